"""A process's children, descendants and name, read from Linux's /proc (empty when it has gone)."""

from __future__ import annotations

from pathlib import Path


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    kids = children(pid)
    return kids + [d for c in kids for d in descendants(c)]


def name(pid: int) -> str:
    """The process's name (``comm``: what ``prctl(PR_SET_NAME)`` set, e.g. ``harness-rank-5``)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
