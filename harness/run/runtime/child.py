"""`python -m harness run …` in a child process (record-baseline's seeds, the gate, ckpt-resume).

The child imports this checkout's package (its root goes first on PYTHONPATH), so a run made this
way is the same code as the command that made it, installed or not. It does not outlive its parent: a
``record-baseline`` or ``gate`` killed with SIGKILL (which it cannot forward) would otherwise leave its run training
on, unseen, for the rest of its steps. The child asks Linux for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``),
so it stops after the step like any interrupted run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Any

from harness.paths import ROOT


def harness_run(args: list[str], *, env: dict[str, str] | None = None, **kwargs: Any
                ) -> subprocess.CompletedProcess[str]:
    """Run ``harness run ARGS`` to completion; ``env`` adds variables, ``kwargs`` go to subprocess.run."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                PARENT_PID: str(os.getpid()), **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", "run", *args], env=full_env, text=True, check=False,
                          **kwargs)


PARENT_PID = "HARNESS_PARENT_PID"  # set by harness_run for its child, read (and removed) by follow_parent
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def follow_parent() -> None:
    """In a child that :func:`harness_run` started: SIGTERM this process when its parent dies; exit at once if the
    parent is already gone. The variable is removed, so this process's own children (torchrun's ranks) do not
    mistake their parent for it. Elsewhere than Linux nothing is armed (the child then outlives a killed parent)."""
    parent = os.environ.pop(PARENT_PID, None)
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if armed and str(os.getppid()) != parent:  # the parent died before the signal was armed
        raise SystemExit(128 + signal.SIGTERM)
