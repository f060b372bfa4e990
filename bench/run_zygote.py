"""What the run zygote (harness/run/runtime/child.py) saves: ``harness gate`` with and without it, same recipe.

    python bench/run_zygote.py --out DIR [--recipe qwen3_vl_30b] [--steps 12] [--repeat 2]

Each case is ``harness gate --profile cpu --recipes RECIPE --steps N`` (its run, judged against the committed
baseline, and its 6-step checkpoint-resume check: four ``harness run`` children) in a process of its own, once with
the run zygote and once with ``HARNESS_RUN_ZYGOTE=off`` (every child a fresh interpreter), alternating, after one
unmeasured gate that fills the warm-start cache. Measured per gate: wall seconds, the CPU seconds of the whole process
tree (``getrusage`` of the waited children: the gate, the stubs or children, the zygote and the runs it forked and
reaped), the verdict's line and the run's peak ``perf/max_memory_allocated_gb`` (a forked run's resident memory must
be a fresh process's: the CPU memory check reads it). The two runs' metrics are compared value by value (timings and
``perf/`` aside). ``DIR/run_zygote.json`` holds every gate, the comparisons and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rank_zygote import compare, machine, timed

ROOT = Path(__file__).resolve().parents[1]
MEMORY = "perf/max_memory_allocated_gb"


def timed_gate(recipe: str, out: Path, steps: int, zygote: bool) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if zygote:
        env.pop("HARNESS_RUN_ZYGOTE", None)
    else:
        env["HARNESS_RUN_ZYGOTE"] = "off"
    cmd = [sys.executable, "-m", "harness", "gate", "--profile", "cpu", "--recipes", recipe, "--steps", str(steps),
           "--out", str(out)]
    proc, wall, cpu = timed(cmd, env)
    rows = [json.loads(line) for line in (out / recipe / "metrics.jsonl").read_text().splitlines()]
    return {"zygote": zygote, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "out": str(out / recipe),
            "verdict": proc.stdout.splitlines()[0], "peak_memory_gb": max(r[MEMORY] for r in rows if MEMORY in r)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--recipe", default="qwen3_vl_30b")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    timed_gate(args.recipe, args.out / "warm", args.steps, True)  # fills the warm-start cache; not reported
    runs, comparisons = [], []
    for i in range(args.repeat):
        pair = [timed_gate(args.recipe, args.out / f"{i}-{'zygote' if z else 'off'}", args.steps, z)
                for z in ((False, True) if i % 2 == 0 else (True, False))]
        runs += pair
        comparisons.append(compare(Path(str(pair[0]["out"])), Path(str(pair[1]["out"]))))
        print(json.dumps(pair), json.dumps(comparisons[-1]), flush=True)
    doc = {"machine": machine(), "recipe": args.recipe, "steps": args.steps, "runs": runs,
           "comparisons": comparisons}
    (args.out / "run_zygote.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
