"""Other trainers' logs judged by the harness's tiers (``compare --log``, ``record-baseline --from-log``, the log
readers), without training: the verl logs are the committed CPU baseline's seeds rewritten as verl writes them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from verl_logs import BASELINE, baseline_rows, write_verl_log

from harness.cli import main
from harness.judge.logs import LOG_LIMIT, READERS, harness_name, read_log
from harness.schema import schema_errors

TARGET = ["--recipe", "qwen3_vl_30b", "--profile", "cpu", "--scale", "smoke"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("verl-logs")
    doc = json.loads(BASELINE.read_text(encoding="utf-8"))
    out = {}
    for i in range(6):
        rows = baseline_rows(i, doc)
        for step, row in rows.items():
            if step > 0:
                row["perf/throughput"] = 5000.0 + step  # tokens/s per device, as verl logs it
        out[f"seed{i}"] = write_verl_log(rows, d / f"seed{i}.jsonl")
    bad = baseline_rows(0, doc)  # a run whose training reward stays where it started
    for step, row in bad.items():
        for name in ("critic/score/mean", "critic/rewards/mean", "reward/acc/mean"):
            if name in row:
                row[name] = 0.2
    out["flat"] = write_verl_log(bad, d / "flat.jsonl")
    return out


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_a_clean_verl_log_passes_statistical(logs: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    out = tmp_path / "verdict"
    rc, stdout, stderr = cli(capsys, "compare", "--log", f"verl:{logs['seed0']}", *TARGET, "--out", str(out))
    assert rc == 0, stdout + stderr
    assert stdout.startswith("PASS qwen3_vl_30b cpu:smoke tier=statistical")
    assert "environment unknown" in stderr and "throughput not comparable" in stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("curves-")) == ["report.html",
                                                                                        "verdict.json"]
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    assert schema_errors(verdict, "verdict") == []
    assert verdict["tier"] == "statistical" and "not exact" in verdict["tier_reason"]
    assert "a log carries no replayed rollouts" in verdict["tier_reason"]
    assert verdict["logs"][0]["trainer"] == "verl" and len(verdict["logs"][0]["sha256"]) == 64
    assert verdict["logs"][0]["trainer_version"] is None
    assert {c["key"] for c in verdict["changes"]} == {"trainer", "environment"}
    # the per-metric cross-check is in the verdict, printed and on the page
    rows = {r["metric"]: r for r in verdict["crosscheck"]}
    assert "actor/pg_loss" in rows and not any(r["beyond"] for r in rows.values())
    assert "cross-check" in stdout and "Cross-check per metric" in (out / "report.html").read_text(encoding="utf-8")


def test_candidate_logs_are_judged_by_their_median(logs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, stdout, stderr = cli(capsys, "compare", *(a for k in ("seed0", "seed1", "seed2") for a in
                                                 ("--log", f"verl:{logs[k]}")), *TARGET, "--no-report")
    assert rc == 0, stdout + stderr
    assert "(median of 3 runs)" in stdout and "asks for" not in stderr


def test_a_collapsed_reward_fails(logs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, stdout, stderr = cli(capsys, "compare", "--log", f"verl:{logs['flat']}", *TARGET, "--no-report")
    assert rc == 1, stdout + stderr
    assert stdout.startswith("FAIL") and "critic/score/mean" in stdout
    assert "BEYOND the seeds' spread" in stdout


def test_tiers_a_log_cannot_have_are_refused(logs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    for tier, word in (("exact", "never judged exact"), ("replay", "cannot be judged by replay")):
        rc, stdout, stderr = cli(capsys, "compare", "--log", f"verl:{logs['seed0']}", *TARGET, "--tier", tier,
                                 "--no-report")
        assert rc == 2 and word in stderr and len(stderr.splitlines()) == 1
    rc, stdout, _ = cli(capsys, "compare", "--log", f"verl:{logs['seed0']}", *TARGET, "--tier", "band", "--no-report")
    assert rc == 0 and "tier=band" in stdout  # the primary seed's own values stay in the band


def test_record_baseline_from_five_logs(logs: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    args = ["record-baseline", "qwen3_vl_30b", "--profile", "cpu", "--scale", "smoke", "--out", str(out),
            *(a for i in range(1, 6) for a in ("--from-log", f"verl:{logs[f'seed{i}']}"))]
    rc, stdout, stderr = cli(capsys, *args)
    assert rc == 0, stdout + stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert schema_errors(doc, "baseline") == []
    assert doc["environment"] is None and doc["primary_seed"] is None and doc["runs"] == []
    assert [x["file"] for x in doc["logs"]] == [str(logs[f"seed{i}"]) for i in range(1, 6)]
    assert all(set(m["tiers"]) <= {"band", "statistical"} for m in doc["metrics"].values())
    assert doc["metrics"]["critic/score/mean"]["tiers"] == ["band", "statistical"]
    rc, _, stderr = cli(capsys, *args)  # never overwritten without --force
    assert rc == 2 and "already exists" in stderr
    rc, stdout, stderr = cli(capsys, "compare", "--log", f"verl:{logs['seed0']}", *TARGET, "--baseline", str(out),
                             "--no-report")
    assert rc == 0 and "tier=statistical" in stdout, stdout + stderr


def test_unknown_names_are_a_notice(tmp_path: Path) -> None:
    rows = baseline_rows(0)
    for row in rows.values():
        row["critic/returns/mean"] = 0.5
    log = read_log(f"verl:{write_verl_log(rows, tmp_path / 'x.jsonl')}")
    assert log.unknown == ["critic/returns/mean"] and "not judged: critic/returns/mean" in log.notices[0]
    assert log.steps == 40 and "val-core/synthetic/color/reward/mean" in log.series


def test_each_reader_maps_its_names_in_one_table() -> None:
    verl = READERS.lookup("verl")
    assert harness_name(verl, "val-core/openai/gsm8k/reward/mean@1") == "val-core/openai/gsm8k/reward/mean"
    assert harness_name(verl, "actor/pg_loss") == "actor/pg_loss"
    assert harness_name(verl, "perf/mfu/actor") == "perf/mfu"
    assert harness_name(verl, "critic/vf_loss") is None
    assert harness_name(READERS.lookup("trl"), "rewards/accuracy/mean") == "reward/accuracy/mean"


def test_trl_trainer_state(tmp_path: Path) -> None:
    history = [{"step": k, "epoch": k / 4, "loss": 0.1, "reward": 0.1 * k, "kl": 0.01, "grad_norm": 1.0,
                "learning_rate": 1e-6, "completions/mean_length": 30.0} for k in range(1, 5)]
    history.append({"step": 4, "train_runtime": 12.0, "train_loss": 0.1})
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 4, "log_history": history}), encoding="utf-8")
    log = read_log(f"trl:{path}")
    assert log.steps == 4 and log.series["critic/score/mean"][3] == pytest.approx(0.3)
    assert log.series["response_length/mean"][1] == 30.0 and log.unknown == []


def _lines(rows: list[object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _ok(step: int, **extra: object) -> dict[str, object]:
    return {"step": step, "data": {"critic/score/mean": 0.5, "actor/pg_loss": 0.01, **extra}}


MALFORMED = {  # name -> (file content, or a callable making the file; what the one line says)
    "missing-step": (_lines([_ok(1), _ok(2), _ok(4)]), "step 4 follows step 2 (step 3 missing)"),
    "late-start": (_lines([_ok(3), _ok(4)]), "the log starts at step 3 (steps 1-2 missing)"),
    "duplicate-step": (_lines([_ok(1), _ok(2), _ok(2)]), "step 2 is repeated (first on line 2)"),
    "out-of-order": (_lines([_ok(1), _ok(3), _ok(2)]), "step 3 follows step 1"),
    "non-finite": (_lines([_ok(1)]) + '{"step": 2, "data": {"actor/pg_loss": NaN}}\n', "line 2: a non-finite value"),
    "truncated-last-line": (_lines([_ok(1), _ok(2)]) + '{"step": 3, "data": {"actor/pg_lo', "line 3 (the last) is "
                            "truncated"),
    "not-json": (_lines([_ok(1)]) + "step 2 pg_loss 0.1\n" + _lines([_ok(3)]), "line 2: invalid JSON value"),
    "step-not-integer": ('{"step": "1", "data": {}}\n', "line 1: no step"),
    "no-data-object": ('{"step": 1, "data": [1, 2]}\n', "line 1: no data object"),
    "string-value": (_lines([_ok(1, **{"actor/kl_loss": "0.1"})]), "line 1: actor/kl_loss is str, not a number"),
    "duplicate-key": ('{"step": 1, "step": 2, "data": {}}\n', "line 1: duplicate key 'step'"),
    "empty": ("", "the log holds no steps"),
    "over-the-size-limit": (None, f"over the limit of {LOG_LIMIT}"),
    "fifo": (None, "not a regular file"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_log_is_one_line_and_exit_2(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content, says = MALFORMED[case]
    path = tmp_path / "metrics.jsonl"
    if case == "over-the-size-limit":
        with open(path, "wb") as fh:
            fh.truncate(LOG_LIMIT + 1)  # sparse: nothing is written, and nothing may be read
    elif case == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(content or "", encoding="utf-8")
    out = tmp_path / "out"
    rc, stdout, stderr = cli(capsys, "compare", "--log", f"verl:{path}", *TARGET, "--out", str(out))
    assert rc == 2, stdout + stderr
    assert len(stderr.splitlines()) == 1 and "Traceback" not in stderr and stdout == ""
    assert stderr.startswith(f"error: {path}") and says in stderr and "(fix: " in stderr
    assert not out.exists()


def test_usage_errors_are_one_line(logs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = [(["--log", f"wandb:{logs['seed0']}", *TARGET, "--no-report"], "does not name a log format"),
             (["--log", f"verl:{logs['seed0']}", "--recipe", "qwen3_vl_30b", "--no-report"], "--profile, --scale"),
             (["--log", f"verl:{logs['seed0']}", *TARGET], "--out"),
             (["--log", f"verl:{logs['seed0']}", *TARGET, "--out", str(logs["seed0"].parent)], "new or empty")]
    for args, says in cases:
        rc, stdout, stderr = cli(capsys, "compare", *args)
        assert rc == 2 and len(stderr.splitlines()) == 1 and says in stderr, (args, stderr)


def test_export_verl_writes_the_file_logger_and_lint_accepts_it(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc, script, _ = cli(capsys, "export-verl", "qwen3_vl_30b", "--profile", "gpu-8x-h200-141g", "--format", "script",
                        "--log-file", "/data/runs/q.jsonl")
    assert rc == 0
    assert "'trainer.logger=[console,file]'" in script
    assert 'VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-/data/runs/q.jsonl}"' in script
    assert "export VERL_FILE_LOGGER_PATH" in script
    path = tmp_path / "launch.sh"
    path.write_text(script, encoding="utf-8")
    rc, stdout, _ = cli(capsys, "lint-verl", str(path), "--profile", "gpu-8x-h200-141g")
    assert rc == 0 and " 0 error(s)" in stdout
    rc, overrides, _ = cli(capsys, "export-verl", "qwen3_vl_30b", "--profile", "gpu-8x-h200-141g")
    assert "trainer.logger=[console,file]" in overrides.splitlines()


def test_a_harness_run_against_a_baseline_from_logs(logs: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    """The other way round: a harness run judged against verl logs — statistical (the logs' environment and seeds
    unknown), exact refused, and the per-metric cross-check in the verdict and on stdout."""
    from harness.config.recipe import resolve
    from harness.jsonio import write_json_atomic
    from harness.run.runner import base_manifest

    base = tmp_path / "from-logs.json"
    rc, _, stderr = cli(capsys, "record-baseline", "qwen3_vl_30b", "--profile", "cpu", "--scale", "smoke", "--out",
                        str(base), *(a for i in range(1, 6) for a in ("--from-log", f"verl:{logs[f'seed{i}']}")))
    assert rc == 0, stderr
    run = tmp_path / "run"
    run.mkdir()
    m = base_manifest(resolve("qwen3_vl_30b", "cpu", "smoke"), steps=40, runtime="local", world=1, fault={})
    m.update(schema_version=1, status="complete", created_utc="2026-01-01T00:00:00Z",
             finished_utc="2026-01-01T00:01:00Z", error=None)
    m["steps"]["completed"] = 40
    write_json_atomic(run / "manifest.json", m)
    rows = baseline_rows(0)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": k, **rows[k]}) + "\n" for k in sorted(rows)),
                                       encoding="utf-8")
    rc, stdout, stderr = cli(capsys, "compare", str(run), "--baseline", str(base), "--no-report")
    assert rc == 0 and "tier=statistical" in stdout, stdout + stderr
    assert "cross-check" in stdout and "actor/pg_loss" in stdout
    verdict = json.loads((run / "verdict.json").read_text(encoding="utf-8"))
    assert schema_errors(verdict, "verdict") == [] and verdict["crosscheck"]
    assert "unknown (trainer logs)" in verdict["tier_reason"]
    rc, _, stderr = cli(capsys, "compare", str(run), "--baseline", str(base), "--tier", "exact", "--no-report")
    assert rc == 2


@pytest.mark.parametrize("speed, rc", [(1.0, 0), (0.5, 1)])
def test_throughput_per_device_where_the_profile_names_the_reference_device(
        speed: float, rc: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((BASELINE.parent / "gpu-1x-h200-smoke.json").read_text(encoding="utf-8"))
    ref = doc["throughput"]["references"][0]["value"]
    rows = baseline_rows(0, doc)
    for step, row in rows.items():
        if step > 0:
            row["perf/throughput"] = ref * speed
    log = write_verl_log(rows, tmp_path / "gpu.jsonl")
    got, stdout, stderr = cli(capsys, "compare", "--log", f"verl:{log}", "--recipe", "qwen3_vl_30b", "--profile",
                              "gpu-1x-h200", "--scale", "smoke", "--no-report")
    assert got == rc, stdout + stderr
    assert "throughput per device" in stderr and ("SLOWER" in stdout) == (rc == 1)
