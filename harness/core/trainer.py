"""The GRPO loop, top to bottom: generate → score → advantage → old/ref log-probs → update → log.

Departures from verl worth knowing (each deliberate):
- Sampling runs in this process with the policy's own KV cache (no vLLM); the recipe's
  rollout engine settings are checked by the safety rules but not used for sampling.
- Old log-probs are recomputed by the actor before the update (as verl does); the rollout's
  own log-probs are kept only for the ``training/rollout_probs_diff_*`` metrics.
- Responses are padded to exactly ``max_response_length`` so shapes (and so kernels) do not
  depend on what was sampled.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from harness.core import algos
from harness.core.data import PromptLoader, build_synthetic, collate_prompts, load_local
from harness.core.decode import pick_engine
from harness.core.device import (
    adamw_kernel,
    fast_kernels,
    peak_memory_gb,
    release_host_memory,
    reset_peak_memory,
    synchronize,
)
from harness.core.fused_moe import use_fused_moe
from harness.core.fused_sampler import plain as plain_sampling
from harness.core.fused_sampler import usable as fused_sampler_usable
from harness.core.gather import gather_once, gathered
from harness.core.lean_norm import use_lean_norms
from harness.core.model_builder import BuiltModules, banned_bias, build_models, check_model_dir
from harness.core.replay import ReplaySource, rank_rows, replayed_batch
from harness.core.reward import get_reward
from harness.core.rollout import RolloutBatch, draw_uniforms, generate
from harness.core.tokenizer import NON_SAMPLABLE, load_tokenizer, special_token_ids
from harness.core.typed_recipe import Recipe, Rollout
from harness.core.update import LossConfig, attach_positions, batched_logprobs, is_on_policy, update_actor
from harness.core.vision import build_image_processor
from harness.errors import HarnessError

TIMING_PREFIXES = ("timing_s/", "perf/")  # wall-clock dependent: excluded from bitwise comparisons


class Sampling(NamedTuple):
    """How responses are drawn (the recipe's rollout settings, or validation's)."""

    temperature: float
    top_k: int
    top_p: float


@dataclass
class Dist:
    """This process's place in a data-parallel job (world 1 = single process)."""

    rank: int = 0
    world: int = 1
    all_reduce: Callable[[torch.Tensor], torch.Tensor] = field(default=lambda t: t)
    all_gather_objects: Callable[[Any], list[Any]] = field(default=lambda o: [o])
    wrap: Callable[[BuiltModules], BuiltModules] | None = None  # e.g. FSDP2 sharding (harness.core.parallel)
    # every rank waits here, for up to the given seconds (beyond the collectives' timeout: one rank's long work)
    barrier: Callable[[float], None] = field(default=lambda timeout_s: None)
    grad_scale: float = 1.0  # world size when the wrapper averages gradients over ranks


def lr_lambda(step: int, *, total: int, warmup: int, kind: str, min_ratio: float) -> float:
    """Multiplier of the peak LR after ``step`` optimiser-schedule steps (linear warmup)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if kind == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def step_generator(device: torch.device, seed: int, step: int, rank: int, stream: int = 0) -> torch.Generator:
    """A generator seeded from (seed, step, rank, stream): reproducible per step, independent of history."""
    mixed = np.random.SeedSequence([seed, step, rank, stream]).generate_state(1, dtype=np.uint64)[0]
    gen = torch.Generator(device=device)
    gen.manual_seed(int(mixed) & 0x7FFF_FFFF_FFFF_FFFF)
    return gen


class StepSizes(NamedTuple):
    """One rank's batch arithmetic of a GRPO step (sequences = prompts × n)."""

    prompts: int  # this rank's prompts
    rows: int  # this rank's sequences
    mini: int  # sequences per optimizer step (per rank)
    micro: int  # sequences per update forward/backward
    old_micro: int  # sequences per old log-prob forward
    ref_micro: int  # sequences per reference log-prob forward
    epochs: int
    on_policy: bool  # one epoch over one mini-batch: the update's own forward gives the old log-probs


def step_sizes(cfg: Recipe, world: int, rows: int | None = None) -> StepSizes:
    """The batch arithmetic of :meth:`GRPOTrainer.step` at ``world`` ranks (``rows``: the sequences this rank
    really holds, default the full share: ``train_batch_size / world`` prompts × n)."""
    arr = cfg.actor_rollout_ref
    n = arr.rollout.n
    prompts = cfg.data.train_batch_size // world
    rows = prompts * n if rows is None else rows
    mini = arr.actor.ppo_mini_batch_size * n // world
    return StepSizes(prompts=prompts, rows=rows, mini=mini, micro=arr.actor.ppo_micro_batch_size_per_gpu or mini,
                     old_micro=arr.rollout.log_prob_micro_batch_size_per_gpu or rows,
                     ref_micro=arr.ref.log_prob_micro_batch_size_per_gpu or rows, epochs=arr.actor.ppo_epochs,
                     on_policy=is_on_policy(rows, mini, arr.actor.ppo_epochs))


def image_processing(cfg: Recipe) -> tuple[Any | None, int]:
    """The image processor of a vision-language recipe (None for text) and its spatial merge size."""
    vision = cfg.model.architecture.vision
    if vision is None:
        return None, 1
    return build_image_processor(vision.patch_size, vision.temporal_patch_size, vision.spatial_merge_size,
                                 vision.min_pixels, vision.max_pixels), vision.spatial_merge_size


def datasets(cfg: Recipe) -> tuple[list[Any], list[Any]]:
    """The recipe's (train, validation) examples: its local files, else its seeded synthetic tasks."""
    data, seed = cfg.data, int(cfg.seed)
    syn = data.synthetic
    train = load_local(data.train_files) if data.train_files else build_synthetic(
        syn.tasks, syn.train_size, seed, "train", syn.image_size)
    val = load_local(data.val_files) if data.val_files else build_synthetic(
        syn.tasks, syn.val_size, seed, "val", syn.image_size)
    return train, val


def prompt_loader(cfg: Recipe, examples: list[Any], tok: Any, *, pixels: bool = True) -> PromptLoader:
    """The training prompts, encoded (and checked against ``max_prompt_length``) as the run's loader holds them
    (``pixels`` False: their tokens without the images' pixel values, for counting)."""
    data = cfg.data
    processor, merge = image_processing(cfg)
    return PromptLoader(examples, tok, processor, merge, batch_size=data.train_batch_size,
                        max_prompt_length=data.max_prompt_length, truncation=data.truncation,
                        filter_overlong_prompts=data.filter_overlong_prompts, shuffle=data.shuffle, seed=int(cfg.seed),
                        pixels=pixels)


def ready_models(models: BuiltModules, cfg: Recipe, device: torch.device, dist: Dist,
                 device_memory_bytes: float | None = None) -> tuple[BuiltModules, str]:
    """Built (and warm-started) models made ready to train on ``device``: the lean RMSNorms where the fast
    kernels apply, the decode engine chosen, and the data-parallel wrapper (sharding) applied, with the
    rollout's gathering decided (:func:`harness.core.gather.gather_once`; ``device_memory_bytes`` None: the
    host). Returns the models and the decode engine. The run and ``harness plan`` both go through here."""
    if fast_kernels(device, cfg.deterministic):  # see harness.core.lean_norm and harness.core.fused_moe
        lean = use_lean_norms(models.actor)
        ref = use_lean_norms(models.ref) if models.ref is not None else 0  # never trained: its forwards fused
        moe = use_fused_moe(models.actor) + (use_fused_moe(models.ref) if models.ref is not None else 0)
        models = replace(models, notes=(*models.notes, f"{lean} RMSNorms with the lean backward"
                                        + (f", {ref} of the reference's" if ref else "")
                                        + (f"; {moe} MoE experts modules with the fused routing" if moe else "")))
    models = replace(models, fused_sampler=fused_sampler_usable(device, fast=fast_kernels(device, cfg.deterministic),
                                                                dtype=next(models.actor.parameters()).dtype))
    if dist.wrap is not None:
        models = dist.wrap(models)
        once, note = gather_once(models.actor, device_memory_bytes)
        models = replace(models, gather_once=once, notes=(*models.notes, note))
    # a sharded model gathered once decodes as a plain one (its hooks detached); gathered per layer, it cannot
    engine, why = pick_engine(models.actor, device, sharded=dist.wrap is not None and not models.gather_once)
    if why:
        models = replace(models, notes=(*models.notes, why))
    return models, engine


def rollout_scope(models: BuiltModules) -> Any:
    """Around a rollout: the sharded actor's units gathered once (:func:`harness.core.gather.gathered`), or
    nothing to do."""
    if not models.gather_once:
        return nullcontext()
    return gathered(models.actor)


def build_optimizer(cfg: Recipe, actor: torch.nn.Module, device: torch.device) -> tuple[torch.optim.Optimizer, Any]:
    """The actor's AdamW (the kernel :func:`~harness.core.device.adamw_kernel` picks for ``device``) and its
    LR schedule."""
    optim = cfg.actor_rollout_ref.actor.optim
    params = [p for p in actor.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=optim.lr, betas=(optim.betas[0], optim.betas[1]), weight_decay=optim.weight_decay,
                            eps=1e-8, **adamw_kernel(device, cfg.deterministic))
    total = int(cfg.trainer.total_training_steps)
    warmup = optim.lr_warmup_steps if optim.lr_warmup_steps >= 0 else int(optim.lr_warmup_steps_ratio * total)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_lambda(
        s, total=total, warmup=warmup, kind=optim.lr_scheduler_type, min_ratio=optim.min_lr_ratio))
    return opt, sched


def loss_config(cfg: Recipe) -> LossConfig:
    """The policy loss's settings from the recipe's actor and rollout sections."""
    actor = cfg.actor_rollout_ref.actor
    return LossConfig(
        clip_low=actor.clip_ratio_low, clip_high=actor.clip_ratio_high, clip_ratio_c=actor.clip_ratio_c,
        agg_mode=actor.loss_agg_mode, entropy_coeff=actor.entropy_coeff, use_kl_loss=actor.use_kl_loss,
        kl_coef=actor.kl_loss_coef, kl_type=actor.kl_loss_type,
        temperature=cfg.actor_rollout_ref.rollout.temperature, policy_loss=actor.policy_loss.loss_mode)


WARM_START_WAIT_S = 3600.0  # how long the other ranks wait for rank 0's warm start (a dead rank 0 stops the job)


class GRPOTrainer:
    """Builds everything from a resolved recipe (the typed :class:`~harness.core.typed_recipe.Recipe`), then runs steps."""

    def __init__(self, cfg: Recipe, *, device: torch.device, peak_tflops: float, dist: Dist | None = None,
                 warm_start_fn: Callable[[GRPOTrainer], dict[str, Any]] | None = None,
                 device_memory_gb: float | None = None) -> None:
        if cfg.model.path:  # a local model directory is checked before anything is built or read (again when loaded)
            check_model_dir(cfg, Path(cfg.model.path).expanduser())
        self.cfg = cfg
        self.device = device
        self.dist = dist or Dist()
        self.peak_tflops = peak_tflops
        self.seed = int(cfg.seed)
        arr = cfg.actor_rollout_ref
        self.actor_cfg, self.rollout_cfg = arr.actor, arr.rollout
        self.tok = load_tokenizer()
        self.ids = special_token_ids(self.tok)
        self.image_processor, self.merge = image_processing(cfg)
        self.train_examples, self.val_examples = datasets(cfg)
        self._val_loader: PromptLoader | None = None
        self.loader = prompt_loader(cfg, self.train_examples, self.tok)
        self.models = build_models(cfg, self.ids, device, self.seed, with_ref=bool(self.actor_cfg.use_kl_loss))
        vocab = cfg.model.architecture.text.vocab_size
        self.bias = banned_bias(vocab, list(NON_SAMPLABLE) + list(range(len(self.tok), vocab)), device)
        self.warm_start_info = self._warm_start(warm_start_fn) if warm_start_fn else {}
        if self.models.ref is not None and self.warm_start_info:
            self.models.ref.load_state_dict(self.models.actor.state_dict())
        self.models, self.decode_engine = ready_models(
            self.models, cfg, device, self.dist, device_memory_gb * 1e9 if device_memory_gb else None)
        self.reward_fn = get_reward(cfg.reward.name)
        self.optimizer, self.scheduler = build_optimizer(cfg, self.models.actor, device)
        if self.device.type == "cpu":
            release_host_memory()  # what the warm start freed must not count in the steps' peak
        self.loss_cfg = loss_config(cfg)
        self.advantage_sign = 1.0  # -1 only in the sign-flip mutation test
        self.replay: ReplaySource | None = None  # set for a replay run (harness.core.replay)
        self.last_rollout: tuple[RolloutBatch, dict[str, torch.Tensor]] | None = None
        self.last_rows: list[int] = []  # this rank's rows (sequences) of the last step's batch
        self.tokens_seen = 0

    # ------------------------------------------------------------------ setup helpers
    def _warm_start(self, fn: Callable[[GRPOTrainer], dict[str, Any]]) -> dict[str, Any]:
        """The warm start, trained (or loaded from its cache) by rank 0 first; the other ranks wait, then load
        what it cached (the same weights: it is deterministic), instead of all training it at once."""
        if self.dist.world == 1:
            return fn(self)
        info = fn(self) if self.dist.rank == 0 else {}
        self.dist.barrier(WARM_START_WAIT_S)  # longer than a collective may wait: rank 0 may be training it
        return info if self.dist.rank == 0 else fn(self)

    def _prompts_on_device(self, batch: list[Any]) -> tuple[dict[str, torch.Tensor], list[Any], list[Any], list[Any]]:
        collated = collate_prompts(batch, self.ids["pad"], self.ids["image_pad"])
        prompts = {k: collated[k].to(self.device) for k in ("input_ids", "attention_mask")}
        pixels = [p.pixel_values.to(self.device, self.models.actor.dtype) if p.pixel_values is not None else None
                  for p in batch]
        grids = [p.image_grid_thw.to(self.device) if p.image_grid_thw is not None else None for p in batch]
        return prompts, pixels, grids, [p.example.uid for p in batch]

    # ------------------------------------------------------------------ one GRPO step
    def shard(self, num_prompts: int) -> list[int]:
        """The rows (sequences; prompt i's k-th response is row ``i·n + k``) this rank holds: every mini-batch of
        the global batch is split evenly over the ranks, rank r keeping part r of each.

        Mini-batch j holds the same rows whatever the world size (a 2-process run matches a 1-process run).
        When the mini-batch's prompts split over the ranks, a rank holds whole groups; otherwise (verl's rule:
        ``ppo_mini_batch_size × n`` a multiple of the world, e.g. 8 prompts × 8 responses on 16 ranks) a group's
        responses span ranks, and the advantages gather the scores (:meth:`_advantages`).
        """
        world, rank, n = self.dist.world, self.dist.rank, self.rollout_cfg.n
        mini = self.actor_cfg.ppo_mini_batch_size
        if world == 1:
            return list(range(num_prompts * n))
        if num_prompts % mini or (mini * n) % world:
            raise HarnessError(f"ppo_mini_batch_size {mini} x rollout.n {n} must split evenly over {world} ranks and "
                               f"ppo_mini_batch_size divide train_batch_size {num_prompts}",
                               key_path="actor_rollout_ref.actor.ppo_mini_batch_size",
                               fix="use a mini-batch size whose responses are a multiple of the world size")
        k = mini * n // world
        return [j * n + rank * k + i for j in range(0, num_prompts, mini) for i in range(k)]

    def _advantages(self, scores: torch.Tensor, group_ids: list[str], mask: torch.Tensor, split: bool) -> torch.Tensor:
        """GRPO advantages of this rank's rows; when groups span ranks, from every rank's scores (gathered in rank
        order: the rows of a mini-batch part are contiguous, so each group's members are all there)."""
        adv_fn = algos.get_adv_estimator(self.cfg.algorithm.adv_estimator)
        norm = bool(self.cfg.algorithm.norm_adv_by_std_in_grpo)
        if not split:
            return adv_fn(scores, group_ids, mask, eps=1e-6, norm_by_std=norm)
        parts = self.dist.all_gather_objects((group_ids, scores.detach().cpu().tolist()))
        at = sum(len(g) for g, _ in parts[:self.dist.rank])
        every = torch.tensor([v for _, s in parts for v in s], dtype=scores.dtype)
        per_row = adv_fn(every, [g for ids, _ in parts for g in ids], torch.ones(len(every), 1, dtype=torch.long),
                         eps=1e-6, norm_by_std=norm)
        return per_row[at:at + len(group_ids)].to(mask.device) * mask.to(per_row.dtype)

    def rollout(self, batch: list[Any], *, step: int, n: int, sampling: Sampling | Rollout, greedy: bool = False,
                ignore_eos: bool = False, rows: list[int] | None = None,
                global_rows: int | None = None) -> RolloutBatch:
        """Sample n responses per prompt; sampling noise is keyed by (step, global row): ``rows`` are the global
        rows sampled (default: this batch's own), of ``global_rows``."""
        prompts, pixels, grids, uids = self._prompts_on_device(batch)
        rows = rows if rows is not None else list(range(len(batch) * n))
        gen = step_generator(torch.device("cpu"), self.seed, step, 0)
        uniforms = draw_uniforms(gen, self.cfg.data.max_response_length, global_rows or len(batch) * n,
                                 rows, self.device)
        model = self.models.actor
        was_training = model.training
        model.eval()
        try:
            with rollout_scope(self.models):
                return generate(model, prompts, n=n, max_new_tokens=self.cfg.data.max_response_length,
                                temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                                eos_id=self.ids["eos"], pad_id=self.ids["pad"], image_pad_id=self.ids["image_pad"],
                                bias=self.bias, uniforms=uniforms, group_ids=uids, pixels=pixels, grids=grids,
                                greedy=greedy, ignore_eos=ignore_eos, run_to_length=self.dist.world > 1,
                                engine=self.decode_engine, fused_sampler=self.models.fused_sampler and plain_sampling(
                                    greedy=greedy, top_k=sampling.top_k, top_p=sampling.top_p))
        finally:
            model.train(was_training)

    def _replayed(self, batch: list[Any], step: int, n: int,
                  rows: list[int]) -> tuple[RolloutBatch, dict[str, torch.Tensor]]:
        """The recorded rollout of ``step`` on this run's own prompts (pixels from this run's data); a rank replays
        its own ``rows``."""
        assert self.replay is not None  # only a replay run asks
        prompts, pixels, grids, _ = self._prompts_on_device(batch)
        rep = lambda t: t.repeat_interleave(n, dim=0)  # noqa: E731 - groups contiguous, as in generate()
        rec = rank_rows(self.replay.step(step), rows, int(prompts["input_ids"].shape[1]))
        return replayed_batch(rec, rep(prompts["input_ids"]), rep(prompts["attention_mask"]),
                              [p for p in pixels for _ in range(n)], [g for g in grids for _ in range(n)],
                              step=step, source=self.replay.path)

    def score(self, rb: RolloutBatch, examples: list[Any], n: int) -> dict[str, torch.Tensor]:
        """Rule-based rewards per sequence (decoded without special tokens)."""
        scores, accs, fmts = [], [], []
        responses, masks = rb.response_ids.cpu(), rb.response_mask.cpu().bool()  # one read-back, not one per row
        for i in range(rb.size):
            ids = responses[i][masks[i]].tolist()
            text = self.tok.decode(ids, skip_special_tokens=True)
            res = self.reward_fn(text, examples[i // n].answer)
            scores.append(res.score)
            accs.append(res.acc)
            fmts.append(res.format)
        as_t = lambda v: torch.tensor(v, dtype=torch.float32, device=self.device)  # noqa: E731
        return {"scores": as_t(scores), "acc": as_t(accs), "format": as_t(fmts)}

    def step(self, step: int) -> dict[str, float]:
        """One GRPO step; returns the step's metrics (verl names)."""
        timing: dict[str, float] = {}
        reset_peak_memory(self.device)
        t_step = self._tick()
        global_batch = self.loader.next_batch()
        rows = self.shard(len(global_batch))
        n = self.rollout_cfg.n
        split = self.actor_cfg.ppo_mini_batch_size % self.dist.world != 0  # a group's responses span ranks (all alike)
        # whole groups: this rank's prompts, n responses each; split groups: one prompt entry per row
        batch = [global_batch[r // n] for r in (rows if split else rows[::n])]
        n_here = 1 if split else n

        t = self._tick()
        if self.replay is not None:  # teacher-forced: the baseline's tokens and rewards, no sampling
            rb, rewards = self._replayed(batch, step, n_here, rows)
        else:
            rb = self.rollout(batch, step=step, n=n_here, sampling=self.rollout_cfg, rows=rows,
                              global_rows=len(global_batch) * n)
        timing["timing_s/gen"] = self._tock(t)

        t = self._tick()
        if self.replay is None:
            rewards = self.score(rb, [p.example for p in batch], n_here)
        timing["timing_s/reward"] = self._tock(t)
        self.last_rollout = (rb, rewards)
        self.last_rows = rows

        t = self._tick()
        adv = self._advantages(rewards["scores"], rb.group_ids, rb.response_mask, split) * self.advantage_sign
        rb.tensors.update(advantages=adv, scores=rewards["scores"])
        timing["timing_s/adv"] = self._tock(t)

        lp_kw = dict(bias=self.bias, temperature=self.loss_cfg.temperature, image_pad_id=self.ids["image_pad"])
        sizes = step_sizes(self.cfg, self.dist.world, rows=rb.size)
        t = self._tick()
        attach_positions(self.models.actor, rb, self.ids["image_pad"])  # once, not per micro-batch and model
        if not sizes.on_policy:  # on-policy, the update's own forward gives them
            rb.tensors["old_logp"] = batched_logprobs(self.models.actor, rb, sizes.old_micro, **lp_kw)
        timing["timing_s/old_log_prob"] = self._tock(t)
        if self.models.ref is not None:
            t = self._tick()
            rb.tensors["ref_logp"] = batched_logprobs(self.models.ref, rb, sizes.ref_micro, **lp_kw)
            timing["timing_s/ref"] = self._tock(t)

        t = self._tick()
        self.models.actor.train()
        upd = update_actor(self.models.actor, self.optimizer, self.scheduler, rb, cfg=self.loss_cfg,
                           mini_size=sizes.mini, micro_size=sizes.micro, epochs=sizes.epochs,
                           clip_grad=self.actor_cfg.optim.clip_grad, bias=self.bias,
                           image_pad_id=self.ids["image_pad"], all_reduce=self.dist.all_reduce,
                           grad_scale=self.dist.grad_scale, on_policy=sizes.on_policy)
        timing["timing_s/update_actor"] = self._tock(t)
        timing["timing_s/step"] = self._tock(t_step)
        return self._metrics(rb, rewards, upd, timing)

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint restores: the actor's weights and optimizer moments (this rank's shards, from
        torch.distributed.checkpoint's state-dict API), the LR schedule, the data loader's place and the token count."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.models.actor, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, "scheduler": self.scheduler.state_dict(),
                "loader": self.loader.state_dict(), "tokens_seen": self.tokens_seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` gave (the model and optimizer parts shaped like this trainer's own)."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.models.actor, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.loader.load_state_dict(state["loader"])
        self.tokens_seen = int(state["tokens_seen"])

    # ------------------------------------------------------------------ metrics
    def _tick(self) -> float:
        synchronize(self.device)
        return time.perf_counter()

    def _tock(self, t0: float) -> float:
        synchronize(self.device)
        return time.perf_counter() - t0

    def _reduce_mean(self, values: dict[str, torch.Tensor]) -> dict[str, float]:
        """Global mean / max / min over all ranks' sequences for each named per-sequence tensor."""
        out: dict[str, float] = {}
        for name, v in values.items():
            v = v.double()
            stats = self.dist.all_reduce(torch.stack([v.sum(), torch.tensor(float(v.numel()), dtype=torch.float64,
                                                                             device=v.device)]))
            out[f"{name}/mean"] = float(stats[0] / stats[1])
            gathered = self.dist.all_gather_objects((float(v.max()), float(v.min())))
            out[f"{name}/max"] = max(g[0] for g in gathered)
            out[f"{name}/min"] = min(g[1] for g in gathered)
        return out

    def _metrics(self, rb: RolloutBatch, rewards: dict[str, torch.Tensor], upd: dict[str, float],
                 timing: dict[str, float]) -> dict[str, float]:
        resp_len = rb.response_mask.sum(-1).float()
        prompt_len = rb.prompt_mask.sum(-1).float()
        valid = rb.response_mask.bool()
        seq_adv = (rb.tensors["advantages"] * rb.response_mask).sum(-1) / rb.response_mask.sum(-1).clamp(min=1)
        m = dict(upd)
        m.update(self._reduce_mean({
            "critic/score": rewards["scores"], "critic/rewards": rewards["scores"], "critic/advantages": seq_adv,
            "response_length": resp_len, "prompt_length": prompt_len,
            "reward/acc": rewards["acc"], "reward/format": rewards["format"]}))
        max_len = self.cfg.data.max_response_length
        clipped = (resp_len >= max_len).double()
        m["response_length/clip_ratio"] = float(self.dist.all_reduce(clipped.sum()) / (rb.size * self.dist.world))
        if self.replay is None:  # a replayed rollout has no generation-time log-probs
            diff = (rb.tensors["old_logp"].exp() - rb.rollout_logp.exp()).abs()[valid]
            m["training/rollout_probs_diff_max"] = float(diff.max()) if diff.numel() else 0.0
            m["training/rollout_probs_diff_mean"] = float(diff.mean()) if diff.numel() else 0.0
        tokens = float(self.dist.all_reduce((resp_len.sum() + prompt_len.sum()).double()))
        self.tokens_seen += int(tokens)
        m["perf/total_num_tokens"] = tokens
        m["perf/throughput"] = tokens / timing["timing_s/step"] / self.dist.world
        flops = 6 * self.models.n_active_params * tokens * self.actor_cfg.ppo_epochs
        m["perf/mfu"] = flops / timing["timing_s/update_actor"] / (self.peak_tflops * 1e12 * self.dist.world)
        m["perf/max_memory_allocated_gb"] = peak_memory_gb(self.device)
        m.update(timing)
        return {k: m[k] for k in sorted(m)}

    # ------------------------------------------------------------------ validation
    @torch.no_grad()
    def validate(self, step: int) -> dict[str, float]:
        """Reward on the held-out split with the recipe's validation sampling (greedy or seeded)."""
        vk = self.rollout_cfg.val_kwargs
        if self._val_loader is None:  # the held-out prompts are encoded (images processed) once per run
            self._val_loader = PromptLoader(self.val_examples, self.tok, self.image_processor, self.merge,
                                            batch_size=self.cfg.data.val_batch_size or len(self.val_examples),
                                            max_prompt_length=self.cfg.data.max_prompt_length,
                                            truncation=self.cfg.data.truncation,
                                            filter_overlong_prompts=self.cfg.data.filter_overlong_prompts,
                                            shuffle=False, seed=self.seed)
        loader = copy.copy(self._val_loader)  # from its first batch every time (the copy's position moves)
        mine: list[tuple[int, int, str, float]] = []  # (batch, row, data source, score): this rank's prompts
        world, rank = self.dist.world, self.dist.rank
        for i in range(len(loader)):
            batch = loader.next_batch()
            greedy = not vk.do_sample or vk.temperature == 0
            sampling = Sampling(temperature=vk.temperature or 1.0, top_k=vk.top_k, top_p=vk.top_p)
            index = list(range(rank, len(batch), world))  # every world-th prompt: each validated by one rank
            if not index:
                continue
            rows = [k * vk.n + j for k in index for j in range(vk.n)]
            rb = self.rollout([batch[k] for k in index], step=1_000_000 + step * 1000 + i, n=vk.n,
                              sampling=sampling, greedy=greedy, rows=rows, global_rows=len(batch) * vk.n)
            scores = self.score(rb, [batch[k].example for k in index], vk.n)["scores"].tolist()
            mine += [(i, row, batch[row // vk.n].example.data_source, v) for row, v in zip(rows, scores, strict=True)]
        per_source: dict[str, list[float]] = {}
        for _, _, src, v in sorted(x for part in self.dist.all_gather_objects(mine) for x in part):  # global order
            per_source.setdefault(src, []).append(v)
        return {f"val-core/{src}/reward/mean": float(np.mean(vals)) for src, vals in sorted(per_source.items())}
