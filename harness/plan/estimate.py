"""From a traced step to the plan: the full-length rollout, the step's collectives, the profile's verdict.

Memory per rank and phase is the trace's (:mod:`harness.plan.trace`), with one extension: the rollout's
decode peak grows by the KV cache the untraced decode steps add, ``rows × (R − 1 − decode_steps) ×
bytes per cached token`` (a decode step's other buffers do not depend on its position).

Step time per rank, per phase, from the profile's declared rates (``peak_bf16_tflops``,
``memory_bandwidth_gbps``, ``interconnect.*_gbps``) and counts of this step (``N`` active parameters,
``L`` layers, ``H·d`` attention width, ``S = P + R``):

- compute: forward ``2·N·t + 2·L·H·d·t·c`` FLOPs for ``t`` tokens attending ``c`` positions
  (causal: ``c = S/2`` for a full sequence); backward twice the forward, plus one forward with
  gradient checkpointing.
- memory: every decode step reads the whole model (gathered when sharded) and its rows' KV
  cache; the optimizer reads and writes its shard (parameters, gradients, two fp32 moments).
- collectives: the traced bytes of each kind, scaled to the step (decode forwards, micro-batches,
  optimizer steps), over the shard group's link (intra-node when the group fits in a node).
- host link: with offload, the shards go to the device for every forward and backward (a rollout that
  gathers once: once), and gradients come back.

A phase takes the longest of the four (they overlap), which names its bound; the step is their sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.typed_files import Profile
from harness.core.typed_recipe import Recipe
from harness.plan.trace import DECODE_STEPS, PHASES, StepTrace

GB = 1e9
USABLE_FRACTION = 0.95  # of the device's memory (the rest: CUDA context, allocator slack, communication buffers)
OPTIMIZER_BYTES_PER_PARAM = 2 * 8  # AdamW: two fp32 moments, read and written

FIXES = {
    "parameters": "shard more (raise fsdp_size or the ranks) or turn on actor_rollout_ref.actor.veomni.param_offload",
    "gradients": "shard more (raise fsdp_size or the ranks) or turn on actor_rollout_ref.actor.veomni.param_offload",
    "optimizer": "turn on actor_rollout_ref.actor.veomni.optimizer_offload or shard more",
    "activations": "lower actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (or the log-prob micro-batches) and "
                   "keep actor_rollout_ref.model.enable_gradient_checkpointing on",
    "kv_cache": "lower data.train_batch_size or data.max_response_length, or spread the rollout over more ranks",
}


@dataclass(frozen=True)
class Rates:
    flops: float  # FLOP/s per device
    memory: float | None  # bytes/s per device
    intra: float | None  # bytes/s per device, one direction
    inter: float | None
    host: float | None


def rates(profile: Profile) -> Rates:
    acc, ic = profile.accelerator, profile.interconnect
    gbps = lambda v: v * GB if v else None  # noqa: E731
    return Rates(flops=acc.peak_bf16_tflops * 1e12, memory=gbps(acc.memory_bandwidth_gbps),
                 intra=gbps(ic.intra_node_gbps), inter=gbps(ic.inter_node_gbps), host=gbps(ic.host_link_gbps))


STATIC_ENGINES = ("graph", "static")  # their decoders keep the cache between rollouts (harness.core.decode)


def validation_cache_bytes(cfg: Recipe, trace: StepTrace) -> int:
    """The validation decoder's cache, kept beside the training one by a static engine when the run validates."""
    t = cfg.trainer
    if trace.decode_engine not in STATIC_ENGINES or not (t.test_freq > 0 or t.val_before_train):
        return 0
    data = cfg.data
    rows = (data.val_batch_size or data.synthetic.val_size) * cfg.actor_rollout_ref.rollout.val_kwargs.n
    return rows * (trace.prompt_len + trace.response_len) * trace.kv_bytes_per_token


def _with_kv(part: dict[str, Any], extra: int) -> dict[str, Any]:
    out = dict(part)
    out["breakdown"] = {**part["breakdown"], "kv_cache": part["breakdown"].get("kv_cache", 0) + extra}
    out["peak_bytes"] = part["peak_bytes"] + extra
    return out


def _phase_peaks(cfg: Recipe, trace: StepTrace) -> dict[str, dict[str, Any]]:
    """Per reported phase: peak bytes and breakdown, the rollout's decode taken to the full length.

    A static engine's cache (allocated at its full length on the first rollout) stays through every
    phase, and so does its validation decoder's; a dynamic cache is freed when the rollout ends."""
    ph = trace.phases
    s = trace.sizes
    out: dict[str, dict[str, Any]] = {}
    grow = s.rows * max(0, trace.response_len - 1 - DECODE_STEPS) * trace.kv_bytes_per_token
    static = trace.decode_engine in STATIC_ENGINES
    kept = (grow if static else 0) + validation_cache_bytes(cfg, trace)
    rollout = [_with_kv(ph["rollout"], kept)] if "rollout" in ph else []
    if "rollout.decode" in ph:
        rollout.append(_with_kv(ph["rollout.decode"], grow + kept - (grow if static else 0)))
    merged = {"rollout": rollout,
              "logprob": [_with_kv(ph[k], kept) for k in ("logprob.old", "logprob.ref") if k in ph],
              "update": [_with_kv(ph["update"], kept)] if "update" in ph else [],
              "optimizer": [_with_kv(ph["optimizer"], kept)] if "optimizer" in ph else []}
    for name in PHASES:
        parts = merged[name]
        best = max(parts, key=lambda p: p["peak_bytes"]) if parts else {"peak_bytes": 0, "breakdown": {}}
        out[name] = {"peak_bytes": int(best["peak_bytes"]),
                     "breakdown": {k: int(best["breakdown"].get(k, 0)) for k in
                                   ("parameters", "gradients", "optimizer", "activations", "kv_cache")}}
    return out


def _repeats(trace: StepTrace) -> dict[str, float]:
    """How many times the step runs what each traced sub-phase ran once."""
    s = trace.sizes
    decode_forwards = max(0, trace.response_len - 1)
    return {"rollout": 1.0, "rollout.decode": decode_forwards / DECODE_STEPS,
            "logprob.old": math.ceil(s.rows / s.old_micro), "logprob.ref": math.ceil(s.rows / s.ref_micro),
            "update": s.epochs * math.ceil(s.rows / s.micro) / trace.update_micro_batches,
            "optimizer": s.epochs * math.ceil(s.rows / s.mini)}


def collectives(trace: StepTrace) -> list[dict[str, Any]]:
    """The step's collectives per reported phase and kind: count and bytes (traced × repeats)."""
    reps = _repeats(trace)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for c in trace.collectives:
        phase = c["phase"].split(".")[0]
        r = reps.get(c["phase"], 1.0)
        row = out.setdefault((phase, c["kind"]), {"phase": phase, "kind": c["kind"], "count": 0, "bytes": 0})
        row["count"] += int(round(c["count"] * r))
        row["bytes"] += int(round(c["bytes"] * r))
    return sorted(out.values(), key=lambda r: (PHASES.index(r["phase"]) if r["phase"] in PHASES else 9, r["kind"]))


def _flops(cfg: Recipe, trace: StepTrace) -> dict[str, float]:
    text = cfg.model.architecture.text
    width = text.num_attention_heads * text.head_dim * text.num_hidden_layers
    N, s, P, R = trace.n_active_params, trace.sizes, trace.prompt_len, trace.response_len
    S = P + R

    def fwd(tokens: float, ctx: float) -> float:
        return 2 * N * tokens + 2 * width * tokens * ctx

    ckpt = 1 if cfg.actor_rollout_ref.model.enable_gradient_checkpointing else 0
    decode = sum(fwd(s.rows, P + t) for t in range(1, R))
    return {"rollout": fwd(s.rows * P, P / 2) + decode,
            "logprob": (0 if s.on_policy else fwd(s.rows * S, S / 2)) + (fwd(s.rows * S, S / 2) if trace.has_ref else 0),
            "update": s.epochs * (3 + ckpt) * fwd(s.rows * S, S / 2),
            "optimizer": 0.0}


def _memory_traffic(trace: StepTrace, dtype_bytes: int) -> dict[str, float]:
    s, P, R = trace.sizes, trace.prompt_len, trace.response_len
    weights = trace.n_params * dtype_bytes
    kv_reads = sum(s.rows * (P + t) * trace.kv_bytes_per_token for t in range(1, R))
    forwards = {"rollout": 1 + (R - 1), "logprob": _logprob_forwards(trace),
                "update": 2 * s.epochs * math.ceil(s.rows / s.micro), "optimizer": 0}
    out: dict[str, float] = {k: float(v * weights) for k, v in forwards.items()}
    out["rollout"] += kv_reads
    steps = s.epochs * math.ceil(s.rows / s.mini)
    out["optimizer"] = steps * trace.local_params * (3 * dtype_bytes + OPTIMIZER_BYTES_PER_PARAM)
    return out


def step_time(cfg: Recipe, profile: Profile, trace: StepTrace, colls: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per phase: seconds, the bound (compute, memory, interconnect, host) and each term (module docstring)."""
    r = rates(profile)
    dtype_bytes = 4 if cfg.model.dtype == "float32" else 2
    flops, traffic = _flops(cfg, trace), _memory_traffic(trace, dtype_bytes)
    shard = trace.shard_group
    link = r.intra if shard <= profile.accelerator.count_per_node else r.inter
    s = trace.sizes
    host_moves = {"rollout": 1 if trace.gather_once else trace.response_len, "logprob": _logprob_forwards(trace),
                  "update": 3 * s.epochs * math.ceil(s.rows / s.micro), "optimizer": 0}
    out: dict[str, dict[str, Any]] = {}
    for phase in PHASES:
        comm = sum(c["bytes"] * (trace.world - 1) / max(trace.world, 1) for c in colls
                   if c["phase"] == phase and c["kind"] in ("all_gather", "reduce_scatter"))
        replicas = sum(c["bytes"] for c in colls if c["phase"] == phase and c["kind"] == "all_reduce")
        terms = {"compute": flops[phase] / r.flops,
                 "memory": traffic[phase] / r.memory if r.memory else 0.0,
                 "interconnect": (comm / link if link else 0.0) + (replicas / r.inter if r.inter else 0.0),
                 "host": (host_moves[phase] * trace.local_params * dtype_bytes / r.host)
                 if trace.offload and r.host else 0.0}
        bound = max(terms, key=lambda k: terms[k])
        out[phase] = {"time_s": terms[bound], "bound": bound, "terms_s": terms, "flops": flops[phase]}
    return out


def _logprob_forwards(trace: StepTrace) -> int:
    """Forwards of the log-prob phase: the old log-probs' micro-batches (none on-policy) and the reference's."""
    s = trace.sizes
    return (0 if s.on_policy else math.ceil(s.rows / s.old_micro)) + \
        (math.ceil(s.rows / s.ref_micro) if trace.has_ref else 0)


def plan_document(cfg: Recipe, profile: Profile, trace: StepTrace, *, recipe: str, scale: str) -> dict[str, Any]:
    """The plan as JSON: memory per phase, the verdict against the device, collectives and step time."""
    phases = _phase_peaks(cfg, trace)
    colls = collectives(trace)
    times = step_time(cfg, profile, trace, colls)
    device_type = profile.device_type
    mem_gb = profile.host.memory_gb if device_type == "cpu" else profile.accelerator.memory_gb
    device_bytes = int(mem_gb * GB)
    budget = int(USABLE_FRACTION * device_bytes)
    peak_phase = max(PHASES, key=lambda p: phases[p]["peak_bytes"])
    peak = phases[peak_phase]["peak_bytes"]
    breakdown = phases[peak_phase]["breakdown"]
    consumer = max(breakdown, key=lambda k: breakdown[k])
    for name in PHASES:
        phases[name].update(time_s=times[name]["time_s"], bound=times[name]["bound"],
                            terms_s=times[name]["terms_s"], flops=times[name]["flops"])
    per_node = profile.accelerator.count_per_node
    return {
        "recipe": recipe, "profile": profile.name, "scale": scale, "device_type": device_type,
        "world_size": trace.world, "nnodes": cfg.trainer.nnodes, "devices_per_node": cfg.trainer.n_gpus_per_node,
        "rank": trace.rank, "shard_group": trace.shard_group,
        "fits": peak <= budget, "per_rank_peak_bytes": peak, "peak_phase": peak_phase,
        "largest_consumer": consumer, "fix": None if peak <= budget else FIXES[consumer],
        "device_memory_bytes": device_bytes, "budget_bytes": budget, "headroom_bytes": budget - peak,
        "host_bytes_per_rank": trace.host_bytes, "host_bytes_per_node": trace.host_bytes * per_node,
        "phases": phases, "collectives": colls,
        "step_time_s": sum(times[p]["time_s"] for p in PHASES),
        "shapes": {"rollout_sequences": trace.sizes.rows, "prompt_length": trace.prompt_len,
                   "response_length": trace.response_len, "update_micro_batch": trace.sizes.micro,
                   "old_logprob_micro_batch": None if trace.sizes.on_policy else trace.sizes.old_micro,
                   "ref_logprob_micro_batch": trace.sizes.ref_micro if trace.has_ref else None,
                   "mini_batch": trace.sizes.mini, "epochs": trace.sizes.epochs},
        "model": {"n_params": trace.n_params, "n_active_params": trace.n_active_params,
                  "local_params": trace.local_params, "decode_engine": trace.decode_engine,
                  "offload": trace.offload, "kv_bytes_per_token": trace.kv_bytes_per_token,
                  "notes": trace.notes},
        "trace": {"decode_steps": DECODE_STEPS, "placeholder_reads": trace.placeholder_reads,
                  "wall_s": round(trace.wall_s, 2), "sub_phases": trace.phases},
    }


def world_size(res: Any) -> int:
    """Ranks of the resolved recipe: nnodes × devices per node (the cpu profile: one process)."""
    t = res.spec.trainer
    return 1 if t.device == "cpu" else int(t.nnodes) * int(t.n_gpus_per_node)


def make_plan(res: Any, rank: int = 0, *, longest_allowed: bool = False) -> dict[str, Any]:
    """The plan document of a resolved recipe (see :func:`harness.plan.estimate.plan_document`)."""
    from harness.errors import HarnessError
    from harness.plan.trace import trace_step

    world = world_size(res)
    if not 0 <= rank < world:
        raise HarnessError(f"rank {rank} is not in a world of {world}", key_path="--rank",
                           fix=f"give a rank from 0 to {world - 1}")
    prompt_len = res.spec.data.max_prompt_length if longest_allowed else None  # else the data's longest
    hw = res.hardware
    memory = None if hw.device_type == "cpu" else hw.accelerator.memory_gb * GB
    trace = trace_step(res.spec, world=world, rank=rank, prompt_len=prompt_len, device_memory_bytes=memory)
    return plan_document(res.spec, res.hardware, trace, recipe=res.name, scale=res.scale)


def write_plan(doc: dict[str, Any], run_dir: Path) -> Path:
    """``plan.json`` beside a run's records (atomically)."""
    from harness.jsonio import write_json_atomic

    path = run_dir / "plan.json"
    write_json_atomic(path, doc)
    return path
