"""The statistics of the ``statistical`` tier, as pure functions (MLPerf RCP's procedure).

A run's late-window mean of a convergence metric is tested against the distribution of the
baseline seeds' window means: the reference centre is their **olympic mean** (the mean without
the single lowest and highest value, as MLPerf's reference-convergence-point checker computes it,
once there are at least 5 values), and the run fails when it lies beyond the one-sided prediction
bound ``centre ± t(1 - alpha, n - 1) · sd · sqrt(1 + 1/n)`` in the regression direction (a
one-sided t-test of one new observation against n references) and by more than a practical floor.
Two-sided metrics use ``alpha / 2`` on each side. With several metrics tested at once, each gets
``alpha / m`` (Bonferroni), so the family-wise false-alarm rate stays at most ``alpha``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

OLYMPIC_MIN = 5  # fewer values: the plain mean (dropping 2 of 4 would waste half the references)


def olympic_mean(values: list[float]) -> float:
    """Mean without one lowest and one highest value (plain mean below ``OLYMPIC_MIN`` values)."""
    if not values:
        raise ValueError("olympic_mean of no values")
    xs = sorted(values)
    if len(xs) >= OLYMPIC_MIN:
        xs = xs[1:-1]
    return math.fsum(xs) / len(xs)


def t_critical(alpha: float, dof: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(1 - alpha, dof))


@dataclass(frozen=True)
class Bound:
    centre: float
    sd: float
    allowed: float  # the largest shortfall (in the regression direction) that still passes
    n: int


def prediction_bound(refs: list[float], alpha: float, floor: float) -> Bound:
    """How far a new value may fall short of the references' olympic mean before the test rejects."""
    centre = olympic_mean(refs)
    if len(refs) < 2:
        return Bound(centre, 0.0, floor, len(refs))
    sd = statistics.stdev(refs)
    allowed = t_critical(alpha, len(refs) - 1) * sd * math.sqrt(1 + 1 / len(refs))
    return Bound(centre, sd, max(floor, allowed), len(refs))


def t_statistic(x: float, refs: list[float]) -> float:
    """(x - olympic mean) / (sd · sqrt(1 + 1/n)); +inf/-inf when the references have no spread."""
    centre = olympic_mean(refs)
    sd = statistics.stdev(refs) if len(refs) > 1 else 0.0
    scale = sd * math.sqrt(1 + 1 / len(refs))
    if scale == 0:
        return 0.0 if x == centre else math.copysign(math.inf, x - centre)
    return (x - centre) / scale


def shortfall(x: float, centre: float, direction: str) -> float:
    """How much worse than ``centre`` the value is (negative = better); two-sided: the distance."""
    if direction == "higher-is-better":
        return centre - x
    if direction == "lower-is-better":
        return x - centre
    return abs(x - centre)


def per_test_alpha(alpha: float, tests: int, direction: str) -> float:
    """Bonferroni over ``tests`` metrics; a two-sided test splits its share over both tails."""
    a = alpha / max(1, tests)
    return a / 2 if direction == "two-sided" else a
