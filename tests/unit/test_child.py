"""A child run does not outlive the command that started it (record-baseline, the gate, ckpt-resume)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run.runtime.child import PARENT_PID

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# The parent: starts a child that arms follow_parent() (as `harness run` does first), reading its stdout and stderr
# through pipes; prints the child's pid once the child says it is armed, then sleeps until it is killed.
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, %r: str(os.getpid())})
assert child.stdout.readline() == "armed\\n"
print(child.pid, flush=True)
time.sleep(120)
""" % PARENT_PID
# The child: on SIGTERM it writes to stderr, whose reader is gone by then, as a run's stop notice does, and
# records that it got there.
CHILD = """
import os, signal, sys, time
from harness.run.runtime.child import follow_parent, PARENT_PID
follow_parent()
assert PARENT_PID not in os.environ  # the child's own children do not inherit it
def stop(*_):
    sys.stderr.write("notice: SIGTERM received; stopping after this step\\n" * 10000)
    sys.stderr.flush()
    with open(sys.argv[1], "w") as f:
        f.write("stopped cleanly")
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
print("armed", flush=True)
time.sleep(120)
"""


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_child_stops_cleanly_when_its_parent_is_killed(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    marker = tmp_path / "stopped"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(marker)], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)  # the signal no handler sees: nothing forwards it
        parent.wait(timeout=30)
        assert _gone(child, 30), "the child ran on after its parent was killed"
        # its SIGTERM handler ran and could write: no broken pipe, output to /dev/null
        assert marker.read_text() == "stopped cleanly"
    finally:
        parent.kill()


def test_without_the_variable_nothing_is_armed() -> None:
    """A `harness run` a user starts (no HARNESS_PARENT_PID) is not tied to its shell."""
    env = {k: v for k, v in os.environ.items() if k != PARENT_PID} | {"PYTHONPATH": str(ROOT)}
    code = "from harness.run.runtime.child import follow_parent; follow_parent(); import ctypes; " \
           "v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); print(v.value)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "0"  # PR_GET_PDEATHSIG: none


def test_a_parent_already_gone_stops_the_child_at_once() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), PARENT_PID: "1"}  # not this child's parent: it died meanwhile
    proc = subprocess.run([sys.executable, "-c", "from harness.run.runtime.child import follow_parent; "
                           "follow_parent(); print('ran on')"], capture_output=True, text=True, env=env)
    assert proc.returncode == 128 + signal.SIGTERM and "ran on" not in proc.stdout
    (line,) = proc.stderr.splitlines()  # one line naming the variable and the fix, no traceback
    assert line.startswith(f"error: {PARENT_PID}:") and "fix:" in line
