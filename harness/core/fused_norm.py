"""RMSNorm in Triton: the inference forward in one kernel, and the training forward and backward in one each.

transformers' Qwen3 RMSNorm runs ``x.float()``, ``pow(2)``, ``mean``, ``+ eps``, ``rsqrt``, a multiply, a
cast back and the weight's multiply: 8 kernels and three float32 copies of the input per call. In W's
decode step (one H200, 128 rows) the 17 norms took 289 µs of 3.4 ms, 136 kernels, for work bound by one
read of a few hundred KB. Here one program normalises one row: the same formula, the mean of squares
summed in another order (other bits).

Under autograd, :class:`~harness.core.lean_norm.LeanRMSNorm` still runs the module's eager operations and an
eager backward of about a dozen more, each a full pass over a float32 copy: in W's update (one H200, 2026-12-04
profile) the float32 multiplies alone took 34.8 ms of 643 ms of kernel time, and the norms' casts, means,
broadcast bf16 multiplies and the weight's gradient sum add as much again. :class:`TrainRMSNorm` does the forward
in one kernel (saving the input and one float32 ``rsqrt`` per row, as the lean norm does) and the backward in
one: each program walks a run of row tiles, writes their input gradient and keeps its share of the weight's
gradient in float32 registers; the shares are summed afterwards in a fixed order (no atomics: the same bits on
every run of the same shapes and device).

Both serve only where bits are not promised — through :mod:`harness.core.lean_norm`, which is switched on only on
CUDA outside deterministic mode.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from torch import Tensor

from harness.core.device import cuda_triton, pow2_block, shapes_only

TILE = 4096  # elements of a program's row tile (rows × the padded width): 2 rows of W's hidden 2048, 32 q/k rows
WARPS = 8  # per program: a 4,096-element tile's float32 rows (input, gradient, normalised row) in registers
PROGRAMS_PER_SM = 4  # backward programs per multiprocessor, each over a run of tiles (and one weight-gradient share)


def usable(x: Tensor) -> bool:
    """A CUDA tensor, no autograd, Triton present."""
    return not torch.is_grad_enabled() and cuda_triton(x.device)


def trainable(x: Tensor) -> bool:
    """A CUDA tensor with Triton present: :class:`TrainRMSNorm` can run (the caller decides where bits may change)."""
    return cuda_triton(x.device)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``weight * (x.float() * rsqrt(mean(x.float()²) + eps)).to(x.dtype)`` over the last dimension, in the
    dtype that product has in torch (``weight``'s and ``x``'s promoted)."""
    rows = _rows(x)
    n = rows.shape[1]
    out = torch.empty(rows.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
    _kernel()[(rows.shape[0],)](rows, weight.contiguous(), out, n, float(eps), BLOCK=pow2_block(n))
    return out.view(x.shape)


def _rows(x: Tensor) -> Tensor:
    """``x`` as contiguous (rows, width)."""
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    return rows if rows.stride(-1) == 1 and rows.stride(0) == n else rows.contiguous()


def _tiling(rows: int, n: int) -> tuple[int, int, int]:
    """(padded width, rows per tile, tiles)."""
    block = pow2_block(n)
    per_tile = max(1, TILE // block)
    return block, per_tile, max(1, -(-rows // per_tile))


class TrainRMSNorm(torch.autograd.Function):
    """``weight * (x.float() * rsqrt(mean(x.float()²) + eps)).to(x.dtype)`` over the last dimension (the output in
    the dtype torch's product has), saving ``x`` and the float32 ``rsqrt`` per row. Backward, with ``h`` the
    normalised row and ``g = grad · weight``: ``dx = rsqrt · (g - h · mean(g · h))`` and ``dweight = Σ_rows grad ·
    h``, both from float32 sums."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        rows = _rows(x)
        R, n = rows.shape
        out = torch.empty(rows.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
        rstd = torch.empty(R, dtype=torch.float32, device=x.device)
        if not shapes_only(rows) and R:
            block, per_tile, tiles = _tiling(R, n)
            _train_kernels()[0][(tiles,)](rows, weight.contiguous(), out, rstd, R, n, float(eps), ROWS=per_tile,
                                         BLOCK=block, num_warps=WARPS)
        ctx.save_for_backward(rows, rstd, weight)
        ctx.shape = x.shape
        return out.view(x.shape)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        rows, rstd, weight = ctx.saved_tensors
        R, n = rows.shape
        dx = torch.empty_like(rows)
        block, per_tile, tiles = _tiling(R, n)
        # tiles per program: a power of two (a compile-time loop bound, so few variants as the row count varies)
        per_program = 1 << (-(-tiles // (PROGRAMS_PER_SM * _multiprocessors(rows.device))) - 1).bit_length()
        programs = -(-tiles // per_program)
        shares = (torch.empty if R else torch.zeros)((programs, n), dtype=torch.float32, device=rows.device)
        if not shapes_only(rows) and R:
            _train_kernels()[1][(programs,)](_rows(grad), rows, weight.contiguous(), rstd, dx, shares, R, n,
                                            ROWS=per_tile, BLOCK=block, TILES=per_program, num_warps=WARPS)
        grad_w = shares.sum(0).to(weight.dtype) if ctx.needs_input_grad[1] else None
        return (dx.view(ctx.shape) if ctx.needs_input_grad[0] else None), grad_w, None


def _multiprocessors(device: torch.device) -> int:
    if device.type != "cuda":  # Triton's interpreter (tests on the CPU)
        return 2
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


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


@cache
def _train_kernels() -> tuple[Any, Any]:
    """:class:`TrainRMSNorm`'s forward and backward, defined on first use."""
    import triton
    import triton.language as tl

    @triton.jit
    def forward(x_ptr, w_ptr, y_ptr, rstd_ptr, R, n, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
        c = tl.arange(0, BLOCK)
        mask = (r < R)[:, None] & (c < n)[None, :]
        offs = r[:, None] * n + c[None, :]
        raw = tl.load(x_ptr + offs, mask=mask, other=0.0)
        x = raw.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, 1) / n + eps)
        h = (x * rstd[:, None]).to(raw.dtype)  # the cast back to the input's dtype, as the module does
        w = tl.load(w_ptr + c, mask=c < n, other=0.0).to(tl.float32)
        tl.store(y_ptr + offs, (w[None, :] * h.to(tl.float32)).to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(rstd_ptr + r, rstd, mask=r < R)

    @triton.jit
    def backward(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, shares_ptr, R, n, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                 TILES: tl.constexpr):
        p = tl.program_id(0)
        c = tl.arange(0, BLOCK)
        w = tl.load(w_ptr + c, mask=c < n, other=0.0).to(tl.float32)
        share = tl.zeros([BLOCK], dtype=tl.float32)
        for i in range(TILES):  # this program's run of row tiles (those past the last row are masked off)
            r = (p * TILES + i).to(tl.int64) * ROWS + tl.arange(0, ROWS)
            mask = (r < R)[:, None] & (c < n)[None, :]
            offs = r[:, None] * n + c[None, :]
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(rstd_ptr + r, mask=r < R, other=0.0)
            h = x * rstd[:, None]
            share += tl.sum(g * h.to(x_ptr.dtype.element_ty).to(tl.float32), 0)  # the forward's rounded h
            gw = g * w[None, :]
            mean = tl.sum(gw * h, 1) / n
            tl.store(dx_ptr + offs, (rstd[:, None] * (gw - h * mean[:, None])).to(dx_ptr.dtype.element_ty), mask=mask)
        tl.store(shares_ptr + p * n + c, share, mask=c < n)

    return forward, backward
