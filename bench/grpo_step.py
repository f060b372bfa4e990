"""One GRPO step on workload W: the harness core against TRL's ``GRPOTrainer``, same work, same machine.

Workload W (issue "GPU speed"): Qwen3-30B-A3B architecture at full width (hidden 2048, 32 heads / 4 KV heads,
head_dim 128, 128 experts top-8, MoE intermediate 768, vocab 151936) with 4 layers, seeded random init, bf16.
One step = 16 prompts x 8 samples, 256 prompt tokens, exactly 256 response tokens (EOS ignored / suppressed),
KL loss to a frozen reference (low_var_kl = k3, coef 0.01), one AdamW step over the whole batch (lr 1e-6, clip 1.0).

``--side both`` (default) runs each side in its own subprocess of this script (clean CUDA context, own peak
memory), ours first; the peak TFLOPS measured by ours is handed to TRL. Results: a short table on stdout and
``<out>/<YYYY-MM-DD>-<gpu>.json``. ``--tiny`` is a CPU-sized configuration for checking the script itself.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.metadata
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402 - after the sys.path entry for the harness
from step_profile import memory_accounting, phase, start_profile, write_profile  # noqa: E402 - bench/ beside this

RECIPE = "qwen3_30b_a3b"
FULL_WIDTH = dict(hidden=2048, heads=32, kv_heads=4, head_dim=128, intermediate=6144, experts=128, top_k=8,
                  moe_inter=768, vocab=151936)
TINY = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, experts=8, top_k=2, moe_inter=32, vocab=512,
            layers=2, prompts=4, n=2, prompt_len=16, response_len=16)
# "w-long": W's model at the seed recipe's lengths (qwen3_vl_30b: 1,024 prompt + 2,048 response tokens), W's batch of
# 16 x 8 sequences. Micro-batches of 8 sequences (24,576 tokens, 1.5x W's 32 x 512) on both sides; 3 steps, 1 warm-up
# (TRL's step is over a minute there). --tiny keeps the tiny model and batch at 32 + 64 tokens.
PRESETS: dict[str, dict[str, int]] = {
    "w": dict(steps=5, warmup=2, prompts=16, n=8, prompt_len=256, response_len=256),
    "w-long": dict(steps=3, warmup=1, prompts=16, n=8, prompt_len=1024, response_len=2048, micro=8, logprob_micro=16,
                   trl_micro=8),
}
TINY_LONG = dict(prompt_len=32, response_len=64)
LR, CLIP_GRAD, KL_COEF, KL_TYPE, CLIP_EPS, TEMPERATURE, SEED = 1e-6, 1.0, 0.01, "low_var_kl", 0.2, 1.0, 42


# ----------------------------------------------------------------------------- setup
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--side", choices=("ours", "trl", "both"), default="both")
    p.add_argument("--preset", choices=tuple(PRESETS), default="w",
                   help="w: W (256 + 256 tokens); w-long: W's model at 1,024 + 2,048 tokens (bench/README.md). "
                        "Flags given explicitly override the preset's values")
    p.add_argument("--steps", type=int, default=None,
                   help="GRPO steps per side (the first --warmup are not counted); w: 5, w-long: 3")
    p.add_argument("--warmup", type=int, default=None, help="w: 2, w-long: 1")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--prompts", type=int, default=None, help="w, w-long: 16")
    p.add_argument("--n", type=int, default=None, help="samples per prompt (w, w-long: 8)")
    p.add_argument("--prompt-len", type=int, default=None, help="w: 256, w-long: 1024")
    p.add_argument("--response-len", type=int, default=None, help="w: 256, w-long: 2048")
    p.add_argument("--tiny", action="store_true", help="tiny model and batch (CPU check of the script)")
    p.add_argument("--micro", type=int, default=None,
                   help="ours: update micro-batch in sequences (w: the recipe's reduced scale, 32; w-long: 8)")
    p.add_argument("--logprob-micro", type=int, default=None,
                   help="ours: old/ref log-prob micro-batch in sequences (w: the recipe's reduced scale, 64; w-long: 16)")
    p.add_argument("--trl-micro", type=int, default=None,
                   help="TRL per_device_train_batch_size (w: 32, i.e. 4 accumulation steps for 128 completions; w-long: 8)")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward, on both sides (default off on both)")
    p.add_argument("--peak-tflops", type=float, default=None, help="default: measured (a large matmul)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--profile-step", type=int, default=None,
                   help="ours: run this step under torch.profiler; its kernel table per phase goes to --out")
    p.add_argument("--memory-step", type=int, default=None,
                   help="ours: account step N's update memory (saved tensors per module; CUDA: live blocks at peak)")
    p.add_argument("--logit-chunk-mib", type=int, default=None,
                   help="ours: float32 logits per output-head chunk (default: harness.core.update.LOGIT_CHUNK_BYTES)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)  # set by --side both for its subprocesses
    args = p.parse_args(argv)
    explicit = {key for key in PRESETS[args.preset] if getattr(args, key) is not None}
    for key, value in PRESETS[args.preset].items():  # explicit flags win over the preset
        if key not in explicit:
            setattr(args, key, value)
    if args.tiny:
        for key in ("micro", "logprob_micro", "trl_micro"):  # the tiny batch keeps its own micro-batches
            if key not in explicit:
                setattr(args, key, None)
        for key in ("layers", "prompts", "n", "prompt_len", "response_len"):
            setattr(args, key, TINY[key])
        if args.preset == "w-long":
            args.prompt_len, args.response_len = TINY_LONG["prompt_len"], TINY_LONG["response_len"]
    return args


def pick_device(kind: str) -> torch.device:
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda":
        torch.cuda.set_device(0)
        return torch.device("cuda", 0)
    return torch.device("cpu")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def workload(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    arch = {k: v for k, v in TINY.items() if k in FULL_WIDTH} if args.tiny else dict(FULL_WIDTH)
    return dict(arch, preset=args.preset, layers=args.layers, prompts=args.prompts, n=args.n, prompt_len=args.prompt_len,
                response_len=args.response_len, sequences=args.prompts * args.n,
                tokens_per_step=args.prompts * args.n * (args.prompt_len + args.response_len),
                dtype="bfloat16" if device.type == "cuda" else "float32", lr=LR, clip_grad=CLIP_GRAD,
                kl_coef=KL_COEF, kl_type=KL_TYPE, clip_eps=CLIP_EPS, temperature=TEMPERATURE, seed=SEED,
                adv="grpo (group mean, /std)", loss_agg="token-mean over the whole batch", optimizer="AdamW",
                mini_batch="whole batch (one optimizer step)", tiny=bool(args.tiny))


def build_cfg(wl: dict[str, Any], device: torch.device, micro: int | None, lp_micro: int | None, grad_ckpt: bool
              ) -> tuple[dict[str, Any], str]:
    """The resolved recipe for W: scale ``reduced`` on gpu-1x-h200 when the recipe has it, else ``full``
    resolved on gpu-8x-h200-141g; either way patched explicitly below to exactly the benchmark's workload.
    Micro-batches left ``None`` keep the ``reduced`` scale's values (16 / 32 sequences without it)."""
    from harness.config.recipe import resolve
    from harness.errors import HarnessError

    try:
        cfg, source = resolve(RECIPE, "gpu-1x-h200", "reduced").config, f"{RECIPE} gpu-1x-h200:reduced"
    except HarnessError:
        cfg, source = resolve(RECIPE, "gpu-8x-h200-141g", "full").config, f"{RECIPE} gpu-8x-h200-141g:full (patched)"
    cfg = copy.deepcopy(cfg)
    reduced = source.endswith(":reduced")
    arr = cfg["actor_rollout_ref"]
    micro = micro or (arr["actor"]["ppo_micro_batch_size_per_gpu"] if reduced else 16)
    lp_micro = lp_micro or (arr["rollout"]["log_prob_micro_batch_size_per_gpu"] if reduced else 32)
    text = cfg["model"]["architecture"]["text"]
    text.update(hidden_size=wl["hidden"], num_hidden_layers=wl["layers"], num_attention_heads=wl["heads"],
                num_key_value_heads=wl["kv_heads"], head_dim=wl["head_dim"], intermediate_size=wl["intermediate"],
                vocab_size=wl["vocab"])
    text["moe"].update(num_experts=wl["experts"], num_experts_per_tok=wl["top_k"],
                       moe_intermediate_size=wl["moe_inter"])
    cfg["model"].update(path=None, dtype=wl["dtype"])
    cfg.update(seed=SEED, deterministic=False)
    cfg["trainer"].update(device=device.type, nnodes=1, n_gpus_per_node=1)
    # max_prompt_length only bounds the trainer's own (unused here) synthetic prompt loader
    cfg["data"].update(train_batch_size=wl["prompts"], max_response_length=wl["response_len"],
                       max_prompt_length=max(wl["prompt_len"], cfg["data"]["max_prompt_length"]))
    cfg["data"]["synthetic"].update(train_size=wl["prompts"], val_size=wl["prompts"])
    arr["model"]["enable_gradient_checkpointing"] = grad_ckpt
    actor = arr["actor"]
    actor["optim"].update(lr=LR, clip_grad=CLIP_GRAD, lr_scheduler_type="constant", lr_warmup_steps=0)
    actor.update(ppo_mini_batch_size=wl["prompts"], ppo_micro_batch_size_per_gpu=micro, ppo_epochs=1,
                 use_kl_loss=True, kl_loss_coef=KL_COEF, kl_loss_type=KL_TYPE, loss_agg_mode="token-mean",
                 entropy_coeff=0.0, clip_ratio_low=CLIP_EPS, clip_ratio_high=CLIP_EPS)
    arr["ref"]["log_prob_micro_batch_size_per_gpu"] = lp_micro
    arr["rollout"].update(n=wl["n"], temperature=TEMPERATURE, top_p=1.0, top_k=-1,
                          log_prob_micro_batch_size_per_gpu=lp_micro)
    return cfg, source


def measure_peak_tflops(device: torch.device) -> float:
    """Dense matmul throughput: 8192^3 bf16 on GPU (1024^3 fp32 on CPU), mean of 10 after 3 warm-ups."""
    size, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (1024, torch.float32)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    sync(device)
    per = (time.perf_counter() - t0) / 10
    del a, b
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2 * size**3 / per / 1e12


def make_prompts(tok: Any, count: int, length: int, seed: int = SEED) -> list[list[int]]:
    """``count`` prompts of exactly ``length`` ordinary (non-special) token ids whose decoded text re-encodes to
    the same ids, so the TRL side (which takes text) and ours (ids) get identical prompts."""
    from harness.core.tokenizer import PAD_ID  # ids below the first special token are ordinary BPE tokens

    ordinary = [i for i in range(PAD_ID) if (s := tok.decode([i])).isascii() and s.isprintable()]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        for _attempt in range(200):
            enc = tok.encode(tok.decode([rng.choice(ordinary) for _ in range(length + length // 4 + 8)]))
            ids = enc[:length]
            if len(ids) == length and tok.encode(tok.decode(ids)) == ids:
                out.append(ids)
                break
        else:
            raise RuntimeError(f"could not build a {length}-token prompt that survives decode/encode")
    return out


def even_fraction(ids: list[int] | torch.Tensor, mask: torch.Tensor | None = None) -> float | torch.Tensor:
    """The benchmark's reward: the fraction of even token ids in a response (cheap, deterministic, varies)."""
    if mask is None:
        return sum(1 for t in ids if t % 2 == 0) / max(1, len(ids))
    m = mask.float()
    return ((ids % 2 == 0).float() * m).sum(-1) / m.sum(-1).clamp(min=1)


def steady(values: list[float], warmup: int) -> list[float]:
    return values[warmup:] if len(values) > warmup else values[-1:]


def gpu_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


# ----------------------------------------------------------------------------- ours
def run_ours(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from harness.core import algos, update
    from harness.core.data import EncodedPrompt, Example
    from harness.core.device import reset_peak_memory
    from harness.core.trainer import GRPOTrainer
    from harness.core.typed_recipe import Recipe
    from harness.core.update import attach_positions, batched_logprobs, head_kind, is_on_policy, update_actor

    if args.logit_chunk_mib:
        update.LOGIT_CHUNK_BYTES = args.logit_chunk_mib << 20
    wl = workload(args, device)
    peak = args.peak_tflops or measure_peak_tflops(device)
    cfg, source = build_cfg(wl, device, args.micro or (4 if args.tiny else None),
                            args.logprob_micro or (8 if args.tiny else None), args.gradient_checkpointing)
    micro = cfg["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"]
    lp_micro = cfg["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"]
    tr = GRPOTrainer(Recipe.model_validate(cfg), device=device, peak_tflops=peak)
    actor, ref = tr.models.actor, tr.models.ref
    prompts = make_prompts(tr.tok, args.prompts, args.prompt_len)
    batch = [EncodedPrompt(ids, None, None, Example(uid=f"bench-{i:04d}", data_source="bench", question="", answer=""))
             for i, ids in enumerate(prompts)]
    adv_fn = algos.get_adv_estimator("grpo")
    lp_kw = dict(bias=tr.bias, temperature=tr.loss_cfg.temperature, image_pad_id=tr.ids["image_pad"])
    B, R = args.prompts * args.n, args.response_len
    steps, splits, mems, new_tokens, phase_mems = [], [], [], [], []
    cuda = device.type == "cuda"

    def phase_peak() -> float:  # the peak since the last call (GB), then a new window
        if not cuda:
            return 0.0
        peak = torch.cuda.max_memory_allocated(device) / 1e9
        torch.cuda.reset_peak_memory_stats(device)
        return peak
    for step in range(args.steps):
        prof = start_profile(device) if step == args.profile_step else None
        reset_peak_memory(device)
        resident = torch.cuda.memory_allocated(device) / 1e9 if cuda else 0.0
        sync(device)
        t0 = time.perf_counter()
        with phase(prof, "gen"):
            rb = tr.rollout(batch, step=step, n=args.n, sampling=tr.rollout_cfg, ignore_eos=True)
        sync(device)
        t1 = time.perf_counter()
        pm = {"resident_at_start": resident, "gen": phase_peak()}
        scores = even_fraction(rb.response_ids, rb.response_mask)
        adv = adv_fn(scores, rb.group_ids, rb.response_mask, eps=1e-6, norm_by_std=True)
        rb.tensors.update(advantages=adv, scores=scores)
        attach_positions(actor, rb, tr.ids["image_pad"])  # as the trainer does
        new_tokens.append(int(rb.response_mask.sum()))
        sync(device)
        t2 = time.perf_counter()
        on_policy = is_on_policy(rb.size, B, 1)  # mini-batch B, one epoch: the update's forward gives old log-probs
        with phase(prof, "logprob"):
            if not on_policy:
                rb.tensors["old_logp"] = batched_logprobs(actor, rb, lp_micro, **lp_kw)
            rb.tensors["ref_logp"] = batched_logprobs(ref, rb, lp_micro, **lp_kw)
        sync(device)
        t3 = time.perf_counter()
        pm["logprob"] = phase_peak()
        actor.train()
        with phase(prof, "update"), memory_accounting(actor, device, Path(args.out), step,
                                                      step == args.memory_step, micro):
            update_actor(actor, tr.optimizer, tr.scheduler, rb, cfg=tr.loss_cfg, mini_size=B, micro_size=micro,
                         epochs=1, clip_grad=CLIP_GRAD, bias=tr.bias, image_pad_id=tr.ids["image_pad"],
                         on_policy=on_policy)
        sync(device)
        t4 = time.perf_counter()
        if prof is not None:
            write_profile(prof, Path(args.out), step)
        steps.append(t4 - t0)
        splits.append({"gen": t1 - t0, "ref_old_logprob": t3 - t2, "update": t4 - t3, "other": t2 - t1})
        pm["update"] = phase_peak()
        phase_mems.append(pm)
        mems.append(max(pm["gen"], pm["logprob"], pm["update"]) if cuda else 0.0)
        print(f"[ours] step {step}: {t4 - t0:.3f} s (gen {t1 - t0:.3f}, logprob {t3 - t2:.3f}, "
              f"update {t4 - t3:.3f})", flush=True)
    kept = steady(list(range(len(steps))), args.warmup)
    split = {k: statistics.median(splits[i][k] for i in kept) for k in splits[0]}
    tokens = wl["tokens_per_step"]
    return {
        "gpu": gpu_name(device), "peak_tflops_measured": peak, "n_params": tr.models.n_params,
        "n_active_params": tr.models.n_active_params,
        "step_s": statistics.median(steps[i] for i in kept), "step_s_all": steps, "split_s": split,
        "split_s_all": splits,
        "rollout_new_tok_per_s": B * R / split["gen"],
        "train_mfu": 6 * tr.models.n_active_params * tokens / split["update"] / (peak * 1e12),
        "peak_mem_gb": max(mems) if device.type == "cuda" else None,
        "peak_mem_gb_by_phase": phase_mems[-1] if cuda else None,  # the last step's, and what it started with
        "response_tokens_per_step": new_tokens, "exact_length": all(t == B * R for t in new_tokens),
        "settings": {"recipe": source, "update_micro_batch": micro, "logprob_micro_batch": lp_micro,
                     "attn_implementation": tr.models.attn_implementation, "decode_engine": tr.decode_engine,
                     "old_logprob_forward": not on_policy, "logprob_head": head_kind(device),
                     "logit_chunk_mib": update.LOGIT_CHUNK_BYTES >> 20, "model_notes": list(tr.models.notes),
                     "experts_implementation": getattr(actor.config, "_experts_implementation", None),
                     "gradient_checkpointing": args.gradient_checkpointing, "dtype": wl["dtype"],
                     "optimizer": type(tr.optimizer).__name__, "weight_decay": cfg["actor_rollout_ref"]["actor"]
                     ["optim"]["weight_decay"]},
    }


# ----------------------------------------------------------------------------- TRL
def run_trl(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):  # everything here is local
        os.environ.setdefault(var, "1")
    import datasets
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from harness.core.model_builder import build_models
    from harness.core.tokenizer import load_tokenizer, special_token_ids
    from harness.core.typed_recipe import Recipe

    wl = workload(args, device)
    peak = args.peak_tflops or measure_peak_tflops(device)
    B, R, P = args.prompts * args.n, args.response_len, args.prompt_len
    per_device = args.trl_micro or (B // 2 if args.tiny else 32)
    if B % per_device:
        raise SystemExit(f"--trl-micro {per_device} must divide {B} completions")
    cfg, _ = build_cfg(wl, device, per_device, per_device, args.gradient_checkpointing)
    tok = load_tokenizer()
    tmp = Path(tempfile.mkdtemp(prefix="grpo-bench-trl-"))
    model_dir = tmp / "model"
    # the same seeded weights as ours (same config, same seed), saved and passed by path: with beta > 0 TRL
    # rebuilds its reference model from that path
    built = build_models(Recipe.model_validate(cfg), special_token_ids(tok), device, SEED, with_ref=False)
    experts = getattr(built.actor.config, "_experts_implementation", None)
    n_params, n_active, attn = built.n_params, built.n_active_params, built.attn_implementation
    built.actor.save_pretrained(str(model_dir))
    tok.save_pretrained(str(model_dir))
    del built
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    trl_tok = AutoTokenizer.from_pretrained(str(model_dir))
    trl_tok.pad_token = tok.pad_token
    texts = [tok.decode(ids) for ids in make_prompts(tok, args.prompts, P)]
    if any(len(ids) != P for ids in trl_tok(text=texts)["input_ids"]):
        raise SystemExit("TRL's tokenizer does not give the prompts their exact length")
    dataset = datasets.Dataset.from_dict({"prompt": texts})

    def even_ids(prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], **_: Any) -> list[float]:
        return [float(even_fraction(ids)) for ids in completion_ids]

    init_kwargs: dict[str, Any] = {"dtype": wl["dtype"], "attn_implementation": attn}
    if experts:
        init_kwargs["experts_implementation"] = experts
    settings = dict(
        per_device_train_batch_size=per_device, gradient_accumulation_steps=B // per_device, num_generations=args.n,
        max_completion_length=R, generation_kwargs={"min_new_tokens": R}, beta=KL_COEF, learning_rate=LR,
        lr_scheduler_type="constant", weight_decay=cfg["actor_rollout_ref"]["actor"]["optim"]["weight_decay"],
        max_grad_norm=CLIP_GRAD, router_aux_loss_coef=0.0, epsilon=CLIP_EPS, num_iterations=1, loss_type="dapo",
        scale_rewards="group",
        temperature=TEMPERATURE, top_p=1.0, top_k=0, use_vllm=False, bf16=device.type == "cuda",
        gradient_checkpointing=args.gradient_checkpointing, max_steps=args.steps, logging_steps=1, seed=SEED,
        shuffle_dataset=False, model_init_kwargs=init_kwargs)
    config = GRPOConfig(output_dir=str(tmp / "out"), report_to="none", save_strategy="no", disable_tqdm=True,
                        use_cpu=device.type == "cpu", dataloader_num_workers=0, **settings)
    timer = _StepTimer(device, TrainerCallback)
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=even_ids, args=config, train_dataset=dataset,
                          processing_class=trl_tok, callbacks=[timer.callback])
    timer.instrument(trainer)
    try:
        trainer.train()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the saved model (6 GB for W)
    kept = steady(list(range(len(timer.steps))), args.warmup)
    step_s = statistics.median(timer.steps[i] for i in kept)
    split = {k: statistics.median(timer.splits[i][k] for i in kept) for k in ("gen", "ref_old_logprob")}
    split["update"] = step_s - split["gen"] - split["ref_old_logprob"]
    lengths = timer.lengths
    return {
        "gpu": gpu_name(device), "peak_tflops_measured": peak, "n_params": n_params, "n_active_params": n_active,
        "step_s": step_s, "step_s_all": timer.steps,
        "split_s": split, "split_s_all": timer.splits,
        "rollout_new_tok_per_s": B * R / split["gen"] if split["gen"] else None,
        "train_mfu": 6 * n_active * wl["tokens_per_step"] / split["update"] / (peak * 1e12),
        "peak_mem_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
        "completion_length": {"min": min(lengths), "max": max(lengths)} if lengths else None,
        "exact_length": bool(lengths) and min(lengths) == max(lengths) == R,
        "settings": {**{k: v for k, v in settings.items() if k != "model_init_kwargs"}, **init_kwargs,
                     "model": "passed by path (save_pretrained of the same seeded model)", "optim": config.optim,
                     "steps_per_generation": config.steps_per_generation},
    }


class _StepTimer:
    """Optimizer-step wall time (a TrainerCallback, synchronised) plus the time inside TRL's generation and
    no-grad log-prob methods. TRL's split ``update`` is the remainder (loss, backward, optimizer, reward)."""

    def __init__(self, device: torch.device, base: type) -> None:
        self.device, self.steps, self.splits, self.lengths = device, [], [], []
        self.acc = {"gen": 0.0, "ref_old_logprob": 0.0}
        self._t0 = 0.0
        timer = self

        class Callback(base):  # type: ignore[misc, valid-type]
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                sync(timer.device)
                timer.acc = dict.fromkeys(timer.acc, 0.0)
                timer._t0 = time.perf_counter()

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                sync(timer.device)
                timer.steps.append(time.perf_counter() - timer._t0)
                timer.splits.append(dict(timer.acc))
                print(f"[trl] step {len(timer.steps) - 1}: {timer.steps[-1]:.3f} s (gen {timer.acc['gen']:.3f}, "
                      f"logprob {timer.acc['ref_old_logprob']:.3f})", flush=True)

        self.callback = Callback()

    def _wrap(self, trainer: Any, name: str, key: str, only_no_grad: bool = False) -> None:
        fn = getattr(trainer, name, None)
        if fn is None:
            print(f"[trl] note: GRPOTrainer has no {name}; the split will miss it", flush=True)
            return

        def timed(*a: Any, **k: Any) -> Any:
            if only_no_grad and torch.is_grad_enabled():
                return fn(*a, **k)
            sync(self.device)
            t = time.perf_counter()
            out = fn(*a, **k)
            sync(self.device)
            self.acc[key] += time.perf_counter() - t
            if name == "_generate_single_turn":
                self.lengths.extend(len(ids) for ids in out[0])
            return out

        setattr(trainer, name, timed)

    def instrument(self, trainer: Any) -> None:
        self._wrap(trainer, "_generate_single_turn", "gen")
        self._wrap(trainer, "_get_per_token_logps_and_entropies", "ref_old_logprob", only_no_grad=True)


# ----------------------------------------------------------------------------- report
def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda}
    for pkg in ("transformers", "trl", "datasets", "accelerate", "huggingface-hub", "tokenizers"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], check=False,
                             capture_output=True, text=True, timeout=30)
        out["driver"] = smi.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        out["driver"] = None
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=False, capture_output=True,
                              text=True, timeout=30)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               check=False, capture_output=True, text=True, timeout=30)
        out["harness_commit"] = head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") or None
    except (OSError, subprocess.SubprocessError):
        out["harness_commit"] = None
    if os.environ.get("BENCH_COMMIT"):  # a copy without git metadata (the device's): the commit it was made from
        out["harness_commit"] = os.environ["BENCH_COMMIT"] + " (BENCH_COMMIT)"
    return out


def child(argv: list[str], side: str, extra: list[str]) -> dict[str, Any]:
    """Run one side in a fresh interpreter (own CUDA context, own peak memory) and read its result."""
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        out = Path(tmp) / f"{side}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--side", side, "--child-out", str(out), *extra]
        env = dict(os.environ)
        own_path = os.environ.get(f"BENCH_PYTHONPATH_{side.upper()}")
        if own_path:  # this side's own packages (e.g. TRL's datasets needs an older huggingface-hub)
            env["PYTHONPATH"] = own_path
        print(f"== {side}: {' '.join(cmd)}" + (f" (PYTHONPATH={own_path})" if own_path else ""), flush=True)
        rc = subprocess.run(cmd, check=False, env=env).returncode
        if rc != 0 or not out.is_file():
            return {"error": f"the {side} side exited with status {rc}"}
        return json.loads(out.read_text())


def report(args: argparse.Namespace, device: torch.device, ours: dict[str, Any] | None, trl: dict[str, Any] | None
           ) -> Path:
    any_side = next((s for s in (ours, trl) if s and "error" not in s), {})
    wl = dict(workload(args, device), n_params=any_side.get("n_params"),
              n_active_params=any_side.get("n_active_params"))
    ok = ours and trl and "error" not in ours and "error" not in trl
    notes = [
        "step_s = median of the steps after --warmup; split_s = medians per phase over the same steps.",
        ("ours.split_s: gen = rollout (KV-cached sampling loop, EOS ignored); ref_old_logprob = old + reference "
         "log-prob forwards; update = update_actor (fwd+bwd over micro-batches, clip, AdamW); other = reward + "
         "advantage."),
        ("trl.split_s: gen = _generate_single_turn (transformers generate, min_new_tokens = response length); "
         "ref_old_logprob = no-grad log-prob forwards (reference only: TRL skips old log-probs when one generation "
         "feeds one optimizer step); update = step - gen - ref_old_logprob (includes reward, advantage, bookkeeping)."),
        "train_mfu = 6 * N_active * batch tokens (prompt + response) / update time / measured peak.",
        ("TRL loss_type 'dapo' = token-level mean over the whole accumulated batch (verl token-mean); its KL is k3 "
         "(verl low_var_kl, unclamped); scale_rewards 'group' = GRPO std normalisation."),
        "TRL samples from the whole vocabulary; ours bans special and out-of-tokenizer ids (the same sampling work).",
        "TRL's MoE router load-balancing loss is off (router_aux_loss_coef 0.0): ours has none.",
    ]
    result = {
        "gpu": any_side.get("gpu") or gpu_name(device), "device": device.type, "versions": versions(), "workload": wl,
        "ours": ours, "trl": trl, "speedup": trl["step_s"] / ours["step_s"] if ok else None,
        "peak_tflops_measured": (ours or {}).get("peak_tflops_measured") or (trl or {}).get("peak_tflops_measured"),
        "notes": notes,
    }
    slug = re.sub(r"[^a-z0-9]+", "-", result["gpu"].lower()).strip("-") or "unknown"
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.preset != "w":
        slug += f"-{args.preset}"
    path = out_dir / f"{datetime.date.today().isoformat()}-{slug}.json"
    k = 2
    while path.exists():
        path = out_dir / f"{datetime.date.today().isoformat()}-{slug}-{k}.json"
        k += 1
    path.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
    print_table(result)
    print(f"wrote {path}")
    return path


def print_table(r: dict[str, Any]) -> None:
    def f(side: dict[str, Any] | None, key: str, fmt: str, sub: str | None = None) -> str:
        if not side or "error" in side:
            return (side or {}).get("error", "-")[:24] if key == "step_s" else "-"
        v = side.get(key) if sub is None else (side.get(key) or {}).get(sub)
        return "-" if v is None else format(v, fmt)

    wl = r["workload"]
    print(f"\nGRPO step ({wl.get('preset', 'w')}) on {r['gpu']}: {wl['layers']} layers, hidden {wl['hidden']}, {wl['experts']} experts "
          f"top-{wl['top_k']}, {wl['prompts']}x{wl['n']} sequences, {wl['prompt_len']}+{wl['response_len']} tokens "
          f"(peak {r['peak_tflops_measured'] or 0:.4g} TFLOPS measured)")
    rows = [("step s (median)", "step_s", ".3f", None), ("  generate s", "split_s", ".3f", "gen"),
            ("  ref+old log-prob s", "split_s", ".3f", "ref_old_logprob"), ("  update s", "split_s", ".3f", "update"),
            ("rollout new tok/s", "rollout_new_tok_per_s", ",.0f", None), ("train MFU", "train_mfu", ".3f", None),
            ("peak memory GB", "peak_mem_gb", ".1f", None)]
    print(f"{'':24}{'ours':>14}{'TRL':>14}")
    for label, key, fmt, sub in rows:
        print(f"{label:24}{f(r['ours'], key, fmt, sub):>14}{f(r['trl'], key, fmt, sub):>14}")
    print(f"{'speedup (TRL / ours)':24}{format(r['speedup'], '.2f') + 'x' if r['speedup'] else '-':>14}")
    for name in ("ours", "trl"):
        side = r[name]
        if side and "error" not in side and not side.get("exact_length"):
            print(f"WARNING: {name} did not produce exactly {wl['response_len']} tokens per response")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.side == "both":
        device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                              else "cpu")  # the parent never touches the GPU itself
        ours = child(argv, "ours", [])
        extra = ["--peak-tflops", repr(ours["peak_tflops_measured"])] if "peak_tflops_measured" in ours else []
        trl = child(argv, "trl", extra if args.peak_tflops is None else [])
        report(args, device, ours, trl)
        return 0 if "error" not in ours and "error" not in trl else 1
    device = pick_device(args.device)
    torch.manual_seed(SEED)
    result = run_ours(args, device) if args.side == "ours" else run_trl(args, device)
    if args.child_out:
        result["versions"] = versions()  # each side's own (their PYTHONPATHs may differ)
        Path(args.child_out).write_text(json.dumps(result))
        return 0
    report(args, device, result if args.side == "ours" else None, result if args.side == "trl" else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
