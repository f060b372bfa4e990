"""One small device layer for cpu / cuda / npu, and the determinism switch.

``torch_npu`` is imported only when an NPU is asked for. Everything device-specific the
trainer needs (synchronise, peak memory, RNG state, env for deterministic collectives) is here.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import random
import re
import resource
import sys
from typing import Any, TypedDict

import numpy as np
import torch

from harness.devices import DEVICE_KINDS
from harness.errors import HarnessError
from harness.numerics import PIN_ENV

# Environment that makes kernels and collectives deterministic (set before CUDA/NCCL/HCCL start).
DETERMINISTIC_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "HCCL_DETERMINISTIC": "true",
    "CLOSE_MATMUL_K_SHIFT": "1",
}
# Variables that change numerics; recorded in the run manifest.
NUMERICS_ENV = sorted(set(DETERMINISTIC_ENV) | {
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NCCL_NVLS_ENABLE", "PYTORCH_CUDA_ALLOC_CONF", "HCCL_ALGO",
    "ASCEND_LAUNCH_BLOCKING", "CUDA_LAUNCH_BLOCKING",
} | set(PIN_ENV))


def resolve_device(kind: str, local_rank: int = 0) -> torch.device:
    """The torch device for ``kind`` (a row of :data:`harness.devices.DEVICE_KINDS`) on this rank; a clear error
    if torch cannot see it."""
    dk = DEVICE_KINDS.lookup(kind)
    if dk.module is None:
        return torch.device(dk.name)
    if dk.extension:
        try:
            importlib.import_module(dk.extension)  # registers the device with torch
        except ImportError:
            raise HarnessError(f"the recipe asks for {dk.name} but {dk.extension} is not installed",
                               key_path="trainer.device", fix=dk.install_fix) from None
    mod = getattr(torch, dk.module, None)
    if mod is None or not mod.is_available():
        raise HarnessError(f"the recipe asks for {dk.name} but torch sees no such device", key_path="trainer.device",
                           fix=dk.install_fix)
    mod.set_device(local_rank)
    return torch.device(dk.name, local_rank)


def _accel(device: torch.device) -> Any:
    dk = DEVICE_KINDS.get(device.type)
    return getattr(torch, dk.module, None) if dk is not None and dk.module else None


def synchronize(device: torch.device) -> None:
    mod = _accel(device)
    if mod is not None:
        mod.synchronize(device)


_STATUS = re.compile(r"^(VmHWM|RssFile|RssShmem):\s+(\d+)\s+kB", re.M)


def release_host_memory() -> None:
    """Give freed heap back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Called once before the first step, so memory a warm start trained in the same process freed
    does not stay resident and count in every step's peak. Not per step: trimming there would
    make each step fault its memory in again and slow the run being measured.
    """
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_host_peak() -> bool:
    """Reset this process's peak RSS (Linux ``clear_refs`` 5); False where that is not possible.

    Without the reset, a CPU run's peak would be the whole process's: set-up and a warm start
    trained in the same process would count in every step.
    """
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _host_peak_gb() -> float:
    """Peak private memory since the last reset: VmHWM less the file-backed and shared pages now
    resident (library code, whose resident share depends on the page cache, not on the run).

    Falls back to ru_maxrss (peak since the process started) where /proc is not there.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            fields = {k: int(v) for k, v in _STATUS.findall(fh.read())}
        if "VmHWM" in fields:
            return (fields["VmHWM"] - fields.get("RssFile", 0) - fields.get("RssShmem", 0)) * 1024 / 1e9
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if sys.platform == "darwin" else 1024) / 1e9


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window (one training step)."""
    mod = _accel(device)
    if mod is not None:
        mod.reset_peak_memory_stats(device)
    else:
        _reset_host_peak()


def peak_memory_gb(device: torch.device) -> float:
    """Peak allocated device memory (accelerators) or the process's peak RSS in this window (cpu), in GB."""
    mod = _accel(device)
    if mod is not None:
        return mod.max_memory_allocated(device) / 1e9
    return _host_peak_gb()


def _deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True)`` without importing TorchInductor when nothing has yet: the
    public call imports it (1.4 s of a 20 s CPU run on two cores) only to set its ``deterministic`` option, which
    TorchInductor reads from ``TORCHINDUCTOR_DETERMINISTIC`` when it is first imported. So: that variable, then
    the same switch the public call sets."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
        return
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    torch._C._set_deterministic_algorithms(True, warn_only=False)


def set_determinism(seed: int, deterministic: bool) -> None:
    """Seed every RNG; with ``deterministic`` also force deterministic kernels and collectives."""
    if deterministic:
        for key, value in DETERMINISTIC_ENV.items():
            os.environ.setdefault(key, value)
        _deterministic_algorithms()
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Every RNG state of this process (for checkpoints)."""
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def numerics_env() -> dict[str, str]:
    return {k: os.environ[k] for k in NUMERICS_ENV if k in os.environ}


# ----------------------------------------------------------------------------- machine speed
CALIBRATION_WORKLOAD = "8 x (256x256 GEMM + tanh) + 4 x softmax(64x2048), float32; median of 15 after 2 warm-ups"


def speed_index(device: torch.device) -> float:
    """Repetitions per second of a small fixed workload like the engine's (GEMM, elementwise, softmax).

    Measured at a run's start and end: a throughput reference recorded on a machine of the same
    model but another speed (another VM host, a busier neighbour) is scaled by the ratio of the two
    indices before it is used as a floor. Uses no global RNG state.
    """
    import statistics
    import time

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=gen).to(device)
    b = (torch.randn(256, 256, generator=gen) / 16).to(device)
    x = torch.randn(64, 2048, generator=gen).to(device)

    def once() -> None:
        y = a
        for _ in range(8):
            y = torch.tanh(y @ b)
        for _ in range(4):
            x.softmax(-1)
        synchronize(device)

    times = []
    with torch.no_grad():
        for i in range(17):
            t0 = time.perf_counter()
            once()
            if i >= 2:
                times.append(time.perf_counter() - t0)
    return 1.0 / statistics.median(times)


CALIBRATE_EVERY = 10  # steps between a CPU run's calibration samples (besides the one at its start and its end)


def calibrate_every(device: torch.device) -> int:
    """Steps between a run's calibration samples. An accelerator run samples before every step (its sample is
    the step's ``perf/speed_index``): a launch-bound step there follows the host's moment-to-moment load, and
    samples every 10 steps missed it (an H200 host's runs false-FAILed throughput, 2026-12-04). A sample costs
    ~15 ms there; on a CPU it costs about a step's share of a small run, so a CPU run samples every 10 steps."""
    return CALIBRATE_EVERY if device.type == "cpu" else 1


def calibrated_speed(samples: list[float]) -> float:
    """A run's machine speed: the median of its calibration samples, taken at its start, every
    :data:`CALIBRATE_EVERY` steps and at its end. One sample taken during a neighbour's burst, or in a fast moment
    of a machine that is slow for the rest of the run (an H200 host measured 1,669 at a run's start and ~1,100 for
    the rest of it, at 0.72x the throughput), moves the median only when it is most of the run."""
    import statistics

    return float(statistics.median(samples))


def fast_kernels(device: torch.device, deterministic: bool) -> bool:
    """Whether the engine may use its faster kernels that change bits (the fused AdamW, the compiled output
    head and its chunked backward, the lean and Triton RMSNorms, the fused sampler and MoE routing): on CUDA
    outside deterministic mode only. Deterministic runs keep the kernels their baselines were recorded with,
    bit for bit."""
    return device.type == "cuda" and not deterministic


def cuda_triton(device: torch.device) -> bool:
    """A CUDA device with Triton to compile for it: where the engine's own kernels (the fused sampler, the
    one-kernel RMSNorm, the MoE routing, the compiled output head) can run at all."""
    if device.type != "cuda":
        return False
    from torch.utils._triton import has_triton

    return bool(has_triton())


def pow2_block(n: int) -> int:
    """The smallest power of two ≥ ``n`` (and ≥ 16): a Triton block that covers ``n`` elements."""
    return max(16, 1 << (n - 1).bit_length())


def shapes_only(t: torch.Tensor) -> bool:
    """A meta or fake tensor (``harness plan`` traces memory): a kernel's buffers are allocated, nothing runs."""
    from torch._subclasses.fake_tensor import is_fake

    return t.is_meta or bool(is_fake(t))


class AdamWKernel(TypedDict):
    fused: bool | None
    foreach: bool | None


def adamw_kernel(device: torch.device, deterministic: bool) -> AdamWKernel:
    """Which AdamW implementation: fused on the CPU (its square root is the instruction's, the same bits on
    every x86-64 machine; the per-tensor step's goes through oneMKL's vector math, which differs between
    Intel and AMD) and on CUDA outside deterministic mode; else the per-tensor loop."""
    fused = device.type == "cpu" or fast_kernels(device, deterministic)
    return {"fused": True, "foreach": None} if fused else {"fused": None, "foreach": False}
