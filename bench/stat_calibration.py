"""False-alarm rate and power of the statistical tier's test, estimated by resampling every clean run at hand.

Pools the late-window means of the tier's metric (``harness.judge.baseline.STATISTICAL``) from a baseline's
seeds and from ``bench/verdict_power.py`` campaigns (their clean ``seed N`` runs; fault runs are read
as the faults), then, for each alpha and reference size n, draws n references and one candidate from
the clean pool without replacement and applies the tier's test (:mod:`harness.judge.stats`: olympic mean,
population sd, one-sided t prediction bound on the metric's scale). The fraction of clean candidates
failed is the false-alarm rate; the fraction of fault runs failed (against the same draws of
references) is the detection rate. Every clean run is a seed of the same recipe on one of the machines
named in the table, so the pool mixes machines the way a user's fleet does.

    python bench/stat_calibration.py baselines/qwen3_vl_30b/cpu-smoke.json runs/power runs/power2 \\
        --alpha 0.05 0.01 --refs 20 --draws 20000
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.judge import stats  # noqa: E402
from harness.judge.baseline import STATISTICAL, load_series, statistical_window, window_mean  # noqa: E402

FAULT = re.compile(r"^(?P<fault>.+) \(statistical(?:, seed \d+)?\)$")


def baseline_means(path: Path, metric: str) -> list[float]:
    doc = json.loads(path.read_text())
    spec, steps = doc["metrics"][metric], doc["steps"]
    w = statistical_window(doc["policy"]["statistical"], steps)
    rows = [spec["values"], *spec["noise_values"]]
    series = [{k: v for k, v in zip(spec["steps"], row) if v is not None} for row in rows]
    return [m for m in (window_mean(s, steps, w) for s in series) if m is not None]


def campaign_means(folder: Path, metric: str, policy: dict) -> tuple[list[float], dict[str, list[float]]]:
    doc = json.loads((folder / "verdict_power.json").read_text())
    clean, faults = [], {}
    for key, r in doc["runs"].items():
        run_dir = Path(r["dir"])
        run_dir = run_dir if run_dir.is_dir() else folder / run_dir.name
        if not (run_dir / "metrics.jsonl").is_file() or r.get("status") == "error":
            continue
        s = load_series(run_dir).get(metric, {})
        if not s:
            continue
        steps = max(s)
        m = window_mean(s, steps, statistical_window(policy, steps))
        if key.startswith("seed "):
            clean.append(m)
        elif (f := FAULT.match(key)):
            faults.setdefault(f["fault"], []).append(m)
    return clean, faults


def fails(x: float, refs: list[float], alpha: float, spec: tuple[str, str, float | None], floor: float) -> bool:
    direction, transform, own_floor = spec
    tf = stats.TRANSFORMS[stats.applicable_transform(transform, refs + [x])]
    ref_t = [tf(v) for v in refs]
    bound = stats.prediction_bound(ref_t, stats.per_test_alpha(alpha, 1, direction),
                                   floor if own_floor is None else own_floor)
    return stats.shortfall(tf(x), bound.centre, direction) > bound.allowed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path)
    ap.add_argument("campaigns", type=Path, nargs="*")
    ap.add_argument("--metric", default=next(iter(STATISTICAL)))
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.05, 0.01])
    ap.add_argument("--refs", type=int, nargs="+", default=[20])
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    policy = json.loads(args.baseline.read_text())["policy"]["statistical"]
    pool = baseline_means(args.baseline, args.metric)
    faults: dict[str, list[float]] = {}
    for c in args.campaigns:
        clean, f = campaign_means(c, args.metric, policy)
        pool += clean
        for k, v in f.items():
            faults.setdefault(k, []).extend(v)
    spec = STATISTICAL[args.metric]
    rng = random.Random(args.seed)
    srt = sorted(pool)
    print(f"{len(pool)} clean runs of {args.metric} (late-window means): min {srt[0]:.3f}, 5th pct "
          f"{srt[len(srt) // 20]:.3f}, median {srt[len(srt) // 2]:.3f}, max {srt[-1]:.3f}; faults: "
          + ", ".join(f"{k} ({len(v)})" for k, v in faults.items()) + "\n")
    head = "| alpha | references | false alarms (clean candidate fails) | P(>= 2 of 20 fail) | " + \
        " | ".join(f"{k} caught" for k in faults) + " |"
    print(head + "\n|" + "---|" * (head.count("|") - 1))
    for alpha in args.alpha:
        for n in args.refs:
            fa = 0
            caught = dict.fromkeys(faults, 0)
            for _ in range(args.draws):
                draw = rng.sample(pool, n + 1)
                refs, cand = draw[:n], draw[n]
                fa += fails(cand, refs, alpha, spec, policy["practical_floor"])
                for k, v in faults.items():
                    caught[k] += fails(rng.choice(v), refs, alpha, spec, policy["practical_floor"])
            rate = fa / args.draws
            p2 = 1 - (1 - rate) ** 20 - 20 * rate * (1 - rate) ** 19
            se = math.sqrt(rate * (1 - rate) / args.draws)
            print(f"| {alpha} | {n} | {100 * rate:.1f} % (± {100 * 1.96 * se:.1f}) | {100 * p2:.0f} % | "
                  + " | ".join(f"{100 * c / args.draws:.0f} %" for c in caught.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
