"""Checkpoint and resume on CPU: an interrupted run continues bit for bit (1 and 2 processes, kill -9).

All runs use the qwen3_vl_30b smoke recipe with ``trainer.test_freq=3`` and ``trainer.save_freq=3``.
HARNESS_CACHE is inherited, so the warm start is trained once and shared with other runs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from harness.config.recipe import resolve
from harness.errors import HarnessError
from harness.run.resume_check import ckpt_resume_check, metric_mismatch
from harness.run.rundir import read_metrics

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
RECIPE = "qwen3_vl_30b"
VAL = "val-core/synthetic/color/reward/mean"
RUN = [sys.executable, "-m", "harness", "run", RECIPE, "--profile", "cpu", "--steps", "6", "--set",
       "trainer.test_freq=3", "--set", "trainer.save_freq=3", "--stage", "train", "--quiet", "--runtime", "local"]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _ckpts(run_dir: Path) -> list[str]:
    root = run_dir / "checkpoints"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """6 steps straight vs 3 + SIGTERM + resume 3 (single process)."""
    res = resolve(RECIPE, "cpu", "smoke", ("trainer.test_freq=3",))
    t0 = time.time()
    out = ckpt_resume_check(res, tmp_path_factory.mktemp("check"), 6)
    print(f"ckpt-resume check (1 process, 6 steps) took {time.time() - t0:.0f} s")
    return out


def test_resume_after_sigterm_is_bitwise(check: dict) -> None:
    assert check["pass"], check["first_mismatch"]
    resumed = Path(check["resumed"])
    manifest = _manifest(resumed)
    assert manifest["status"] == "complete" and not (resumed / "INCOMPLETE").exists()
    assert [r["from_step"] for r in manifest["resumes"]] == [3]
    assert _ckpts(resumed) == ["step-000003", "step-000006"]
    assert _ckpts(Path(check["straight"])) == [], "the straight run is never resumed: no checkpoint"
    steps = [r["step"] for r in read_metrics(resumed / "metrics.jsonl")]
    assert steps == list(range(7)), "a step is duplicated or missing"


def test_validation_every_test_freq_and_deterministic(check: dict) -> None:
    straight = read_metrics(Path(check["straight"]) / "metrics.jsonl")
    resumed = read_metrics(Path(check["resumed"]) / "metrics.jsonl")
    assert [r["step"] for r in straight if VAL in r] == [0, 3, 6]  # before training, every 3 steps, the last
    # the resumed run's first half is an independent repeat; its second half validates after a resume
    assert [r[VAL] for r in straight if VAL in r] == [r[VAL] for r in resumed if VAL in r]


def _wait_for(pred, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not pred():
        assert proc.poll() is None, f"the run exited ({proc.returncode}) before {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _partial(run_dir: Path, step: int) -> bool:
    root = run_dir / "checkpoints"
    return root.is_dir() and any(p.name.startswith(f"step-{step:06d}.tmp-") and (p / "state-rank0.json").is_file()
                                 for p in root.iterdir())


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")]


def test_kill9_then_resume_matches(check: dict, tmp_path: Path) -> None:
    """Three kill -9 points in one run's life, each followed by a resume; the end result is bitwise."""
    run = tmp_path / "run"
    start = lambda *extra, **env: subprocess.Popen(  # noqa: E731
        [*RUN, *extra], env=_env(**env), cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)

    # 1. killed while writing the first checkpoint (data written, COMPLETE not yet)
    proc = start("--out", str(run), HARNESS_CKPT_PAUSE_S="300")
    _wait_for(lambda: _partial(run, 3), proc, 900, "the step-3 checkpoint write")
    _kill9(proc)
    assert _manifest(run)["status"] == "running" and (run / "INCOMPLETE").exists()
    assert not [c for c in _ckpts(run) if ".tmp-" not in c]

    # 2. --resume with no complete checkpoint starts over; killed at a random moment after step 3's checkpoint
    proc = start("--resume", str(run))
    _wait_for(lambda: (run / "checkpoints" / "step-000003" / "COMPLETE").is_file(), proc, 900, "checkpoint 3")
    saved = time.time()
    _wait_for(lambda: 4 in _steps(run), proc, 900, "step 4")
    # steps 5 and 6 and the last checkpoint are still ahead: a delay under one step's time lands in them
    step_s = time.time() - saved
    delay = random.uniform(0.0, step_s)
    print(f"kill -9 {delay:.1f} s after step 4 (one step took {step_s:.1f} s)")
    time.sleep(delay)
    assert proc.poll() is None, "the run finished before it could be killed"
    _kill9(proc)
    assert _ckpts(run) == ["step-000003"]

    # 3. --resume (from step 3), killed while writing the last checkpoint: every metrics row is already written
    proc = start("--resume", str(run), HARNESS_CKPT_PAUSE_S="300")
    _wait_for(lambda: _partial(run, 6), proc, 900, "the step-6 checkpoint write")
    _kill9(proc)
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == list(range(7))

    # 4. the original command again: resume_mode auto continues it from step 3 and completes
    done = subprocess.run([*RUN, "--out", str(run)], env=_env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "continuing the unfinished run" in done.stderr
    manifest = _manifest(run)
    assert manifest["status"] == "complete" and not (run / "INCOMPLETE").exists()
    assert [r["from_step"] for r in manifest["resumes"]] == [0, 3, 3]
    assert _ckpts(run) == ["step-000003", "step-000006"]  # partial writes cleaned
    straight = read_metrics(Path(check["straight"]) / "metrics.jsonl")
    assert metric_mismatch(straight, read_metrics(run / "metrics.jsonl")) is None

    again = subprocess.run([*RUN, "--resume", str(run)], env=_env(), cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 2 and "nothing to resume" in again.stderr.strip().splitlines()[-1]


def test_two_processes_resume_is_bitwise(tmp_path: Path) -> None:
    """2 gloo processes (FSDP2, DTensor state): 4 steps straight vs 2 + SIGTERM + resume 2, with
    ``trainer.save_freq=-1``: the one checkpoint is the one SIGTERM writes (how the check runs for models
    whose checkpoints would not fit on disk twice)."""
    res = resolve(RECIPE, "cpu", "smoke", ("trainer.test_freq=3", "trainer.save_freq=-1"))
    t0 = time.time()
    for attempt in range(2):
        try:
            out = ckpt_resume_check(res, tmp_path / f"attempt-{attempt}", 4, nproc=2)
            break
        except HarnessError as err:
            # open bug: now and then rank 0 aborts (SIGABRT, in gloo) while the 2-process job stops on SIGTERM;
            # retried once, and said in the output, until it is found
            if attempt or "signal 6" not in str(err):
                raise
            warnings.warn(f"2-process SIGTERM resume: retried after an intermittent abort: {err}", stacklevel=1)
    print(f"ckpt-resume check (2 processes, 4 steps) took {time.time() - t0:.0f} s")
    assert out["pass"], out["first_mismatch"]
    manifest = _manifest(Path(out["resumed"]))
    assert manifest["runtime"]["world_size"] == 2 and [r["from_step"] for r in manifest["resumes"]] == [2]
    assert _ckpts(Path(out["resumed"])) == ["step-000002"]
    ckpt = Path(out["resumed"]) / "checkpoints" / "step-000002"
    assert {f"state-rank{r}{ext}" for r in (0, 1) for ext in (".json", ".safetensors")} == {
        p.name for p in ckpt.iterdir() if p.name.startswith("state-")}
