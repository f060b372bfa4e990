"""The run record never overwrites or follows links; metrics with repeated steps are refused; reads are bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.jsonio import load_json_strict, read_bytes_limited, write_text_atomic
from harness.run.rundir import MARKER, RunRecord, read_metrics


def test_repeated_or_unordered_steps_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "x": 1}\n{"step": 1, "x": 2}\n{"step": 1, "x": 2}\n')
    with pytest.raises(HarnessError, match="step 1 is repeated") as err:
        read_metrics(path)
    assert "\n" not in str(err.value)
    path.write_text('{"step": 2}\n{"step": 1}\n')
    with pytest.raises(HarnessError, match="out of order"):
        read_metrics(path)
    path.write_text('{"step": 1}\n{"x": 1}\n')
    with pytest.raises(HarnessError, match="no integer 'step'"):
        read_metrics(path)
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "x": 0.')  # torn last line: ignored
    assert [r["step"] for r in read_metrics(path)] == [1, 2]


def _manifest(x: int) -> dict:
    from harness.config.recipe import resolve
    from harness.run.runner import base_manifest

    return {**base_manifest(resolve("qwen3_vl_30b", "cpu", "smoke"), steps=1, runtime="local", world=1, fault={}),
            "seed": x}  # marks which manifest was written


def test_record_refuses_an_existing_run_and_links(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rec = RunRecord(run, _manifest(1))
    rec.metrics.write(1, {"a": 0.5})
    rec.finish("complete")
    mode = stat.S_IMODE((run / "manifest.json").stat().st_mode)
    assert mode == 0o666 & ~_umask()  # the usual mode of a new file, not mkstemp's 0600
    with pytest.raises(HarnessError, match="already holds manifest.json"):
        RunRecord(run, _manifest(2))
    assert load_json_strict(run / "manifest.json")["seed"] == 1
    other = tmp_path / "other"
    other.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.symlink(victim, other / MARKER)
    with pytest.raises(HarnessError, match="already exists|symbolic"):
        RunRecord(other, _manifest(3))
    assert victim.read_text() == "keep"
    os.symlink(victim, tmp_path / "link.json")
    write_text_atomic(tmp_path / "link.json", "{}")  # replaces the link, never writes through it
    assert victim.read_text() == "keep" and not (tmp_path / "link.json").is_symlink()


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_bounded_reads_refuse_devices_fifos_and_big_files(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="not a regular file"):
        read_bytes_limited("/dev/zero", 1024)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(HarnessError, match="not a regular file"):  # refused without blocking
        load_json_strict(fifo)
    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 600 + "0]")
    with pytest.raises(HarnessError, match="over the limit of 1000"):
        load_json_strict(big, 1000)
    assert load_json_strict(big)[0] == 0


def test_stage_is_internal_and_hidden_from_help() -> None:
    from harness.cli import build_parser

    parser = build_parser({"run": "run"})
    run = parser._subparsers._group_actions[0].choices["run"]  # noqa: SLF001 - the run subcommand's parser
    assert "--stage" not in run.format_help()
    assert run.parse_args(["r", "--stage", "train"]).stage == "train"  # still accepted from the harness's launchers


def test_record_baseline_reports_a_baseline_without_replay(tmp_path: Path, monkeypatch, capsys) -> None:
    """A model too large for a replay archive gives a baseline with no replay block: said, not a KeyError."""
    import typed_records as typed

    import harness.judge.baseline_record as BR
    from harness.cli import main

    ref = {"value": 14473.0, "device_model": "NVIDIA H200", "relative_spread": 0.1, "threads": 1, "runtime": "local",
           "seed_values": [14473.0], "recorded_utc": "2026-01-01T00:00:00Z"}
    doc = typed.baseline({"steps": 5, "noise_seeds": [43], "metrics": {}, "throughput": {"references": [ref]},
                          "memory": {"value": 49.4, "seed_values": [49.4], "relative_spread": 0.0}})
    assert doc.replay is None
    monkeypatch.setattr(BR, "record", lambda *a, **k: doc)
    assert main(["record-baseline", "qwen3_1_7b", "--profile", "cpu", "--out", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "14,473 tok/s on NVIDIA H200" in out and "no replay tier" in out
