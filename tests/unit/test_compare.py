"""The judge on synthetic runs and baselines: tier choice and refusal, verdicts and their files, environment
changes, throughput like for like (the tiers themselves: tests/unit/test_tiers.py)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import typed_records as typed
from test_tiers import MODEL, STEPS, _baseline, _by, _series, ev  # noqa: F401 (shared helpers)

from harness.config.schema_defs import all_schemas, render
from harness.errors import HarnessError
from harness.jsonio import write_json_atomic
from harness.judge import baseline as B
from harness.judge import compare as C
from harness.judge import tiers as T
from harness.paths import SCHEMAS_DIR
from harness.records.base import dump
from harness.records.run import Manifest
from harness.records.verdict import RunJudged
from harness.run import environment as E
from harness.schema import check, schema_errors


# ----------------------------------------------------------------------------- tier choice and refusal
def _m(doc: dict) -> Manifest:
    """A manifest document (built and changed as a dict here) as the judge reads it."""
    return Manifest.model_validate(doc)


def _env(doc: dict) -> dict:
    """The environment block a baseline stores for the run of this manifest."""
    return dump(E.summary(_m(doc)))


def _b(doc: dict):
    return typed.baseline(doc)


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
            "primary_seed": manifest["seed"], "environment": _env(manifest), "metrics": {}}


def test_exact_when_everything_matches(manifest, env_baseline):
    tiers, why = C.choose_tiers(_m(manifest), _b(env_baseline), None)
    assert tiers == ["exact", "band", "statistical"] and "same environment" in why


def test_overrides_stay_exact_eligible(manifest, env_baseline):
    """Environment and seed equal: an override is the only thing that can move the bits, so it is judged bitwise."""
    m = copy.deepcopy(manifest)
    m["overrides"] = [{"key": "actor_rollout_ref.actor.kl_loss_coef", "value": 0.0}]
    tiers, why = C.choose_tiers(_m(m), _b(env_baseline), None)
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
    tiers, why = C.choose_tiers(_m(m), _b(env_baseline), None)
    assert tiers == ["statistical"] and why.startswith("not exact-eligible")


def test_forced_exact(manifest, env_baseline):
    m = copy.deepcopy(manifest)
    m["seed"] = 7
    tiers, why = C.choose_tiers(_m(m), _b(env_baseline), "exact")
    assert tiers[0] == "exact" and "seed 7" in why
    m["software"]["transformers"] = "0.0.0"
    with pytest.raises(C._Refusal, match="transformers"):
        C.choose_tiers(_m(m), _b(env_baseline), "exact")
    assert C.choose_tiers(_m(manifest), _b(env_baseline), "statistical")[0] == ["statistical"]


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
    reasons = C.refusal_reasons(C.subject_of(_m(manifest)), _b(b))
    assert len(reasons) == 1 and expect in reasons[0]
    assert C.refusal_reasons(C.subject_of(_m(manifest)), _b(env_baseline)) == []


# ----------------------------------------------------------------------------- verdict and files
def test_verdict_summary_exit_codes_and_schema():
    base = _baseline({"actor/pg_loss": {"ref": _series(lambda k: 0.5)}}, throughput=13000.0)
    run = {"actor/pg_loss": _series(lambda k: 0.5), "perf/throughput": _series(lambda k: 13100.0),
           "perf/max_memory_allocated_gb": _series(lambda k: 0.9)}
    checks, notices = ev(run, base, ["exact", "band", "statistical"], STEPS)
    v = C.seal(C.new_verdict("pass", RunJudged(dir="r", recipe="qwen3_vl_30b", profile="cpu", scale="smoke", seed=42,
                                               status="complete", steps_completed=STEPS), tier="exact",
                             tiers_applied=["exact", "band", "statistical"], checks=checks, notices=notices))
    line = v.summary_line
    assert line.startswith("PASS qwen3_vl_30b cpu:smoke tier=exact 1/1 gated metrics equal; throughput 13.1k tok/s "
                           "(ref 13.0k, -15% floor); memory 0.90 GB ≤ 1.10 GB")
    assert C.exit_code(v) == 0 and "\n" not in line
    assert schema_errors(dump(v), "verdict") == []
    unknown = RunJudged(dir="r", recipe=None, profile=None, scale=None, seed=None, status=None, steps_completed=None)
    assert C.exit_code(C.new_verdict("fail", unknown)) == 1
    assert C.exit_code(C.new_verdict("refused", unknown)) == 2
    assert C.exit_code(C.new_verdict("no-baseline", unknown)) == 0


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
    vals = loaded.metrics["actor/pg_loss"].values
    assert [v.hex() for v in vals] == [v.hex() for v in tricky[:4]]
    assert "timing_s/step" not in loaded.metrics and "perf/throughput" not in loaded.metrics
    (tp,) = loaded.throughput.references
    assert loaded.noise_seeds == [43] and tp.value == 1004.0
    assert tp.device_model == manifest["machine"]["device_model"] and tp.threads == manifest["software"]["threads"]
    assert loaded.metrics["critic/score/mean"].seed_window_means == [0.4, 0.4]  # window: 20 % of 4 steps = 1


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
    assert v.status == "pass" and v.tier == "exact", v.summary_line
    assert v.tier_reason.startswith("bitwise equal to the baseline's primary run although not exact-eligible")
    assert "image_id" in v.tier_reason and any(c.key == "image_id" for c in v.changes)
    off = [json.loads(r) for r in rows.splitlines()]
    off[2]["actor/grad_norm"] = math.nextafter(off[2]["actor/grad_norm"], 1.0)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in off))
    v = C.judge(run, None, baseline_path=baseline)
    assert v.tier == "statistical" and v.tier_reason.startswith("not exact-eligible"), v.summary_line
    (run / "metrics.jsonl").write_text(rows)  # forced --tier statistical stays statistical
    assert C.judge(run, None, baseline_path=baseline, tier="statistical").tier == "statistical"


def _warm(digest: str, cached: bool) -> dict:
    return {"key": "k" * 24, "cached": cached, "path": "/cache/warm_start/" + "k" * 24 + ".safetensors",
            "weights_sha256": digest}


def test_a_warm_start_other_than_the_baselines_fails_and_names_the_cache(tmp_path, manifest):
    """A planted cache entry (same key, other weights): the exact and the band tier, and the summary, name it."""
    m = copy.deepcopy(manifest)
    m["warm_start"] = _warm("a" * 64, cached=False)
    baseline, primary = _recorded(tmp_path, m)
    assert json.loads(baseline.read_text())["warm_start"] == {"key": "k" * 24, "weights_sha256": "a" * 64}
    run = tmp_path / "planted"
    run.mkdir()
    m["warm_start"] = _warm("b" * 64, cached=True)
    write_json_atomic(run / "manifest.json", m)
    (run / "metrics.jsonl").write_text((primary / "metrics.jsonl").read_text())
    for tier in (None, "band"):
        v = C.judge(run, None, baseline_path=baseline, tier=tier)
        assert v.status == "fail" and C.exit_code(v) == 1, v.summary_line
        (reason,) = [r for r in v.reasons if r.startswith("warm start:")]
        assert "loaded from the warm-start cache entry /cache/warm_start/" in reason and "HARNESS_CACHE" in reason
        assert "differ from the baseline's (aaaaaaaaaaaa)" in v.summary_line
        assert schema_errors(json.loads((run / "verdict.json").read_text()), "verdict") == []
    m["warm_start"] = _warm("a" * 64, cached=True)  # the same weights from the cache: nothing to say
    write_json_atomic(run / "manifest.json", m)
    assert C.judge(run, None, baseline_path=baseline).status == "pass"


def test_a_different_warm_start_is_only_noted_where_the_run_differs_anyway(manifest):
    ref = {"warm_start": {"key": "k", "weights_sha256": "a" * 64}, "primary_seed": manifest["seed"],
           "recipe": {"config_hash": manifest["recipe"]["config_hash"]}, "environment": _env(manifest), "metrics": {}}
    m = copy.deepcopy(manifest)
    m["warm_start"] = _warm("b" * 64, cached=False)
    reason, notice = C.warm_start_finding(_m(m), _b(ref))
    assert notice is None and "trained now" in reason and "re-record the baseline" in reason
    m["seed"], m["overrides"] = 7, [{"key": "seed", "value": 7}]
    reason, notice = C.warm_start_finding(_m(m), _b(ref))
    assert reason is None and "as expected where the run differs (seed 7" in notice
    m["warm_start"].pop("weights_sha256")  # a manifest from before the digest was recorded
    assert C.warm_start_finding(_m(m), _b(ref))[1].startswith("warm start not compared")
    assert C.warm_start_finding(_m(m), _b({**ref, "warm_start": None})) == (None, None)  # committed baselines lack it


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
    assert v.status == "refused" and "duplicate key" in v.reasons[0] and C.exit_code(v) == 2
    assert schema_errors(json.loads((run / "verdict.json").read_text()), "verdict") == []
    with pytest.raises(HarnessError, match="baseline file cannot be used") as err:  # named: a typo is bad input
        C.judge(run, None, baseline_path=tmp_path / "missing.json")
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    with pytest.raises(HarnessError, match="not a regular file"):
        C.judge(run, None, baseline_path=tmp_path)
    monkeypatch.setattr(C, "default_path", lambda *a: tmp_path / "none-recorded.json")
    v = C.judge(run, None)  # the recipe's own baseline not recorded yet: a notice, exit 0
    assert v.status == "no-baseline" and C.exit_code(v) == 0 and "record-baseline" in v.summary_line
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
    baseline = {**env_baseline, "environment": _env(ref)}
    m = copy.deepcopy(ref)
    m["machine"]["device_model"] = m["machine"]["cpu_model"] = "Some Other CPU"
    changes = C.environment_changes(_m(m), _b(baseline))
    assert [(c.key, c.blocks_exact) for c in changes][:1] == [("device_model", False)]
    assert C.choose_tiers(_m(m), _b(baseline), None)[0][0] == "exact"
    m["numerics"] = {**PINNED, "level": "native"}  # unpinned: the model matters again
    blocking = [c.key for c in C.environment_changes(_m(m), _b(baseline)) if c.blocks_exact]
    assert "numerics pin" in blocking and "device_model" in blocking


def test_the_cpu_pin_does_not_block_exact_on_an_accelerator(manifest, env_baseline):
    """A GPU run's bits do not come from the CPU libraries: another pin is listed, never blocking."""
    ref = copy.deepcopy(manifest)
    ref["machine"].update(device_type="cuda", device_model="NVIDIA H200")
    ref["numerics"] = {**PINNED, "env": {**PINNED["env"], "MKL_CBWR": "AVX2,STRICT"}}
    baseline = {**env_baseline, "environment": _env(ref)}
    m = copy.deepcopy(ref)
    m["numerics"] = PINNED
    changes = C.environment_changes(_m(m), _b(baseline))
    assert [(c.key, c.blocks_exact) for c in changes] == [("numerics pin", False)]
    assert "MKL_CBWR=AVX2,STRICT" in E.change_text(changes[0]) and "MKL_CBWR=COMPATIBLE" in E.change_text(changes[0])


def test_changes_list_every_difference_with_its_weight(manifest, env_baseline):
    m = copy.deepcopy(manifest)
    m["software"]["transformers"] = "9.9.9"
    m["harness"]["revision"] = "f" * 40
    m["machine"]["driver"] = "999.1"
    got = {c.key: c for c in C.environment_changes(_m(m), _b(env_baseline))}
    assert got["transformers"].blocks_exact and E.change_text(got["transformers"]).endswith("-> 9.9.9")
    assert got["driver"].blocks_exact
    assert not got["harness revision"].blocks_exact


def test_replay_runs_are_judged_by_the_replay_tier_only(manifest, env_baseline):
    m = copy.deepcopy(manifest)
    m["replay"] = {"baseline": "b.json", "baseline_sha256": "0" * 64, "rollouts_sha256": "0" * 64,
                   "baseline_profile": "cpu"}
    assert C.choose_tiers(_m(m), _b(env_baseline), None)[0] == ["replay"]
    with pytest.raises(C._Refusal, match="replay tier only"):
        C.choose_tiers(_m(m), _b(env_baseline), "exact")
    with pytest.raises(C._Refusal, match="did not replay"):
        C.choose_tiers(_m(manifest), _b(env_baseline), "replay")
    other = copy.deepcopy(env_baseline)
    other["profile"] = "gpu-1x-h200"
    assert C.refusal_reasons(C.subject_of(_m(m)), _b(other)) == []  # a replay may run a baseline on another profile
    assert "replay" in C.refusal_reasons(C.subject_of(_m(manifest)), _b(other))[0]


# ----------------------------------------------------------------------------- throughput like for like
def test_throughput_from_another_device_model_is_a_notice_never_a_fail():
    base = _baseline({}, throughput=1000.0)
    slow = {"perf/throughput": _series(lambda k: 100.0)}
    other = {"machine": {"device_model": "Other CPU"}, "software": {"threads": 2}}
    checks, notices = ev(slow, base, [], STEPS, env=other)
    assert not _by(checks, "throughput")
    assert any(n.startswith("throughput not comparable: Other CPU (2 threads) vs Test CPU (2 threads)")
               for n in notices)
    (skip,) = [u for u in notices.unjudged if u.group == "throughput"]  # a skipped testcase in JUnit, with why
    assert skip.metric == "perf/throughput" and skip.reason.startswith("throughput not comparable: Other CPU")
    threads = {"machine": {"device_model": MODEL}, "software": {"threads": 8}}
    assert not _by(ev(slow, base, [], STEPS, env=threads)[0], "throughput")
    assert not _by(ev(slow, base, [], STEPS)[0], "throughput")[0].passed  # same model and threads: a 10x slowdown fails


def test_memory_is_not_compared_across_software_or_devices():
    base = _baseline({}, memory=0.5)
    run = {"perf/max_memory_allocated_gb": {1: 0.6}}
    checks, notices = T.evaluate(T.Context(run, typed.baseline(base), 1, None), [], memory_differs=["torch"])
    assert not _by(checks, "memory") and any(n.startswith("memory not comparable") and "torch" in n for n in notices)
    assert [u.metric for u in notices.unjudged if u.group == "memory"] == ["perf/max_memory_allocated_gb"]
    assert not _by(T.evaluate(T.Context(run, typed.baseline(base), 1, None), [])[0], "memory")[0].passed


def test_another_isa_class_stays_exact_eligible_when_pinned(manifest, env_baseline):
    """Measured: pinned, an AVX-512 Intel and an AVX2 AMD machine gave the same bits for a whole smoke run."""
    ref = copy.deepcopy(manifest)
    ref["numerics"] = {**PINNED, "isa_class": "AuthenticAMD/avx2"}
    ref["machine"]["device_model"] = "AMD EPYC"
    baseline = {**env_baseline, "environment": _env(ref)}
    m = copy.deepcopy(ref)
    m["numerics"] = {**PINNED, "isa_class": "GenuineIntel/avx512"}
    m["machine"]["device_model"] = "Intel(R) Xeon(R) Processor"
    changes = C.environment_changes(_m(m), _b(baseline))
    assert not [c for c in changes if c.blocks_exact]
    assert "device_model" in [c.key for c in changes]  # still listed
    assert C.choose_tiers(_m(m), _b(baseline), None)[0][0] == "exact"
    other = copy.deepcopy(m)
    other["numerics"]["env"] = {**PINNED["env"], "MKL_CBWR": "AVX2,STRICT"}  # another pin: other bits
    assert "numerics pin" in [c.key for c in C.environment_changes(_m(other), _b(baseline)) if c.blocks_exact]


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
        ctx = T.Context({"perf/throughput": _series(lambda k: run_tps)}, typed.baseline(base), STEPS, typed.env(e),
                        run_speed=speed)
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
    assert [u.reason for u in notices.unjudged if u.group == "throughput"] == [
        n for n in notices if n.startswith("throughput not judged")]
    checks, notices = ev(run(950.0, set(range(1, STEPS + 1))), base, [], STEPS)  # busy, yet above the floor
    assert _by(checks, "throughput")[0].passed and any(n.startswith("throughput passed although") for n in notices)
    assert not [u for u in notices.unjudged if u.group == "throughput"]
    slow = _by(ev(run(600.0, set()), base, [], STEPS)[0], "throughput")
    assert slow and not slow[0].passed, "uncontended and 40% slower: a regression"
    few = run(1000.0, {7, 8})
    few["perf/throughput"].update({7: 300.0, 8: 300.0})
    checks, notices = ev(few, base, [], STEPS)
    assert _by(checks, "throughput")[0].passed and any("2 of" in n and "uncontended" in n for n in notices)


def test_a_run_is_calibrated_by_the_median_of_its_samples():
    """An H200 host timed 1,669 at a run's start and ~1,100 for the rest of it, and the run made 0.72x the
    reference's throughput: the faster sample (the old rule) read a 1.06x machine and failed it; the median reads
    the machine it ran on. One burst during one sample does not move the median either way."""
    from harness.core.device import calibrated_speed

    reference = 1574.5
    samples = [1668.7, 1102.0, 1095.4, 1110.8, 1081.6]  # start, steps 10/20/30, end
    assert max(samples) / reference > 1.0 and calibrated_speed(samples) / reference < 0.72
    steady = [1570.0, 1580.0, 700.0, 1575.0, 1590.0]  # a neighbour's burst during the third sample
    assert calibrated_speed(steady) == 1575.0
    assert calibrated_speed([1500.0]) == 1500.0
