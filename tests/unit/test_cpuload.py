"""Per-step CPU contention: the counters' arithmetic, and what the throughput verdict does with it."""

from __future__ import annotations

import time

import pytest

from harness.judge import baseline as B
from harness.run import cpuload as L

STAT = """cpu  500 0 100 300 0 0 0 10 0 0
cpu0 200 0 50 150 0 0 0 5 0 0
cpu1 300 0 50 150 0 0 0 5 0 0
cpu2 999 0 0 0 0 0 0 0 0 0
intr 1 2 3
"""


def test_only_the_cpus_this_run_may_use_count():
    assert L.parse_proc_stat(STAT, {0, 1}) == (600, 300, 10)
    assert L.parse_proc_stat(STAT, {2}) == (999, 0, 0)
    assert L.parse_proc_stat(STAT, {7}) is None
    assert L.parse_proc_stat("cpu0 1 2 3\n", {0}) is None  # a kernel without the steal column: not measured


def test_shares_split_the_time_between_this_run_others_and_idle():
    hz = 100
    a = L.Sample(busy=1000, idle=1000, steal=0, own_s=10.0)
    # 200 jiffies passed: this run 1.2 s = 120 jiffies, 40 more busy (others), 20 stolen, 20 idle
    b = L.Sample(busy=1160, idle=1020, steal=20, own_s=11.2)
    s = L.shares(a, b, hz)
    assert s == {L.OTHERS_METRIC: pytest.approx(0.3), L.IDLE_METRIC: pytest.approx(0.1)}
    alone = L.Sample(busy=1120, idle=1080, steal=0, own_s=11.2)  # only this run worked: no others
    assert L.shares(a, alone, hz)[L.OTHERS_METRIC] == pytest.approx(0.0, abs=1e-12)
    assert L.shares(a, a, hz) is None


def test_contended_means_others_took_time_of_saturated_cpus():
    assert L.contended(0.3, 0.02)
    assert not L.contended(0.3, 0.5), "a big machine whose other cores are busy: this run lost nothing"
    assert not L.contended(0.02, 0.0), "the run itself saturates the CPUs: not contention"
    assert not L.contended(None, None)


def test_a_step_is_measured_on_this_machine():
    load = L.StepLoad()
    load.start()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.05:
        pass
    shares = load.stop()
    if not shares:
        pytest.skip("no /proc/stat here")
    assert set(shares) == {L.OTHERS_METRIC, L.IDLE_METRIC}
    assert all(0.0 <= v <= 1.0 for v in shares.values())


def test_unreadable_counters_record_nothing(tmp_path):
    load = L.StepLoad(stat=tmp_path / "missing")
    load.start()
    assert load.stop() == {}


def _run(tps: dict[int, float], busy: set[int], steps: int = 20) -> dict[str, dict[int, float]]:
    return {"perf/throughput": tps,
            L.OTHERS_METRIC: {k: (0.4 if k in busy else 0.01) for k in range(1, steps + 1)},
            L.IDLE_METRIC: {k: (0.0 if k in busy else 0.02) for k in range(1, steps + 1)}}


def test_contended_steps_are_left_out_of_the_steady_speed():
    tps = {k: (500.0 if k in (10, 11) else 1000.0) for k in range(1, 21)}
    sp = B.steady_speed(_run(tps, {10, 11}), "perf/throughput", warmup=2)
    assert sp.judgeable and sp.left_out == 2 and sp.values == [1000.0] * 16
    assert sp.others_share == pytest.approx(0.4)
    mostly = B.steady_speed(_run(tps, set(range(5, 21))), "perf/throughput", warmup=2)
    assert not mostly.judgeable and "16 of 18 steady steps" in mostly.why_not()
    old = B.steady_speed({"perf/throughput": tps}, "perf/throughput", warmup=2)  # runs recorded before the metric
    assert old.judgeable and old.left_out == 0 and len(old.values) == 18


def test_reference_speeds_prefer_uncontended_runs():
    tps = {k: 1000.0 for k in range(1, 21)}
    pol = B.DEFAULT_POLICY.throughput.model_copy(update={"metric": "perf/throughput", "warmup_steps": 2})
    assert B.reference_speeds([_run(tps, set()), _run(tps, set(range(1, 21)))], pol, 20) == [[1000.0] * 18, []]
    # every run contended (e.g. --jobs 2 on two cores): all their steps, a low reference and so a lenient floor
    assert B.reference_speeds([_run(tps, set(range(1, 21)))], pol, 20) == [[1000.0] * 18]
    with pytest.raises(B.HarnessError, match="no steady steps"):
        B.reference_speeds([{"perf/throughput": {1: 5.0}}], pol, 1)
