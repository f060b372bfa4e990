"""The sampler in two Triton kernels: one read of the logits per decode step instead of seven passes.

:func:`harness.core.rollout.sample_from_logits` draws by inverse CDF: it adds the banned-token bias to the
upcast logits, takes the log-softmax and the softmax, a cumulative sum over the whole vocabulary and counts
the entries below ``u``. On W's decode (one H200, 128 rows × 151,936) that is 27 kernels and 0.75 ms of a
3.4 ms step, for work bound by one read of 39 MB of bf16 logits.

Here the same draw (the same distribution, the same uniforms, the same unfiltered tempered log-prob) is
made in two levels:

1. ``_chunk_stats``, one program per (row, chunk of ``BLOCK`` tokens): the chunk's max ``m`` and
   ``s = Σ exp(x - m)`` of ``x = (logit + bias) / T`` (the exponentials in float32, their sum in float64).
2. ``_draw``, one program per row: ``M = max m``, the chunk weights ``w = s · exp(m - M)``, their
   cumulative sum, the chunk that holds ``u · Σw``; then that chunk's tokens (read again: ``BLOCK``
   entries), their cumulative sum from where the chunk starts, and the token that crosses it. The
   log-prob is ``x[token] - (M + log Σw)``. The running sums are float64: over W's 151,936 near-uniform
   probabilities (~7e-6 each) a float32 running sum's rounding (as CUDA's ``cumsum`` of float32 has) moves
   boundaries by a few percent of a token's width; the CPU's ``cumsum`` accumulates in double.

The sums run in another order than a full-vocabulary ``cumsum``, so a ``u`` within rounding of a boundary
between two tokens can pick the neighbour: the same distribution, other bits. That is why it is used only
where bits are not promised (:func:`harness.core.device.fast_kernels`: CUDA outside deterministic mode,
where the CPU's and the deterministic runs' baselines are not replayed) and only for plain sampling: no
top-k, no top-p, not greedy. A token of zero probability (a banned one) is never drawn: the draw is held to
the last chunk and the last token of positive weight.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from torch import Tensor

from harness.core.device import cuda_triton, pow2_block, shapes_only

BLOCK = 1024  # tokens per chunk: W's 151,936 are 149 chunks


def usable(device: torch.device, *, fast: bool, dtype: torch.dtype) -> bool:
    """Whether the fused sampler may serve a model's rollouts: where the engine may change bits (``fast``), with
    Triton on a CUDA device, for a model that is not float64 (the kernels compute in float32). Decided once per
    run (:func:`harness.core.trainer.ready_models`); each rollout adds :func:`plain`."""
    return fast and dtype != torch.float64 and cuda_triton(device)


def plain(*, greedy: bool, top_k: int, top_p: float) -> bool:
    """Plain sampling (no top-k / top-p, not greedy): the only draw the kernels make."""
    return not greedy and not (top_k and 0 < top_k) and top_p >= 1.0


def fused_sample(logits: Tensor, bias: Tensor, uniforms: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """(tokens (B,) int64, log-probs (B,) float32) for ``logits`` (B, V) of any float dtype (rows may be
    strided, the vocabulary contiguous), ``bias`` (V,) added in float32, ``uniforms`` (B,) in [0, 1)."""
    B, V = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    bias = bias.to(torch.float32).contiguous()
    u = uniforms.to(torch.float32).contiguous()
    n_chunks = -(-V // BLOCK)
    m = torch.empty((B, n_chunks), dtype=torch.float32, device=logits.device)
    s = torch.empty((B, n_chunks), dtype=torch.float64, device=logits.device)
    tokens = torch.empty(B, dtype=torch.int64, device=logits.device)
    logp = torch.empty(B, dtype=torch.float32, device=logits.device)
    if shapes_only(logits):  # harness plan traces the memory: the buffers above are what the kernels use
        return tokens, logp
    chunk_stats, draw = _kernels()
    chunk_stats[(B, n_chunks)](logits, logits.stride(0), bias, float(temperature), m, s, V, n_chunks, BLOCK=BLOCK)
    draw[(B,)](logits, logits.stride(0), bias, float(temperature), m, s, u, tokens, logp, V, n_chunks,
               BLOCK=BLOCK, CHUNKS=pow2_block(n_chunks))
    return tokens, logp


@cache
def _kernels() -> tuple[Any, Any]:
    """The two kernels, defined on first use (importing this module needs no Triton)."""
    import triton
    import triton.language as tl

    @triton.jit
    def chunk_stats(x_ptr, row_stride, bias_ptr, temperature, m_ptr, s_ptr, V, n_chunks, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        c = tl.program_id(1)
        offs = c * BLOCK + tl.arange(0, BLOCK)
        valid = offs < V
        x = tl.load(x_ptr + row.to(tl.int64) * row_stride + offs, mask=valid, other=0.0).to(tl.float32)
        x = (x + tl.load(bias_ptr + offs, mask=valid, other=0.0)) / temperature
        x = tl.where(valid, x, float("-inf"))
        mx = tl.max(x, 0)
        tl.store(m_ptr + row * n_chunks + c, mx)
        tl.store(s_ptr + row * n_chunks + c, tl.sum(tl.exp(x - mx).to(tl.float64), 0))

    @triton.jit
    def draw(x_ptr, row_stride, bias_ptr, temperature, m_ptr, s_ptr, u_ptr, tok_ptr, logp_ptr, V, n_chunks,
             BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
        row = tl.program_id(0)
        ci = tl.arange(0, CHUNKS)
        cv = ci < n_chunks
        m = tl.load(m_ptr + row * n_chunks + ci, mask=cv, other=float("-inf"))
        s = tl.load(s_ptr + row * n_chunks + ci, mask=cv, other=0.0)
        big = tl.max(m, 0)
        w = tl.where(cv, s * tl.exp(m - big).to(tl.float64), 0.0)
        cw = tl.cumsum(w, 0)
        total = tl.max(cw, 0)  # w >= 0: the running sum's last value
        target = tl.load(u_ptr + row).to(tl.float64) * total
        k = tl.sum((cw <= target).to(tl.int32), 0)  # the first chunk whose running sum passes the target
        k = tl.minimum(k, tl.max(tl.where(w > 0, ci, 0), 0))  # never past the last chunk of positive weight
        before = tl.sum(tl.where(ci == k, cw - w, 0.0), 0)
        ti = tl.arange(0, BLOCK)
        offs = k * BLOCK + ti
        valid = offs < V
        x = tl.load(x_ptr + row.to(tl.int64) * row_stride + offs, mask=valid, other=0.0).to(tl.float32)
        x = (x + tl.load(bias_ptr + offs, mask=valid, other=0.0)) / temperature
        x = tl.where(valid, x, float("-inf"))
        p = tl.exp(x - big).to(tl.float64)
        run = tl.cumsum(p, 0) + before
        j = tl.sum((run <= target).to(tl.int32), 0)
        j = tl.minimum(j, tl.max(tl.where(p > 0, ti, 0), 0))  # never past the chunk's last token of positive weight
        xj = tl.sum(tl.where(ti == j, x, 0.0), 0)
        tl.store(tok_ptr + row, (k * BLOCK + j).to(tl.int64))
        tl.store(logp_ptr + row, xj - (big + tl.log(total).to(tl.float32)))

    return chunk_stats, draw
