"""The statistical tier's threshold agrees with the procedure of mlperf-logging's RCP checker.

RCP (mlperf_logging.rcp_checker): reference statistics, then the smallest acceptable submission
mean found by binary search with a one-sided pooled two-sample t-test (``_find_p_value``: scipy's
``ttest_ind_from_stats`` with equal variances, halved to one side, alpha 0.05). For one submitted
run against n reference runs of the same sd, that boundary is ``mean - t(1-alpha, n-1) * sd *
sqrt(1 + 1/n)`` — the allowed shortfall of :func:`harness.judge.stats.prediction_bound`. The RCP's own
functions are called here on the same numbers; with 5 or more references the tier uses RCP's olympic
statistics (``RCP_Checker.compute_rcp_stats``: lowest and highest run dropped from the mean, the
population sd of all runs, n - 2 samples).
"""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import numpy as np
import pytest
from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

from harness.judge.stats import prediction_bound

ALPHA = 0.05
SEEDS = [
    [0.845, 0.803, 0.789],
    [0.61, 0.58, 0.66, 0.64, 0.59],
    [1.0, 0.98, 0.97, 0.99, 1.0, 0.96, 0.995],
    [0.3, 0.42, 0.35, 0.38],
]


def stat_threshold(seeds: list[float], alpha: float, floor: float) -> tuple[float, float, float]:
    b = prediction_bound(seeds, alpha, floor)
    return b.centre, b.sd, b.allowed


def rcp_boundary(mean: float, sd: float, n_ref: int, n_subm: int = 1) -> float:
    """mlperf-logging's smallest acceptable mean (its binary search and t-test, unchanged)."""
    me = SimpleNamespace(submission_runs=n_subm + 2, tolerance=1e-9, alpha=ALPHA)
    me._find_p_value = lambda *a: RCP_Checker._find_p_value(me, *a)
    # The search looks in [0, mean] (RCP's "epochs": a submission faster than the reference by more
    # than chance); the distance to the mean is the same one-sided bound as our shortfall below it.
    return RCP_Checker._find_min_acceptable_mean(me, mean, sd, n_ref)


def olympic(values: list[float]) -> tuple[float, int]:
    """RCP's reference mean: drop the lowest and the highest run (compute_rcp_stats, samples_rejected 1)."""
    v = sorted(values)
    return float(np.mean(v[1:-1])), len(v) - 2


@pytest.mark.parametrize("seeds", SEEDS)
def test_allowed_shortfall_is_the_rcp_boundary(seeds: list[float]) -> None:
    mu, sd, allowed = stat_threshold(seeds, ALPHA, 0.0)
    n = len(seeds) - 2 if len(seeds) >= 5 else len(seeds)
    assert sd == pytest.approx(float(np.std(seeds)) if len(seeds) >= 5 else statistics.stdev(seeds))
    boundary = rcp_boundary(mu, sd, n)
    assert mu - boundary == pytest.approx(allowed, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("seeds", SEEDS)
def test_pass_fail_decisions_agree(seeds: list[float]) -> None:
    mu, sd, allowed = stat_threshold(seeds, ALPHA, 0.0)
    me = SimpleNamespace()
    n = len(seeds) - 2 if len(seeds) >= 5 else len(seeds)
    for x in (mu - 2 * allowed, mu - 1.01 * allowed, mu - 0.99 * allowed, mu, mu + allowed):
        ok_rcp, _ = RCP_Checker._find_p_value(me, x, sd, 1, mu, sd, n, ALPHA)
        ours = mu - x <= allowed
        # RCP tests "significantly below"; a run above the mean is never significantly below
        assert ours == (ok_rcp or x >= mu), (seeds, x)


@pytest.mark.parametrize("seeds", SEEDS[1:])
def test_olympic_reference_through_the_same_test(seeds: list[float]) -> None:
    """The tier's reference statistics are RCP's own (compute_rcp_stats), and so is its boundary."""
    mean, n = olympic(seeds)
    sd = float(np.std(seeds))
    checker = SimpleNamespace(rcp_data={"r": {"Benchmark": "b", "BS": 1, "Epochs to converge": list(seeds)}},
                              submission_runs=3, tolerance=1e-9, alpha=ALPHA, verbose=False, _prune_rcps=lambda: None)
    checker._find_p_value = lambda *a: RCP_Checker._find_p_value(checker, *a)
    checker._find_min_acceptable_mean = lambda *a: RCP_Checker._find_min_acceptable_mean(checker, *a)
    RCP_Checker.compute_rcp_stats(checker)
    rec = checker.rcp_data["r"]
    assert rec["RCP Mean"] == pytest.approx(mean) and rec["RCP Stdev"] == pytest.approx(sd)
    from scipy import stats

    allowed = float(stats.t.ppf(1 - ALPHA, n - 1)) * sd * (1 + 1 / n) ** 0.5
    assert mean - rec["Min Epochs"] == pytest.approx(allowed, rel=1e-6, abs=1e-8)
    if len(seeds) >= 5:
        ours = stat_threshold(seeds, ALPHA, 0.0)
        assert ours == pytest.approx((rec["RCP Mean"], rec["RCP Stdev"], mean - rec["Min Epochs"]), rel=1e-6)
