"""Allocator bytes of real CPU ranks, per rank: what `harness plan` predicts for the cpu profile, measured.

    python bench/rank_memory.py [RECIPE ...] [--worlds 1 2]     # table: planned vs measured per rank

Each rank is a process joining a gloo group (``world`` > 1: the run's own FSDP2 wrapper), builds the run's
trainer for the recipe's smoke scale on the cpu profile (no warm start: its SFT is not a GRPO step) and runs two
steps under ``torch.profiler`` with ``profile_memory``: every allocation and free the CPU allocator reports, in
order, from before the trainer is built. The peak is the highest running total during the second step (the
optimizer's state exists from the first), the steady state ``harness plan`` plans.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
STEP_MARK = "rank_memory.step2"


def _resolved(recipe: str, world: int) -> Any:
    from harness.config.recipe import resolve
    from harness.run.runtime.rank import cpu_world

    return cpu_world(resolve(recipe, "cpu", "smoke", ("trainer.total_training_steps=2",)), world)


def _peak_in_step(prof: Any) -> int:
    """The highest running total of the allocator's reports (allocations +, frees -) inside the marked step."""
    events = list(prof.profiler.kineto_results.events())
    mem = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    mark = next(e for e in events if e.name() == STEP_MARK)
    start, end = mark.start_ns(), mark.start_ns() + mark.duration_ns()
    total = peak = 0
    for t, nbytes in mem:
        total += nbytes
        if start <= t <= end:
            peak = max(peak, total)
    return peak


def _join_as(rank: int, world: int, port: int) -> None:
    """This spawned process is ``rank`` of ``world`` on localhost (env:// rendezvous), with one thread."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)


def _rank(rank: int, world: int, recipe: str, port: int, out: Any) -> None:
    _join_as(rank, world, port)
    from harness.core.parallel import distributed, shutdown
    from harness.core.trainer import Dist, GRPOTrainer

    res = _resolved(recipe, world)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        dist = distributed(res.spec, "gloo") if world > 1 else Dist()
        tr = GRPOTrainer(res.spec, device=torch.device("cpu"), peak_tflops=1.0, dist=dist)
        tr.step(1)
        with torch.profiler.record_function(STEP_MARK):
            tr.step(2)
    out[rank] = _peak_in_step(prof)
    if world > 1:
        shutdown()


def _rollout_rank(rank: int, world: int, recipe: str, port: int, out: Any) -> None:
    """One rank's first rollout: its prompt indices, tokens, log-probs, the all-gathers it issued and the FSDP2
    root pre-forwards that ran; then the same rollout through the static-cache engine (``static_tokens``)."""
    _join_as(rank, world, port)
    import torch.distributed as dist
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

    from harness.core.gather import sharded_units
    from harness.core.parallel import distributed, shutdown
    from harness.core.trainer import GRPOTrainer

    res = _resolved(recipe, world)
    tr = GRPOTrainer(res.spec, device=torch.device("cpu"), peak_tflops=1.0, dist=distributed(res.spec, "gloo"))
    counts = {"gathers": 0, "pre_forwards": 0}
    names = [n for n in ("all_gather_single", "all_gather_into_tensor") if hasattr(dist, n)]  # FSDP2's, by version
    real = {n: getattr(dist, n) for n in names}
    real_pre = FSDPState._root_pre_forward

    def counting(fn: Any, key: str) -> Any:
        def counted(*a: Any, **k: Any) -> Any:
            counts[key] += 1
            return fn(*a, **k)
        return counted

    for name in names:
        setattr(dist, name, counting(real[name], "gathers"))
    FSDPState._root_pre_forward = counting(real_pre, "pre_forwards")  # type: ignore[method-assign]
    batch = tr.loader.next_batch()
    n = tr.rollout_cfg.n
    rows = tr.shard(len(batch))
    index = [r // n for r in rows[::n]]  # whole groups here (the mini-batch's prompts split over the ranks)

    def rollout() -> Any:
        return tr.rollout([batch[i] for i in index], step=1, n=n, sampling=tr.rollout_cfg, rows=rows,
                          global_rows=len(batch) * n)

    rb = rollout()
    for name in names:
        setattr(dist, name, real[name])
    FSDPState._root_pre_forward = real_pre  # type: ignore[method-assign]
    tr.decode_engine = "static"  # the engine CUDA graphs capture, run eagerly
    static = rollout()
    units = sharded_units(tr.models.actor)
    out[rank] = {"index": index, "tokens": rb.response_ids.tolist(), "logps": rb.rollout_logp.tolist(),
                 "static_tokens": static.response_ids.tolist(), "units": len(units), "notes": list(tr.models.notes),
                 **counts}
    shutdown()


def _unsharded_rank(rank: int, recipe: str, subsets: list[list[int]], out: Any) -> None:
    """One unsharded model (one process, one thread) sampling each subset of the first batch's prompts."""
    torch.set_num_threads(1)
    from harness.core.trainer import GRPOTrainer

    res = _resolved(recipe, 1)
    tr = GRPOTrainer(res.spec, device=torch.device("cpu"), peak_tflops=1.0)
    batch = tr.loader.next_batch()
    n = tr.rollout_cfg.n
    for k, index in enumerate(subsets):
        rb = tr.rollout([batch[i] for i in index], step=1, n=n, sampling=tr.rollout_cfg,
                        rows=[i * n + j for i in index for j in range(n)], global_rows=len(batch) * n)
        out[k] = {"tokens": rb.response_ids.tolist(), "logps": rb.rollout_logp.tolist(), "prompts": len(batch)}


def unsharded_rollouts(recipe: str, subsets: list[list[int]]) -> list[dict[str, Any]]:
    """What one unsharded model samples for each subset of prompts, in a fresh process like the ranks'."""
    out = mp.Manager().dict()
    mp.spawn(_unsharded_rank, args=(recipe, subsets, out), nprocs=1, join=True)
    return [out[k] for k in range(len(subsets))]


def sharded_rollouts(recipe: str, world: int) -> list[dict[str, Any]]:
    """Each rank's first rollout of ``recipe`` (smoke, cpu) on ``world`` gloo processes (see :func:`_rollout_rank`)."""
    return _spawn(_rollout_rank, recipe, world)


def _spawn(fn: Any, recipe: str, world: int) -> list[Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(fn, args=(world, recipe, port, out), nprocs=world, join=True)
    return [out[r] for r in range(world)]


def measure(recipe: str, world: int) -> list[int]:
    """Per-rank allocator peak (bytes) of the second step of ``recipe`` (smoke, cpu) on ``world`` processes."""
    return [int(v) for v in _spawn(_rank, recipe, world)]


def planned(recipe: str, world: int) -> int:
    from harness.plan.estimate import plan_document
    from harness.plan.trace import trace_step

    res = _resolved(recipe, world)
    doc = plan_document(res.spec, res.hardware, trace_step(res.spec, world=world), recipe=recipe, scale="smoke")
    return int(doc["per_rank_peak_bytes"])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("recipes", nargs="*", default=["qwen3_1_7b", "qwen3_30b_a3b", "qwen3_vl_30b"])
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    print(f"cpu capability {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}")
    for recipe in args.recipes:
        for world in args.worlds:
            got, want = measure(recipe, world), planned(recipe, world)
            print(f"{recipe:<15} world {world}: planned {want / 1e6:8.1f} MB  measured per rank "
                  f"{', '.join(f'{g / 1e6:.1f}' for g in got)} MB  ({(want / max(got) - 1) * 100:+.1f} %)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
