"""Fault injection and test hooks are callbacks made from the environment; the loop only calls them."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from harness.errors import HarnessError
from harness.run import hooks as H


def test_faults_parse_or_fail_in_one_line():
    assert H.parse_fault(None) == {} and H.parse_fault("flip-advantage") == {"flip-advantage": True}
    assert H.parse_fault("slowdown:0.3") == {"slowdown": 0.3}
    with pytest.raises(HarnessError, match="unknown fault 'nan-loss'"):
        H.parse_fault("nan-loss")
    with pytest.raises(HarnessError, match="bad slowdown '1.5'"):
        H.parse_fault("slowdown:1.5")


def test_callbacks_follow_the_environment(monkeypatch):
    monkeypatch.delenv("HARNESS_STOP_AFTER_STEP", raising=False)
    assert H.callbacks_from_env({}) == []
    monkeypatch.setenv("HARNESS_STOP_AFTER_STEP", "3")
    kinds = [type(c) for c in H.callbacks_from_env({"flip-advantage": True, "slowdown": 0.5})]
    assert kinds == [H.FlipAdvantage, H.Slowdown, H.StopAfter]


def test_each_callback_does_what_it_says(monkeypatch):
    trainer = SimpleNamespace(advantage_sign=1.0)
    H.FlipAdvantage().on_start(trainer)
    assert trainer.advantage_sign == -1.0
    busy = []
    monkeypatch.setattr(H, "busy_wait", busy.append)
    m = {"timing_s/step": 1.0, "perf/total_num_tokens": 1000.0, "perf/throughput": 1000.0}
    H.Slowdown(0.5).on_step(4, m, world=1)
    assert busy == [1.0] and m["timing_s/step"] == 2.0 and m["perf/throughput"] == 500.0  # half the throughput
    sent = []
    monkeypatch.setattr(H.os, "kill", lambda pid, sig: sent.append(sig))
    stop = H.StopAfter(2)
    stop.on_recorded(1)
    stop.on_recorded(2)
    assert sent == [signal.SIGTERM]


def test_the_slowdown_keeps_the_thread_busy_rather_than_asleep():
    """Slower code keeps the host busy; a sleep idles it (and on an H200 host the steps after a sleep ran faster)."""
    import time

    wall, cpu = time.perf_counter(), time.thread_time()
    H.busy_wait(0.2)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    assert wall >= 0.2 and cpu >= 0.05, (wall, cpu)  # asleep, a thread uses ~0 CPU
