"""Linux's ``prctl`` for the processes a run starts: a process's name, and a signal when its parent dies.

Both are no-ops elsewhere than Linux (they return without effect, :func:`parent_death_signal` False).
"""

from __future__ import annotations

import ctypes
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_NAME = 15


def _prctl(option: int, arg: int | bytes) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def set_name(name: str) -> None:
    """``name`` (15 bytes at most) as this process's name in ``ps``, ``top`` and ``pgrep``."""
    _prctl(PR_SET_NAME, name.encode()[:15])


def parent_death_signal(sig: int) -> bool:
    """Ask for ``sig`` when this process's parent dies (Linux sends it when the *thread* that started this process
    ends); False where that cannot be armed."""
    return _prctl(PR_SET_PDEATHSIG, sig)
