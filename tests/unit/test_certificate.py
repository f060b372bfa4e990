"""Certification suites and the pure parts of certificates (no training; see tests/integration/test_certify.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cert_builder import manifest

from harness.config.profiles import load_profile, profile_names
from harness.config.schema_defs import all_schemas, render
from harness.config.typed_files import Profile
from harness.errors import HarnessError
from harness.judge import certify as C
from harness.paths import SCHEMAS_DIR
from harness.records.base import dump
from harness.records.certificate import CertCheck, SuiteEntry
from harness.records.run import Manifest


def test_generated_cert_schemas_are_committed() -> None:
    for name in ("suite.schema.json", "certificate.schema.json"):
        assert (SCHEMAS_DIR / name).read_text() == render(all_schemas()[name]), \
            f"{name} is stale: run python -m harness.config.schema_defs"


@pytest.mark.parametrize("profile", profile_names())
def test_every_profile_has_a_runnable_suite(profile: str) -> None:
    from harness.config.recipe import resolve
    from harness.config.safety.check import preflight

    prof = load_profile(profile)
    path, suite = C.load_suite(profile)
    assert path.name == f"{profile}.json" and suite.profile == profile
    for entry in suite.entries:
        res = resolve(entry.recipe, profile, entry.scale)
        t = res.spec.trainer
        assert t.nnodes <= prof["nodes"], entry.id
        assert t.nnodes * t.n_gpus_per_node <= prof["nodes"] * prof["accelerator"]["count_per_node"]
        preflight(res)
        ref = C.baseline_profile(entry)
        assert ref in profile_names() and entry.numerics.reference_baseline == \
            f"baselines/{entry.recipe}/{ref}-{entry.scale}.json"
    if prof["device_type"] != "cpu":  # accelerator floors say where they were measured, or that they are estimates
        notes = " ".join(suite.notes).lower()
        assert "estimate" in notes or "measured on" in notes or "derived from" in notes


FLOORS = Path(__file__).resolve().parents[2] / "bench" / "results" / "floors-2026-12-05-solo.json"


@pytest.mark.parametrize("profile", ["npu-16x-ascend-a3", "gpu-8x-h200-141g", "gpu-8x-h100-80g", "gpu-2x-h200"])
def test_multi_device_floors_are_derived_from_the_measured_reference(profile: str) -> None:
    """Each floor is bench/derive_floors.py's: SAFETY x D x F1 x T1 / (N x TN), F1 the reference's solo figure."""
    import sys

    sys.path.insert(0, str(FLOORS.parents[1]))
    import derive_floors as D

    from harness.judge.baseline import load_baseline

    rows = {r["entry"]: r for r in json.loads(FLOORS.read_text()) if r["suite"] == f"{profile}.json"}
    _, suite = C.load_suite(profile)
    assert {e.id for e in suite.entries} == set(rows)
    for entry in suite.entries:
        row = rows[entry.id]
        base = load_baseline(Path(__file__).resolve().parents[2] / entry.numerics.reference_baseline)
        assert row["reference_tok_s"] == next(r.value for r in base.throughput.references if r.solo)
        want = D.SAFETY * row["device_ratio"] * row["reference_tok_s"] * row["reference_step_s"] / (
            row["world"] * row["predicted_step_s"])
        assert row["predicted_step_s"] >= row["reference_step_s"] and 0 < row["device_ratio"] <= 1
        assert entry.throughput_floor_tokens_per_s_per_device == row["floor"] == D._round_down(want)
        assert entry.notes is not None and D.note(row) in entry.notes


@pytest.mark.parametrize("profile", ["npu-16x-ascend-a3", "gpu-8x-h200-141g", "gpu-8x-h100-80g", "gpu-2x-h200"])
def test_multi_device_suites_replay_the_one_gpu_reference(profile: str) -> None:
    _, suite = C.load_suite(profile)
    for entry in suite.entries:
        assert C.baseline_profile(entry) == "gpu-1x-h200"
        assert entry.numerics.tier == "replay"


def _suite(tmp_path: Path, **patch: object) -> Path:
    doc = json.loads(C.suite_path("cpu").read_text())
    doc["entries"][0].update(patch)
    if "dup" in patch:
        doc["entries"][0].pop("dup")
        doc["entries"].append(dict(doc["entries"][0]))
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps(doc))
    return p


def test_suite_cross_field_errors(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="duplicate entry id"):
        C.load_suite_file(_suite(tmp_path, dup=True), "cpu")
    bad = {"tier": "exact", "reference_baseline": "baselines/qwen3_vl_30b/gpu-8x-h200-141g-smoke.json"}
    with pytest.raises(HarnessError, match="exact tier against another profile"):
        C.load_suite_file(_suite(tmp_path, numerics=bad), "cpu")
    with pytest.raises(HarnessError, match="not 'gpu-1x-h200'"):
        C.load_suite_file(_suite(tmp_path), "gpu-1x-h200")
    with pytest.raises(HarnessError, match="unknown key"):
        C.load_suite_file(_suite(tmp_path, mfu=0.1), "cpu")


ENTRY = SuiteEntry.model_validate({
    "id": "e", "recipe": "r", "scale": "smoke", "steps": None, "throughput_floor_tokens_per_s_per_device": 100.0,
    "mfu_floor": 0.01, "memory_budget_fraction": 0.5, "determinism_repeat": True,
    "numerics": {"tier": "band", "reference_baseline": "baselines/r/cpu-smoke.json"}})


def _run(tmp_path: Path, name: str, rows: list[dict[str, float]], deterministic: bool = True) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": k + 1, **r}) + "\n" for k, r in enumerate(rows)))
    (d / "manifest.json").write_text(json.dumps(manifest(deterministic=deterministic)))
    return d


def _rows(loss_last: float = 0.25) -> list[dict[str, float]]:
    rows = [{"actor/pg_loss": 0.1 * k, "perf/throughput": 1000.0 + k, "perf/mfu": 0.02,
             "perf/max_memory_allocated_gb": 0.5 + k / 100, "timing_s/step": 1.0 + k} for k in range(6)]
    rows[-1]["actor/pg_loss"] = loss_last
    return rows


def test_perf_checks_numbers() -> None:
    series = C.load_series(Path("/nonexistent"))
    assert series == {}
    prof = Profile.model_validate(load_profile("cpu"))
    series = {"perf/throughput": {k: 1000.0 + k for k in range(1, 7)}, "perf/mfu": {k: 0.02 for k in range(1, 7)},
              "perf/max_memory_allocated_gb": {k: 0.5 + k / 100 for k in range(1, 7)}}
    tp, mfu, mem = C.perf_checks(ENTRY, prof, series, "runs/e/run-1")
    assert tp.value == pytest.approx(1005.7) and tp.outcome == "pass" and tp.comparison == ">="
    assert mfu.value == pytest.approx(0.02) and mfu.outcome == "pass"
    assert mem.value == pytest.approx(0.56) and mem.threshold == 4.0 and mem.outcome == "pass"
    slow_entry = ENTRY.model_copy(update={"throughput_floor_tokens_per_s_per_device": 5000.0})
    assert C.perf_checks(slow_entry, prof, series, "r")[0].outcome == "fail"
    empty = C.perf_checks(ENTRY, prof, {}, "r")
    assert [c.outcome for c in empty] == ["fail", "fail", "fail"] and empty[0].value is None


def test_determinism_check(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", _rows())
    same = _run(tmp_path, "b", [{**r, "timing_s/step": 9.0, "perf/throughput": 1.0} for r in _rows()])
    c = C.determinism_check(ENTRY, [a, same], ["a", "b"])
    assert c.value == 0 and c.outcome == "pass" and c.run == "b"
    ulp = _run(tmp_path, "c", _rows(math.nextafter(0.25, 1.0)))
    c = C.determinism_check(ENTRY, [a, ulp], ["a", "c"])
    assert c.value == 1 and c.outcome == "fail" and "step 6: actor/pg_loss" in c.detail
    loose = _run(tmp_path, "d", _rows(), deterministic=False)
    c = C.determinism_check(ENTRY, [a, loose], ["a", "d"])
    assert c.outcome == "not-applicable" and c.value is None
    (loose / "manifest.json").write_text(json.dumps({"deterministic": True}))  # not a manifest: its schema fails
    c = C.determinism_check(ENTRY, [a, loose], ["a", "d"])
    assert c.outcome == "fail" and c.detail == "d has no readable manifest"


def _cert_check(**patch: object) -> CertCheck:
    return CertCheck.model_validate({"entry": "e", "name": "memory", "run": "r", "value": 1.0, "threshold": 2.0,
                                     "comparison": "<=", "unit": "GB", "outcome": "pass", "detail": "", **patch})


def test_outcomes_and_summary() -> None:
    assert C.derive_outcome(_cert_check()) == "pass"
    assert C.derive_outcome(_cert_check(comparison=">=")) == "fail"
    assert C.derive_outcome(_cert_check(value=None)) == "fail"
    assert C.derive_outcome(_cert_check(comparison=None)) == "not-applicable"
    checks = [_cert_check(outcome=o) for o in ("pass", "not-applicable", "fail")]
    summary, result = C.summarize(checks)
    assert dump(summary) == {"checks": 3, "failed": 1, "not_applicable": 1} and result == "fail"
    assert C.summarize(checks[:2])[1] == "pass"


def test_verify_bad_input_and_schema(tmp_path: Path) -> None:
    p = tmp_path / "certificate.json"
    p.write_text("[1, 2]")
    with pytest.raises(HarnessError, match="not a certificate") as err:
        C.verify(p)
    assert err.value.exit_code == 2
    from harness.judge.attest import PREDICATE_TYPE, STATEMENT_TYPE

    p.write_text(json.dumps({"_type": STATEMENT_TYPE, "subject": [], "predicateType": PREDICATE_TYPE,
                             "predicate": {"inputs": [], "results": [], "checks": []}}))
    v = C.verify(p)
    assert v.problems and all(x.startswith(f"{p}::") and "fails its schema" in x for x in v.problems)
    assert not v.signed and not v.signature_checked and v.certificate is None


def test_system_is_derived_from_the_manifests() -> None:
    prof = Profile.model_validate(load_profile("cpu"))
    m = Manifest.model_validate(manifest(machine={"hostname": "h"}))
    system = C.derive_system(prof, [m], "ignored-outside-docker")
    s = dump(system)
    assert s["accelerator"] == {"vendor": "none", "model": "x86_64", "count": 1, "memory_gb": 8.0,
                                "peak_bf16_tflops": 1.0}
    assert s["runtime"] == {"kind": "local", "image": None, "image_id": None, "lock_sha256": None}
    assert s["software"]["accelerator_driver"] is None and s["host"]["memory_gb"] == 23.4
    assert list(s["software"])[-2:] == ["accelerator_driver", "accelerator_runtime"]
    docker = Manifest.model_validate(manifest(runtime={"kind": "torchrun", "image_id": "sha256:i",
                                                       "lock_sha256": "a" * 64}))
    assert C.derive_system(prof, [docker], "harness-cpu:0.1.0").runtime.kind == "docker"
    other = Manifest.model_validate(manifest(machine={"hostname": "h", "device_count": 8}))
    assert C.system_disagreements([("a", m), ("b", other)]) == ["b recorded another machine than a"]
    assert C.system_disagreements([("a", m), ("b", m)]) == []
    forged = {**s, "accelerator": {**s["accelerator"], "count": 8}}
    assert C.first_difference(forged, s, "/system") == ("/system/accelerator/count", 8, 1)
    assert C.first_difference(s, s) is None


def test_relative_paths_stay_inside(tmp_path: Path) -> None:
    assert C.rel(tmp_path / "a" / "b.json", tmp_path) == "a/b.json"
    with pytest.raises(HarnessError, match="not inside"):
        C.rel(tmp_path.parent, tmp_path)
