"""The CPU numerics pin: the same bits on every supported x86-64 machine.

A CPU run's numbers depend on which instruction set the math libraries dispatch to: ATen picks
AVX-512 or AVX2 kernels by ``cpuid``, oneMKL picks a code branch (and, on AMD, its own kernels),
oneDNN JIT-compiles for the widest ISA it finds, and the number of threads decides how reductions
are split. RL training amplifies a last-bit difference into another trajectory within a few
steps, so a baseline recorded on an AVX-512 machine could not be reproduced bitwise on an
AVX2-only one.

The torch 2.13 CPU wheel links oneMKL 2024.2 (BLAS/LAPACK and the vector math ATen uses for
``exp``, ``log``, ``sqrt`` …), oneDNN 3.x and OpenMP (``torch.__config__.show()``). The pin fixes them to
code paths every supported machine runs the same way:

- ``ATEN_CPU_CAPABILITY=avx2`` — ATen's vectorised kernels (reductions, softmax, norms, SDPA);
- ``MKL_CBWR=COMPATIBLE`` — oneMKL's conditional numerical reproducibility on its compatible branch,
  the one oneMKL documents as giving the same results on Intel and non-Intel processors. Its AVX2
  branch (``AVX2,STRICT``, 23 % faster on a smoke run) does not: measured, ``exp``, ``log`` and
  ``logsumexp`` then differ between an Intel AVX-512 and an AMD AVX2 machine, and so do GEMMs (a
  256 x 256 ``mm``), so a run differs even with no vector math left (``bench/results/cpu-mkl-branch-*``).
  Nor do its ``SSE4_2`` and ``AVX`` branches (as fast as AVX2 there): on an AMD EPYC all three give one result,
  on an Intel Xeon each its own, every GEMM shape differing (``bench/results/cpu-mkl-branches-2026-12-06``);
- ``ONEDNN_MAX_CPU_ISA=AVX2`` (and the older ``DNNL_MAX_CPU_ISA``) — oneDNN's JIT;
- a fixed thread count (``CPU_THREADS``) for OpenMP, oneMKL and torch.

Two operations stay vendor-specific whatever oneMKL is told, so the GRPO core avoids them on the CPU:
``torch.sqrt`` (oneMKL's, not correctly rounded: 16 % of float32 results differ from IEEE on an AMD
EPYC, and other ones on Intel) — the group std takes :func:`harness.core.algos.portable_sqrt` — and
therefore the per-tensor AdamW step, which calls it: the CPU optimiser is the fused one (its square
root is the instruction's).

The variables are read once, when each library initialises, so :func:`apply_env` runs first thing
in the command line (before torch is imported) and :func:`activate` checks afterwards that the pin
actually took (``torch.backends.cpu.get_cpu_capability()``). ``HARNESS_CPU_ISA=native`` turns the
pin off (each library uses the widest ISA of the machine: faster, machine-specific bits). A
machine without AVX2 and FMA, or not x86-64, runs unpinned and says so in its manifest.

Measured with ``bench/cpu_portability.sh`` on torch 2.11 (the build both machines could install),
an AMD EPYC AVX2 machine against an Intel Xeon AVX-512 one: the whole ``qwen3_vl_30b`` smoke run
(150-step warm start, 40 GRPO steps, 1,285 metric values) gives **the same bits** on both; with the
earlier pin (``MKL_CBWR=AVX2,STRICT``, per-tensor AdamW, ``torch.sqrt``) they agreed to ~1e-6
relative. So the exactness key holds the pin, not the CPU's vendor or widest ISA (:func:`isa_class`,
still recorded). The cost: oneMKL's compatible GEMMs are slower — measured on a 2-core AMD EPYC, the
smoke recipes ran 26–37 % slower than on its AVX2 branch.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from typing import Any

PIN_VARIABLE = "HARNESS_CPU_ISA"
DEFAULT_LEVEL = "avx2"
CPU_THREADS = 2  # the smallest runner the project supports; the pin fixes it everywhere
LEVELS: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "DNNL_MAX_CPU_ISA": "AVX2"},
}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
REQUIRED_FLAGS = {"avx2": ("avx2", "fma")}
# Every variable the pin may set (recorded in run manifests as numerics settings).
PIN_ENV = sorted({k for env in LEVELS.values() for k in env} | set(THREAD_VARIABLES) | {PIN_VARIABLE})


def _cpuinfo(field: str) -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _cpu_flags() -> set[str]:
    return set(_cpuinfo("flags").split())


def isa_class() -> str:
    """The CPU's vendor and widest vector ISA (``GenuineIntel/avx512``, ``AuthenticAMD/avx2`` …).

    Recorded in manifests and listed among a verdict's changes; not part of the exactness key (pinned,
    the classes give the same bits, see the module docstring).
    """
    flags = _cpu_flags()
    widest = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "sse"
    return f"{_cpuinfo('vendor_id') or platform.machine()}/{widest}"


def requested_level() -> str:
    """The level asked for: ``HARNESS_CPU_ISA`` (``avx2`` by default, ``native`` = no pin)."""
    return (os.environ.get(PIN_VARIABLE) or DEFAULT_LEVEL).strip().lower()


def supported(level: str) -> tuple[bool, str]:
    """Whether this machine can run ``level``, and why not."""
    if level not in LEVELS:
        return False, f"unknown level '{level}'"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False, f"{platform.machine()} is not x86-64"
    missing = [f for f in REQUIRED_FLAGS[level] if f not in _cpu_flags()]
    if missing:
        return False, f"the CPU lacks {', '.join(missing)}"
    return True, ""


def apply_env() -> None:
    """Set the pin's variables for this process and its children (before torch is imported).

    Values already in the environment win (a user may pin differently); what was in effect is
    recorded by :func:`describe`.
    """
    for key, value in pinned(os.environ).items():
        os.environ.setdefault(key, value)


def pinned(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the pin's variables added where it lacks them: what :func:`apply_env` makes of a process's
    environment (a child started with it imports under the pin it would set for itself)."""
    out = dict(env)
    level = (out.get(PIN_VARIABLE) or DEFAULT_LEVEL).strip().lower()
    if level == "native" or not supported(level)[0]:
        return out
    for key, value in LEVELS[level].items():
        out.setdefault(key, value)
    for key in THREAD_VARIABLES:
        out.setdefault(key, str(CPU_THREADS))
    return out


def activate() -> None:
    """Fix torch's thread count to the pin's (call after torch is imported, before any work)."""
    if describe()["level"] == "native":
        return
    import torch

    threads = int(os.environ.get("OMP_NUM_THREADS") or CPU_THREADS)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def describe() -> dict[str, Any]:
    """The pin in effect: ``level`` (avx2 | native), why, its variables, and whether it took."""
    level = requested_level()
    ok, why = supported(level) if level != "native" else (False, f"{PIN_VARIABLE}=native")
    if not ok:
        return {"level": "native", "reason": why or "not pinned", "env": {}}
    env = {k: os.environ.get(k) for k in sorted(LEVELS[level]) + list(THREAD_VARIABLES)}
    reason = "pinned"
    expected = {k: v for k, v in LEVELS[level].items()}
    expected.update({k: str(CPU_THREADS) for k in THREAD_VARIABLES})
    changed = [k for k, v in expected.items() if env.get(k) != v]
    if changed:
        reason = "pinned, with user settings: " + ", ".join(f"{k}={env.get(k)}" for k in changed)
    return {"level": level, "reason": reason, "env": env}


def record() -> dict[str, Any]:
    """The manifest's ``numerics`` block: the pin, the effective ATen capability and threads."""
    import torch

    out = describe()
    out["isa_class"] = isa_class()
    out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    out["threads"] = torch.get_num_threads()
    if out["level"] != "native" and out["cpu_capability"].lower() != out["env"].get("ATEN_CPU_CAPABILITY", ""):
        out["level"] = "native"
        out["reason"] = (f"pin did not take: torch dispatches to {out['cpu_capability']} (torch was initialised "
                         "before the pin was set)")
    return out


def exactness_key(numerics: dict[str, Any] | None) -> dict[str, Any] | None:
    """What of the pin decides bitwise comparability across CPU machines (None = not pinned).

    The ISA class is not part of it: pinned, an Intel AVX-512 and an AMD AVX2 machine give the same
    bits (measured, see the module docstring); it stays in the manifest and in "what changed".
    """
    if not numerics or numerics.get("level") in (None, "native"):
        return None
    return {"level": numerics["level"], "env": numerics.get("env", {}), "threads": numerics.get("threads"),
            "cpu_capability": numerics.get("cpu_capability")}
