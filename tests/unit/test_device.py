"""Host peak memory on CPU: a window per step, not the process's lifetime peak."""

from __future__ import annotations

import os

import pytest
import torch

from harness.core.device import peak_memory_gb, reset_peak_memory

CPU = torch.device("cpu")


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_reset_starts_a_new_window() -> None:
    reset_peak_memory(CPU)
    base = peak_memory_gb(CPU)
    big = bytearray(256 * 1024 * 1024)  # zero-filled: every page touched
    big[::4096] = b"\x01" * len(big[::4096])
    during = peak_memory_gb(CPU)
    assert during >= base + 0.2, (base, during)
    del big
    assert peak_memory_gb(CPU) >= during - 1e-3  # a peak does not fall by itself
    reset_peak_memory(CPU)
    assert peak_memory_gb(CPU) < during - 0.2, "the earlier allocation still counts after a reset"
