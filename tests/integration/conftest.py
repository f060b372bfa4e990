"""Runs that several integration tests read: each made once per session, as the command a user types makes it.

``smoke_run(recipe, steps)`` is ``harness run RECIPE --profile cpu --runtime local --quiet --no-report [--steps N]``
in a session directory: the committed-baseline test judges it, the MLPerf test checks its ``mlperf.log``. Under
pytest-xdist the workers share it: the first to ask makes it while holding a lock, another that asks meanwhile
waits for it (it would otherwise train the same run beside it) and reads what it left.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SmokeRun = Callable[[str, "int | None"], "tuple[subprocess.CompletedProcess[str], Path]"]


@pytest.fixture(scope="session")
def smoke_run(workers_dir: Callable[[str], Path]) -> SmokeRun:
    smoke_runs_dir = workers_dir("smoke-runs")  # tests/conftest.py

    def run(recipe: str, steps: int | None) -> tuple[subprocess.CompletedProcess[str], Path]:
        work = smoke_runs_dir / f"{recipe}-{steps or 'all'}"
        work.mkdir(exist_ok=True)
        out, done = work / "run", work / "result.json"
        args = [sys.executable, "-m", "harness", "run", recipe, "--profile", "cpu", "--runtime", "local", "--out",
                str(out), "--quiet", "--no-report", *(["--steps", str(steps)] if steps else [])]
        with open(work / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not done.is_file():
                env = {k: v for k, v in os.environ.items() if k != "HARNESS_FAULT"}
                env["PYTHONPATH"] = str(ROOT)  # HARNESS_CACHE: the session's (tests/conftest.py)
                proc = subprocess.run(args, capture_output=True, text=True, timeout=1800, env=env, cwd=work)
                done.write_text(json.dumps({"returncode": proc.returncode, "stdout": proc.stdout,
                                            "stderr": proc.stderr}))
        made = json.loads(done.read_text())
        return subprocess.CompletedProcess(args, made["returncode"], made["stdout"], made["stderr"]), out

    return run
