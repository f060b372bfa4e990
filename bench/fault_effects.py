"""How far each injected fault moves each metric, against the spread of clean seeds: the power analysis
behind the statistical tier's choice of metrics.

Reads a ``bench/verdict_power.py`` campaign (its ``verdict_power.json`` and the runs' ``metrics.jsonl``),
with clean runs (``seed N``) and several seeds per fault (``--fault-seeds``). For every metric and
window (the first, middle and last fifth of the steps, and all of them) it compares the faults' window
means with the clean seeds':

- ``d``: (faults' mean - clean mean) / clean sd — the standardised effect;
- ``p``: the two-sided Mann-Whitney U p-value of faults vs clean (scale-free, no normality assumed);
- ``caught``: how many fault runs lie outside the clean seeds' two-sided prediction bound at
  ``alpha / tests`` (what a one-run test on that metric alone, Bonferroni over every metric and window
  looked at, would catch);
- ``paired``: where a fault seed also ran clean, the median |fault - clean| over the clean sd: near 1 (or
  above) means the fault's run is as far from its own clean twin as another seed is — the fault is lost
  in the trajectory's chaos.

    python bench/fault_effects.py runs/power --top 8 > fault_effects.md
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.verdict_power import campaign_runs  # noqa: E402
from harness.judge.baseline import is_timing, load_series  # noqa: E402
from harness.judge.stats import per_test_alpha, prediction_bound  # noqa: E402


def window_means(series: dict[int, float], steps: int) -> dict[str, float]:
    """Mean over each fifth-of-the-run window (and the whole run) of one metric's series."""
    fifth = max(1, math.ceil(steps / 5))
    spans = {"first fifth": (1, fifth), "middle fifth": (2 * fifth + 1, 3 * fifth),
             "last fifth": (steps - fifth + 1, steps), "all steps": (1, steps)}
    out = {}
    for name, (lo, hi) in spans.items():
        vals = [v for k, v in series.items() if lo <= k <= hi and math.isfinite(v)]
        if vals:
            out[name] = math.fsum(vals) / len(vals)
    return out


def load_campaign(out: Path) -> tuple[dict[int, dict], dict[str, dict[int, dict]], int]:
    """(clean seed -> metric -> window -> mean, fault -> seed -> ..., steps)."""
    runs = [(fault, seed, {k: s for k, s in load_series(d).items() if not is_timing(k)})
            for fault, seed, d in campaign_runs(out)]
    steps = max((max(s) for *_, series in runs for s in series.values() if s), default=0)
    clean: dict[int, dict] = {}
    faults: dict[str, dict[int, dict]] = {}
    for fault, seed, series in runs:
        wm = {m: window_means(s, steps) for m, s in series.items()}
        if fault is None:
            clean[seed] = wm
        else:
            faults.setdefault(fault, {})[-1 if seed is None else seed] = wm
    return clean, faults, steps


def effects(clean: dict[int, dict], runs: dict[int, dict], alpha: float) -> list[dict]:
    from scipy.stats import mannwhitneyu

    metrics = sorted(set.intersection(*(set(r) for r in clean.values())))
    windows = ("first fifth", "middle fifth", "last fifth", "all steps")
    tests = len(metrics) * len(windows)
    a = per_test_alpha(alpha, tests, "two-sided")
    rows = []
    for m in metrics:
        for w in windows:
            ref = [c[m][w] for c in clean.values() if w in c.get(m, {})]
            got = {s: r[m][w] for s, r in runs.items() if w in r.get(m, {})}
            if len(ref) < 3 or not got:
                continue
            sd = statistics.stdev(ref)
            mean = statistics.fmean(ref)
            shift = statistics.fmean(got.values()) - mean
            d = shift / sd if sd > 0 else (0.0 if shift == 0 else math.copysign(math.inf, shift))
            bound = prediction_bound(ref, a, 0.0)
            caught = sum(abs(x - bound.centre) > bound.allowed for x in got.values())
            p = mannwhitneyu(list(got.values()), ref).pvalue if len(got) > 1 and sd > 0 else math.nan
            pairs = [abs(x - clean[s][m][w]) / sd for s, x in got.items() if s in clean and w in clean[s].get(m, {})
                     and sd > 0]
            rows.append({"metric": m, "window": w, "d": d, "p": p, "caught": caught, "n": len(got),
                         "paired": statistics.median(pairs) if pairs else math.nan})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a bench/verdict_power.py --out folder (or several, merged)", nargs="+")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--top", type=int, default=6, help="rows per fault: most runs caught, then largest |d|, first")
    ap.add_argument("--json", type=Path, help="also write every row here")
    args = ap.parse_args()
    clean: dict[int, dict] = {}
    faults: dict[str, dict[int, dict]] = {}
    steps = 0
    for folder in args.out:
        c, f, n = load_campaign(folder)
        clean.update(c)
        for k, v in f.items():
            faults.setdefault(k, {}).update(v)
        steps = max(steps, n)
    print(f"{len(clean)} clean seeds, {steps} steps; faults: "
          + ", ".join(f"{k} ({len(v)} seeds)" for k, v in faults.items()) + "\n")
    everything = {}
    for fault, runs in faults.items():
        rows = effects(clean, runs, args.alpha)
        everything[fault] = rows
        best = sorted(rows, key=lambda r: (-r["caught"], -abs(r["d"])))[:args.top]
        print(f"### {fault}\n\n| metric | window | d | Mann-Whitney p | caught by a one-run test | paired |\n"
              "|---|---|---|---|---|---|")
        for r in best:
            print(f"| {r['metric']} | {r['window']} | {r['d']:+.2f} | {r['p']:.2g} | {r['caught']}/{r['n']} | "
                  f"{r['paired']:.2f} |")
        print(f"\nAny metric and window catching a run: {max((r['caught'] for r in rows), default=0)} of "
              f"{len(runs)} at most (alpha {args.alpha} over {len(rows)} tests).\n")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
