"""Session-wide test settings.

One warm-start cache for the whole session (a fresh temporary directory, never the user's
``~/.cache/harness``): the cache is keyed by everything that produced a warm start, so runs of the
same recipe, seed and numerics share one instead of each training its own.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _shared_warm_start_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["HARNESS_CACHE"] = str(tmp_path_factory.mktemp("harness-cache"))
