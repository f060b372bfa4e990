"""Comparison tiers on synthetic metric series: exact, replay, band, statistical, throughput, memory, tier choice."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from harness.config.schema import check, schema_errors
from harness.config.schema_defs import all_schemas, render
from harness.errors import HarnessError
from harness.jsonio import write_json_atomic
from harness.judge import baseline as B
from harness.judge import compare as C
from harness.judge import tiers as T
from harness.paths import SCHEMAS_DIR
from harness.run import environment as E

STEPS = 20


def _series(fn, steps=STEPS, start=1):
    return {k: float(fn(k)) for k in range(start, steps + 1)}


MODEL = "Test CPU"


def ev(run, base, tiers, upto, env=None, dtype="float32"):
    """Every check of ``tiers`` (plus throughput and memory) of ``run`` against ``base``."""
    env = env or {"machine": {"device_model": MODEL}, "software": {"threads": 2}}
    return T.evaluate(T.Context(run, base, upto, env, dtype), tiers)


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
        entry = {"tiers": B.metric_tiers(name), "steps": ks, "values": [spec["ref"][k] for k in ks],
                 "noise_values": noise, "noise_std": std}
        spec_ = B.stat_spec(name)
        if spec_:
            entry["direction"], entry["transform"] = spec_[0], spec_[1]
            if spec_[2] is not None:
                entry["stat_floor"] = spec_[2]
        out[name] = entry
    tp = {"device_model": MODEL, "threads": 2, "runtime": "local", "value": throughput, "seed_values": [throughput],
          "relative_spread": spread, "recorded_utc": "2026-01-01T00:00:00Z"}
    return {"metrics": out, "steps": steps, "policy": copy.deepcopy(policy or B.DEFAULT_POLICY),
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
    assert B.metric_tiers(name) == tiers


def test_window_mean_dense_and_sparse():
    s = _series(lambda k: k)
    assert B.window_mean(s, 20, 5) == (16 + 17 + 18 + 19 + 20) / 5
    assert B.window_mean({0: 0.3, 10: 0.6, 20: 0.9}, 20, 5) == 0.9
    assert B.window_mean({0: 0.3, 10: 0.6}, 19, 5) == 0.6  # no value in the window: the last one before
    assert B.window_mean({}, 10, 3) is None
    pol = {"window_fraction": 0.2}
    assert B.statistical_window(pol, 40) == 8 and B.statistical_window(pol, 12) == 3
    assert B.statistical_window(pol, 1) == 1 and B.statistical_window({"window_fraction": 0.9}, 10) == 5


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
    assert not c.passed and len(c.failing_steps) == 10 and c.as_dict()["run_value"] is None
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


# ----------------------------------------------------------------------------- tier choice and refusal
@pytest.fixture(scope="module")
def manifest():
    """A real manifest for the qwen3_vl_30b cpu smoke recipe (built, not run)."""
    from harness.config.recipe import resolve
    from harness.run.runner import base_manifest

    res = resolve("qwen3_vl_30b", "cpu", "smoke")
    m = base_manifest(res, steps=4, runtime="local", world=1, fault={})
    m.update(schema_version=1, status="complete", created_utc="2026-01-01T00:00:00Z",
             finished_utc="2026-01-01T00:01:00Z", error=None)
    m["steps"]["completed"] = 4
    check(m, "manifest", "synthetic manifest")
    return m


@pytest.fixture()
def env_baseline(manifest):
    return {"recipe": {"name": "qwen3_vl_30b", "hash": manifest["recipe"]["hash"],
                       "config_hash": manifest["recipe"]["config_hash"]},
            "profile": "cpu", "scale": "smoke", "architecture": manifest["resolved_config"]["model"]["architecture"],
            "primary_seed": manifest["seed"], "environment": E.summary(manifest)}


def test_exact_when_everything_matches(manifest, env_baseline):
    tiers, why = C.choose_tiers(manifest, env_baseline, None)
    assert tiers == ["exact", "band", "statistical"] and "same environment" in why


def test_overrides_stay_exact_eligible(manifest, env_baseline):
    """Environment and seed equal: an override is the only thing that can move the bits, so it is judged bitwise."""
    m = copy.deepcopy(manifest)
    m["overrides"] = [{"key": "actor_rollout_ref.actor.kl_loss_coef", "value": 0.0}]
    tiers, why = C.choose_tiers(m, env_baseline, None)
    assert tiers[0] == "exact" and "kl_loss_coef=0.0" in why


@pytest.mark.parametrize("change", ["seed", "software", "threads", "image", "nondeterministic"])
def test_statistical_when_not_exact_eligible(manifest, env_baseline, change):
    m = copy.deepcopy(manifest)
    if change == "seed":
        m["seed"] = 7
        m["overrides"] = [{"key": "seed", "value": 7}]
    elif change == "software":
        m["software"]["torch"] = "0.0.0"
    elif change == "threads":
        m["software"]["threads"] = 64
    elif change == "image":
        m["runtime"]["image_id"] = "sha256:" + "0" * 64
    else:
        m["deterministic"] = False
    tiers, why = C.choose_tiers(m, env_baseline, None)
    assert tiers == ["statistical"] and why.startswith("not exact-eligible")


def test_forced_exact(manifest, env_baseline):
    m = copy.deepcopy(manifest)
    m["seed"] = 7
    tiers, why = C.choose_tiers(m, env_baseline, "exact")
    assert tiers[0] == "exact" and "seed 7" in why
    m["software"]["transformers"] = "0.0.0"
    with pytest.raises(C._Refusal, match="transformers"):
        C.choose_tiers(m, env_baseline, "exact")
    assert C.choose_tiers(manifest, env_baseline, "statistical")[0] == ["statistical"]


@pytest.mark.parametrize("field,expect", [("hash", "recipe hash"), ("arch", "architecture"), ("profile", "profile"),
                                          ("scale", "scale")])
def test_refusal_reasons(manifest, env_baseline, field, expect):
    b = copy.deepcopy(env_baseline)
    if field == "hash":
        b["recipe"]["hash"] = "f" * 64
    elif field == "arch":
        b["architecture"]["text"]["hidden_size"] *= 2
    elif field == "profile":
        b["profile"] = "gpu-1x-h200"
    else:
        b["scale"] = "full"
    reasons = C.refusal_reasons(manifest, b)
    assert len(reasons) == 1 and expect in reasons[0]
    assert C.refusal_reasons(manifest, env_baseline) == []


# ----------------------------------------------------------------------------- verdict and files
def test_verdict_summary_exit_codes_and_schema():
    base = _baseline({"actor/pg_loss": {"ref": _series(lambda k: 0.5)}}, throughput=13000.0)
    run = {"actor/pg_loss": _series(lambda k: 0.5), "perf/throughput": _series(lambda k: 13100.0),
           "perf/max_memory_allocated_gb": _series(lambda k: 0.9)}
    checks, notices = ev(run, base, ["exact", "band", "statistical"], STEPS)
    v = C.Verdict("pass", {"dir": "r", "recipe": "qwen3_vl_30b", "profile": "cpu", "scale": "smoke", "seed": 42,
                           "status": "complete", "steps_completed": STEPS}, tier="exact",
                  tiers_applied=["exact", "band", "statistical"], checks=checks, notices=notices)
    line = v.summary_line()
    assert line.startswith("PASS qwen3_vl_30b cpu:smoke tier=exact 1/1 gated metrics equal; throughput 13.1k tok/s "
                           "(ref 13.0k, -15% floor); memory 0.90 GB ≤ 1.10 GB")
    assert v.exit_code == 0 and "\n" not in line
    assert schema_errors(v.to_dict(), "verdict") == []
    assert C.Verdict("fail", {}).exit_code == 1
    assert C.Verdict("refused", {}).exit_code == 2
    assert C.Verdict("no-baseline", {}).exit_code == 0


def test_failure_reasons_name_group_metric_and_numbers():
    base = _baseline({"actor/pg_loss": {"ref": _series(lambda k: 0.5)}})
    checks, _ = ev({"actor/pg_loss": _series(lambda k: 0.7)}, base, ["band"], STEPS)
    (reason,) = C.failure_reasons(checks)
    assert reason.startswith("band: 1 check(s) failed: actor/pg_loss") and "20/20 steps outside" in reason


def test_build_baseline_round_trips_floats_exactly(tmp_path, manifest):
    """Baseline values are the run's floats bit for bit (repr round trip), and the file passes its schema."""
    tricky = [0.1 + 0.2, 1 / 3, 5e-324, -0.0, 1e308, 2.0 ** -40]
    dirs = []
    for seed in (42, 43):
        d = tmp_path / f"seed-{seed}"
        d.mkdir()
        m = copy.deepcopy(manifest)
        m["seed"] = seed
        m["overrides"] = [] if seed == 42 else [{"key": "seed", "value": seed}]
        write_json_atomic(d / "manifest.json", m)
        rows = [{"step": 0, "val-core/synthetic/color/reward/mean": 0.25}]
        rows += [{"step": k, "actor/pg_loss": tricky[k - 1] * (1 if seed == 42 else 2), "critic/score/mean": 0.1 * k,
                  "perf/throughput": 1000.0 + k, "perf/max_memory_allocated_gb": 0.5, "timing_s/step": 0.1}
                 for k in range(1, 5)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        dirs.append(d)
    doc = B.build_baseline(dirs, command="test")
    out = tmp_path / "b.json"
    write_json_atomic(out, doc)
    loaded = B.load_baseline(out)
    vals = loaded["metrics"]["actor/pg_loss"]["values"]
    assert [v.hex() for v in vals] == [v.hex() for v in tricky[:4]]
    assert "timing_s/step" not in loaded["metrics"] and "perf/throughput" not in loaded["metrics"]
    (tp,) = loaded["throughput"]["references"]
    assert loaded["noise_seeds"] == [43] and tp["value"] == 1004.0
    assert tp["device_model"] == manifest["machine"]["device_model"] and tp["threads"] == manifest["software"]["threads"]
    assert loaded["metrics"]["critic/score/mean"]["seed_window_means"] == [0.4, 0.4]  # window: 20 % of 4 steps = 1


def _recorded(tmp_path, manifest, seeds=(42, 43)):
    """A baseline built from tiny seed runs, and the primary run's directory."""
    dirs = []
    for seed in seeds:
        d = tmp_path / f"seed-{seed}"
        d.mkdir()
        m = copy.deepcopy(manifest)
        m["seed"] = seed
        m["overrides"] = [] if seed == seeds[0] else [{"key": "seed", "value": seed}]
        write_json_atomic(d / "manifest.json", m)
        rows = [{"step": k, "actor/pg_loss": 0.1 * k * seed, "actor/grad_norm": 1.0 / (k + seed),
                 "critic/score/mean": 0.5 + 0.01 * k, "perf/throughput": 1000.0, "perf/max_memory_allocated_gb": 0.5}
                for k in range(1, 5)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        dirs.append(d)
    out = tmp_path / "baseline.json"
    write_json_atomic(out, B.build_baseline(dirs, command="test"))
    return out, dirs[0]


def test_a_run_that_reproduces_the_bits_is_exact_whatever_the_environment(tmp_path, manifest):
    """Not exact-eligible (another image and Python) but bitwise equal: exact, and the reason says both.
    One bit off instead: the statistical tier, as the eligibility rule says."""
    baseline, primary = _recorded(tmp_path, manifest)
    run = tmp_path / "container-run"
    run.mkdir()
    m = json.loads((primary / "manifest.json").read_text())
    m["runtime"]["image_id"] = "sha256:" + "1" * 64
    m["software"]["python"] = "3.11.2"
    write_json_atomic(run / "manifest.json", m)
    rows = (primary / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(rows)
    v = C.judge(run, None, baseline_path=baseline)
    assert v.status == "pass" and v.tier == "exact", v.summary_line()
    assert v.tier_reason.startswith("bitwise equal to the baseline's primary run although not exact-eligible")
    assert "image_id" in v.tier_reason and any(c["key"] == "image_id" for c in v.changes)
    off = [json.loads(r) for r in rows.splitlines()]
    off[2]["actor/grad_norm"] = math.nextafter(off[2]["actor/grad_norm"], 1.0)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in off))
    v = C.judge(run, None, baseline_path=baseline)
    assert v.tier == "statistical" and v.tier_reason.startswith("not exact-eligible"), v.summary_line()
    (run / "metrics.jsonl").write_text(rows)  # forced --tier statistical stays statistical
    assert C.judge(run, None, baseline_path=baseline, tier="statistical").tier == "statistical"


def test_generated_record_schemas_are_committed():
    for name in ("manifest.schema.json", "baseline.schema.json", "verdict.schema.json"):
        assert (SCHEMAS_DIR / name).read_text() == render(all_schemas()[name]), \
            f"{name} is stale: run python -m harness.config.schema_defs"


def test_committed_baselines_pass_their_schema():
    for path in sorted(Path(B.BASELINES_DIR).glob("*/*.json")):
        B.load_baseline(path)


def test_judge_refuses_a_broken_baseline_and_unfinished_runs(tmp_path, manifest, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    write_json_atomic(run / "manifest.json", manifest)
    (run / "metrics.jsonl").write_text('{"step": 1, "actor/pg_loss": 0.5}\n')
    bad = tmp_path / "b.json"
    bad.write_text('{"schema_version": 2, "schema_version": 2}')
    v = C.judge(run, None, baseline_path=bad)
    assert v.status == "refused" and "duplicate key" in v.reasons[0] and v.exit_code == 2
    assert schema_errors(json.loads((run / "verdict.json").read_text()), "verdict") == []
    with pytest.raises(HarnessError, match="baseline file cannot be used") as err:  # named: a typo is bad input
        C.judge(run, None, baseline_path=tmp_path / "missing.json")
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    with pytest.raises(HarnessError, match="not a regular file"):
        C.judge(run, None, baseline_path=tmp_path)
    monkeypatch.setattr(C, "default_path", lambda *a: tmp_path / "none-recorded.json")
    v = C.judge(run, None)  # the recipe's own baseline not recorded yet: a notice, exit 0
    assert v.status == "no-baseline" and v.exit_code == 0 and "record-baseline" in v.summary_line()
    (run / "INCOMPLETE").write_text("")
    v = C.judge(run, None, baseline_path=bad)
    assert v.status == "refused" and "not complete" in v.reasons[0]


# ----------------------------------------------------------------------------- environment changes
PINNED = {"level": "avx2", "reason": "pinned", "env": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                                                      "OMP_NUM_THREADS": "2"}, "cpu_capability": "AVX2", "threads": 2}


def test_pinned_cpus_of_another_model_stay_exact_eligible(manifest, env_baseline):
    """With the same numerics pin, another CPU model is listed as a change but does not rule out exact."""
    ref = copy.deepcopy(manifest)
    ref["numerics"] = PINNED
    baseline = {**env_baseline, "environment": E.summary(ref)}
    m = copy.deepcopy(ref)
    m["machine"]["device_model"] = m["machine"]["cpu_model"] = "Some Other CPU"
    changes = C.environment_changes(m, baseline)
    assert [(c.key, c.blocks_exact) for c in changes][:1] == [("device_model", False)]
    assert C.choose_tiers(m, baseline, None)[0][0] == "exact"
    m["numerics"] = {**PINNED, "level": "native"}  # unpinned: the model matters again
    blocking = [c.key for c in C.environment_changes(m, baseline) if c.blocks_exact]
    assert "numerics pin" in blocking and "device_model" in blocking


def test_the_cpu_pin_does_not_block_exact_on_an_accelerator(manifest, env_baseline):
    """A GPU run's bits do not come from the CPU libraries: another pin is listed, never blocking."""
    ref = copy.deepcopy(manifest)
    ref["machine"].update(device_type="cuda", device_model="NVIDIA H200")
    ref["numerics"] = {**PINNED, "env": {**PINNED["env"], "MKL_CBWR": "AVX2,STRICT"}}
    baseline = {**env_baseline, "environment": E.summary(ref)}
    m = copy.deepcopy(ref)
    m["numerics"] = PINNED
    changes = C.environment_changes(m, baseline)
    assert [(c.key, c.blocks_exact) for c in changes] == [("numerics pin", False)]
    assert "MKL_CBWR=AVX2,STRICT" in changes[0].text() and "MKL_CBWR=COMPATIBLE" in changes[0].text()


def test_changes_list_every_difference_with_its_weight(manifest, env_baseline):
    m = copy.deepcopy(manifest)
    m["software"]["transformers"] = "9.9.9"
    m["harness"]["revision"] = "f" * 40
    m["machine"]["driver"] = "999.1"
    got = {c.key: c for c in C.environment_changes(m, env_baseline)}
    assert got["transformers"].blocks_exact and got["transformers"].text().endswith("-> 9.9.9")
    assert got["driver"].blocks_exact
    assert not got["harness revision"].blocks_exact


def test_replay_runs_are_judged_by_the_replay_tier_only(manifest, env_baseline):
    m = copy.deepcopy(manifest)
    m["replay"] = {"baseline": "b.json", "baseline_sha256": "0" * 64, "rollouts_sha256": "0" * 64,
                   "baseline_profile": "cpu"}
    assert C.choose_tiers(m, env_baseline, None)[0] == ["replay"]
    with pytest.raises(C._Refusal, match="replay tier only"):
        C.choose_tiers(m, env_baseline, "exact")
    with pytest.raises(C._Refusal, match="did not replay"):
        C.choose_tiers(manifest, env_baseline, "replay")
    other = copy.deepcopy(env_baseline)
    other["profile"] = "gpu-1x-h200"
    assert C.refusal_reasons(m, other) == []  # a replay may run a baseline on another profile
    assert "replay" in C.refusal_reasons(manifest, other)[0]


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
                                           base, STEPS, None), ["replay"], throughput=False)
    assert not _by(checks, "throughput") and any("replay run does not sample" in n for n in notices)


# ----------------------------------------------------------------------------- throughput like for like
def test_throughput_from_another_device_model_is_a_notice_never_a_fail():
    base = _baseline({}, throughput=1000.0)
    slow = {"perf/throughput": _series(lambda k: 100.0)}
    other = {"machine": {"device_model": "Other CPU"}, "software": {"threads": 2}}
    checks, notices = ev(slow, base, [], STEPS, env=other)
    assert not _by(checks, "throughput")
    assert any(n.startswith("throughput not comparable: Other CPU (2 threads) vs Test CPU (2 threads)")
               for n in notices)
    threads = {"machine": {"device_model": MODEL}, "software": {"threads": 8}}
    assert not _by(ev(slow, base, [], STEPS, env=threads)[0], "throughput")
    assert not _by(ev(slow, base, [], STEPS)[0], "throughput")[0].passed  # same model and threads: a 10x slowdown fails


def test_memory_is_not_compared_across_software_or_devices():
    base = _baseline({}, memory=0.5)
    run = {"perf/max_memory_allocated_gb": {1: 0.6}}
    checks, notices = T.evaluate(T.Context(run, base, 1, None), [], memory_differs=["torch"])
    assert not _by(checks, "memory") and any(n.startswith("memory not comparable") and "torch" in n for n in notices)
    assert not _by(T.evaluate(T.Context(run, base, 1, None), [])[0], "memory")[0].passed


def test_another_isa_class_stays_exact_eligible_when_pinned(manifest, env_baseline):
    """Measured: pinned, an AVX-512 Intel and an AVX2 AMD machine gave the same bits for a whole smoke run."""
    ref = copy.deepcopy(manifest)
    ref["numerics"] = {**PINNED, "isa_class": "AuthenticAMD/avx2"}
    ref["machine"]["device_model"] = "AMD EPYC"
    baseline = {**env_baseline, "environment": E.summary(ref)}
    m = copy.deepcopy(ref)
    m["numerics"] = {**PINNED, "isa_class": "GenuineIntel/avx512"}
    m["machine"]["device_model"] = "Intel(R) Xeon(R) Processor"
    changes = C.environment_changes(m, baseline)
    assert not [c for c in changes if c.blocks_exact]
    assert "device_model" in [c.key for c in changes]  # still listed
    assert C.choose_tiers(m, baseline, None)[0][0] == "exact"
    other = copy.deepcopy(m)
    other["numerics"]["env"] = {**PINNED["env"], "MKL_CBWR": "AVX2,STRICT"}  # another pin: other bits
    assert "numerics pin" in [c.key for c in C.environment_changes(other, baseline) if c.blocks_exact]


def test_a_slower_calibration_lowers_the_floor_a_faster_one_never_raises_it():
    """A fresh machine of the same model but slower (its calibration) is not a regression: the floor follows its
    calibrated speed down. A faster calibration does not raise it (its samples spread under a neighbour's load, and
    a raised floor made the main command false-FAIL in a container). A code slowdown leaves the calibration alone,
    so it still fails; a calibration below 0.7x is another kind of machine: a notice, not a verdict."""
    base = _baseline({}, throughput=1000.0)  # floor -15 %
    base["throughput"]["references"][0]["speed_index"] = 100.0
    base["environment"] = {"software": {"torch": "2.13.0"}}
    env = {"machine": {"device_model": MODEL}, "software": {"threads": 2, "torch": "2.13.0"}}

    def tp(run_tps: float, speed: float | None, torch: str = "2.13.0"):
        e = {**env, "software": {**env["software"], "torch": torch}}
        ctx = T.Context({"perf/throughput": _series(lambda k: run_tps)}, base, STEPS, e, run_speed=speed)
        checks, notices = T.evaluate(ctx, [])
        return (_by(checks, "throughput") or [None])[0], notices

    assert tp(850.0, 128.0)[0].passed, "a faster calibration does not raise the floor"
    assert "calibrated speed 1.28x" in tp(850.0, 128.0)[0].detail
    assert not tp(840.0, 128.0)[0].passed
    slower, _ = tp(720.0, 83.0)  # 17 % slower machine, run 28 % below the reference: 13 % below its own speed
    assert slower.passed and slower.ref_value == pytest.approx(830.0) and "taken as 830" in slower.detail
    assert not tp(720.0, 83.0, torch="2.11.0")[0].passed, "another torch: the calibration is not comparable"
    assert not tp(0.7 * 830.0, 83.0)[0].passed, "a 30 % slowdown on the slower machine still fails"
    assert not tp(600.0, None)[0].passed
    check, notices = tp(600.0, 60.0)
    assert check is None and any("throughput not comparable: this machine ran the speed calibration at 0.60x" in n
                                 for n in notices)


def test_a_metric_the_baseline_lacks_is_named_not_silently_ungated(tmp_path, manifest):
    """A metric added since the baseline was recorded is gated by today's rule: the verdict says it was not
    compared (and why), instead of passing over it."""
    baseline, primary = _recorded(tmp_path, manifest)
    run = tmp_path / "newer-run"
    run.mkdir()
    (run / "manifest.json").write_text((primary / "manifest.json").read_text())
    rows = [json.loads(r) for r in (primary / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r["actor/new_diagnostic"] = 0.25
        r["timing_s/new_phase"] = 0.5  # timing is never gated: not named
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    v = C.judge(run, None, baseline_path=baseline)
    assert v.status == "pass" and v.tier == "exact"
    (notice,) = [n for n in v.notices if n.startswith("not gated")]
    assert "actor/new_diagnostic" in notice and "timing_s/new_phase" not in notice and "re-record" in notice
    assert not [n for n in C.judge(primary, None, baseline_path=baseline).notices if n.startswith("not gated")]


def test_a_busy_machine_gets_no_throughput_verdict_but_a_slow_idle_one_fails():
    """Other processes (or the hypervisor) taking saturated CPUs is not a regression: the verdict says the
    machine was busy instead of failing. Contended steps are left out when enough steps remain; a run
    slowed with the CPUs idle around it (the code itself slower) still fails."""
    from harness.run.cpuload import IDLE_METRIC, OTHERS_METRIC

    base = _baseline({}, throughput=1000.0)

    def run(tps, busy):
        return {"perf/throughput": _series(lambda k: tps), OTHERS_METRIC: _series(lambda k: 0.45 if k in busy else 0.0),
                IDLE_METRIC: _series(lambda k: 0.0 if k in busy else 0.01)}

    checks, notices = ev(run(600.0, set(range(1, STEPS + 1))), base, [], STEPS)
    assert not _by(checks, "throughput")
    assert any(n.startswith("throughput not judged: other work took the CPUs in") and "45%" in n for n in notices)
    checks, notices = ev(run(950.0, set(range(1, STEPS + 1))), base, [], STEPS)  # busy, yet above the floor
    assert _by(checks, "throughput")[0].passed and any(n.startswith("throughput passed although") for n in notices)
    slow = _by(ev(run(600.0, set()), base, [], STEPS)[0], "throughput")
    assert slow and not slow[0].passed, "uncontended and 40% slower: a regression"
    few = run(1000.0, {7, 8})
    few["perf/throughput"].update({7: 300.0, 8: 300.0})
    checks, notices = ev(few, base, [], STEPS)
    assert _by(checks, "throughput")[0].passed and any("2 of" in n and "uncontended" in n for n in notices)
