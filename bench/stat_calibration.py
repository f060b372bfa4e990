"""False-alarm rate and power of the statistical tier's test, estimated by resampling every clean run at hand.

Pools the late-window means of the tier's metric (``harness.judge.baseline.STATISTICAL``) from a baseline's
seeds and from ``bench/verdict_power.py`` campaigns (their clean ``seed N`` runs; fault runs are read
as the faults), then, for each alpha and reference size n, draws n references and one candidate from
the clean pool without replacement and applies the tier's test (:mod:`harness.judge.stats`: olympic mean,
population sd, one-sided t prediction bound on the metric's scale). The fraction of clean candidates
failed is the false-alarm rate; the fraction of fault runs failed (against the same draws of
references) is the detection rate. With ``--candidates K`` the candidate is a set of K runs of other seeds, judged
by their median, held to the bound of one run as the tier does (``--narrow``: narrowed as for the median of
normal values, to show what that costs): what judging several candidate seeds at once gives, a set of runs as
MLPerf judges a submission. Every clean run is a seed of the same recipe on one of the machines
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
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.verdict_power import FAULT_RUN, campaign_runs  # noqa: E402
from harness.judge import stats  # noqa: E402
from harness.judge.baseline import STATISTICAL, load_series, statistical_window, window_mean  # noqa: E402


def baseline_means(path: Path, metric: str) -> list[float]:
    doc = json.loads(path.read_text())
    spec, steps = doc["metrics"][metric], doc["steps"]
    w = statistical_window(doc["policy"]["statistical"]["window_fraction"], steps)
    rows = [spec["values"], *spec["noise_values"]]
    series = [{k: v for k, v in zip(spec["steps"], row) if v is not None} for row in rows]
    return [m for m in (window_mean(s, steps, w) for s in series) if m is not None]


STAT_TEXT = re.compile(r"(?:mean of the last \d+ steps|this run) (?P<value>[-+0-9.e]+|nan|inf)"
                       r"(?:, candidates (?P<cands>[-+0-9.e, naif]+)\))?")


def campaign_values(folder: Path, metric: str, policy: dict) -> list[tuple[str | None, int | None, float]]:
    """(fault or None, seed, late-window mean) of each run of a campaign: from its run directories when they are
    at hand, else from the values its verdicts printed (``verdict_power.json``, committed with the results)."""
    if any(True for _ in campaign_runs(folder)):
        out = []
        for fault, seed, run_dir in campaign_runs(folder):
            s = load_series(run_dir).get(metric, {})
            if s:
                steps = max(s)
                out.append((fault, seed, window_mean(s, steps, statistical_window(policy["window_fraction"], steps))))
        return out
    doc = json.loads((folder / "verdict_power.json").read_text())
    out = []
    for key, r in doc["runs"].items():
        m = STAT_TEXT.search(r.get("statistics", {}).get(metric, ""))
        if m is None:
            continue
        values = [float(m["value"])] + ([float(v) for v in m["cands"].split(", ")] if m["cands"] else [])
        seeds = [None] + r.get("candidates", [None] * (len(values) - 1))
        if key.startswith("seed "):
            seeds[0] = int(key.split()[1])
            out += [(None, s, v) for s, v in zip(seeds, values)]
        elif (f := FAULT_RUN.match(key)):
            seeds[0] = int(f["seed"]) if f["seed"] else None
            out += [(f["fault"], s, v) for s, v in zip(seeds, values)]
    return out


def campaign_means(folder: Path, metric: str, policy: dict) -> tuple[list[float], dict[str, list[float]]]:
    clean, faults = [], {}
    for fault, _, m in campaign_values(folder, metric, policy):
        if fault is None:
            clean.append(m)
        else:
            faults.setdefault(fault, []).append(m)
    return clean, faults


def normal_median_variance(k: int, draws: int = 400_000) -> float:
    """Variance of the median of ``k`` standard normal values (simulated, fixed seed): 1, 0.449, 0.287 for 1, 3, 5."""
    rng = random.Random(k)
    return statistics.pvariance([statistics.median(rng.gauss(0, 1) for _ in range(k)) for _ in range(draws // k)])


def fails(xs: list[float], refs: list[float], alpha: float, spec: tuple[str, str, float | None], floor: float,
          narrow: bool = False) -> bool:
    """The tier's test of the candidate runs' median against the references: the bound of one run (the tier's
    rule), or with ``narrow`` the bound narrowed for a normal median's spread, sd * sqrt(v_k + 1/n)."""
    direction, transform, own_floor = spec
    tf = stats.TRANSFORMS[stats.applicable_transform(transform, refs + xs)]
    floor = floor if own_floor is None else own_floor
    bound = stats.prediction_bound([tf(v) for v in refs], stats.per_test_alpha(alpha, 1, direction), floor)
    allowed = bound.allowed
    if narrow and len(xs) > 1 and bound.n >= 2:
        allowed = max(floor, allowed * math.sqrt((MEDIAN_VARIANCE[len(xs)] + 1 / bound.n) / (1 + 1 / bound.n)))
    return stats.shortfall(statistics.median(tf(x) for x in xs), bound.centre, direction) > allowed


MEDIAN_VARIANCE: dict[int, float] = {}


def grouped(baseline: Path, campaigns: list[Path], metric: str, k: int, alpha: float) -> None:
    """Real verdicts from runs at hand: each campaign's clean runs in seed order, cut into consecutive groups of
    ``k`` (no choice made), each judged by its median against the baseline's own seeds, as the tier does."""
    policy = json.loads(baseline.read_text())["policy"]["statistical"]
    refs, spec = baseline_means(baseline, metric), STATISTICAL[metric]
    print(f"| campaign | seeds | late-window means | median | verdict (alpha {alpha}, {len(refs)} baseline seeds) |")
    print("|---|---|---|---|---|")
    total = bad = 0
    for c in campaigns:
        clean = sorted((seed, v) for fault, seed, v in campaign_values(c, metric, policy) if fault is None)
        for i in range(0, len(clean) - k + 1, k):
            group = clean[i:i + k]
            xs = [v for _, v in group]
            failed = fails(xs, refs, alpha, spec, policy["practical_floor"])
            total, bad = total + 1, bad + failed
            print(f"| {c.name} | {', '.join(str(s) for s, _ in group)} | {', '.join(f'{v:.3f}' for v in xs)} | "
                  f"{statistics.median(xs):.3f} | {'FAIL' if failed else 'pass'} |")
    print(f"\nFalse FAILs: {bad} of {total} verdicts of {k} run(s) each")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path)
    ap.add_argument("campaigns", type=Path, nargs="*")
    ap.add_argument("--metric", default=next(iter(STATISTICAL)))
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.05, 0.01])
    ap.add_argument("--refs", type=int, nargs="+", default=[20])
    ap.add_argument("--candidates", type=int, nargs="+", default=[1],
                    help="runs per candidate, judged by their median (default 1: one run alone)")
    ap.add_argument("--narrow", action="store_true", help="narrow the bound for a median of K as for normal values "
                    "(the tier does not; this shows why)")
    ap.add_argument("--grouped", action="store_true", help="instead of resampling: judge each campaign's clean "
                    "runs in seed order, --candidates[0] at a time, against the baseline's seeds")
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    MEDIAN_VARIANCE.update({k: normal_median_variance(k) for k in args.candidates} if args.narrow else {})
    if args.grouped:
        grouped(args.baseline, args.campaigns, args.metric, args.candidates[0], args.alpha[0])
        return 0
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
            fa += fails(cand, refs, alpha, spec, policy["practical_floor"], args.narrow)
            for name, v in faults.items():
                caught[name] += fails(rng.sample(v, k), refs, alpha, spec, policy["practical_floor"], args.narrow)
        rate = fa / args.draws
        p2 = 1 - (1 - rate) ** 20 - 20 * rate * (1 - rate) ** 19
        se = math.sqrt(rate * (1 - rate) / args.draws)
        print(f"| {alpha} | {n} | {k} | {100 * rate:.1f} % (± {100 * 1.96 * se:.1f}) | {100 * p2:.0f} % | "
              + " | ".join(f"{100 * c / args.draws:.0f} %" for c in caught.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
