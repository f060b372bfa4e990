"""Where a recipe's GRPO step spends its time: per-phase timings, a Python profile and an operator profile.

    python bench/profile_recipe.py RECIPE [--profile P] [--scale S] [--steps N] [--at K] [--set k=v ...] --out DIR

Builds the trainer exactly as ``harness run`` does (resolved recipe, numerics pin, determinism), without
the warm start (its cost is not a step's), and runs ``--steps`` steps. Step ``K`` runs under ``cProfile``
(``DIR/python-stepK.txt``: functions by cumulative and by own time: where the host's time goes, which is
what bounds small models on a GPU), step ``K + 1`` under ``torch.profiler`` (``DIR/ops-stepK+1.txt``:
operators by self CPU time and by device time, and the number of kernel launches). ``DIR/steps.json``
holds every step's ``timing_s/*`` metrics; the median of the steps after ``--at`` is printed per phase.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402 - after the sys.path entry for the harness

from harness import numerics  # noqa: E402
from harness.config.recipe import resolve  # noqa: E402
from harness.core.device import resolve_device, set_determinism, synchronize  # noqa: E402
from harness.core.trainer import GRPOTrainer  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recipe")
    p.add_argument("--profile", default="cpu", help="hardware profile (default: cpu)")
    p.add_argument("--scale", default="smoke")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--at", type=int, default=4, help="step profiled by cProfile (the next one by torch.profiler)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an allowlisted override")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if not 1 <= args.at < args.steps:
        p.error(f"--at must be in 1 .. {args.steps - 1} (step --at + 1 is profiled too)")
    return args


def python_profile(prof: cProfile.Profile) -> str:
    out = []
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(45)
        out.append(f"=== by {key}\n{buf.getvalue()}")
    return "\n".join(out)


def op_profile(prof: Any) -> str:
    events = prof.key_averages()
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    parts = [f"kernel launches: {launches}\n"]
    parts.append("=== by self CPU time\n" + events.table(sort_by="self_cpu_time_total", row_limit=45))
    if any(getattr(e, "self_device_time_total", 0) for e in events):
        parts.append("=== by self device time\n" + events.table(sort_by="self_device_time_total", row_limit=45))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    res = resolve(args.recipe, args.profile, args.scale, tuple(args.set))
    cfg = res.spec
    numerics.activate()
    set_determinism(int(cfg.seed), bool(cfg.deterministic))
    device = resolve_device(cfg.trainer.device)
    trainer = GRPOTrainer(cfg, device=device, peak_tflops=res.hardware.accelerator.peak_bf16_tflops)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{args.recipe} {args.profile}:{args.scale} on {device} (decode {trainer.decode_engine}, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads)", flush=True)
    steps: list[dict[str, float]] = []
    for step in range(1, args.steps + 1):
        if step == args.at:
            cprof = cProfile.Profile()
            cprof.enable()
            m = trainer.step(step)
            synchronize(device)
            cprof.disable()
            (args.out / f"python-step{step}.txt").write_text(python_profile(cprof))
        elif step == args.at + 1:
            from torch.profiler import ProfilerActivity, profile

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
            with profile(activities=acts) as tprof:
                m = trainer.step(step)
                synchronize(device)
            (args.out / f"ops-step{step}.txt").write_text(op_profile(tprof))
        else:
            m = trainer.step(step)
        steps.append({k: v for k, v in m.items() if k.startswith("timing_s/")})
        print(f"step {step}: " + " ".join(f"{k[9:]} {v:.3f}" for k, v in steps[-1].items()), flush=True)
    (args.out / "steps.json").write_text(json.dumps(steps, indent=1) + "\n")
    kept = [s for i, s in enumerate(steps, 1) if i > args.at + 1] or steps[args.at + 1:] or steps
    print("median of the unprofiled steps after --at: " + " ".join(
        f"{k[9:]} {statistics.median(s[k] for s in kept):.3f}" for k in kept[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
