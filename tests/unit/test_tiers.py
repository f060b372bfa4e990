"""The comparison tiers on synthetic metric series: metric classes, exact, band, statistical, replay, throughput and
memory (pure functions; the judge around them is tests/unit/test_compare.py)."""

from __future__ import annotations

import copy
import math

import pytest
import typed_records as typed

from harness.judge import baseline as B
from harness.judge import tiers as T
from harness.records.base import dump

STEPS = 20


def _series(fn, steps=STEPS, start=1):
    return {k: float(fn(k)) for k in range(start, steps + 1)}


MODEL = "Test CPU"


def ev(run, base, tiers, upto, env=None, dtype="float32"):
    """Every check of ``tiers`` (plus throughput and memory) of ``run`` against ``base``."""
    env = env or {"machine": {"device_model": MODEL}, "software": {"threads": 2}}
    return T.evaluate(T.Context(run, typed.baseline(base), upto, typed.env(env), dtype), tiers)


def _baseline(metrics: dict[str, dict], *, steps=STEPS, policy=None, throughput=1000.0, spread=0.0, memory=1.0):
    """A baseline document built directly (the primary series and noise seeds given per metric)."""
    out = {}
    for name, spec in metrics.items():
        ks = sorted(spec["ref"])
        noise = [[s.get(k) for k in ks] for s in spec.get("noise", [])]
        std = []
        for i, k in enumerate(ks):
            vals = [spec["ref"][k]] + [row[i] for row in noise if row[i] is not None]
            std.append(float(__import__("statistics").stdev(vals)) if len(vals) > 1 else 0.0)
        entry = {"tiers": T.metric_tiers(name), "steps": ks, "values": [spec["ref"][k] for k in ks],
                 "noise_values": noise, "noise_std": std}
        spec_ = B.stat_spec(name)
        if spec_:
            entry["direction"], entry["transform"] = spec_[0], spec_[1]
            if spec_[2] is not None:
                entry["stat_floor"] = spec_[2]
        out[name] = entry
    tp = {"device_model": MODEL, "threads": 2, "runtime": "local", "value": throughput, "seed_values": [throughput],
          "relative_spread": spread, "recorded_utc": "2026-01-01T00:00:00Z"}
    return {"metrics": out, "steps": steps, "policy": copy.deepcopy(policy or dump(B.DEFAULT_POLICY)),
            "throughput": {"references": [tp]},
            "memory": {"value": memory, "seed_values": [memory], "relative_spread": 0.0}}


def _by(checks, group, metric=None):
    return [c for c in checks if c.group == group and (metric is None or c.metric == metric)]


# ----------------------------------------------------------------------------- metric classes
def test_timing_prefixes_match_the_trainer():
    from harness.core.trainer import TIMING_PREFIXES

    assert B.TIMING_PREFIXES == TIMING_PREFIXES


@pytest.mark.parametrize("name,tiers", [
    ("actor/pg_loss", ["exact", "replay", "band"]),
    ("actor/kl_loss", ["exact", "replay", "band"]),
    ("critic/score/mean", ["exact", "replay", "band", "statistical"]),
    ("critic/score/max", ["exact", "replay"]),
    ("training/rollout_probs_diff_mean", ["exact"]),
    ("val-core/synthetic/color/reward/mean", ["exact", "band"]),
    ("perf/throughput", []), ("timing_s/step", []),
])
def test_metric_tiers(name, tiers):
    assert T.metric_tiers(name) == tiers


def test_window_mean_dense_and_sparse():
    s = _series(lambda k: k)
    assert B.window_mean(s, 20, 5) == (16 + 17 + 18 + 19 + 20) / 5
    assert B.window_mean({0: 0.3, 10: 0.6, 20: 0.9}, 20, 5) == 0.9
    assert B.window_mean({0: 0.3, 10: 0.6}, 19, 5) == 0.6  # no value in the window: the last one before
    assert B.window_mean({}, 10, 3) is None
    assert B.statistical_window(0.2, 40) == 8 and B.statistical_window(0.2, 12) == 3
    assert B.statistical_window(0.2, 1) == 1 and B.statistical_window(0.9, 10) == 5


# ----------------------------------------------------------------------------- exact
def test_exact_equal_and_one_ulp_off():
    ref = _series(lambda k: 0.1 * k)
    base = _baseline({"actor/pg_loss": {"ref": ref}})
    checks, _ = ev({"actor/pg_loss": dict(ref)}, base, ["exact"], STEPS)
    assert _by(checks, "exact")[0].passed
    run = dict(ref)
    run[7] = math.nextafter(run[7], 1.0)
    c = _by(ev({"actor/pg_loss": run}, base, ["exact"], STEPS)[0], "exact")[0]
    assert not c.passed and c.step == 7 and c.failing_steps == [7] and c.tolerance == 0.0


def test_exact_distinguishes_signed_zero_and_missing_steps():
    assert not T.bitwise_equal(0.0, -0.0)
    assert T.bitwise_equal(float("nan"), float("nan"))
    assert not T.bitwise_equal(None, 1.0)
    base = _baseline({"actor/pg_loss": {"ref": _series(lambda k: k)}})
    run = {"actor/pg_loss": _series(lambda k: k, steps=10)}
    c = _by(ev(run, base, ["exact"], STEPS)[0], "exact")[0]
    assert not c.passed and c.step == 11 and len(c.failing_steps) == 10


def test_prefix_comparison_only_looks_at_compared_steps():
    base = _baseline({"actor/pg_loss": {"ref": _series(lambda k: k)}})
    run = {"actor/pg_loss": _series(lambda k: k, steps=8)}
    c = _by(ev(run, base, ["exact", "band"], 8)[0], "exact")[0]
    assert c.passed and c.steps_compared == 8


# ----------------------------------------------------------------------------- band
def test_band_uses_noise_floor_rtol_and_allowed_failures():
    ref = _series(lambda k: 1.0)
    noise = [_series(lambda k: 1.0 + 0.01 * (-1) ** k), _series(lambda k: 1.0 - 0.01 * (-1) ** k)]
    base = _baseline({"actor/entropy": {"ref": ref, "noise": noise}})
    band = base["policy"]["band"]
    # std ~0.01 -> k*noise = 0.03 < rtol*|ref| = 0.05: rtol governs
    run = {"actor/entropy": _series(lambda k: 1.049)}
    assert _by(ev(run, base, ["band"], STEPS)[0], "band")[0].passed
    run = {"actor/entropy": _series(lambda k: 1.06 if k == 5 else 1.0)}  # one failing step: allowed
    c = _by(ev(run, base, ["band"], STEPS)[0], "band")[0]
    assert c.passed and c.failing_steps == [5] and c.step == 5
    run = {"actor/entropy": _series(lambda k: 1.06 if k in (5, 9) else 1.0)}
    c = _by(ev(run, base, ["band"], STEPS)[0], "band")[0]
    assert not c.passed and c.failing_steps == [5, 9]
    assert band["failures_per_50_steps"] == 1


def test_band_noise_window_takes_the_largest_nearby_std():
    assert T.noise_floor([0.0, 0.0, 1.0, 0.0, 0.0, 0.0], 0, 2) == 1.0
    assert T.noise_floor([0.0, 0.0, 1.0, 0.0, 0.0, 0.0], 5, 2) == 0.0
    ref = _series(lambda k: 0.0)
    noise = [_series(lambda k: 0.5 if k == 10 else 0.0)]  # std 0.35 at step 10 only
    base = _baseline({"actor/pg_loss": {"ref": ref, "noise": noise}})
    run = {"actor/pg_loss": _series(lambda k: 0.9 if k in (8, 12) else 0.0)}  # within 3*0.35 thanks to the window
    assert _by(ev(run, base, ["band"], STEPS)[0], "band")[0].passed


def test_band_nan_and_missing_fail():
    base = _baseline({"actor/pg_loss": {"ref": _series(lambda k: 1.0)}})
    run = {"actor/pg_loss": _series(lambda k: float("nan") if k > 10 else 1.0)}
    c = _by(ev(run, base, ["band"], STEPS)[0], "band")[0]
    assert not c.passed and len(c.failing_steps) == 10 and c.model_dump(mode="json")["run_value"] is None
    c = _by(ev({}, base, ["band"], STEPS)[0], "band")[0]
    assert not c.passed


def test_band_per_metric_atol_override():
    base = _baseline({"critic/advantages/mean": {"ref": _series(lambda k: 1e-8)}})
    base["metrics"]["critic/advantages/mean"]["atol"] = 1e-5
    run = {"critic/advantages/mean": _series(lambda k: -3e-6)}
    assert _by(ev(run, base, ["band"], STEPS)[0], "band")[0].passed


# ----------------------------------------------------------------------------- statistical
def _reward_baseline(finals=(0.9, 0.85, 0.95)):
    seeds = [_series(lambda k, f=f: f * k / STEPS) for f in finals]
    return _baseline({"critic/score/mean": {"ref": seeds[0], "noise": seeds[1:]}})


def test_statistical_one_sided():
    base = _reward_baseline()
    good = {"critic/score/mean": _series(lambda k: 0.88 * k / STEPS)}
    c = _by(ev(good, base, ["statistical"], STEPS)[0], "statistical")[0]
    assert c.passed and c.tolerance > base["policy"]["statistical"]["practical_floor"]
    better = {"critic/score/mean": _series(lambda k: 1.5 * k / STEPS)}
    assert _by(ev(better, base, ["statistical"], STEPS)[0], "statistical")[0].passed  # one-sided
    bad = {"critic/score/mean": _series(lambda k: 0.2)}
    c = _by(ev(bad, base, ["statistical"], STEPS)[0], "statistical")[0]
    assert not c.passed and c.run_value == pytest.approx(math.asin(math.sqrt(0.2))) and "off by" in c.detail


def test_statistical_bound_matches_the_t_distribution():
    from scipy import stats as st

    from harness.judge import stats

    b = stats.prediction_bound([0.8, 0.9, 1.0], 0.05, 0.01)  # fewer than 5: plain mean, sample sd
    assert b.centre == pytest.approx(0.9) and b.sd == pytest.approx(0.1)
    assert b.allowed == pytest.approx(st.t.ppf(0.95, 2) * 0.1 * math.sqrt(4 / 3))
    one = stats.prediction_bound([0.9], 0.05, 0.05)
    assert (one.centre, one.sd, one.allowed) == (0.9, 0.0, 0.05)  # one seed: the practical floor
    assert stats.prediction_bound([0.9, 0.9], 0.05, 0.05).allowed == 0.05


def test_olympic_mean_drops_one_extreme_each_side_from_five_values():
    from harness.judge import stats

    assert stats.olympic_mean([1.0, 2.0, 3.0, 4.0]) == 2.5  # too few: plain mean
    assert stats.olympic_mean([0.0, 2.0, 3.0, 4.0, 100.0]) == 3.0
    assert stats.olympic_mean([5.0, 1.0, 1.0, 1.0, 9.0, 1.0]) == 2.0


def test_bonferroni_splits_alpha_over_metrics_and_tails():
    from harness.judge import stats

    assert stats.per_test_alpha(0.05, 5, "higher-is-better") == pytest.approx(0.01)
    assert stats.per_test_alpha(0.05, 5, "two-sided") == pytest.approx(0.005)
    assert stats.shortfall(0.8, 0.9, "higher-is-better") == pytest.approx(0.1)
    assert stats.shortfall(0.8, 0.9, "lower-is-better") == pytest.approx(-0.1)
    assert stats.shortfall(0.8, 0.9, "two-sided") == pytest.approx(0.1)


def test_statistical_tests_rewards_on_the_arcsine_scale():
    from harness.judge import stats

    seeds = [_series(lambda k, f=f: f) for f in (0.99, 0.97, 1.0, 0.98, 0.96)]
    base = _baseline({"critic/score/mean": {"ref": seeds[0], "noise": seeds[1:]}})
    refs = [stats.TRANSFORMS["asin-sqrt"](f) for f in (0.99, 0.97, 1.0, 0.98, 0.96)]
    alpha = base["policy"]["statistical"]["alpha"]
    expect = stats.prediction_bound(refs, alpha, base["policy"]["statistical"]["practical_floor"])
    c = _by(ev({"critic/score/mean": _series(lambda k: 0.9)}, base, ["statistical"], STEPS)[0], "statistical")[0]
    assert "asin-sqrt scale" in c.detail and c.tolerance == pytest.approx(expect.allowed)
    assert c.run_value == pytest.approx(math.asin(math.sqrt(0.9))) and c.ref_value == pytest.approx(expect.centre)
    # a reward outside [0, 1] (another reward function's scale) is tested as it is, not transformed
    wide = _baseline({"critic/score/mean": {"ref": _series(lambda k: 2.0), "noise": [_series(lambda k: 1.5)] * 4}})
    c = _by(ev({"critic/score/mean": _series(lambda k: 1.8)}, wide, ["statistical"], STEPS)[0], "statistical")[0]
    assert "scale" not in c.detail and c.run_value == pytest.approx(1.8)


def test_statistical_rule_is_the_harness_not_the_baseline():
    """A metric an older baseline marked statistical but the current rule does not (the KL loss) is not tested;
    the rule's direction applies even where the baseline recorded another."""
    seeds = [_series(lambda k, f=f: f) for f in (0.10, 0.11, 0.09, 0.10, 0.12)]
    base = _baseline({"actor/kl_loss": {"ref": seeds[0], "noise": seeds[1:]},
                      "critic/score/mean": {"ref": seeds[0], "noise": seeds[1:]}})
    base["metrics"]["actor/kl_loss"].update(tiers=["exact", "statistical"], direction="lower-is-better",
                                             transform="log")
    base["metrics"]["critic/score/mean"]["direction"] = "lower-is-better"
    run = {"actor/kl_loss": _series(lambda k: 50.0), "critic/score/mean": _series(lambda k: 0.0)}
    checks = _by(ev(run, base, ["statistical"], STEPS)[0], "statistical")
    assert [c.metric for c in checks] == ["critic/score/mean"] and not checks[0].passed


def test_transform_domain_and_shortfall_directions():
    from harness.judge import stats

    assert stats.applicable_transform("asin-sqrt", [0.0, 1.0]) == "asin-sqrt"
    assert stats.applicable_transform("asin-sqrt", [0.5, 1.0000001]) == "identity"
    assert stats.shortfall(5.0, 0.1, "lower-is-better") > 0 and stats.shortfall(0.0, 0.1, "lower-is-better") < 0


# ----------------------------------------------------------------------------- throughput / memory
def test_throughput_one_sided_with_refresh_notice():
    base = _baseline({"actor/pg_loss": {"ref": _series(lambda k: 0.0)}}, throughput=1000.0, spread=0.02)
    slow = {"perf/throughput": _series(lambda k: 1.0 if k <= 2 else 1000.0 / 1.3)}
    checks, _ = ev(slow, base, [], STEPS)
    c = _by(checks, "throughput")[0]
    assert not c.passed and c.tolerance == pytest.approx(150.0) and c.steps_compared == STEPS - 2
    ok = {"perf/throughput": _series(lambda k: 900.0)}
    assert _by(ev(ok, base, [], STEPS)[0], "throughput")[0].passed
    fast = {"perf/throughput": _series(lambda k: 2000.0)}
    checks, notices = ev(fast, base, [], STEPS)
    assert _by(checks, "throughput")[0].passed and any("refresh the baseline" in n for n in notices)


def test_quantile_matches_numpy():
    import numpy as np

    vals = [5.0, 1.0, 9.0, 3.0, 7.5, 2.0]
    for q in (0.0, 0.5, 0.9, 1.0):
        assert B.quantile(vals, q) == pytest.approx(float(np.percentile(vals, q * 100)))


def test_throughput_upper_quantile_ignores_contended_steps():
    """Steps stretched by other processes do not fail a run whose fast steps keep the baseline's speed."""
    base = _baseline({}, throughput=1000.0)
    contended = {"perf/throughput": _series(lambda k: 1000.0 if k % 4 == 0 else 150.0)}
    assert _by(ev(contended, base, [], STEPS)[0], "throughput")[0].passed
    slowed = {"perf/throughput": _series(lambda k: 1000.0 / 1.3 if k % 4 == 0 else 150.0)}
    assert not _by(ev(slowed, base, [], STEPS)[0], "throughput")[0].passed


def test_throughput_tolerance_follows_the_spread_within_limits():
    for spread, tol in ((0.0, 0.15), (0.06, 0.18), (0.5, 0.2)):
        base = _baseline({}, throughput=1000.0, spread=spread)
        c = _by(ev({"perf/throughput": _series(lambda k: 1000.0)}, base, [], STEPS)[0], "throughput")[0]
        assert c.tolerance == pytest.approx(1000.0 * tol)


def test_throughput_needs_steady_steps():
    base = _baseline({}, throughput=1000.0)
    checks, notices = ev({"perf/throughput": {1: 5.0, 2: 5.0}}, base, [], 2)
    assert not _by(checks, "throughput") and "warm-up" in notices[0]


def test_memory_ceiling():
    base = _baseline({}, memory=1.0)
    assert _by(ev({"perf/max_memory_allocated_gb": {1: 1.09}}, base, [], 1)[0], "memory")[0].passed
    assert not _by(ev({"perf/max_memory_allocated_gb": {1: 1.2}}, base, [], 1)[0], "memory")[0].passed


# ----------------------------------------------------------------------------- replay tier
def _replay_baseline(noise=1e-6):
    ref = _series(lambda k: 0.5 + 0.01 * k)
    base = _baseline({"actor/pg_loss": {"ref": ref}, "actor/pg_clipfrac": {"ref": _series(lambda k: 0.02)}})
    base["replay"] = {"file": "b.rollouts.npz", "sha256": "0" * 64, "metrics": ["actor/pg_clipfrac", "actor/pg_loss"],
                      "perturbation": "test", "noise": {"actor/pg_loss": [noise * k for k in range(1, STEPS + 1)],
                                                        "actor/pg_clipfrac": [0.0] * STEPS}}
    return base, ref


def test_replay_tolerance_follows_the_noise_envelope_and_dtype():
    base, ref = _replay_baseline()
    pol = base["policy"]["replay"]
    # within k x the running noise maximum
    run = {"actor/pg_loss": {k: v + 0.9 * pol["k_noise"] * 1e-6 * k for k, v in ref.items()},
           "actor/pg_clipfrac": _series(lambda k: 0.02)}
    assert all(c.passed for c in _by(ev(run, base, ["replay"], STEPS)[0], "replay"))
    # a relative error far above fp32 precision at step 2 fails there
    run["actor/pg_loss"] = {k: v * (1.01 if k >= 2 else 1.0) for k, v in ref.items()}
    c = _by(ev(run, base, ["replay"], STEPS)[0], "replay", "actor/pg_loss")[0]
    assert not c.passed and c.step == 2 and c.failing_steps[0] == 2
    # the same run passes with bf16's own tolerance (its unit roundoff is 2^16 x fp32's)
    assert _by(ev(run, base, ["replay"], STEPS, dtype="bfloat16")[0], "replay", "actor/pg_loss")[0].passed


def test_replay_tolerance_allows_a_jump_two_steps_early():
    """A clip-boundary crossing may come a step or two earlier than in the fp64 replay (measured: an H200 fp32
    replay crossed at step 4, the fp64 one at step 5): the envelope looks EVENT_LEAD steps ahead, no further."""
    base, ref = _replay_baseline()
    base["replay"]["noise"]["actor/pg_loss"] = [1e-9] * 4 + [3e-6] * (STEPS - 4)  # the jump at step 5
    jump = 2.7e-6
    for step, passes in ((3, True), (4, True), (2, False)):
        run = {"actor/pg_loss": {k: v + (jump if k >= step else 0.0) for k, v in ref.items()},
               "actor/pg_clipfrac": _series(lambda k: 0.02)}
        c = _by(ev(run, base, ["replay"], STEPS)[0], "replay", "actor/pg_loss")[0]
        assert c.passed is passes, (step, c.detail)
    assert T.EVENT_LEAD == 2


def test_replay_clip_fraction_may_move_by_a_token_or_two():
    base, ref = _replay_baseline()
    run = {"actor/pg_loss": dict(ref), "actor/pg_clipfrac": _series(lambda k: 0.02 + 0.004)}
    assert _by(ev(run, base, ["replay"], STEPS)[0], "replay", "actor/pg_clipfrac")[0].passed
    run["actor/pg_clipfrac"] = _series(lambda k: 0.03)
    assert not _by(ev(run, base, ["replay"], STEPS)[0], "replay", "actor/pg_clipfrac")[0].passed


def test_replay_skips_throughput_with_a_notice():
    base, ref = _replay_baseline()
    checks, notices = T.evaluate(T.Context({"actor/pg_loss": dict(ref), "perf/throughput": _series(lambda k: 1.0)},
                                           typed.baseline(base), STEPS, None), ["replay"], throughput=False)
    assert not _by(checks, "throughput") and any("replay run does not sample" in n for n in notices)
