"""A throughput reference says how it was measured, and is never recorded from a run that shared its accelerator.

The runner reads nvidia-smi's compute applications before it touches the device (``calibration.device_processes``);
a reference is ``solo`` when every run it comes from saw none, and record-baseline refuses runs that saw some, and
seeds run side by side on one accelerator.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.config import profiles
from harness.errors import HarnessError
from harness.judge.baseline import DEFAULT_POLICY, refuse_shared_device, throughput_reference
from harness.records.base import read
from harness.records.run import Manifest
from harness.run.environment import summary

RUN = Path(__file__).resolve().parents[2] / "certificates/gpu-1x-h200/runs/qwen3-1-7b-smoke/run-1"


def _manifest(sharers: int | None) -> Manifest:
    m = read(RUN / "manifest.json", Manifest, "manifest")
    assert m.calibration is not None
    cal = m.calibration.model_copy(update={"device_processes": sharers})
    return m.model_copy(update={"calibration": cal})


def test_a_run_that_shared_the_device_gives_no_reference(tmp_path: Path) -> None:
    refuse_shared_device([_manifest(0), _manifest(None)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(HarnessError) as err:
        refuse_shared_device([_manifest(0), _manifest(2)], [tmp_path / "a", tmp_path / "b"])
    line = err.value.one_line()
    assert "2 other process(es) held the NVIDIA H200" in line and str(tmp_path / "b") in line


@pytest.mark.parametrize("sharers,solo", [([0, 0], True), ([0, None], None)])
def test_the_reference_says_how_it_was_measured(sharers: list[int | None], solo: bool | None) -> None:
    ms = [_manifest(s) for s in sharers]
    seeds = [{"perf/throughput": {3: 1.0, 4: 2.0}}, {"perf/throughput": {3: 1.5, 4: 1.5}}]
    ref = throughput_reference(summary(ms[0]), seeds, DEFAULT_POLICY.throughput, 4, ms[0].runtime.kind, ms)
    assert ref.solo is solo


def test_device_processes_reads_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    assert profiles.device_processes("cpu") is None

    def fake(out: str, rc: int = 0) -> Any:
        return lambda *a, **k: subprocess.CompletedProcess(a, rc, stdout=out, stderr="")

    monkeypatch.setattr(subprocess, "run", fake("4242\n4343\n"))
    assert profiles.device_processes("cuda") == 2
    monkeypatch.setattr(subprocess, "run", fake(""))
    assert profiles.device_processes("cuda") == 0
    monkeypatch.setattr(subprocess, "run", fake("", rc=9))
    assert profiles.device_processes("cuda") is None


def test_seeds_side_by_side_on_an_accelerator_are_refused(tmp_path: Path) -> None:
    from harness.judge.baseline_record import record

    with pytest.raises(HarnessError) as err:
        record("qwen3_1_7b", "gpu-1x-h200", "smoke", seeds=2, steps=None, out=tmp_path / "b.json",
               runs_dir=tmp_path / "runs", command="harness record-baseline", jobs=2, log=lambda s: None)
    assert "--jobs 2 would run seeds side by side on one H200" in err.value.one_line()


def test_cpu_seeds_side_by_side_wait_passively_unless_the_user_chose() -> None:
    """Two 2-thread runs on two cores with spinning OpenMP threads took 3-5x as long as passive ones
    (bench/results/omp-wait-epyc-2026-12-07/); one run at a time keeps the default, and a policy set is kept."""
    from harness.judge.baseline_record import side_by_side_env

    assert side_by_side_env(2, {}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert side_by_side_env(1, {}) == {}
    assert side_by_side_env(3, {"OMP_WAIT_POLICY": "ACTIVE"}) == {}
    assert side_by_side_env(2, {"OMP_WAIT_POLICY": ""}) == {}
