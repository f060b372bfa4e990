"""One GRPO step of a recipe on one rank of its profile, traced at full size without a device.

The models are built by the run's own builder on the ``meta`` device (shapes, no bytes), made ready by
the run's :func:`~harness.core.trainer.ready_models` (lean norms, decode engine, and FSDP2 sharding
over a *fake* process group of the profile's world size), then materialised as fake tensors. The
step runs the run's own functions with this rank's true shapes (:func:`~harness.core.trainer.step_sizes`):

- ``rollout``: :func:`~harness.core.rollout.generate` on this rank's prompts, every one as long as the
  longest prompt of the recipe's training data as the run's loader encodes it (a batch is padded to its
  longest: the step that draws it is the largest), the prefill and ``decode_steps`` decode forwards. The KV cache is then
  taken to its full length (prompt + ``max_response_length``) from the bytes per cached token the
  trace measured: the decode peak grows by exactly the cache's growth.
- ``logprob``: one old log-prob micro-batch (unless the update is on-policy) and one reference one,
  :func:`~harness.core.update.batched_logprobs`, at full sequence length.
- ``update``: :func:`~harness.core.update.update_actor` on one micro-batch: forward, backward, the
  gradient clip; ``optimizer``: its AdamW step (the run's kernel, with its state already there, as
  from the second step on).

Prompts are text: a vision tower's parameters, gradients and optimizer state are counted, its
activations on images are not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from harness.core.fused_sampler import plain as plain_sampling
from harness.core.model_builder import BuiltModules, banned_bias, build_models
from harness.core.rollout import PROMPT_POSITIONS, RolloutBatch, generate
from harness.core.tokenizer import load_tokenizer, special_token_ids
from harness.core.trainer import (
    Dist,
    StepSizes,
    build_optimizer,
    datasets,
    loss_config,
    prompt_loader,
    ready_models,
    rollout_scope,
    step_sizes,
)
from harness.core.typed_recipe import Recipe
from harness.core.update import attach_positions, batched_logprobs, update_actor
from harness.plan.tracker import Tracker

DECODE_STEPS = 2  # decode forwards traced after the prefill (the rest differ only by the cache's length)
PHASES = ("rollout", "logprob", "update", "optimizer")


@dataclass
class StepTrace:
    """What one rank's step held and sent (per phase), and the shapes it ran at."""

    world: int
    rank: int
    sizes: StepSizes
    prompt_len: int
    response_len: int
    decode_engine: str
    n_params: int
    n_active_params: int
    local_params: int  # this rank's parameter elements (its shards)
    offload: bool
    has_ref: bool
    shard_group: int  # ranks one replica is sharded over (1: unsharded)
    kv_bytes_per_token: int  # per sequence and cached position
    update_micro_batches: int = 1  # update micro-batches traced (two when a mini-batch has two or more)
    gather_once: bool = False  # sharded: the rollout gathers every unit once
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)  # peak_bytes, breakdown
    collectives: list[dict[str, Any]] = field(default_factory=list)  # phase, kind, count, bytes (traced)
    host_bytes: int = 0
    placeholder_reads: int = 0
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0


@contextmanager
def fake_world(world: int, rank: int) -> Iterator[Dist]:
    """This process as rank ``rank`` of a fake process group of ``world`` ranks (collectives do nothing)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from harness.core.parallel import init_distributed

    if world == 1:
        yield Dist()
        return
    if dist.is_initialized():
        raise RuntimeError("harness plan needs a process without a process group")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield init_distributed("cpu")
    finally:
        dist.destroy_process_group()


def _kv_hook(tracker: Tracker, decode_seen: list[bool]) -> Iterator[None]:
    """Tag what every transformers cache layer holds as the KV cache; the first one-token update starts the decode."""
    from transformers import cache_utils

    layers = [cls for cls in (cache_utils.DynamicLayer, cache_utils.StaticLayer)]
    saved = {cls: cls.update for cls in layers}

    def wrap(orig: Any) -> Any:
        def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *a: Any, **kw: Any) -> Any:
            if key_states.shape[-2] == 1 and not decode_seen[0] and tracker.phase == "rollout":
                decode_seen[0] = True
                tracker.switch("rollout.decode")
            out = orig(self, key_states, value_states, *a, **kw)
            tracker.retag([t for t in (self.keys, self.values) if isinstance(t, torch.Tensor)], "kv_cache")
            return out
        return update

    for cls in layers:
        cls.update = wrap(saved[cls])  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, fn in saved.items():
            cls.update = fn  # type: ignore[method-assign]


def _batch(rows: int, P: int, R: int, pos_3d: bool, with_logps: bool) -> RolloutBatch:
    """A full-length batch (prompts at P, responses at R, nothing padded) of fake tensors."""
    ids = lambda n: _real_tokens((rows, n))  # noqa: E731
    ones = lambda n: _real_ones((rows, n))  # noqa: E731
    pos = torch.arange(P).expand(rows, P)
    rb = RolloutBatch(prompt_ids=ids(P), prompt_mask=ones(P), response_ids=ids(R), response_mask=ones(R),
                      rollout_logp=torch.zeros(rows, R), group_ids=[i // 2 for i in range(rows)],
                      pixels=[None] * rows, grids=[None] * rows,
                      tensors={PROMPT_POSITIONS: pos[:, None].expand(rows, 3, P) if pos_3d else pos})
    if with_logps:
        rb.tensors.update(advantages=torch.zeros(rows, R), old_logp=torch.zeros(rows, R),
                          ref_logp=torch.zeros(rows, R))
    return rb


TEXT_TOKEN = 100  # a plain text token of the harness's tokenizer (not special)


def _real_tokens(shape: tuple[int, int]) -> torch.Tensor:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return torch.full(shape, TEXT_TOKEN, dtype=torch.long)


def _real_ones(shape: tuple[int, int]) -> torch.Tensor:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return torch.ones(shape, dtype=torch.long)


def _materialise(models: BuiltModules, tracker: Tracker, offload_actor: bool, offload_ref: bool) -> None:
    for model, off in ((models.actor, offload_actor), (models.ref, offload_ref)):
        if model is None:
            continue
        model.to_empty(device="cpu")
        if getattr(model.config, "tie_word_embeddings", False) or getattr(
                getattr(model.config, "text_config", None), "tie_word_embeddings", False):
            model.tie_weights()  # type: ignore[operator]  # new storages for every parameter: the head shares the embedding's again
        tracker.retag(list(model.parameters()) + list(model.buffers()),
                      tracker.state_category("parameters", off))


def trace_step(cfg: Recipe, *, world: int, rank: int = 0, decode_steps: int = DECODE_STEPS,
               prompt_len: int | None = None, device_memory_bytes: float | None = None) -> StepTrace:
    """Trace one GRPO step of ``cfg`` (resolved for its profile) as rank ``rank`` of ``world`` (module docstring).

    ``prompt_len``: for a workload that feeds its own prompts (a benchmark), instead of the recipe data's longest.
    ``device_memory_bytes``: the profile's device memory (the rollout's gathering depends on it; None: the host)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from harness.core.parallel import fsdp_wrapper

    t0 = time.perf_counter()
    arr = cfg.actor_rollout_ref
    engine_cfg = arr.actor.veomni
    offload_actor = world > 1 and bool(engine_cfg.param_offload or engine_cfg.optimizer_offload)
    offload_ref = world > 1 and bool(arr.ref.param_offload)
    device = decision_device(cfg.trainer.device)
    tok = load_tokenizer()
    ids = special_token_ids(tok)
    P, R = prompt_len or longest_prompt(cfg, tok), cfg.data.max_response_length
    sizes = step_sizes(cfg, world)
    with fake_world(world, rank) as d:
        if world > 1:
            d = replace(d, wrap=fsdp_wrapper(cfg, world, mesh_device="cpu"), grad_scale=float(world))
        built = build_models(cfg, ids, torch.device("meta"), int(cfg.seed), with_ref=bool(arr.actor.use_kl_loss))
        models, engine = ready_models(built, cfg, device, d, device_memory_bytes)
        tracker = Tracker(offload=offload_actor)
        decode_seen = [False]
        with FakeTensorMode(allow_non_fake_inputs=True), tracker, tracker.watching_resizes(), \
                contextmanager(_kv_hook)(tracker, decode_seen):
            _materialise(models, tracker, offload_actor, offload_ref)
            actor = models.actor
            if world == 1:  # unsharded: autograd accumulates the gradients (sharded: the reduce-scatter writes them)
                for param in actor.parameters():
                    if param.requires_grad:
                        param.register_post_accumulate_grad_hook(
                            lambda q: tracker.retag([q.grad] if q.grad is not None else [], "gradients"))
            optimizer, scheduler = build_optimizer(cfg, actor, device)
            _warm_optimizer(optimizer, tracker, offload_actor)
            optimizer.register_step_pre_hook(lambda *_: tracker.switch("optimizer", context="optimizer",
                                                                       offloaded=offload_actor))
            optimizer.register_step_post_hook(lambda *_: tracker.switch("update"))
            vocab = cfg.model.architecture.text.vocab_size
            bias = banned_bias(vocab, [], torch.device("cpu"))
            pos_3d = cfg.model.family == "qwen3_vl_moe"

            with tracker.in_phase("rollout"):
                prompts = {"input_ids": _real_tokens((sizes.prompts, P)),
                           "attention_mask": _real_ones((sizes.prompts, P))}
                actor.eval()
                with rollout_scope(models):
                    if models.gather_once:  # the whole model, gathered once for the rollout: parameters
                        tracker.retag(list(actor.parameters()), "parameters")
                    generate(actor, prompts, n=arr.rollout.n, max_new_tokens=decode_steps + 1,
                             temperature=arr.rollout.temperature, top_k=arr.rollout.top_k, top_p=arr.rollout.top_p,
                             eos_id=ids["eos"], pad_id=ids["pad"], image_pad_id=ids["image_pad"], bias=bias,
                             uniforms=torch.zeros(decode_steps + 1, sizes.rows), group_ids=list(range(sizes.prompts)),
                             pixels=[None] * sizes.prompts, grids=[None] * sizes.prompts, greedy=False,
                             ignore_eos=False, run_to_length=world > 1,  # (the EOS checks read placeholders: go on)
                             engine="static" if engine == "graph" else engine,  # same buffers; graphs need CUDA
                             fused_sampler=models.fused_sampler and plain_sampling(
                                 greedy=False, top_k=arr.rollout.top_k, top_p=arr.rollout.top_p))
            lp_kw = dict(bias=bias, temperature=arr.rollout.temperature, image_pad_id=ids["image_pad"])
            if not sizes.on_policy:
                with tracker.in_phase("logprob.old"):
                    rb = _batch(sizes.old_micro, P, R, pos_3d, False)
                    attach_positions(actor, rb, ids["image_pad"])
                    batched_logprobs(actor, rb, sizes.old_micro, **lp_kw)
                    del rb
            if models.ref is not None:
                with tracker.in_phase("logprob.ref"):
                    rb = _batch(sizes.ref_micro, P, R, pos_3d, False)
                    attach_positions(actor, rb, ids["image_pad"])
                    batched_logprobs(models.ref, rb, sizes.ref_micro, **lp_kw)
                    del rb
            with tracker.in_phase("update"):  # two micro-batches when the mini-batch has them: the second
                rows = min(sizes.mini, 2 * sizes.micro)  # runs with the first one's gradients accumulated
                rb = _batch(rows, P, R, pos_3d, True)
                attach_positions(actor, rb, ids["image_pad"])
                actor.train()
                update_actor(actor, optimizer, scheduler, rb, cfg=loss_config(cfg), mini_size=rows,
                             micro_size=sizes.micro, epochs=1, clip_grad=arr.actor.optim.clip_grad, bias=bias,
                             image_pad_id=ids["image_pad"], all_reduce=d.all_reduce, grad_scale=d.grad_scale,
                             on_policy=sizes.on_policy)
                del rb
    local = sum(_local(p).numel() for p in models.actor.parameters())
    text = cfg.model.architecture.text
    kv_heads = text.num_key_value_heads
    kv_per_token = 2 * text.num_hidden_layers * kv_heads * text.head_dim * actor_dtype_bytes(models)
    out = StepTrace(world=world, rank=rank, sizes=sizes, prompt_len=P, response_len=R, decode_engine=engine,
                    n_params=models.n_params, n_active_params=models.n_active_params, local_params=local,
                    offload=offload_actor, has_ref=models.ref is not None,
                    shard_group=_shard_group(cfg, world), kv_bytes_per_token=kv_per_token,
                    gather_once=models.gather_once,
                    update_micro_batches=math.ceil(min(sizes.mini, 2 * sizes.micro) / sizes.micro), host_bytes=tracker.host_bytes(),
                    placeholder_reads=tracker.placeholder_reads, notes=list(models.notes))
    for name, p in tracker.phases.items():
        out.phases[name] = {"peak_bytes": p.peak_bytes, "breakdown": dict(p.breakdown), "start_bytes": p.start_bytes}
    out.collectives = [{"phase": ph, "kind": c.kind, "count": c.count, "bytes": c.bytes}
                       for (ph, _), c in sorted(tracker.collectives.items())]
    out.wall_s = time.perf_counter() - t0
    return out


def longest_prompt(cfg: Recipe, tok: Any) -> int:
    """The longest training prompt, in tokens, as the run's loader encodes the recipe's data (each batch is
    padded to its own longest, so the step that draws it is the largest)."""
    train, _ = datasets(cfg)
    return max(len(p.input_ids) for p in prompt_loader(cfg, train, tok, pixels=False).prompts)


def decision_device(kind: str) -> torch.device:
    """The device the run's kernel choices are made for (engine, AdamW kernel, lean norms): CUDA and the CPU
    as themselves; any other kind (npu: torch_npu is not loaded here) as a device that is neither, which is
    what those choices see on it."""
    return torch.device(kind) if kind in ("cpu", "cuda") else torch.device("meta")


def _shard_group(cfg: Recipe, world: int) -> int:
    engine = cfg.actor_rollout_ref.actor.veomni
    if world == 1 or not engine.enable_full_shard:
        return 1
    return engine.fsdp_size if 0 < engine.fsdp_size < world else world


def _local(p: torch.Tensor) -> torch.Tensor:
    local = getattr(p, "_local_tensor", None)
    return local if local is not None else p


def actor_dtype_bytes(models: BuiltModules) -> int:
    return next(models.actor.parameters()).element_size()


def _warm_optimizer(optimizer: torch.optim.Optimizer, tracker: Tracker, offloaded: bool) -> None:
    """Create AdamW's state (moments, step counts) as its first step leaves it: from the second step on it is
    resident through every phase. Zero moments beside each parameter and a step count of 1 (what a step with zero
    gradients leaves), put in place by the optimizer's own ``load_state_dict`` (which moves each entry where the
    kernel keeps it), instead of a step over the sharded parameters: that step's tensor dispatch took ~16 % of a
    full-scale plan."""
    sd = optimizer.state_dict()
    ids = [i for group in sd["param_groups"] for i in group["params"]]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    with tracker.counting_as(tracker.state_category("optimizer", offloaded)):
        state = {i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                     "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
                 for i, p in zip(ids, params, strict=True)}
        optimizer.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
