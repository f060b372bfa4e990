"""Which of a run's tensor operations reach oneMKL's vector math (VML), and from where.

The CPU numerics pin (:mod:`harness.numerics`) runs oneMKL on its ``COMPATIBLE`` branch because the ``AVX2,STRICT``
branch gives other bits for ``exp``, ``log``, ``logsumexp`` and ``sqrt`` on an Intel AVX-512 machine than on an AMD
AVX2 one (``bench/results/portability/``). The compatible branch's GEMMs are the slow ones. Any faster setting must
first keep a run's values off oneMKL's vector math (and then give the same GEMM bits on both vendors, which the
AVX2 branch does not: ``bench/results/cpu-mkl-branch-avx2-epyc-2026-12-06/``). This script shows what that takes: it
runs ``harness run ARGS`` in this process under a ``TorchDispatchMode`` that counts every ATen operator whose
CPU kernel is oneMKL's VML in the torch CPU wheel (``aten/src/ATen/cpu/vml.h``: the ``IMPLEMENT_VML_MKL`` list, and
``logsumexp``, which calls ``exp`` and ``log``) by dtype and by the three innermost Python frames that issued it.
The mode only observes: the run's verdict is the run's own (a PASS at the exact tier shows the same bits).

    HARNESS_CACHE=/tmp/vml-cache python bench/vml_ops.py run qwen3_vl_30b --profile cpu --runtime local \\
        --out /tmp/vml-run --quiet --no-report --steps 2 > vml_ops.txt

An empty cache includes the warm start's training in the count (its forward, backward and optimiser).
"""

from __future__ import annotations

import collections
import sys
import traceback
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten/src/ATen/cpu/vml.h (torch 2.11-2.13): the functions it sends to oneMKL when the wheel is built with it
VML = frozenset({"acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2", "sin",
                 "sqrt", "tan", "tanh", "trunc", "logsumexp"})
SKIP = ("torch/utils/_python_dispatch", "torch/_ops", "torch/_compile", "torch/_dynamo/eval_frame")


def _site(stack: list[traceback.FrameSummary]) -> str:
    frames = [f for f in stack if not any(s in f.filename for s in SKIP)][-3:]
    return " <- ".join(f"{f.filename.split('site-packages/')[-1].split('/harness/', 1)[-1]}:{f.lineno}"
                       for f in reversed(frames))


class VmlCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter[tuple[str, str, str]] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = str(func.overloadpacket).split(".")[-1].rstrip("_")
        if name in VML:
            dtype = next((str(a.dtype) for a in args if isinstance(a, torch.Tensor)), "-")
            self.calls[(name, dtype, _site(traceback.extract_stack()[:-1]))] += 1
        return func(*args, **(kwargs or {}))


def main(argv: list[str]) -> int:
    from harness import cli

    mode = VmlCount()
    code = 0
    with mode:
        try:
            cli.main(argv)
        except SystemExit as stop:
            code = int(stop.code or 0)
    print(f"# harness {' '.join(argv)} (exit {code}); torch {torch.__version__}, "
          f"{torch.backends.cpu.get_cpu_capability()}")
    print("# calls  op         dtype          innermost frames (issuer first)")
    for (name, dtype, site), n in sorted(mode.calls.items(), key=lambda kv: (kv[0][0], -kv[1])):
        print(f"{n:7d}  {name:10s} {dtype:14s} {site}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
