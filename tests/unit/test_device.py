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


_DETERMINISM_PROBE = """
import sys, os
os.environ.pop("TORCHINDUCTOR_DETERMINISTIC", None)
import torch
from harness.core.device import set_determinism
set_determinism(7, True)
print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
      "torch._inductor" in sys.modules)
import torch._inductor.config as c
print(c.deterministic)
"""


def test_deterministic_mode_without_importing_inductor() -> None:
    """set_determinism sets what torch.use_deterministic_algorithms(True) sets (the kernels' switch, not warn-only,
    and TorchInductor's option once it is imported) without importing TorchInductor itself."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _DETERMINISM_PROBE], capture_output=True, text=True, check=True,
                         timeout=120).stdout.split("\n")
    assert out[0] == "True False False", out
    assert out[1] == "True", out
