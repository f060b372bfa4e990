"""Session-wide test settings.

One warm-start cache for the whole session (a fresh temporary directory, never the user's
``~/.cache/harness``): the cache is keyed by everything that produced a warm start, so runs of the
same recipe, seed and numerics share one instead of each training its own. Under pytest-xdist the
workers share it too (entries are written atomically under random names, so concurrent writers of one
key leave one valid entry).

OpenMP threads wait passively: the suite runs on two workers of two cores, and the default spin-wait
of two 2-thread processes on two cores doubles both processes' wall time. The wait policy changes
no result (the thread count, which does, stays the pinned one).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session", autouse=True)
def _shared_warm_start_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> None:
    if worker_id == "master":
        os.environ["HARNESS_CACHE"] = str(tmp_path_factory.mktemp("harness-cache"))
        return
    shared = tmp_path_factory.getbasetemp().parent / "harness-cache"  # the workers' common base directory
    shared.mkdir(exist_ok=True)
    os.environ["HARNESS_CACHE"] = str(shared)
