"""World sizes executed for real on CPU ranks (``harness run --simulate``): verdict, replay distance, repeat, wall time.

Each layout is a profile simulated on this machine (gloo): world 1 (``gpu-1x-h200``), 2 (``gpu-2x-h200``),
8 (``gpu-8x-h200-141g``), 16 (``npu-16x-ascend-a3``) and 2 x 8 (``gpu-8x-h200-141g --nnodes 2``: two torchrun
launchers on localhost). Every run is judged by default: the profiles without baselines of their own replay
the ``gpu-1x-h200`` baseline (``reference_profile``). With ``--repeat`` each layout runs twice and the two
runs' non-timing metrics must be bitwise equal.

    python bench/multirank.py --recipes qwen3_1_7b --steps 10 --repeat --out bench/results/multirank-DATE.json

Writes one JSON (rows: recipe, layout, world, exit code, verdict line, worst replay distance as a fraction of
its tolerance, repeat equality, wall seconds) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

LAYOUTS = {  # name -> (profile, extra arguments, world)
    "1": ("gpu-1x-h200", [], 1),
    "2": ("gpu-2x-h200", [], 2),
    "8": ("gpu-8x-h200-141g", [], 8),
    "16": ("npu-16x-ascend-a3", [], 16),
    "2x8": ("gpu-8x-h200-141g", ["--nnodes", "2"], 16),
}
TIMING = ("timing_s/", "perf/", "time/")


def values(run_dir: Path) -> list[dict[str, float]]:
    """The run's non-timing metrics, step by step."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


def worst_replay(verdict: dict) -> tuple[float, str]:
    """The largest |run - reference| / tolerance over the replay checks, and its metric."""
    worst = (0.0, "")
    for c in verdict.get("checks", []):
        if c.get("group") != "replay" or not c.get("tolerance"):
            continue
        ratio = abs(c["run_value"] - c["ref_value"]) / c["tolerance"]
        if math.isfinite(ratio) and ratio > worst[0]:
            worst = (ratio, c["metric"])
    return worst


def run_once(recipe: str, layout: str, steps: int | None, out: Path) -> tuple[int, float, str]:
    profile, extra, _ = LAYOUTS[layout]
    cmd = [sys.executable, "-m", "harness", "run", recipe, "--profile", profile, "--simulate", *extra,
           "--out", str(out), "--no-report", "--quiet"] + (["--steps", str(steps)] if steps else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()] or proc.stderr.strip().splitlines()[-1:] or [""]
    return proc.returncode, wall, lines[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipes", nargs="+", default=["qwen3_1_7b", "qwen3_30b_a3b", "qwen3_vl_30b"])
    ap.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    ap.add_argument("--steps", type=int, help="GRPO steps (default: the recipe's smoke total)")
    ap.add_argument("--repeat", action="store_true", help="run each layout twice; compare bitwise")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in args.recipes:
            for layout in args.layouts:
                first = Path(tmp) / f"{recipe}-{layout}-a"
                code, wall, line = run_once(recipe, layout, args.steps, first)
                verdict = json.loads((first / "verdict.json").read_text()) if (first / "verdict.json").is_file() else {}
                ratio, metric = worst_replay(verdict)
                row = {"recipe": recipe, "layout": layout, "profile": LAYOUTS[layout][0], "world": LAYOUTS[layout][2],
                       "exit": code, "verdict": line, "tier": verdict.get("tier"), "worst_replay_ratio": ratio,
                       "worst_replay_metric": metric, "wall_s": round(wall, 1)}
                if args.repeat and code == 0:
                    second = Path(tmp) / f"{recipe}-{layout}-b"
                    code2, wall2, _ = run_once(recipe, layout, args.steps, second)
                    row["repeat_exit"] = code2
                    row["repeat_bitwise"] = code2 == 0 and values(first) == values(second)
                    row["repeat_wall_s"] = round(wall2, 1)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    doc = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": __import__("os").cpu_count(),
                       "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__},
           "steps": args.steps, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print("| recipe | layout | world | exit | tier | worst replay / tolerance | repeat bitwise | wall s |")
    print("|---|---|---:|---:|---|---:|---|---:|")
    for r in rows:
        print(f"| {r['recipe']} | {r['layout']} | {r['world']} | {r['exit']} | {r['tier']} | "
              f"{r['worst_replay_ratio']:.3f} ({r['worst_replay_metric']}) | {r.get('repeat_bitwise', '-')} | "
              f"{r['wall_s']} |")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
