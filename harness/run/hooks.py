"""Fault injection and test hooks as training callbacks, built once when a run starts.

The gate's mutation tests must prove that a verdict catches a flipped advantage sign or a slowdown
(``HARNESS_FAULT``), and the resume tests need a run that stops itself after a given step
(``HARNESS_STOP_AFTER_STEP``). Those are callbacks here, made from the environment by
:func:`callbacks_from_env`; the training loop only calls them, and a run with a fault injected is
marked as such in its manifest (and refused as a baseline).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from harness.errors import HarnessError

FAULTS = ("flip-advantage", "slowdown")


def parse_fault(text: str | None) -> dict[str, Any]:
    """``flip-advantage`` or ``slowdown:0.3`` (throughput 30 % lower: each step sleeps 0.3 / 0.7 of its
    time); empty = none."""
    if not text:
        return {}
    name, _, arg = text.partition(":")
    if name not in FAULTS:
        raise HarnessError(f"unknown fault '{name}'", key_path="HARNESS_FAULT", fix=f"use one of {', '.join(FAULTS)}")
    if name == "slowdown":
        try:
            value = float(arg)
        except ValueError:
            value = -1.0
        if not 0.0 < value < 1.0:
            raise HarnessError(f"bad slowdown '{arg}'", key_path="HARNESS_FAULT",
                               fix="give the fraction of throughput to lose, 0 < x < 1, e.g. slowdown:0.3")
        return {"slowdown": value}
    return {name: True}


class Callback:
    """Called by the training loop: once the trainer exists, after each step's training (its metrics may be
    changed), and after the step is recorded."""

    def on_start(self, trainer: Any) -> None:
        pass

    def on_step(self, step: int, metrics: dict[str, float], world: int) -> None:
        pass

    def on_recorded(self, step: int) -> None:
        pass


class FlipAdvantage(Callback):
    def on_start(self, trainer: Any) -> None:
        trainer.advantage_sign = -1.0


def busy_wait(seconds: float) -> None:
    """Keep this thread busy for ``seconds``, as slower code would: a sleep instead idles the host, and on an H200
    host the steps after a sleep ran ~15 % faster (a 30 % slowdown then read as -17 %, 2026-12-05)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Slowdown(Callback):
    """A step of time t then takes t / (1 - x): throughput falls by the fraction x (the numbers do not change).
    The extra time is spent busy (:func:`busy_wait`), not asleep."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def on_step(self, step: int, metrics: dict[str, float], world: int) -> None:
        extra = metrics["timing_s/step"] * self.fraction / (1.0 - self.fraction)
        busy_wait(extra)
        metrics["timing_s/step"] += extra
        metrics["perf/throughput"] = metrics["perf/total_num_tokens"] / metrics["timing_s/step"] / world


class StopAfter(Callback):
    """Test-only: this process sends itself SIGTERM once ``step`` is recorded (as a scheduler's preemption would)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_recorded(self, step: int) -> None:
        if step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def callbacks_from_env(fault: dict[str, Any]) -> list[Callback]:
    """The callbacks ``fault`` (parsed ``HARNESS_FAULT``) and ``HARNESS_STOP_AFTER_STEP`` ask for."""
    out: list[Callback] = []
    if fault.get("flip-advantage"):
        out.append(FlipAdvantage())
    if fault.get("slowdown"):
        out.append(Slowdown(fault["slowdown"]))
    stop = os.environ.get("HARNESS_STOP_AFTER_STEP", "")
    if stop.isdigit():
        out.append(StopAfter(int(stop)))
    return out
