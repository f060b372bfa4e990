"""MLPerf-format logs: the writer, the shipped rules and mlperf-logging's own compliance checker (no training)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cert_builder import manifest

from harness import mlperf as M
from harness.config.recipe import resolve
from harness.mlperf import rules as R

ROOT = Path(__file__).resolve().parents[2]


def _manifest(recipe: str = "qwen3_1_7b", steps: int = 10, profile: str = "cpu") -> dict:
    """A run's manifest as the run record holds it when the log is opened (the log reads it as its model)."""
    return manifest(recipe, profile=profile, steps=steps, status="running")


def _write(run: Path, manifest: dict, rewards: dict[int, float], status: str = "complete") -> Path:
    run.mkdir(parents=True, exist_ok=True)
    log = M.MlperfLog(run, manifest)
    log.run_start()
    for step in range(1, manifest["steps"]["requested"] + 1):
        metrics = {"timing_s/step": 0.25, "critic/score/mean": 0.5}
        if step in rewards:
            metrics["val-core/synthetic/text_choice/reward/mean"] = rewards[step]
        log.step(step, metrics)
    log.finish(status)
    return run / M.LOG_FILE


def _events(path: Path) -> list[dict]:
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in path.read_text().splitlines()]


def test_rules_are_generated_and_fresh() -> None:
    files = R.generate()
    assert R.COMMON in files and len(files) == 1 + len(R.references())
    for path, text in files.items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run python -m harness.mlperf.rules"


def test_run_constants_follow_the_recipe() -> None:
    c = M.run_constants(resolve("qwen3_vl_30b", "cpu", "smoke").config)
    assert c["global_batch_size"] == c["num_prompts_per_step"] * c["num_generations_per_prompt"] == 16 * 8
    assert c["opt_base_learning_rate"] == 1e-3 and c["opt_adamw_beta_2"] == 0.999 and c["opt_name"] == "adamw"
    assert c["gradient_accumulation_steps"] == 2 and c["lowest_numerical_precision_in_linear"] == "fp32"


def test_log_events_and_status(tmp_path: Path) -> None:
    target = R.convergence_target("qwen3_1_7b", "smoke")
    log = _write(tmp_path, _manifest(), {10: target + 0.01})
    ev = _events(log)
    keys = [e["key"] for e in ev]
    assert keys.index("init_start") < keys.index("init_stop") < keys.index("run_start") < keys.index("epoch_start")
    assert keys.count("epoch_stop") == 10 and keys[-1] == "run_stop" and ev[-1]["metadata"]["status"] == "success"
    acc = next(e for e in ev if e["key"] == "eval_accuracy")
    assert acc["metadata"] == {**acc["metadata"], "epoch_num": 10, "samples_count": 10 * 128}
    start = next(e for e in ev if e["key"] == "epoch_start")
    stop = next(e for e in ev if e["key"] == "epoch_stop")
    assert stop["time_ms"] - start["time_ms"] == 250
    below = _write(tmp_path / "below", _manifest(), {10: target - 0.01})
    assert _events(below)[-1]["metadata"]["status"] == "aborted"


def test_checker_accepts_the_log_and_names_a_removed_key(tmp_path: Path) -> None:
    log = _write(tmp_path, _manifest(), {10: 0.5})
    ok, out = R.check_log(log)
    assert ok, out
    lines = [ln for ln in log.read_text().splitlines() if '"key": "opt_base_learning_rate"' not in ln]
    (tmp_path / "cut.log").write_text("\n".join(lines) + "\n")
    ok, out = R.check_log(tmp_path / "cut.log")
    assert not ok and "opt_base_learning_rate" in out and "FAILED" in out


def test_checker_rejects_a_changed_constant_and_a_missed_target(tmp_path: Path) -> None:
    manifest = _manifest()
    manifest["resolved_config"]["data"]["train_batch_size"] = 32
    ok, out = R.check_log(_write(tmp_path / "batch", manifest, {10: 0.5}))
    assert not ok and "global_batch_size" in out
    ok, out = R.check_log(_write(tmp_path / "slow", _manifest(), {10: 0.0}))
    assert not ok and "target_accuracy" in out


@pytest.mark.parametrize("profile", ["cpu", "gpu-1x-h200", "gpu-8x-h200-141g", "npu-16x-ascend-a3"])
def test_rules_fit_the_profile(tmp_path: Path, profile: str) -> None:
    """The constants a profile changes (precision, micro-batch, accumulation) are pinned to the log's platform."""
    log = _write(tmp_path, _manifest(profile=profile), {10: 0.5})
    ok, out = R.check_log(log)
    assert ok, out
    other = "gpu-1x-h200" if profile == "cpu" else "cpu"  # the same log claiming another platform
    (tmp_path / "other.log").write_text(log.read_text().replace(f'"value": "{profile}"', f'"value": "{other}"'))
    ok, out = R.check_log(tmp_path / "other.log")
    assert not ok and "lowest_numerical_precision_in_linear" in out, out
    (tmp_path / "nowhere.log").write_text(log.read_text().replace(f'"value": "{profile}"', '"value": "gpu-9x"'))
    ok, out = R.check_log(tmp_path / "nowhere.log")
    assert not ok and "submission_platform" in out


def _benchmark(log: Path) -> str | None:
    return next((e["value"] for e in _events(log) if e["key"] == "submission_benchmark"), None)


PUBLISHED_LOGS = sorted(p.relative_to(ROOT) for p in ROOT.glob("certificates/*/runs/*/run-*/mlperf.log")
                        if _benchmark(p) in R.references())


def test_published_logs_are_listed() -> None:
    assert len(PUBLISHED_LOGS) >= 3  # the smoke entries of certificates/gpu-1x-h200 (reduced: no benchmark)


@pytest.mark.parametrize("log", PUBLISHED_LOGS, ids=[str(p.parent) for p in PUBLISHED_LOGS])
def test_published_logs_are_compliant_by_relative_and_absolute_path(log: Path, monkeypatch, capsys) -> None:
    from harness.cli import main

    assert R.check_log(ROOT / log)[0]
    monkeypatch.chdir(ROOT)
    code = main(["mlperf-check", str(log.parent)])  # relative, as the README writes it
    out = capsys.readouterr()
    assert code == 0 and "Traceback" not in out.out + out.err and out.out.splitlines()[-1].startswith("SUCCESS")


def test_a_benchmark_without_rules_and_a_crash_are_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    from harness.cli import main

    log = _write(tmp_path / "run", _manifest(), {10: 0.5})
    log.write_text(log.read_text().replace("grpo_qwen3_1_7b_smoke", "grpo_qwen3_1_7b_reduced"))
    monkeypatch.chdir(tmp_path)
    assert main(["mlperf-check", "run"]) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out and "has no rules" in out.splitlines()[-1]
    ok, out = R.check_log(tmp_path / "missing.log")  # the checker itself fails: its error, not its traceback
    assert not ok and out.startswith("the compliance checker stopped with an error:") and "\n" not in out


def test_resume_cuts_the_log_back(tmp_path: Path) -> None:
    manifest = _manifest()
    _write(tmp_path, manifest, {10: 0.5}, status="interrupted")
    log = M.MlperfLog(tmp_path, manifest, resume_from=4)
    log.run_start()  # kept from the first attempt: not logged again
    for step in range(5, 11):
        log.step(step, {"timing_s/step": 0.1, **({"val-core/x/reward/mean": 0.5} if step == 10 else {})})
    log.finish("complete")
    keys = [e["key"] for e in _events(tmp_path / M.LOG_FILE)]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1 and keys.count("epoch_stop") == 10
    assert R.check_log(tmp_path / M.LOG_FILE)[0]


def test_system_description_fields() -> None:
    from harness.records.certificate import Certificate

    env = json.loads((ROOT / "certificates" / "gpu-1x-h200" / "certificate.json").read_text())
    published = json.loads(base64.b64decode(env["payload"]))["predicate"]
    cert = Certificate.model_validate({
        **published, "profile": {**published["profile"], "name": "cpu"},
        "harness": {**published["harness"], "version": "0.1.0"},
        "system": {"accelerator": {"vendor": "none", "model": "x86_64", "count": 1, "memory_gb": 8.0,
                                   "peak_bf16_tflops": 1.0},
                   "nodes": 1, "host": {"cpu_cores": 2, "memory_gb": 23.5, "hostname": "h"},
                   "interconnect": {"intra_node": "none", "inter_node": "none"}, "collective_backend": "gloo",
                   "software": {"torch": "2.13.0", "python": "3.11.2", "cuda": None, "threads": 2},
                   "runtime": {"kind": "local", "image": None, "image_id": None, "lock_sha256": None}}})
    d = M.system_description(cert)
    assert d["accelerators_per_node"] == 1 and d["accelerator_model_name"] == "none x86_64"
    assert d["number_of_nodes"] == 1 and d["host_memory_capacity"] == "23.5 GB" and d["system_name"] == "cpu"
    assert "torch 2.13.0" in d["framework"] and "cuda" not in d["other_software_stack"]


@pytest.mark.parametrize("bench", sorted(R.references()))
def test_every_benchmark_has_a_target(bench: str) -> None:
    ref = R.references()[bench]
    assert ref.target is not None and 0.0 < ref.target <= 1.0
    assert f"'target_accuracy': {ref.target!r}" in (R.RULES_DIR / f"closed_{bench}.yaml").read_text()
    # a run reads only its own recipe's baselines for its target: the same one
    assert R.convergence_target(ref.recipe, ref.scale) == ref.target


def test_a_benchmark_is_read_from_its_first_baseline_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later baseline naming a benchmark an earlier one named is not read (each read is a schema check); one
    naming another benchmark, or one whose name cannot be told, is read and refused as a record."""
    from harness.mlperf import benchmarks
    from harness.mlperf.benchmarks import _references
    from harness.schema import SchemaErrors

    monkeypatch.setattr(benchmarks, "ROOT", tmp_path)  # a reference names its file relative to the root
    good = json.loads((ROOT / "baselines/qwen3_1_7b/cpu-smoke.json").read_text())
    first, same, other = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    first.write_text(json.dumps(good))
    same.write_text(json.dumps({**good, "metrics": "not metrics"}))  # fails its schema: never read
    other.write_text(json.dumps({**good, "scale": "reduced", "metrics": "not metrics"}))
    refs = _references([first, same])
    assert list(refs) == ["grpo_qwen3_1_7b_smoke"] and refs["grpo_qwen3_1_7b_smoke"].baseline == "a.json"
    with pytest.raises(SchemaErrors):
        _references([same, first])
    with pytest.raises(SchemaErrors):
        _references([first, other])
