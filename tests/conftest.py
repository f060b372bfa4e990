"""Session-wide test settings.

One warm-start cache for the whole session (a fresh temporary directory, never the user's
``~/.cache/harness``; ``HARNESS_TEST_CACHE`` names one that the caller shares between sessions): the
cache is keyed by everything that produced a warm start, so runs of the same recipe, seed and numerics
share one instead of each training its own. Under pytest-xdist the
workers share it too (entries are written atomically under random names, so concurrent writers of one
key leave one valid entry).

OpenMP threads wait passively: the suite runs on two workers of two cores, and the default spin-wait
of two 2-thread processes on two cores doubles both processes' wall time. The wait policy changes
no result (the thread count, which does, stays the pinned one).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

# OpenMP's threads sleep at once between parallel regions when pytest-xdist runs two workers on two cores: spinning,
# each run's threads take the CPUs the other worker's run needs (two 12-step smoke runs side by side: 27 s passive,
# 31-33 s with a 1,000-spin wait, 90-126 s with libgomp's default). Alone (the serial pass), a run is faster with the
# default wait: a passive thread's wake-up costs each small parallel region ~0.3 ms on a 2-core VM (one 12-step smoke
# run: 23-24 s passive, 18-21 s spinning). bench/results/omp-wait-epyc-2026-12-07/.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1) > 1:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def workers_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Callable[[str], Path]:
    """``name`` → a directory of this session that every pytest-xdist worker of it shares."""
    def make(name: str) -> Path:
        if worker_id == "master":
            return tmp_path_factory.mktemp(name)
        shared = tmp_path_factory.getbasetemp().parent / name  # the workers' common base directory
        shared.mkdir(exist_ok=True)
        return shared

    return make


@pytest.fixture(scope="session", autouse=True)
def _shared_warm_start_cache(workers_dir: Callable[[str], Path]) -> None:
    # HARNESS_TEST_CACHE: a directory the caller shares between pytest sessions (nox's integration passes)
    shared = os.environ.get("HARNESS_TEST_CACHE")
    os.environ["HARNESS_CACHE"] = shared or str(workers_dir("harness-cache"))
