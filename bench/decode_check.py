"""Rollout decoding engines on one device: agreement and speed (harness.core.decode).

Builds workload W's model (Qwen3-30B-A3B at full width, ``--layers`` layers, seeded random init,
bf16, sdpa attention, grouped_mm experts; see bench/README.md) and samples ``--prompts`` ×
``--n`` responses of exactly ``--response-len`` tokens with each engine: ``dynamic`` (the
dynamic-cache loop), ``static`` (static cache, eager) and, on CUDA, ``graph`` (static cache,
each decode step one CUDA graph). Reports per engine the wall time of a warm call, new tokens
per second, and agreement with the dynamic loop (tokens equal, max |Δ log-prob|); ``graph`` must
equal ``static`` bitwise (the same kernels, replayed). Also the multimodal model (Qwen3-VL-MoE,
tiny) with an image in the prompt, where only agreement is checked.

    python bench/decode_check.py --out DIR            # CUDA: W, 128 × 256 tokens
    python bench/decode_check.py --tiny --device cpu  # the script itself, in seconds
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.model_builder import banned_bias  # noqa: E402
from harness.core.rollout import draw_uniforms, generate  # noqa: E402

W = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_attention_heads=32, num_key_value_heads=4,
         head_dim=128, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def build(dims: dict, layers: int, device: torch.device, dtype: torch.dtype, vlm: bool) -> torch.nn.Module:
    import transformers

    text = dict(dims, num_hidden_layers=layers, max_position_embeddings=4096, pad_token_id=0, eos_token_id=1,
                decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.0)
    if vlm:
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20]
                                   if dims["head_dim"] == 128 else [4, 2, 2], "mrope_interleaved": True}
        vision = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=8, temporal_patch_size=2,
                      spatial_merge_size=2, out_hidden_size=dims["hidden_size"], num_position_embeddings=64,
                      deepstack_visual_indexes=[0], in_channels=3)
        cfg = transformers.Qwen3VLMoeConfig(text_config=text, vision_config=vision,
                                            image_token_id=dims["vocab_size"] - 4,
                                            video_token_id=dims["vocab_size"] - 3,
                                            vision_start_token_id=dims["vocab_size"] - 2,
                                            vision_end_token_id=dims["vocab_size"] - 1)
        cls = transformers.Qwen3VLMoeForConditionalGeneration
    else:
        cfg = transformers.Qwen3MoeConfig(norm_topk_prob=True, **text)
        cls = transformers.Qwen3MoeForCausalLM
    cfg._attn_implementation = "sdpa"  # noqa: SLF001
    experts = "grouped_mm" if device.type == "cuda" else "eager"
    cfg._experts_implementation = experts  # noqa: SLF001
    if vlm:
        cfg.text_config._experts_implementation = experts  # noqa: SLF001
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(cfg)
    return model.to(dtype).eval()


def prompts(vocab: int, B: int, P: int, device: torch.device, vlm: bool):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, vocab - 8, (B, P), generator=g)
    mask = torch.ones_like(ids)
    for i in range(B):  # left padding of varied length
        pad = int(torch.randint(0, P // 4, (1,), generator=g))
        mask[i, :pad] = 0
    ids = ids.masked_fill(mask == 0, 0)
    pixels, grids = [None] * B, [None] * B
    if vlm:
        ids[0, P - 8:P - 4] = vocab - 4  # 4 merged patches = 16 patches of 8×8, 2 frames
        grids[0] = torch.tensor([[1, 4, 4]])
        pixels[0] = torch.randn(16, 3 * 2 * 8 * 8, generator=g).to(device)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}, pixels, grids


def sample(model, engine: str, inputs, pixels, grids, *, n: int, R: int, vocab: int, ignore_eos: bool):
    """``engine``: one of :func:`generate`'s, or ``graph-fused`` (the graph engine with the fused sampler)."""
    B = inputs["input_ids"].shape[0] * n
    device = inputs["input_ids"].device
    u = draw_uniforms(torch.Generator().manual_seed(2), R, B, list(range(B)), device)
    bias = banned_bias(vocab, [vocab - 4, vocab - 3, vocab - 2, vocab - 1], device)
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        rb = generate(model, inputs, n=n, max_new_tokens=R, temperature=1.0, top_k=0, top_p=1.0, eos_id=1, pad_id=0,
                      image_pad_id=vocab - 4, bias=bias, uniforms=u, group_ids=list(range(len(pixels))),
                      pixels=pixels, grids=grids, ignore_eos=ignore_eos, engine=engine.removesuffix("-fused"),
                      fused_sampler=engine.endswith("-fused"))
    _sync(device)
    return rb, time.perf_counter() - t0


def sampler_times(B: int, vocab: int, device: torch.device, reps: int = 200) -> dict:
    """Device time of one sampler call on (B, vocab) bf16 logits, each captured in a CUDA graph and replayed
    ``reps`` times: the reference (upcast, bias, inverse CDF over the whole vocabulary) and the fused kernels."""
    from harness.core.fused_sampler import fused_sample
    from harness.core.rollout import sample_from_logits

    g = torch.Generator(device=device).manual_seed(3)
    logits = (torch.randn(B, vocab, generator=g, device=device) * 3).to(torch.bfloat16)
    bias = banned_bias(vocab, [vocab - 4, vocab - 3, vocab - 2, vocab - 1], device)
    u = torch.rand(B, generator=g, device=device)
    calls = {
        "reference": lambda: sample_from_logits(logits.float() + bias, temperature=1.0, top_k=0, top_p=1.0,
                                                uniforms=u),
        "fused": lambda: fused_sample(logits, bias, u, 1.0),
    }
    times = {}
    for name, fn in calls.items():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times[name] = round(start.elapsed_time(end) * 1000 / reps, 1)
    ref_tok, _ = calls["reference"]()
    fused_tok, _ = calls["fused"]()
    times["tokens_equal"] = int((ref_tok == fused_tok).sum())
    times["rows"] = B
    return times


def compare(ref, got) -> dict:
    """Agreement with the reference engine: rows equal, where rows first diverge, log-prob gap before that."""
    R = ref.response_ids.shape[1]
    firsts, gaps = [], []
    for i in range(ref.size):
        diff = (ref.response_ids[i] != got.response_ids[i]).nonzero()
        d = int(diff[0]) if len(diff) else R
        valid = ref.response_mask[i, :d].bool() & got.response_mask[i, :d].bool()
        gap = (ref.rollout_logp[i, :d] - got.rollout_logp[i, :d]).abs()[valid]
        firsts.append(d)
        gaps.append(float(gap.max()) if gap.numel() else 0.0)
    firsts.sort()
    return {"rows_equal": sum(d == R for d in firsts), "rows": len(firsts),
            "median_first_divergence": firsts[len(firsts) // 2], "logp_max_abs_diff_before_divergence": max(gaps)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--response-len", type=int, default=256)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    dims = TINY if args.tiny else W
    if args.tiny:
        args.prompts, args.n, args.prompt_len, args.response_len, args.layers = 4, 2, 16, 16, 2
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    engines = ["dynamic", "static"] + (["graph", "graph-fused"] if device.type == "cuda" else [])
    result: dict = {"device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
                    "torch": torch.__version__, "workload": {"layers": args.layers, "prompts": args.prompts,
                                                             "n": args.n, "prompt_len": args.prompt_len,
                                                             "response_len": args.response_len, "dtype": str(dtype)},
                    "text": {}, "vlm": {}}
    out = Path(args.out) if args.out else None
    for vlm in (False, True):
        key = "vlm" if vlm else "text"
        model = build(TINY if vlm else dims, 2 if vlm else args.layers, device, dtype, vlm)
        inputs, pixels, grids = prompts(model.config.get_text_config().vocab_size, 4 if vlm else args.prompts,
                                        32 if vlm else args.prompt_len, device, vlm)
        R = 32 if vlm else args.response_len
        vocab = model.config.get_text_config().vocab_size
        runs = {}
        for engine in engines:
            calls = 1 if vlm else 2
            for _ in range(calls):  # the second call is the warm one
                rb, secs = sample(model, engine, inputs, pixels, grids, n=2 if vlm else args.n, R=R, vocab=vocab,
                                  ignore_eos=not vlm)
            runs[engine] = rb
            new = int(rb.response_mask.sum())
            result[key][engine] = {"seconds": round(secs, 4), "new_tok_per_s": round(new / secs, 1),
                                   "new_tokens": new}
            if engine != "dynamic":
                result[key][engine]["vs_dynamic"] = compare(runs["dynamic"], rb)
            if engine == "graph-fused":  # the same distribution, other bits: rows diverge at some token
                result[key][engine]["vs_graph"] = compare(runs["graph"], rb)
            print(key, engine, json.dumps(result[key][engine]), flush=True)
        if "graph" in runs:
            g, s = runs["graph"], runs["static"]
            result[key]["graph_equals_static_bitwise"] = bool(torch.equal(g.response_ids, s.response_ids)
                                                              and torch.equal(g.rollout_logp, s.rollout_logp)
                                                              and torch.equal(g.response_mask, s.response_mask))
            print(key, "graph == static bitwise:", result[key]["graph_equals_static_bitwise"], flush=True)
        if device.type == "cuda" and not vlm:
            result[key]["sampler_us"] = sampler_times(args.prompts * args.n, vocab, device)
            print(key, "sampler µs per call:", json.dumps(result[key]["sampler_us"]), flush=True)
        if device.type == "cuda":
            result[key]["peak_mem_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        del model
        if out:
            out.mkdir(parents=True, exist_ok=True)
            (out / "decode_check.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
