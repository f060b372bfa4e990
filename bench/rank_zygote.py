"""What the rank zygote (harness/run/runtime/zygote.py) saves: N-rank CPU runs with and without it, same recipe.

    python bench/rank_zygote.py --out DIR [--ranks 2 8] [--steps 2] [--repeat 1]

Each case is ``harness run RECIPE --profile cpu --runtime torchrun --nproc-per-node N --stage train --quiet`` in a
process of its own, once with the zygote and once with ``HARNESS_RANK_ZYGOTE=off`` (every rank imports for itself),
alternating, after one unmeasured 1-process run that fills the warm-start cache. Measured per run: wall seconds and
the CPU seconds of the whole process tree (``getrusage`` of the waited children: the launcher, torchrun, the stubs,
the zygote and its ranks). The two runs' metrics are compared value by value (timings and ``perf/`` aside).
``DIR/rank_zygote.json`` holds every run, the comparisons and the machine (CPU model, ``get_cpu_capability()``,
torch version).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE_NAME = "zygote_bench"


def bench_recipe(directory: Path) -> Path:
    """The qwen3_vl_30b recipe with a 20-step warm start and a mini-batch of 4 prompts (8 ranks hold whole shares)."""
    data = json.loads((ROOT / "recipes" / "qwen3_vl_30b.json").read_text())
    data["name"] = RECIPE_NAME
    data["scales"]["smoke"]["warm_start"]["steps"] = 20
    data["scales"]["smoke"]["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 4
    data["$schema"] = str(ROOT / "schemas/v1/recipe.schema.json")
    path = directory / f"{RECIPE_NAME}.json"
    path.write_text(json.dumps(data))
    return path


def timed_run(recipe: Path, out: Path, steps: int, ranks: int, zygote: bool) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if zygote:
        env.pop("HARNESS_RANK_ZYGOTE", None)
    else:
        env["HARNESS_RANK_ZYGOTE"] = "off"
    runtime = ["--runtime", "torchrun", "--nproc-per-node", str(ranks)] if ranks > 1 else ["--runtime", "local"]
    cmd = [sys.executable, "-m", "harness", "run", str(recipe), "--profile", "cpu", "--steps", str(steps), "--out",
           str(out), "--stage", "train", "--quiet", *runtime]
    proc, wall, cpu = timed(cmd, env)
    return {"ranks": ranks, "zygote": zygote, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "out": str(out)}


def timed(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run ``cmd`` in the checkout; (the process, wall seconds, CPU seconds of its whole waited-for tree). Exits
    with its output when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return proc, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compare(a: Path, b: Path) -> dict[str, object]:
    rows_a = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    rows_b = [json.loads(line) for line in (b / "metrics.jsonl").read_text().splitlines()]
    values = equal = 0
    for ra, rb in zip(rows_a, rows_b, strict=True):
        for key, value in ra.items():
            if key == "step" or key.startswith(("timing_s/", "perf/", "training/rollout_probs_diff")):
                continue
            values += 1
            equal += value == rb.get(key)
    return {"steps": len(rows_a), "values": values, "equal": equal}


def machine() -> dict[str, object]:
    import torch

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cpu": model, "cores": os.cpu_count(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "python": platform.python_version()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    recipe = bench_recipe(args.out)
    timed_run(recipe, args.out / "warm", args.steps, 1, True)  # fills the warm-start cache; not reported
    runs, comparisons = [], []
    for ranks in args.ranks:
        for i in range(args.repeat):
            pair = [timed_run(recipe, args.out / f"r{ranks}-{i}-{'zygote' if z else 'off'}", args.steps, ranks, z)
                    for z in ((False, True) if i % 2 == 0 else (True, False))]
            runs += pair
            comparisons.append({"ranks": ranks, **compare(Path(str(pair[0]["out"])), Path(str(pair[1]["out"])))})
            print(json.dumps(pair), json.dumps(comparisons[-1]), flush=True)
    doc = {"machine": machine(), "steps": args.steps, "runs": runs, "comparisons": comparisons}
    (args.out / "rank_zygote.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
