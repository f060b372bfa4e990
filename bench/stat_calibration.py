"""False-alarm rate and power of the statistical tier's test, estimated by resampling every clean run at hand.

Pools the late-window means of the tier's metric (``harness.judge.baseline.STATISTICAL``) from a baseline's
seeds and from ``bench/verdict_power.py`` campaigns (their clean ``seed N`` runs; fault runs are read
as the faults), then, for each alpha and reference size n, draws n references and one candidate from
the clean pool without replacement and applies the tier's test (:mod:`harness.judge.stats`: olympic mean,
population sd, one-sided t prediction bound on the metric's scale). The fraction of clean candidates
failed is the false-alarm rate; the fraction of fault runs failed (against the same draws of
references) is the detection rate. With ``--candidates K`` the candidate is a set of K runs of other seeds, judged
by their median (the bound widened for a median's spread, ``MEDIAN_VARIANCE``): what judging several candidate
seeds at once would give, a set of runs as MLPerf RCP judges one. Every clean run is a seed of the same recipe on one of the machines
named in the table, so the pool mixes machines the way a user's fleet does.

    python bench/stat_calibration.py baselines/qwen3_vl_30b/cpu-smoke.json runs/power runs/power2 \\
        --alpha 0.05 0.01 --refs 20 --draws 20000
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.verdict_power import campaign_runs  # noqa: E402
from harness.judge import stats  # noqa: E402
from harness.judge.baseline import STATISTICAL, load_series, statistical_window, window_mean  # noqa: E402

# var(median of K standard normal values): a K-run candidate's median spreads by sqrt of this, not 1
MEDIAN_VARIANCE = {1: 1.0, 3: 0.449, 5: 0.287}


def baseline_means(path: Path, metric: str) -> list[float]:
    doc = json.loads(path.read_text())
    spec, steps = doc["metrics"][metric], doc["steps"]
    w = statistical_window(doc["policy"]["statistical"], steps)
    rows = [spec["values"], *spec["noise_values"]]
    series = [{k: v for k, v in zip(spec["steps"], row) if v is not None} for row in rows]
    return [m for m in (window_mean(s, steps, w) for s in series) if m is not None]


def campaign_means(folder: Path, metric: str, policy: dict) -> tuple[list[float], dict[str, list[float]]]:
    clean, faults = [], {}
    for fault, _, run_dir in campaign_runs(folder):
        s = load_series(run_dir).get(metric, {})
        if not s:
            continue
        steps = max(s)
        m = window_mean(s, steps, statistical_window(policy, steps))
        if fault is None:
            clean.append(m)
        else:
            faults.setdefault(fault, []).append(m)
    return clean, faults


def fails(xs: list[float], refs: list[float], alpha: float, spec: tuple[str, str, float | None], floor: float) -> bool:
    """The tier's test of the candidate runs' median (one run: the tier itself) against the references."""
    direction, transform, own_floor = spec
    tf = stats.TRANSFORMS[stats.applicable_transform(transform, refs + xs)]
    ref_t = [tf(v) for v in refs]
    bound = stats.prediction_bound(ref_t, stats.per_test_alpha(alpha, 1, direction),
                                   floor if own_floor is None else own_floor)
    allowed = bound.allowed
    if len(xs) > 1:  # the same t-bound for a median of K: sd * sqrt(var factor + 1/n) instead of sd * sqrt(1 + 1/n)
        n = bound.n
        allowed = max(floor if own_floor is None else own_floor,
                      bound.allowed * math.sqrt((MEDIAN_VARIANCE[len(xs)] + 1 / n) / (1 + 1 / n)))
    return stats.shortfall(statistics.median(tf(x) for x in xs), bound.centre, direction) > allowed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path)
    ap.add_argument("campaigns", type=Path, nargs="*")
    ap.add_argument("--metric", default=next(iter(STATISTICAL)))
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.05, 0.01])
    ap.add_argument("--refs", type=int, nargs="+", default=[20])
    ap.add_argument("--candidates", type=int, nargs="+", default=[1], choices=sorted(MEDIAN_VARIANCE),
                    help="runs per candidate, judged by their median (default 1: the tier as it is)")
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
    head = "| alpha | references | candidate runs | false alarms (clean candidate fails) | P(>= 2 of 20 fail) | " + \
        " | ".join(f"{k} caught" for k in faults) + " |"
    print(head + "\n|" + "---|" * (head.count("|") - 1))
    for alpha, n, k in itertools.product(args.alpha, args.refs, args.candidates):
        fa = 0
        caught = dict.fromkeys(faults, 0)
        for _ in range(args.draws):
            draw = rng.sample(pool, n + k)
            refs, cand = draw[:n], draw[n:]
            fa += fails(cand, refs, alpha, spec, policy["practical_floor"])
            for name, v in faults.items():
                caught[name] += fails(rng.sample(v, k), refs, alpha, spec, policy["practical_floor"])
        rate = fa / args.draws
        p2 = 1 - (1 - rate) ** 20 - 20 * rate * (1 - rate) ** 19
        se = math.sqrt(rate * (1 - rate) / args.draws)
        print(f"| {alpha} | {n} | {k} | {100 * rate:.1f} % (± {100 * 1.96 * se:.1f}) | {100 * p2:.0f} % | "
              + " | ".join(f"{100 * c / args.draws:.0f} %" for c in caught.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
