"""The statistics of the ``statistical`` tier, as pure functions (MLPerf RCP's procedure).

A run's late-window mean of a convergence metric is tested against the baseline seeds' window
means the way mlperf-logging's reference-convergence-point checker tests a submission against its
reference runs (``RCP_Checker.compute_rcp_stats`` and ``_find_min_acceptable_mean``):

- reference statistics: with at least 5 values, the **olympic** mean (the single lowest and
  highest value dropped), the population standard deviation of all values, and n - 2 samples;
  with fewer, the plain mean, the sample standard deviation and n;
- the run fails when it lies beyond the one-sided bound ``centre ± t(1 - alpha, n - 1) · sd ·
  sqrt(1 + 1/n)`` in the regression direction (a one-sided pooled t-test of one run against n
  references) and by more than a practical floor.

Two-sided metrics use ``alpha / 2`` on each side. With several metrics tested at once, each gets
``alpha / m`` (Bonferroni), so the family-wise false-alarm rate stays at most ``alpha``.

Rewards are proportions in [0, 1] whose late-window means pile up near 1 with a long lower tail;
the t-bound assumes a symmetric spread. They are therefore tested on the arcsine-square-root scale
(the variance-stabilising transform of a proportion), which stretches the crowded end: measured by
cross-validation over 26 seeds of the main CPU smoke recipe (both rewards tested), it cut the
false-alarm rate from 9.6 % to 7.6 % with 10 reference seeds and from 5.1 % to 4.4 % with 20
(baselines/README.md).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
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


def _asin_sqrt(v: float) -> float:
    return math.asin(math.sqrt(v))


TRANSFORMS: dict[str, Callable[[float], float]] = {"identity": lambda v: v, "asin-sqrt": _asin_sqrt}
TRANSFORM_DOMAIN = {"asin-sqrt": (0.0, 1.0)}


def applicable_transform(transform: str, values: list[float]) -> str:
    """``transform`` when every value lies in its domain, else ``identity`` (a reward outside [0, 1])."""
    lo, hi = TRANSFORM_DOMAIN.get(transform, (-math.inf, math.inf))
    return transform if all(lo <= v <= hi for v in values) else "identity"


def t_critical(alpha: float, dof: int) -> float:
    """Student's t quantile ``1 - alpha`` (``scipy.special.stdtrit``: the same value as ``scipy.stats.t.ppf``,
    without importing ``scipy.stats``, which pulls in torch's compiler stack: ~2 s per judging process)."""
    from scipy import special

    return float(special.stdtrit(dof, 1 - alpha))


@dataclass(frozen=True)
class Bound:
    centre: float
    sd: float
    allowed: float  # the largest shortfall (in the regression direction) that still passes
    n: int


def reference_stats(refs: list[float]) -> tuple[float, float, int]:
    """(centre, sd, n) of the reference values, as RCP computes them (see the module docstring)."""
    if len(refs) >= OLYMPIC_MIN:
        return olympic_mean(refs), statistics.pstdev(refs), len(refs) - 2
    return math.fsum(refs) / len(refs), (statistics.stdev(refs) if len(refs) > 1 else 0.0), len(refs)


def prediction_bound(refs: list[float], alpha: float, floor: float) -> Bound:
    """How far a new value may fall short of the references' centre before the test rejects."""
    centre, sd, n = reference_stats(refs)
    if n < 2:
        return Bound(centre, sd, floor, n)
    allowed = t_critical(alpha, n - 1) * sd * math.sqrt(1 + 1 / n)
    return Bound(centre, sd, max(floor, allowed), n)


def t_statistic(x: float, refs: list[float]) -> float:
    """(x - centre) / (sd · sqrt(1 + 1/n)) with RCP's reference statistics; ±inf when they have no spread."""
    centre, sd, n = reference_stats(refs)
    scale = sd * math.sqrt(1 + 1 / n)
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
