"""Runs that several integration tests read: each made once per session, as the command a user types makes it.

``smoke_run(recipe, steps)`` is ``harness run RECIPE --profile cpu --runtime local --quiet --no-report [--steps N]``
in a session directory: the committed-baseline test judges it, the MLPerf test checks its ``mlperf.log``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SmokeRun = Callable[[str, "int | None"], "tuple[subprocess.CompletedProcess[str], Path]"]


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    made: dict[tuple[str, int | None], tuple[subprocess.CompletedProcess[str], Path]] = {}

    def run(recipe: str, steps: int | None) -> tuple[subprocess.CompletedProcess[str], Path]:
        if (recipe, steps) not in made:
            work = tmp_path_factory.mktemp(f"smoke-{recipe}")
            out = work / "run"
            env = {k: v for k, v in os.environ.items() if k != "HARNESS_FAULT"}
            env["PYTHONPATH"] = str(ROOT)  # HARNESS_CACHE: the session's (tests/conftest.py)
            proc = subprocess.run([sys.executable, "-m", "harness", "run", recipe, "--profile", "cpu", "--runtime",
                                   "local", "--out", str(out), "--quiet", "--no-report",
                                   *(["--steps", str(steps)] if steps else [])],
                                  capture_output=True, text=True, timeout=1800, env=env, cwd=work)
            made[(recipe, steps)] = (proc, out)
        return made[(recipe, steps)]

    return run
