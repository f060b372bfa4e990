"""The tests' fork server (tests/forkserver.py) gives what a ``python -m harness`` process gives: exit code, stdout
and stderr; a variable read at import time sends the command to a process of its own; a time limit stops it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.parametrize("args", [
    ["validate", "qwen3_vl_30b"],  # 0, a summary on stdout
    ["run", "no-such-recipe", "--profile", "cpu"],  # 2, one line on stderr
    ["run", "qwen3_vl_30b", "--profile", "cpu", "--set", "actor_rollout_ref.model.trust_remote_code=true"],
    ["plan"],  # argparse's usage error
    ["--version"],
    [],  # no command: the help on stderr, exit 2
], ids=["validate", "unknown-recipe", "refused-override", "usage", "version", "no-command"])
def test_a_forked_command_gives_what_a_process_gives(args: list[str], tmp_path: Path) -> None:
    forked = forkserver.run(args, cwd=tmp_path, env=_env(), timeout=300)
    real = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=300,
                          env=_env(), cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert forked.forked  # type: ignore[attr-defined]
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_an_import_time_variable_gets_a_process_of_its_own(tmp_path: Path) -> None:
    for name, value in (("HARNESS_CPU_ISA", "native"), ("OMP_NUM_THREADS", "1"), ("PYTHONHASHSEED", "7")):
        proc = forkserver.run(["validate", "qwen3_vl_30b"], cwd=tmp_path, env=_env(**{name: value}), timeout=300)
        assert proc.returncode == 0 and not proc.forked, name  # type: ignore[attr-defined]
    assert forkserver.run(["--version"], cwd=tmp_path, env=_env(HARNESS_FAULT="flip-advantage"),
                          timeout=60).forked  # type: ignore[attr-defined]  # read when a run starts: forked


def _in(directory: Path) -> list[int]:
    """Processes whose working directory is ``directory``."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.readlink(f"/proc/{pid}/cwd") == str(directory):
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_a_time_limit_stops_the_command(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run(["run", "qwen3_vl_30b", "--profile", "cpu", "--runtime", "local", "--out", str(tmp_path / "r"),
                        "--quiet"], cwd=tmp_path, env=_env(HARNESS_CACHE=str(tmp_path / "cache")), timeout=3)
    assert time.monotonic() - t0 < 60
    deadline = time.monotonic() + 30
    while _in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _in(tmp_path) == []
    assert forkserver.run(["--version"], cwd=tmp_path, env=_env(), timeout=60).returncode == 0
