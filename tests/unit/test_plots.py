"""The report's curves read at a glance: bands clipped to each metric's range and named, the baseline visible above
the run, failed checks marked where they failed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import typed_records as typed

from harness.core import reward
from harness.judge import plots
from harness.judge.tiers import make_check

SCORE, VAL, KL, TP = "critic/score/mean", "val-core/geo/reward/mean", "actor/kl_loss", "perf/throughput"
POLICY = {"band": {"rtol": 0.05, "atol": 1e-8, "k_noise": 3.0, "noise_window": 2},
          "throughput": {"quantile": 0.5, "warmup_steps": 1}}
STEPS = [1, 2, 3, 4, 5, 6]


def _spec(values: list[float], noise_std: float, tiers: tuple[str, ...] = ("exact", "band"),
          steps: list[int] = STEPS) -> dict[str, Any]:
    return {"tiers": list(tiers), "steps": steps, "values": values, "noise_std": [noise_std] * len(values),
            "noise_values": [[v * 0.98 for v in values], [v * 0.95 for v in values]]}


def baseline(**metrics: dict[str, Any]) -> dict[str, Any]:
    return {"primary_seed": 42, "policy": POLICY, "metrics": metrics}


def wide() -> dict[str, Any]:
    """A reward whose raw band (3 * 0.4 = ±1.2 around 0.3..0.9) is far wider than [0, 1], as on the CPU smoke run."""
    return baseline(**{SCORE: _spec([0.3, 0.4, 0.5, 0.7, 0.8, 0.9], 0.4),
                       VAL: _spec([0.35, 0.6, 1.0], 0.4, steps=[0, 3, 6])})


def run_of(b: dict[str, Any]) -> dict[str, dict[int, float]]:
    return {m: dict(zip(s["steps"], s["values"])) for m, s in b["metrics"].items()}


def curve_data(run: dict[str, dict[int, float]], b: dict[str, Any], **kw: Any) -> list[plots.Curve]:
    """The figures of ``run`` against the partial baseline document ``b`` (read into its model)."""
    return plots.curve_data(run, typed.baseline(b), **kw)


def curve(curves: list[plots.Curve], stem: str) -> plots.Curve:
    return next(c for c in curves if c.stem == stem)


def artists(fig: Any, gid: str) -> list[Any]:
    ax = fig.axes[0]
    return [a for a in (*ax.lines, *ax.collections) if a.get_gid() == gid]


def legend_texts(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.legends[0].get_texts()]


# ----------------------------------------------------------------------------- ranges and bands
def test_a_bounded_reward_band_stays_in_0_1() -> None:
    b = wide()
    reward_curve = curve(curve_data(run_of(b), b), "reward")
    for s in reward_curve.series:
        assert s.band is not None and min(s.band.lo) >= 0.0 and max(s.band.hi) <= 1.0, s.metric
    assert reward_curve.series[0].band.hi[-1] == 1.0 and reward_curve.series[0].band.lo[0] == 0.0  # clipped, not dropped
    lo, hi = reward_curve.ylim
    assert -0.1 <= lo and hi <= 1.1  # the y-limits come from the data and the clipped bands, not the raw ±1.2
    fig = plots.draw(reward_curve)
    for metric in (SCORE, VAL):
        (band,) = artists(fig, f"band:{metric}")
        ys = [y for path in band.get_paths() for _, y in path.vertices]
        assert 0.0 <= min(ys) and max(ys) <= 1.0
    assert fig.axes[0].get_ylim() == pytest.approx(reward_curve.ylim)


def test_an_unbounded_metric_keeps_its_band() -> None:
    b = baseline(**{"actor/pg_loss": _spec([0.1, -0.2, 0.05, 0.0, 0.1, 0.2], 0.4)})
    (s,) = curve(curve_data(run_of(b), b), "loss").series
    assert s.band.lo[0] == pytest.approx(0.1 - 1.2) and s.band.hi[0] == pytest.approx(0.1 + 1.2)


def test_a_band_is_clipped_to_the_range_widened_by_recorded_values() -> None:
    """k1's KL estimate can go below 0: clipping at the known range never hides a value the run or baseline took."""
    b = baseline(**{KL: _spec([0.0, -0.05, 0.02, 0.1, 0.2, 0.1], 0.3)})
    (s,) = curve(curve_data(run_of(b), b), "kl").series
    assert min(s.band.lo) == pytest.approx(-0.05)  # the lowest recorded value, not 0 and not -0.95
    assert s.band.hi[0] == pytest.approx(0.9)


@pytest.mark.parametrize("name,expected", [(SCORE, (0.0, 1.0)), (VAL, (0.0, 1.0)), ("reward/acc/mean", (0.0, 1.0)),
                                           ("actor/entropy", (0.0, None)), ("actor/grad_norm", (0.0, None)),
                                           (KL, (0.0, None)), (TP, (0.0, None)), ("actor/pg_loss", (None, None)),
                                           ("critic/rewards/mean", (None, None))])
def test_metric_ranges(name: str, expected: tuple) -> None:
    assert plots.metric_range(name) == expected


RESPONSES = ["", "no answer", "<think>x</think> \\boxed{3}", "<think>x</think> \\boxed{4}", "\\boxed{3}",
             "<think></think>\\boxed{\\boxed{3}}", "<think>a</think> \\boxed{3.0} trailing", "\\boxed{"]


@pytest.mark.parametrize("name", reward.reward_names())
def test_every_registered_reward_scores_in_the_range_the_plots_assume(name: str) -> None:
    lo, hi = plots.metric_range(SCORE)
    for response in RESPONSES:
        score = reward.compute_reward(name, response, "3").score
        assert lo <= score <= hi, (name, response, score)


# ----------------------------------------------------------------------------- telling things apart
def test_each_band_is_named_and_drawn_differently() -> None:
    b = wide()
    fig = plots.draw(curve(curve_data(run_of(b), b), "reward"))
    texts = legend_texts(fig)
    assert "band: train score (ref ± tol)" in texts and "band: val geo (ref ± tol)" in texts
    assert "train score (run)" in texts and "train score (baseline seed 42)" in texts
    (a,), (c,) = artists(fig, f"band:{SCORE}"), artists(fig, f"band:{VAL}")
    assert a.get_hatch() != c.get_hatch()
    assert tuple(a.get_facecolor()[0]) != tuple(c.get_facecolor()[0])


def test_the_baseline_is_drawn_above_a_run_that_repeats_it() -> None:
    b = wide()
    fig = plots.draw(curve(curve_data(run_of(b), b), "reward"))  # the run is the baseline, bit for bit
    for metric in (SCORE, VAL):
        (run,), (ref,) = artists(fig, f"run:{metric}"), artists(fig, f"baseline:{metric}")
        assert list(run.get_ydata()) == list(ref.get_ydata())
        assert ref.get_zorder() > run.get_zorder()
        assert ref.get_linestyle() != run.get_linestyle() and ref.get_color() != run.get_color()
        assert run.get_linewidth() > ref.get_linewidth() + 1  # bold run, visible around the baseline on top


# ----------------------------------------------------------------------------- failed checks
CHECKS = [
    make_check("exact", SCORE, 6, 0.5, 0.5, 0.0, True, 6, []),
    make_check("band", SCORE, 3, 0.8, 0.5, 0.01, False, 6, [3, 4, 6]),
    make_check("statistical", VAL, 6, 0.1, 0.5, 0.05, False, 5, []),
    make_check("throughput", TP, None, 50.0, 100.0, 15.0, False, 4, []),
    make_check("memory", "perf/max_memory_allocated_gb", None, 0.4, 0.5, 0.05, True, 6, []),
]


def test_failed_checks_from_a_verdict() -> None:
    assert plots.failed_checks(CHECKS) == {SCORE: [(3, "band"), (4, "band"), (6, "band")], VAL: [(6, "statistical")],
                                           TP: [(None, "throughput")]}
    objects = [make_check("band", SCORE, 3, 0.1, 0.2, 0.01, False, 6, [3, 4]),
               make_check("exact", KL, 6, 0, 0, 0, True)]
    assert plots.failed_checks(objects) == {SCORE: [(3, "band"), (4, "band")]}
    assert plots.failed_checks([]) == {}


def test_a_failed_step_is_marked_on_its_curve() -> None:
    b = wide()
    run = run_of(b)
    run[TP] = {k: 100.0 for k in STEPS}  # a timing metric: the run's only, never a baseline's
    run[SCORE] = {k: v + (0.3 if k in (3, 4, 6) else 0.0) for k, v in run[SCORE].items()}
    curves = curve_data(run, b, throughput=make_check("throughput", TP, None, 90.0, 100.0, 15.0, True, 4),
                        failed=plots.failed_checks(CHECKS))
    fig = plots.draw(curve(curves, "reward"))
    (marks,) = artists(fig, f"failed:{SCORE}:band")
    assert list(marks.get_xdata()) == [3, 4, 6] and list(marks.get_ydata()) == [run[SCORE][k] for k in (3, 4, 6)]
    (val_marks,) = artists(fig, f"failed:{VAL}:statistical")
    assert list(val_marks.get_xdata()) == [6] and val_marks.get_marker() != marks.get_marker()
    texts = legend_texts(fig)
    assert texts.index("failed check (statistical): 1 step") < texts.index("failed check (band): 3 steps")
    assert not [p for p in fig.axes[0].patches if p.get_gid() == "failed:span"]  # every failed step has its mark
    tp = plots.draw(curve(curves, "throughput"))  # a check without a step: the whole figure is framed in red
    assert "failed check (throughput): the run as a whole" in legend_texts(tp)
    assert all(s.get_edgecolor()[:3] == pytest.approx((0xd0 / 255, 0, 0)) for s in tp.axes[0].spines.values())
    assert "floor -15%" in legend_texts(tp) and "baseline median 100" in legend_texts(tp)


def test_the_rarest_failure_is_drawn_largest_on_top() -> None:
    """exact fails at every step once anything differs; the few steps where band failed must still show."""
    b = wide()
    failed = {SCORE: [(k, "exact") for k in STEPS] + [(5, "band")]}
    fig = plots.draw(curve(curve_data(run_of(b), b, failed=failed), "reward"))
    (exact,), (band,) = artists(fig, f"failed:{SCORE}:exact"), artists(fig, f"failed:{SCORE}:band")
    assert band.get_zorder() > exact.get_zorder() and band.get_markersize() > exact.get_markersize()
    assert band.get_marker() != exact.get_marker()
    texts = legend_texts(fig)
    assert texts.index("failed check (band): 1 step") < texts.index("failed check (exact): 6 steps")


def test_a_failed_step_without_a_run_value_is_a_span() -> None:
    b = wide()
    run = run_of(b)
    del run[SCORE][6]  # the run stopped at step 5
    failed = {SCORE: [(3, "band"), (6, "band"), (7, "band")]}
    fig = plots.draw(curve(curve_data(run, b, failed=failed), "reward"))
    (marks,) = artists(fig, f"failed:{SCORE}:band")
    assert list(marks.get_xdata()) == [3]
    spans = [p for p in fig.axes[0].patches if p.get_gid() == "failed:span"]
    assert [(p.get_x(), p.get_width()) for p in spans] == [(5.5, 2.0)]  # steps 6..7, one span


def test_no_failures_no_marks() -> None:
    b = wide()
    fig = plots.draw(curve(curve_data(run_of(b), b, failed={}), "reward"))
    assert not [a for a in fig.axes[0].lines if (a.get_gid() or "").startswith("failed:")] and not any(t.startswith("failed") for t in legend_texts(fig))


# ----------------------------------------------------------------------------- files
def test_plot_curves_writes_one_png_per_figure(tmp_path: Path) -> None:
    b = wide()
    run = run_of(b)
    run["actor/entropy"] = {1: 0.5, 2: math.nan, 3: 0.4}  # a non-finite value is left out, not drawn at 0
    written = plots.plot_curves(tmp_path, run, typed.baseline(b), failed=plots.failed_checks(CHECKS))
    assert [f for f, _ in written] == ["curves-reward.png", "curves-entropy.png"]
    for fname, _ in written:
        assert (tmp_path / fname).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (entropy,) = curve(curve_data(run, b), "entropy").series
    assert entropy.run == [(1, 0.5), (3, 0.4)]


def test_upto_limits_the_baseline_not_the_run() -> None:
    b = wide()
    (s, _) = curve(curve_data(run_of(b), b, upto=3), "reward").series
    assert [k for k, _ in s.ref] == [1, 2, 3] and s.band.steps == [1, 2, 3] and len(s.run) == 6
