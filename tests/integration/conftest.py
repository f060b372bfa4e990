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

# The files that take longest, roughly longest first (seconds of one worker on a 2-core EPYC, in the ordered pass of
# bench/results/test-order-avx512-epyc-2026-12-07/after-costliest-first.jsonl). nox runs them `--dist loadfile
# --no-loadscope-reorder`, so the two workers take files in this order (xdist's own order is by number of tests): the
# long ones start at once and the short ones fill the end, instead of one worker running a 55 s file while the other
# has finished (in that pass the workers ended 2 s apart). The first two need no common warm start, which one would
# otherwise wait for while the other trains it. A file not named here runs after these, in collection order.
COSTLIEST_FIRST = (
    "test_baselines.py",  # 315: record-baseline (3 seeds), a gate, replays
    "test_distributed.py",  # 143: torchrun ranks (a recipe of its own)
    "test_regressions.py",  # 245: faults, another seed with a candidate, verl logs
    "test_resume.py",  # 138
    "test_simulate.py",  # 81
    "test_plan_cli.py",  # 82: full-scale plans
    "test_committed_baselines.py",  # 107: makes the qwen3_1_7b smoke run that test_mlperf_log.py reads
    "test_certify.py",  # 83
    "test_docker.py",  # 67
    "test_gate_junit.py",  # 70
    "test_mlperf_log.py",  # 1 after that run (45 when it makes it)
    "test_hostile.py",  # 17
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = [name for name in COSTLIEST_FIRST if not (Path(__file__).parent / name).is_file()]
    if missing:  # a renamed file would silently lose its place
        raise pytest.UsageError(f"tests/integration/conftest.py: COSTLIEST_FIRST names no such file: {missing}")
    rank = {name: i for i, name in enumerate(COSTLIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept


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
