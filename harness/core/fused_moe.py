"""The MoE experts' routing in Triton: tokens into expert order and back without a sort.

transformers' ``grouped_mm`` experts (``transformers.integrations.moe.grouped_mm_experts_forward``) put the
``S = tokens × top_k`` (token, expert) pairs into expert order with ``torch.sort``, count them with
``histc`` and ``cumsum``, gather the hidden states with duplicated indices, and on the way back multiply by
the routing weights, invert the permutation (``arange`` + ``index_put``), gather again and sum over
``top_k``. In W's decode step (one H200, 128 rows, 4 layers) the sort alone was 111 µs of 2.45 ms: a 64-bit
radix sort of 1,024 keys in one block. In the update, the hidden states' gather has a backward that
accumulates duplicated indices through a sort (``indexing_backward_kernel``: 21 ms of a 703 ms update).

Here the same grouped GEMMs run on the same expert order (a *stable* sort's: by expert, then by pair), but:

- the order is counted, not sorted: ``_count`` gives each chunk of pairs its per-expert counts, ``_slots``
  each pair its row in expert order (the experts' starts, the earlier chunks' counts and the pair's rank in
  its chunk) and each row its token, and the ``grouped_mm`` offsets;
- :class:`Dispatch` gathers the tokens' rows (``index_select``); its backward sums each token's ``top_k``
  rows (``_gather_sum``), with no duplicated-index scatter;
- :class:`Combine` sums each token's ``top_k`` rows times their weights in one kernel (float32 sums, one
  rounding); its backward writes each row's gradient (``weight × grad``) and each weight's (the row's dot
  product with the token's gradient) in one kernel.

The sums round in another order than transformers' (bf16 products, then a sum), so it serves only where bits
are not promised: on CUDA outside deterministic mode (:func:`harness.core.device.fast_kernels`), switched on
per model by :func:`use_fused_moe`. Experts with biases, a post-expert norm or expert parallelism keep
transformers' forward.
"""

from __future__ import annotations

import types
from functools import cache
from typing import Any

import torch
from torch import Tensor

from harness.core.device import cuda_triton, pow2_block, shapes_only

SUB = 32  # pairs per one-hot tile (SUB × experts int32 in registers)
CHUNK = SUB  # pairs per program of the counting kernels, at least (W's decode step: 1,024 pairs, 32 programs)
C_TILE = 32  # chunk rows of the counts read at once by ``_slots``
MAX_CHUNKS = 256  # chunks grow past CHUNK so that there are at most this many (a fixed loop: no recompiles)


def usable(x: Tensor) -> bool:
    """A CUDA tensor with Triton present (the kernels' only requirement; the caller decides where bits may
    change)."""
    return cuda_triton(x.device)


def route(expert_ids: Tensor, num_experts: int) -> tuple[Tensor, Tensor, Tensor]:
    """For ``expert_ids`` (T, k) (each in [0, num_experts)): ``slot`` (T·k,) int64, each pair's row in expert
    order (a stable sort's: by expert, then by pair index); ``token`` (T·k,) int64, each row's token; and
    ``offsets`` (num_experts,) int32, the cumulative rows per expert (``grouped_mm``'s ``offs``)."""
    T, k = expert_ids.shape
    S, dev = T * k, expert_ids.device
    ids = expert_ids.reshape(-1).contiguous()
    slot = torch.empty(S, dtype=torch.int64, device=dev)
    token = torch.empty(S, dtype=torch.int64, device=dev)
    offsets = torch.empty(num_experts, dtype=torch.int32, device=dev)
    if shapes_only(ids):  # harness plan traces the memory: the buffers above are what the kernels use
        return slot, token, offsets
    chunk = max(CHUNK, 1 << (-(-S // MAX_CHUNKS) - 1).bit_length())  # at most MAX_CHUNKS chunks
    n_chunks = max(1, -(-S // chunk))
    counts = torch.empty((n_chunks, num_experts), dtype=torch.int32, device=dev)
    e_pad = pow2_block(num_experts)
    k_count, k_slots = _routing_kernels()
    k_count[(n_chunks,)](ids, S, counts, num_experts, CHUNK=chunk, SUB=SUB, E_PAD=e_pad)
    k_slots[(n_chunks,)](ids, S, k, counts, n_chunks, num_experts, slot, token, offsets,
                         CHUNK=chunk, SUB=SUB, E_PAD=e_pad, C_TILE=C_TILE, MAX_CHUNKS=MAX_CHUNKS)
    return slot, token, offsets


def gather_sum(src: Tensor, slot: Tensor, k: int, weights: Tensor | None, dtype: torch.dtype) -> Tensor:
    """``out[t] = Σ_j weights[t, j] · src[slot[t·k + j]]`` (weights 1 if None), summed in float32, in
    ``dtype``: (T, H) for ``src`` (S, H), ``slot`` (S,) with S = T·k."""
    S, H = src.shape
    T = S // k
    out = torch.empty((T, H), dtype=dtype, device=src.device)
    if shapes_only(src) or T == 0:
        return out
    src = src.contiguous()
    w = weights.reshape(-1).contiguous() if weights is not None else slot  # (never read without weights)
    _pair_kernels()[0][(T,)](src, slot, w, out, H, K=k, HAS_W=weights is not None, BLOCK_H=pow2_block(H))
    return out


class Dispatch(torch.autograd.Function):
    """``x[token]``: the tokens' rows in expert order. Backward: each token's ``k`` rows of the gradient summed
    (one kernel; no scatter of duplicated indices)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, token: Tensor, slot: Tensor, k: int) -> Tensor:
        ctx.save_for_backward(slot)
        ctx.k, ctx.dtype = k, x.dtype
        return x.index_select(0, token)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        (slot,) = ctx.saved_tensors
        return gather_sum(grad, slot, ctx.k, None, ctx.dtype), None, None, None


class Combine(torch.autograd.Function):
    """``out[t] = Σ_j w[t, j] · y[slot[t·k + j]]`` in ``dtype``. Backward: ``dy[slot[t·k + j]] = w[t, j] ·
    grad[t]`` and ``dw[t, j] = y[slot[t·k + j]] · grad[t]``, one kernel."""

    @staticmethod
    def forward(ctx: Any, y: Tensor, weights: Tensor, slot: Tensor, dtype: torch.dtype) -> Tensor:
        ctx.save_for_backward(y, weights, slot)
        return gather_sum(y, slot, weights.shape[-1], weights, dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        y, weights, slot = ctx.saved_tensors
        H = y.shape[1]
        T, k = weights.shape
        dy = torch.empty_like(y)
        dw = torch.empty((T, k), dtype=weights.dtype, device=y.device)
        if not shapes_only(y) and T:
            _pair_kernels()[1][(T,)](grad.contiguous(), y.contiguous(), slot, weights.contiguous(), dy, dw, H, K=k,
                                     BLOCK_H=pow2_block(H))
        return dy, dw, None, None


def experts_forward(self: Any, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
    """transformers' ``grouped_mm_experts_forward`` with the routing above (same GEMMs, same expert order);
    transformers' own where the kernels cannot serve (not CUDA with Triton)."""
    from transformers.integrations.moe import _grouped_linear, grouped_mm_experts_forward

    if not usable(hidden_states):
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    k = top_k_index.shape[-1]
    slot, token, offsets = route(top_k_index, self.num_experts)
    x = Dispatch.apply(hidden_states.contiguous(), token, slot, k)
    up = self.gate_up_proj if self.has_gate else self.up_proj
    h = _grouped_linear(x, up, offsets, is_transposed=self.is_transposed)
    h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
    h = _grouped_linear(h, self.down_proj, offsets, is_transposed=self.is_transposed)
    return Combine.apply(h, top_k_weights, slot, hidden_states.dtype)


def fusable(module: torch.nn.Module) -> bool:
    """A transformers experts module running ``grouped_mm`` whose features the fused path covers (no biases,
    no post-expert norm, no expert parallelism), not switched already."""
    cfg = getattr(module, "config", None)
    return (getattr(cfg, "_experts_implementation", None) == "grouped_mm" and hasattr(module, "num_experts")
            and hasattr(module, "down_proj") and not getattr(module, "has_bias", True)
            and not getattr(module, "has_post_expert_norm", True) and not getattr(module, "_is_expert_parallel", True)
            and "forward" not in vars(module))


def use_fused_moe(model: torch.nn.Module) -> int:
    """Switch ``model``'s ``grouped_mm`` experts modules to :func:`experts_forward`; returns how many."""
    count = 0
    for module in model.modules():
        if fusable(module):
            module.forward = types.MethodType(experts_forward, module)
            count += 1
    return count


@cache
def _routing_kernels() -> tuple[Any, Any]:
    """``_count`` and ``_slots``, defined on first use (importing this module needs no Triton)."""
    import triton
    import triton.language as tl

    @triton.jit
    def count(ids_ptr, S, counts_ptr, E, CHUNK: tl.constexpr, SUB: tl.constexpr, E_PAD: tl.constexpr):
        c = tl.program_id(0).to(tl.int64)
        ex = tl.arange(0, E_PAD)
        acc = tl.zeros([E_PAD], dtype=tl.int32)
        for s0 in range(0, CHUNK, SUB):
            offs = c * CHUNK + s0 + tl.arange(0, SUB)
            e = tl.load(ids_ptr + offs, mask=offs < S, other=E_PAD).to(tl.int32)  # E_PAD matches no expert
            acc += tl.sum((e[:, None] == ex[None, :]).to(tl.int32), 0)
        tl.store(counts_ptr + c * E + ex, acc, mask=ex < E)

    @triton.jit
    def slots(ids_ptr, S, K, counts_ptr, n_chunks, E, slot_ptr, token_ptr, offsets_ptr, CHUNK: tl.constexpr,
              SUB: tl.constexpr, E_PAD: tl.constexpr, C_TILE: tl.constexpr, MAX_CHUNKS: tl.constexpr):
        c = tl.program_id(0)
        ex = tl.arange(0, E_PAD)
        before = tl.zeros([E_PAD], dtype=tl.int32)  # this expert's pairs in the chunks before this one
        total = tl.zeros([E_PAD], dtype=tl.int32)
        for c0 in range(0, MAX_CHUNKS, C_TILE):  # loop bounds are compile-time constants
            rows = c0 + tl.arange(0, C_TILE)
            tile = tl.load(counts_ptr + rows[:, None].to(tl.int64) * E + ex[None, :],
                           mask=(rows < n_chunks)[:, None] & (ex < E)[None, :], other=0)
            total += tl.sum(tile, 0)
            before += tl.sum(tl.where((rows < c)[:, None], tile, 0), 0)
        ends = tl.cumsum(total, 0)
        if c == 0:
            tl.store(offsets_ptr + ex, ends, mask=ex < E)
        nxt = ends - total + before  # the next free row of each expert
        for s0 in range(0, CHUNK, SUB):
            offs = c.to(tl.int64) * CHUNK + s0 + tl.arange(0, SUB)
            valid = offs < S
            e = tl.load(ids_ptr + offs, mask=valid, other=E_PAD).to(tl.int32)
            hit = (e[:, None] == ex[None, :]).to(tl.int32)  # (SUB, E_PAD) one-hot
            rank = tl.cumsum(hit, 0) - 1 + nxt[None, :]
            row = tl.sum(tl.where(hit > 0, rank, 0), 1).to(tl.int64)
            tl.store(slot_ptr + offs, row, mask=valid)
            tl.store(token_ptr + row, offs // K, mask=valid)
            nxt += tl.sum(hit, 0)

    return count, slots


@cache
def _pair_kernels() -> tuple[Any, Any]:
    """``_gather_sum`` and ``_combine_backward``, defined on first use."""
    import triton
    import triton.language as tl

    @triton.jit
    def gather_sum(src_ptr, slot_ptr, w_ptr, out_ptr, H, K: tl.constexpr, HAS_W: tl.constexpr, BLOCK_H: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        h = tl.arange(0, BLOCK_H)
        valid = h < H
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for j in range(K):
            row = tl.load(slot_ptr + t * K + j)
            x = tl.load(src_ptr + row * H + h, mask=valid, other=0.0).to(tl.float32)
            if HAS_W:
                x = x * tl.load(w_ptr + t * K + j).to(tl.float32)
            acc += x
        tl.store(out_ptr + t * H + h, acc.to(out_ptr.dtype.element_ty), mask=valid)

    @triton.jit
    def combine_backward(g_ptr, y_ptr, slot_ptr, w_ptr, dy_ptr, dw_ptr, H, K: tl.constexpr, BLOCK_H: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        h = tl.arange(0, BLOCK_H)
        valid = h < H
        g = tl.load(g_ptr + t * H + h, mask=valid, other=0.0).to(tl.float32)
        for j in range(K):
            row = tl.load(slot_ptr + t * K + j)
            w = tl.load(w_ptr + t * K + j).to(tl.float32)
            tl.store(dy_ptr + row * H + h, (g * w).to(dy_ptr.dtype.element_ty), mask=valid)
            y = tl.load(y_ptr + row * H + h, mask=valid, other=0.0).to(tl.float32)
            tl.store(dw_ptr + t * K + j, tl.sum(y * g, 0).to(dw_ptr.dtype.element_ty))

    return gather_sum, combine_backward
