"""Per-phase CUDA memory of a real `harness` run: what `harness plan` predicts, measured.

    python bench/phase_memory.py --out DIR --name NAME -- run RECIPE --profile P ...   (any `harness` command line)

Wraps the trainer's phase functions (``generate``, ``batched_logprobs``, ``update_actor``) and its step: each
phase's ``torch.cuda.max_memory_allocated`` (its own window), the bytes allocated when it starts and ends, and the
step's start. The run's own memory metric is kept whole: the step's peak is the largest of its phases' peaks.
Writes ``DIR/NAME.phase-memory.json``; the run itself (and the ``plan.json`` it writes beside its records) is as
usual. ``--account-step N``: what is allocated when step N starts, by the first model or harness frame that
allocated it (allocator history recorded from the start), and the blocks its update allocates and holds at its
peak (``DIR/NAME.memory-stepN.txt``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

PHASES = {"generate": "rollout", "batched_logprobs": "logprob", "update_actor": "update"}


def live_blocks(snapshot: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Blocks allocated now, by the first model or harness frame of their allocation (largest first)."""
    from collections import defaultdict

    from memory_account import _frame_label

    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for seg in snapshot.get("segments", []):
        for b in seg.get("blocks", []):
            if b.get("state") == "active_allocated":
                label = _frame_label(b.get("frames") or [])
                acc[label][0] += int(b.get("requested_size") or b.get("size", 0))
                acc[label][1] += 1
    return sorted(((k, v[0], v[1]) for k, v in acc.items()), key=lambda r: -r[1])


def instrument(records: list[dict[str, Any]], account_step: int | None = None, out: Path | None = None,
               name: str = "") -> None:
    import harness.core.trainer as T

    step_max = [0]
    current = [0]
    report: list[str] = []

    def sync() -> None:
        torch.cuda.synchronize()

    def wrap(name: str) -> None:
        real = getattr(T, name)

        def timed(*a: Any, **k: Any) -> Any:
            sync()
            start = torch.cuda.memory_allocated()
            step_max[0] = max(step_max[0], torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            accounting = name == "update_actor" and current[0] == account_step
            if accounting:
                torch.cuda.memory._record_memory_history(enabled=None)
                torch.cuda.memory._record_memory_history(max_entries=2_000_000)
            out = real(*a, **k)
            if accounting:
                from memory_account import cuda_report

                report.append(cuda_report(torch.cuda.memory._snapshot(), start, f"step {account_step}, the update"))
                (out_dir / f"{run_name}.memory-step{account_step}.txt").write_text("\n\n".join(report) + "\n")
            sync()
            peak = torch.cuda.max_memory_allocated()
            step_max[0] = max(step_max[0], peak)
            records.append({"phase": PHASES[name], "start": start, "peak": peak, "end": torch.cuda.memory_allocated(),
                            "t": time.time()})
            return out

        setattr(T, name, timed)

    for fn in PHASES:
        wrap(fn)
    real_step = T.GRPOTrainer.step

    def step(self: Any, n: int) -> Any:
        sync()
        current[0] = n
        records.append({"phase": "step-start", "step": n, "allocated": torch.cuda.memory_allocated()})
        if n == account_step:
            rows = live_blocks(torch.cuda.memory._snapshot())
            gb = 1e9
            report.append(f"## step {n} starts with {torch.cuda.memory_allocated() / gb:.2f} GB allocated\n\n" +
                          "\n".join(f"{label[:90]:90s} {b / gb:8.3f} {k:7d}" for label, b, k in rows[:30]))
        return real_step(self, n)

    real_reset, real_peak = T.reset_peak_memory, T.peak_memory_gb

    def reset(device: torch.device) -> None:
        real_reset(device)
        step_max[0] = 0

    def peak(device: torch.device) -> float:
        return max(step_max[0] / 1e9, real_peak(device))

    out_dir, run_name = out or Path("."), name
    if account_step is not None:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    T.GRPOTrainer.step = step  # type: ignore[method-assign]
    T.reset_peak_memory, T.peak_memory_gb = reset, peak


def main() -> int:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--account-step", type=int)
    args = p.parse_args(argv[:cut])
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # memory_account
    records: list[dict[str, Any]] = []
    instrument(records, args.account_step, args.out, args.name)
    from harness.cli import main as harness_main

    t0 = time.time()
    rc = harness_main(argv[cut + 1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.phase-memory.json").write_text(json.dumps(
        {"argv": argv[cut + 1:], "rc": rc, "wall_s": time.time() - t0, "device": torch.cuda.get_device_name(),
         "torch": torch.__version__, "records": records}, indent=1))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
