"""What the throughput check concludes about runs of one machine under each calibration rule.

Reads the run directories ``bench/gpu_throughput_noise.sh`` leaves (``RUNS/NAME/{metrics.jsonl,manifest.json}``):
runs named ``warm*`` / ``cold`` / ``profiled`` ran the unchanged code, ``slow*`` the 30 % slowdown
(``HARNESS_FAULT=slowdown:0.3``). Every unchanged run is judged against a reference made of the other unchanged
runs (leave one out: a false FAIL is a FAIL there), and every slowed run against a reference of all unchanged
runs (a PASS there is a missed regression). The reference is built as ``harness record-baseline`` builds it: the
policy's quantile of the pooled steady steps, its tolerance from the seeds' spread, the median of their
calibration.

Rules (a run's steady steps are those after the policy's warm-up; p = the policy's quantile, 0.9):
- ``sparse``: the check before per-step sampling: p of the throughput against the reference scaled down by
  median(samples at the start, every 10 steps, the end) / the reference's (never up);
- ``dense``: the same with every sample the run took (before each step, and at its start and end);
- ``paired``: p of each step's throughput divided by min(1, that step's own sample / the reference's speed),
  against the reference's unscaled value;
- ``per_step`` (the product's rule where the reference has ``per_step``): p of each step's throughput times the
  reference's speed / that step's sample, both ways, against the reference seeds' same quantity, its tolerance
  from their spread on that scale.
A run whose calibration is below 0.7x the reference's gets no throughput verdict under sparse/dense (as the
product: "not comparable").

Usage: python bench/throughput_rules.py RUNS_DIR [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.core.device import CALIBRATE_EVERY  # noqa: E402
from harness.judge.series import quantile, rel_spread  # noqa: E402
from harness.records.run import SPEED_METRIC  # noqa: E402

Q, WARMUP, MIN_TOL, MAX_TOL, SPREAD_FACTOR, MIN_SCALE = 0.9, 2, 0.15, 0.2, 3.0, 0.7
METRIC = "perf/throughput"


def _manifest(run: Path) -> dict:
    path = run / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def load(run: Path) -> dict:
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steady = [s for s in steps if s.get("step", 0) > WARMUP and METRIC in s]
    samples = _manifest(run)["calibration"]["samples"]
    per_step = [s.get(SPEED_METRIC) for s in steady]
    # the old cadence: the start, after every 10th step (= the sample before step 10k+1), the end
    by_step = {s["step"]: s.get(SPEED_METRIC) for s in steps}
    sparse = [samples[0]] + [by_step[k + 1] for k in sorted(by_step) if k % CALIBRATE_EVERY == 0 and k > 0
                             and by_step.get(k + 1) is not None] + [samples[-1]]
    return {"name": run.name, "tput": [s[METRIC] for s in steady], "per_step": per_step, "all": samples,
            "sparse": sparse}


def scaled(run: dict, speed: float) -> list[float]:
    return [t * speed / s for t, s in zip(run["tput"], run["per_step"])]


def reference(runs: list[dict], rule: str) -> dict:
    key = "sparse" if rule == "sparse" else "all"
    speed = statistics.median(statistics.median(r[key]) for r in runs)
    per_run = [scaled(r, speed) for r in runs] if rule == "per_step" else [r["tput"] for r in runs]
    seed_values = [quantile(v, Q) for v in per_run]
    tol = min(MAX_TOL, max(MIN_TOL, SPREAD_FACTOR * rel_spread(seed_values)))
    return {"value": quantile([v for vals in per_run for v in vals], Q), "speed": speed, "tol": tol}


def judge(run: dict, ref: dict, rule: str) -> tuple[str, float, float]:
    """(PASS / FAIL / none, the judged value's change against the (scaled) reference, the scale)."""
    if rule in ("paired", "per_step"):
        if None in run["per_step"]:
            return "none", float("nan"), float("nan")
        adj = ([t / min(1.0, s / ref["speed"]) for t, s in zip(run["tput"], run["per_step"])] if rule == "paired"
               else scaled(run, ref["speed"]))
        value, base = quantile(adj, Q), ref["value"]
        scale = statistics.median(run["per_step"]) / ref["speed"]
    else:
        scale = statistics.median(run[rule if rule == "sparse" else "all"]) / ref["speed"]
        if scale < MIN_SCALE:
            return "none", float("nan"), scale
        value, base = quantile(run["tput"], Q), ref["value"] * min(1.0, scale)
    return ("PASS" if value >= base * (1 - ref["tol"]) else "FAIL"), value / base - 1, scale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = {d.name: load(d) for d in sorted(args.runs.iterdir()) if (d / "metrics.jsonl").is_file()
            and "calibration" in _manifest(d)}  # a run that stopped before its first step has neither
    if not runs:
        print(f"no finished runs under {args.runs}")
        return 1
    same = [n for n in runs if not n.startswith("slow")]
    slow = [n for n in runs if n.startswith("slow")]
    out: dict = {"runs": {n: {"p90": quantile(r["tput"], Q), "calibration_median": statistics.median(r["all"]),
                               "calibration_spread": rel_spread(r["all"]), "n_samples": len(r["all"])}
                          for n, r in runs.items()}, "rules": {}}
    for n, r in out["runs"].items():
        print(f"{n:10s} p90 {r['p90']:9,.0f} tok/s  calibration median {r['calibration_median']:7,.0f} "
              f"(spread {r['calibration_spread']:.3f}, {r['n_samples']} samples)")
    for rule in ("sparse", "dense", "paired", "per_step"):
        rows = []
        for n in same + slow:
            refs = [runs[m] for m in same if m != n]
            if not refs:
                continue
            verdict, change, scale = judge(runs[n], reference(refs, rule), rule)
            rows.append({"run": n, "slowed": n in slow, "verdict": verdict, "change": change, "scale": scale})
        false_fail = sum(r["verdict"] == "FAIL" for r in rows if not r["slowed"])
        caught = sum(r["verdict"] == "FAIL" for r in rows if r["slowed"])
        out["rules"][rule] = {"rows": rows, "false_fails": false_fail, "unchanged": len(same),
                              "caught": caught, "slowed": len(slow)}
        print(f"\n{rule}: false FAILs {false_fail}/{len(same)}, slowdowns caught {caught}/{len(slow)}")
        for r in rows:
            print(f"  {r['run']:10s} {r['verdict']:5s} {r['change'] * 100:+6.1f}%  scale {r['scale']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
