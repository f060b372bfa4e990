"""The rank zygote (harness/run/runtime/zygote.py): a stub ends as its forked rank ends, and takes the rank with it.

One zygote serves every case: ``--help`` (the rank's usage on the stub's own stdout, exit 0), a bad option (exit 2,
the message on the stub's stderr), a rank blocked in its rendezvous (rank 0 of 2, its peer never comes) killed by
SIGKILL (the stub dies of SIGKILL, as torchrun must see it), and a stub killed while its rank waits (the rank is gone
within seconds). Without a zygote the stub runs the rank itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import procs
import pytest

from harness.run.runtime.zygote import ENV

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    path = str(tmp_path_factory.mktemp("zygote") / "socket")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "harness.run.runtime.zygote", "--serve", path, "qwen3_vl_30b",
                             "--profile", "cpu", "--scale", "smoke", "--out", "unused"], stdin=subprocess.PIPE,
                            env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield proc, path
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0  # ends once the launcher closes its stdin and no rank is left


def _stub(path: str | None, *argv: str, **env: str) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if k != ENV}
    full.update(PYTHONPATH=str(ROOT), **env)
    if path:
        full[ENV] = path
    return subprocess.Popen([sys.executable, "-m", "harness.run.runtime.zygote", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full, cwd=ROOT)


def test_a_forked_ranks_output_and_exit_code_are_the_stubs(zygote: tuple[subprocess.Popen[bytes], str]) -> None:
    server, path = zygote
    out, err = _stub(path, "--help").communicate(timeout=120)
    assert "usage: harness.run.runtime.rank" in out and not err
    proc = _stub(path, "qwen3_vl_30b", "--profile", "cpu", "--scale", "smoke", "--out", "x", "--no-such-option")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "unrecognized arguments: --no-such-option" in err and not out
    assert server.poll() is None and procs.children(server.pid) == []  # the ranks were reaped


def _blocked_rank(server: int, path: str, tmp_path: Path, **env: str) -> tuple[subprocess.Popen[str], int]:
    """A stub whose rank waits in its rendezvous for a second rank that never comes; (stub, the rank's pid: a child
    of the zygote, or the stub itself when it runs the rank)."""
    port = str(_free_port())
    stub = _stub(path, "qwen3_vl_30b", "--profile", "cpu", "--scale", "smoke", "--steps", "1", "--out",
                 str(tmp_path / "run"), "--quiet", RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port, HARNESS_COLLECTIVE_TIMEOUT_S="120", **env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        named = [p for p in [*procs.children(server), stub.pid] if procs.name(p) == "harness-rank-0"]
        if named:
            return stub, named[0]
        time.sleep(0.1)
    raise AssertionError("the rank never named itself harness-rank-0")


def test_a_killed_rank_kills_its_stub_with_the_same_signal(zygote: tuple[subprocess.Popen[bytes], str],
                                                           tmp_path: Path) -> None:
    server, path = zygote
    stub, rank = _blocked_rank(server.pid, path, tmp_path)
    os.kill(rank, signal.SIGKILL)
    stub.wait(timeout=30)
    assert stub.returncode == -signal.SIGKILL  # torchrun reads "signal 9" for this rank, as for a rank of its own


def test_a_killed_stub_leaves_no_rank_behind(zygote: tuple[subprocess.Popen[bytes], str], tmp_path: Path) -> None:
    server, path = zygote
    stub, rank = _blocked_rank(server.pid, path, tmp_path)
    stub.kill()  # what torchrun's agent does to a worker that outlives its grace period
    stub.wait(timeout=30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{rank}").exists() and rank in procs.children(server.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rank not in procs.children(server.pid), "the rank outlived its stub"


def test_a_rank_whose_import_time_environment_differs_runs_in_its_stub(
        zygote: tuple[subprocess.Popen[bytes], str], tmp_path: Path) -> None:
    """OpenMP reads OMP_NUM_THREADS when it loads: a rank asking for another value than the zygote loaded with is
    not forked (it would run with the zygote's), its stub runs it."""
    server, path = zygote
    threads = str(int(os.environ.get("OMP_NUM_THREADS") or 2) + 1)
    stub, rank = _blocked_rank(server.pid, path, tmp_path, OMP_NUM_THREADS=threads)
    assert rank == stub.pid and rank not in procs.children(server.pid)
    stub.kill()
    stub.wait(timeout=30)


def test_without_a_zygote_the_stub_runs_the_rank_itself(tmp_path: Path) -> None:
    out, _ = _stub(str(tmp_path / "no-such-socket"), "--help").communicate(timeout=120)
    assert "usage: harness.run.runtime.rank" in out
