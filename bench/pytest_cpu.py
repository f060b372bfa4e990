"""Where the test command's CPU goes, test by test: a pytest plugin (``-p pytest_cpu`` with ``bench/`` on the path).

For every test (its setup, call and teardown) it records the wall seconds and the CPU seconds of the pytest process
itself and of every child process it waited for (``getrusage(RUSAGE_SELF)`` + ``RUSAGE_CHILDREN``), so runs that
are killed or end by ``os._exit`` count too, which ``proc_profile.py`` misses. One JSON line per test is appended
to ``$HARNESS_TEST_CPU_LOG`` (default ``/tmp/test-cpu.jsonl``). A fixture's set-up counts for the test that first
asked for it. Commands forked by ``tests/forkserver.py`` are children of the fork server, not of the worker: set
``HARNESS_TEST_FORK=0`` so that each command is a process of its own and is counted where it ran.

Used on a clone, never on a checkout whose tests are being judged::

    HARNESS_TEST_FORK=0 PYTHONPATH=bench nox -R -s integration -- tests/integration tests/fuzz -p pytest_cpu -n 2 --dist loadfile
    python3 bench/pytest_cpu.py /tmp/test-cpu.jsonl
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    t0, (own0, kids0) = time.monotonic(), _cpu()
    yield
    own1, kids1 = _cpu()
    line = {"test": item.nodeid, "wall": round(time.monotonic() - t0, 2), "cpu_self": round(own1 - own0, 2),
            "cpu_children": round(kids1 - kids0, 2), "worker": os.environ.get("PYTEST_XDIST_WORKER", "master"),
            "t_end": round(time.time(), 2)}
    with open(os.environ.get("HARNESS_TEST_CPU_LOG", "/tmp/test-cpu.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def summary(path: str, top: int = 40) -> list[dict[str, Any]]:
    """CPU seconds by test file and the costliest tests (parametrizations summed)."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    by_file: dict[str, float] = defaultdict(float)
    by_test: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        cpu = r["cpu_self"] + r["cpu_children"]
        by_file[r["test"].split("::")[0]] += cpu
        t = by_test[r["test"].split("[")[0]]
        t[0] += cpu
        t[1] += r["cpu_self"]
        t[2] += r["wall"]
    total = sum(by_file.values())
    print(f"{len(rows)} tests, {total:.0f} CPU-s")
    for f, c in sorted(by_file.items(), key=lambda kv: -kv[1]):
        print(f"  {c:7.1f} CPU-s  {f}")
    out = [{"test": k, "cpu_s": round(v[0], 1), "cpu_self_s": round(v[1], 1), "wall_s": round(v[2], 1)}
           for k, v in sorted(by_test.items(), key=lambda kv: -kv[1][0])]
    for r in out[:top]:
        print(f"  {r['cpu_s']:7.1f} CPU-s (in pytest {r['cpu_self_s']:6.1f})  wall {r['wall_s']:7.1f}  {r['test']}")
    return out


if __name__ == "__main__":
    summary(sys.argv[1] if len(sys.argv) > 1 else "/tmp/test-cpu.jsonl")
