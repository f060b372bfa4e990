"""A process's children, descendants and name, read from Linux's /proc (empty when it has gone)."""

from __future__ import annotations

from pathlib import Path


def children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a thread's ``children`` file lists those it started)."""
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # the thread ended meanwhile
            pass
    return out


def descendants(pid: int) -> list[int]:
    kids = children(pid)
    return kids + [d for c in kids for d in descendants(c)]


def name(pid: int) -> str:
    """The process's name (``comm``: what ``prctl(PR_SET_NAME)`` set, e.g. ``harness-rank-5``)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
