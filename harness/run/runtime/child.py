"""`python -m harness run …` in a child process (record-baseline's seeds, the gate, ckpt-resume).

The child imports this checkout's package (its root goes first on PYTHONPATH), so a run made this
way is the same code as the command that made it, installed or not. It does not outlive its parent: a
``record-baseline`` or ``gate`` killed with SIGKILL (which it cannot forward) would otherwise leave its run training
on, unseen, for the rest of its steps. The child asks Linux for a SIGHUP when its parent dies (``PR_SET_PDEATHSIG``):
its output then goes to /dev/null (the pipes its parent read are gone: a write would fail the run with a broken
pipe) and it stops as on SIGTERM, after the step, with a checkpoint and the status ``interrupted``. (Linux sends it
when the *thread* that started the child ends: :func:`harness_run` waits for the child in that thread, whether the
main thread or one of record-baseline's ``--jobs``.)
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Any

from harness.paths import ROOT

PARENT_PID = "HARNESS_PARENT_PID"  # set by harness_run for its child, read (and removed) by follow_parent
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def harness_run(args: list[str], *, env: dict[str, str] | None = None, **kwargs: Any
                ) -> subprocess.CompletedProcess[str]:
    """Run ``harness run ARGS`` to completion; ``env`` adds variables, ``kwargs`` go to subprocess.run."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                PARENT_PID: str(os.getpid()), **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", "run", *args], env=full_env, text=True, check=False,
                          **kwargs)


def follow_parent() -> None:
    """In a child that :func:`harness_run` started: stop this process when its parent dies (:func:`_orphaned`);
    exit at once if the parent is already gone. The variable is removed, so this process's own children (torchrun's
    ranks) do not mistake their parent for it. Elsewhere than Linux nothing is armed (the child then outlives a
    killed parent)."""
    parent = os.environ.pop(PARENT_PID, None)
    if not parent or not sys.platform.startswith("linux"):
        return
    old = signal.signal(signal.SIGHUP, _orphaned)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if not armed:
        signal.signal(signal.SIGHUP, old)
    elif str(os.getppid()) != parent:  # the parent died before the signal was armed
        sys.stderr.write(f"error: {PARENT_PID}: the process that started this run (pid {parent}) has ended (fix: "
                         f"start the run again; a run started by hand must not have {PARENT_PID} set)\n")
        raise SystemExit(128 + signal.SIGTERM)


def _orphaned(signum: int, frame: Any) -> None:
    """The parent died: the pipes it read are gone, so stdout and stderr go to /dev/null from now on, and the run
    stops as it does on SIGTERM."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    signal.raise_signal(signal.SIGTERM)
