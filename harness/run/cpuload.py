"""Who else used this run's CPUs: the share of them taken by other processes or by the hypervisor.

A throughput floor holds for a machine that runs nothing else. On a shared CI runner or a VM with a
busy neighbour the same code runs slower, and a verdict that calls that a regression is a false
FAIL. So every step records, from the kernel's counters (``/proc/stat``, summed over the CPUs this
process may run on) and this process's own CPU time:

- ``perf/cpu_others_share``: the share of those CPUs' time spent on work that is not this run's
  (other processes' user and system time, interrupts) plus the time the hypervisor gave to other
  guests (``steal``);
- ``perf/cpu_idle_share``: the share left idle (``idle`` + ``iowait``).

A step is *contended* when others took a real share (:data:`OTHERS_MIN`) of CPUs that were
saturated (idle below :data:`IDLE_MAX`): this run could have had that time. A big machine whose
other cores are busy is not contended — its idle share stays high. Nothing is recorded where the
counters cannot be read (not Linux); the throughput check then works as before.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

OTHERS_METRIC = "perf/cpu_others_share"
IDLE_METRIC = "perf/cpu_idle_share"
OTHERS_MIN = 0.10  # others took at least this share of the CPUs …
IDLE_MAX = 0.10  # … and less than this share was left idle: the step was contended

# /proc/stat columns after the name: user nice system idle iowait irq softirq steal (guest time is inside user)
_BUSY, _IDLE, _STEAL = (0, 1, 2, 5, 6), (3, 4), 7


def parse_proc_stat(text: str, cpus: set[int]) -> tuple[int, int, int] | None:
    """(busy, idle, steal) jiffies summed over the ``cpuN`` lines of ``cpus``; None if none is there."""
    busy = idle = steal = 0
    seen = False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        vals = [int(x) for x in rest.split()]
        if len(vals) < 8:
            return None
        busy += sum(vals[i] for i in _BUSY)
        idle += sum(vals[i] for i in _IDLE)
        steal += vals[_STEAL]
        seen = True
    return (busy, idle, steal) if seen else None


@dataclass(frozen=True)
class Sample:
    busy: int
    idle: int
    steal: int
    own_s: float  # this run's CPU seconds (all its threads)


def shares(a: Sample, b: Sample, hz: int) -> dict[str, float] | None:
    """The two metrics between samples ``a`` and ``b``; None when no time passed on the counters."""
    busy, idle, steal = b.busy - a.busy, b.idle - a.idle, b.steal - a.steal
    total = busy + idle + steal
    if total <= 0:
        return None
    own = (b.own_s - a.own_s) * hz
    others = max(0.0, busy - own) + steal
    return {OTHERS_METRIC: min(1.0, others / total), IDLE_METRIC: idle / total}


def contended(others: float | None, idle: float | None) -> bool:
    return others is not None and idle is not None and others >= OTHERS_MIN and idle < IDLE_MAX


class StepLoad:
    """``start()`` before a step, ``stop()`` after it: the step's shares (an empty dict where unmeasurable).

    ``own_cpu`` gives this run's CPU seconds; a multi-process run passes one that sums its ranks'.
    """

    def __init__(self, own_cpu: Callable[[], float] = time.process_time, stat: Path = Path("/proc/stat")) -> None:
        self.own_cpu, self.stat = own_cpu, stat
        try:
            self.cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            self.cpus = set()
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._start: Sample | None = None

    def _sample(self) -> Sample | None:
        own = self.own_cpu()  # first and always: in a multi-process run every rank takes part in it
        try:
            parsed = parse_proc_stat(self.stat.read_text(), self.cpus)
        except (OSError, ValueError):
            return None
        return Sample(*parsed, own_s=own) if parsed else None

    def start(self) -> None:
        self._start = self._sample()

    def stop(self) -> dict[str, float]:
        end = self._sample()
        if self._start is None or end is None:
            return {}
        return shares(self._start, end, self.hz) or {}
