"""RMSNorm's inference forward in one Triton kernel (the decode step's 17 norms: 8 kernels each, eagerly).

transformers' Qwen3 RMSNorm runs ``x.float()``, ``pow(2)``, ``mean``, ``+ eps``, ``rsqrt``, a multiply, a
cast back and the weight's multiply: 8 kernels and three float32 copies of the input per call. In W's
decode step (one H200, 128 rows) the 17 norms took 289 µs of 3.4 ms, 136 kernels, for work bound by one
read of a few hundred KB. Here one program normalises one row: the same formula, the mean of squares
summed in another order (other bits), so it serves only where bits are not promised — through
:mod:`harness.core.lean_norm`, which is switched on only on CUDA outside deterministic mode — and only
without autograd (rollouts and log-prob forwards; the update keeps :class:`~harness.core.lean_norm.LeanRMSNorm`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from torch import Tensor

from harness.core.device import cuda_triton, pow2_block


def usable(x: Tensor) -> bool:
    """A CUDA tensor, no autograd, Triton present."""
    return not torch.is_grad_enabled() and cuda_triton(x.device)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``weight * (x.float() * rsqrt(mean(x.float()²) + eps)).to(x.dtype)`` over the last dimension, in the
    dtype that product has in torch (``weight``'s and ``x``'s promoted)."""
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    if rows.stride(-1) != 1 or rows.stride(0) != n:
        rows = rows.contiguous()
    out = torch.empty(rows.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
    _kernel()[(rows.shape[0],)](rows, weight.contiguous(), out, n, float(eps), BLOCK=pow2_block(n))
    return out.view(x.shape)


@cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def rms(x_ptr, w_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        valid = offs < n
        raw = tl.load(x_ptr + row * n + offs, mask=valid, other=0.0)
        x = raw.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, 0) / n + eps)
        h = (x * rstd).to(raw.dtype)  # the cast back to the input's dtype, as the module does
        w = tl.load(w_ptr + offs, mask=valid, other=0.0)
        y = w.to(tl.float32) * h.to(tl.float32)  # one rounding into the output's dtype, as torch's multiply
        tl.store(y_ptr + row * n + offs, y.to(y_ptr.dtype.element_ty), mask=valid)

    return rms
