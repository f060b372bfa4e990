"""The output head's log-probs and entropies under autograd, chunk by chunk, with one gradient buffer for its weight.

The update applies the head to a micro-batch's response positions in row chunks (``update.LOGIT_CHUNK_BYTES`` of
float32 logits each), so that no (positions × vocabulary) tensor is kept. Checkpointed chunks under autograd
(:func:`harness.core.update.logprobs_from_hidden`'s eager path) give each chunk's backward a full (V, H) weight
gradient of its own, which autograd then adds into one: in W's update (152 k × 2048 head, 19 chunks a
micro-batch) 72 adds of 622 MB, ~40 ms of a 643 ms update on an H200 (2026-12-04 profile: ``aten::add_``
445 calls, 53.9 ms), besides a zero-filled (positions × H) gradient per chunk for the slice it read.

:class:`ChunkedHead` computes the same values without keeping anything but its inputs, and in its backward
recomputes each chunk's logits, turns the output gradients into the logits' gradient (one function of the chunk:
``g_logp · (onehot(label) - p) + g_ent · p · (E_p[z] - z)``, divided by the temperature, with ``z`` the tempered
logits and ``p`` their softmax) and lets the two GEMMs write where the gradients live: the hidden rows' into
their slice, the weight's accumulated in the GEMM's epilogue (``addmm_``, β = 1) instead of a separate pass.

The gradients round in another order than autograd's (the entropy's analytic form, one bf16 rounding of the
weight's gradient per chunk, as before), so it serves only where bits are not promised: the head's ``compiled``
kind (CUDA with Triton, outside deterministic mode), where both per-chunk functions are compiled into fused
kernels. Elsewhere (the CPU, deterministic runs) the checkpointed eager chunks keep their bits.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch
from torch import Tensor

from harness.core import algos
from harness.core.model_builder import upcast
from harness.lazyimport import loaded


def chunk_values(hidden: Tensor, weight: Tensor, labels: Tensor, bias: Tensor, temperature: float,
                 with_entropy: bool) -> tuple[Tensor, ...]:
    """One chunk's log-probs (and entropies), as :func:`harness.core.update.logprobs_from_hidden` computes them."""
    logits = upcast(torch.nn.functional.linear(hidden, weight))  # (n, V), as the head computes it, then upcast
    logits = (logits + bias.to(logits.dtype)) / temperature
    logp = algos.logprobs_from_logits(logits[None], labels[None])[0]
    return (logp, algos.entropy_from_logits(logits)) if with_entropy else (logp,)


def logits_grad(logits: Tensor, labels: Tensor, bias: Tensor, temperature: float, g_logp: Tensor,
                g_ent: Tensor | None) -> Tensor:
    """The gradient of the head's (bf16) logits for one chunk, given its log-probs' and entropies' gradients."""
    z = (upcast(logits) + bias.to(torch.float32)) / temperature
    p = torch.softmax(z, dim=-1)
    vocab = torch.arange(z.shape[-1], device=z.device)
    g = torch.where(vocab[None, :] == labels[:, None], g_logp[:, None], 0.0) - p * g_logp[:, None]
    if g_ent is not None:
        finite = torch.isfinite(z)
        pz = torch.where(finite, p * z, 0.0)
        spread = torch.where(finite, pz.sum(-1, keepdim=True) * p - pz, 0.0)  # p · (E_p[z] - z)
        g = g + g_ent[:, None] * spread
    return (g / temperature).to(logits.dtype)


def over_chunks(fn: Callable[..., tuple[Tensor, ...]], hidden: Tensor, weight: Tensor, labels: Tensor, bias: Tensor,
                temperature: float, chunk_rows: int, with_entropy: bool) -> tuple[Tensor, ...]:
    """``fn`` (a chunk function with :func:`chunk_values`' arguments) on each ``chunk_rows`` rows of ``hidden`` (N, H),
    its outputs concatenated: (log-probs,) or (log-probs, entropies), each (N,)."""
    parts = [fn(hidden[i:i + chunk_rows], weight, labels[i:i + chunk_rows], bias, temperature, with_entropy)
             for i in range(0, hidden.shape[0], chunk_rows)]
    return tuple(torch.cat([p[k] for p in parts]) for k in range(2 if with_entropy else 1))


@cache
def _functions(compiled: bool) -> tuple[Callable[..., tuple[Tensor, ...]], Callable[..., Tensor]]:
    """(chunk values, logits' gradient), through ``torch.compile`` with ``compiled`` (once per process)."""
    if not compiled:
        return chunk_values, logits_grad
    # algos imports torch on its first use (harness.lazyimport). Were that first use inside the traced chunk,
    # Dynamo would break the graph at the import: the chunk would compile as two graphs, and a checkpoint
    # around it would not compile as one (bench/update_kernels.py's "checkpointed" head, until 2026-12-07).
    loaded(algos.torch)
    return torch.compile(chunk_values), torch.compile(logits_grad)


def compiled_values() -> Callable[..., tuple[Tensor, ...]]:
    """:func:`chunk_values` compiled: the no-grad log-prob forwards' head on the ``compiled`` kind."""
    return _functions(True)[0]


class ChunkedHead(torch.autograd.Function):
    """Log-probs (N,) and entropies (N,) (with ``with_entropy``) of ``labels`` from hidden rows (N, H) and the head
    (V, H), ``chunk_rows`` rows at a time; ``compiled`` runs both per-chunk functions through ``torch.compile``."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, labels: Tensor, bias: Tensor, temperature: float,
                chunk_rows: int, with_entropy: bool, compiled: bool) -> tuple[Tensor, ...]:
        ctx.save_for_backward(hidden, weight, labels, bias)
        ctx.temperature, ctx.chunk_rows, ctx.compiled = temperature, chunk_rows, compiled
        ctx.set_materialize_grads(False)
        return over_chunks(_functions(compiled)[0], hidden, weight, labels, bias, temperature, chunk_rows, with_entropy)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        hidden, weight, labels, bias = ctx.saved_tensors
        if ctx.needs_input_grad[3]:
            raise NotImplementedError("ChunkedHead: no gradient for the logit bias (a constant of the recipe)")
        g_logp = grads[0] if grads[0] is not None else hidden.new_zeros(hidden.shape[0], dtype=torch.float32)
        g_ent = grads[1] if len(grads) > 1 else None
        _, grad_of = _functions(ctx.compiled)
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = torch.empty_like(weight) if want_w else None
        step = ctx.chunk_rows
        for i in range(0, hidden.shape[0], step):
            h = hidden[i:i + step]
            g = grad_of(torch.nn.functional.linear(h, weight), labels[i:i + step], bias, ctx.temperature,
                        g_logp[i:i + step], None if g_ent is None else g_ent[i:i + step])
            if grad_h is not None:
                torch.mm(g, weight, out=grad_h[i:i + step])
            if grad_w is not None:
                if i == 0:
                    torch.mm(g.t(), h, out=grad_w)
                else:
                    grad_w.addmm_(g.t(), h)  # accumulated in the GEMM: no separate add over the (V, H) gradient
        return grad_h, grad_w, None, None, None, None, None, None
