"""The chunked output head with one weight-gradient buffer (:class:`harness.core.fused_head.ChunkedHead`, eager on the
CPU) against the checkpointed eager chunks it replaces on CUDA: the same values bit for bit, and float64 autograd's
gradients of the hidden rows and the head to float64 rounding, for the loss the update builds (log-probs and
entropies, a banned-token bias, a temperature, a last chunk shorter than the others)."""

from __future__ import annotations

import pytest
import torch

from harness.core import fused_head, update
from harness.core.model_builder import BANNED_LOGIT

N, H, V = 23, 16, 50


def _inputs(dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=gen).to(dtype)
    weight = (torch.randn(V, H, generator=gen) * 0.5).to(dtype)
    labels = torch.randint(0, V, (N,), generator=gen)
    bias = torch.zeros(V, dtype=torch.float32)
    bias[[3, 7]] = BANNED_LOGIT  # banned tokens, as the recipe's bias makes them
    labels[labels == 3] = 4
    labels[labels == 7] = 8
    up = torch.randn(N, generator=gen, dtype=torch.float64), torch.randn(N, generator=gen, dtype=torch.float64)
    return hidden, weight, labels, bias, up


def _checkpointed(hidden, weight, labels, bias, temperature, rows, with_entropy):
    return fused_head.over_chunks(update._checkpointed_chunk, hidden, weight, labels, bias, temperature, rows,
                                  with_entropy)


def _run(fn, hidden, weight, labels, bias, up, temperature, rows, with_entropy):
    h = hidden.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    out = fn(h, w, labels, bias, temperature, rows, with_entropy)
    loss = (out[0].double() * up[0]).sum() + ((out[1].double() * up[1]).sum() if with_entropy else 0.0)
    loss.backward()
    return [o.detach() for o in out], h.grad, w.grad


def _chunked(hidden, weight, labels, bias, temperature, rows, with_entropy):
    return fused_head.ChunkedHead.apply(hidden, weight, labels, bias, temperature, rows, with_entropy, False)


@pytest.mark.parametrize("with_entropy", [True, False])
@pytest.mark.parametrize("rows", [5, 23, 64])
def test_same_values_and_gradients_as_the_checkpointed_chunks(with_entropy: bool, rows: int) -> None:
    hidden, weight, labels, bias, up = _inputs(torch.float64)
    want = _run(_checkpointed, hidden, weight, labels, bias, up, 0.7, rows, with_entropy)
    got = _run(_chunked, hidden, weight, labels, bias, up, 0.7, rows, with_entropy)
    for a, b in zip(got[0], want[0], strict=True):
        assert torch.equal(a, b)  # the same forward function, chunk by chunk
    for a, b in ((got[1], want[1]), (got[2], want[2])):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_bf16_head_matches_float64_gradients_to_bf16_rounding() -> None:
    hidden, weight, labels, bias, up = _inputs(torch.bfloat16, seed=1)
    want = _run(_checkpointed, hidden.double(), weight.double(), labels, bias, up, 1.0, 8, True)
    got = _run(_chunked, hidden, weight, labels, bias, up, 1.0, 8, True)
    assert got[1].dtype == got[2].dtype == torch.bfloat16
    for a, b in ((got[1], want[1]), (got[2], want[2])):
        assert (a.double() - b).abs().max().item() <= 2e-2 * b.abs().max().item()


def test_an_unused_entropy_gets_no_gradient_work_and_a_frozen_head_no_gradient() -> None:
    """Entropies computed but left out of the loss (an entropy coefficient of 0 with metrics only) pass no gradient:
    the backward takes the log-prob term alone; a head that does not train gets none."""
    hidden, weight, labels, bias, up = _inputs(torch.float64, seed=2)
    h = hidden.clone().requires_grad_(True)
    logp, ent = fused_head.ChunkedHead.apply(h, weight, labels, bias, 1.0, 6, True, False)
    (logp * up[0]).sum().backward()
    want = _run(_checkpointed, hidden, weight, labels, bias, up, 1.0, 6, False)
    torch.testing.assert_close(h.grad, want[1], rtol=1e-10, atol=1e-12)
    assert ent.grad_fn is not None and not weight.requires_grad


def _made_by(t: torch.Tensor) -> str:
    """The autograd node under the (1, N) view ``logprobs_from_hidden`` returns."""
    return type(t.grad_fn.next_functions[0][0]).__name__


def test_logprobs_from_hidden_takes_the_chunked_head_only_on_the_compiled_kind(monkeypatch) -> None:
    hidden, weight, labels, bias, _ = _inputs(torch.float32, seed=3)
    h = hidden.reshape(1, N, H).requires_grad_(True)
    kw = dict(bias=bias, temperature=1.0, chunk_rows=8, with_entropy=True)
    eager = update.logprobs_from_hidden(h, weight, labels.reshape(1, N), **kw)
    assert _made_by(eager[0]) == "CatBackward0"  # the CPU: checkpointed eager chunks, concatenated
    calls = []
    monkeypatch.setattr(update, "head_kind", lambda device: "compiled")
    monkeypatch.setattr(fused_head, "_functions", lambda compiled: calls.append(compiled) or
                        (fused_head.chunk_values, fused_head.logits_grad))
    fast = update.logprobs_from_hidden(h, weight, labels.reshape(1, N), **kw)
    assert _made_by(fast[0]) == "ChunkedHeadBackward" and calls == [True]
    assert torch.equal(fast[0], eager[0]) and torch.equal(fast[1], eager[1])
    with torch.no_grad():
        update.logprobs_from_hidden(h, weight, labels.reshape(1, N), **kw)  # no grad: compiled values, no Function
    assert calls == [True, True]


def test_the_compiled_chunk_functions_trace_whole_with_algos_torch_not_yet_imported(monkeypatch) -> None:
    """algos' torch is a stand-in imported on first use; a first use inside the traced chunk would break its graph."""
    from torch._dynamo.utils import counters

    from harness.core import algos
    from harness.lazyimport import lazy_import

    monkeypatch.setattr(algos, "torch", lazy_import("torch"))  # as in a process where nothing used algos yet
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn: compile_(fn, backend="eager"))  # Dynamo's graphs, no kernels
    fused_head._functions.cache_clear()
    torch._dynamo.reset()
    counters.clear()
    try:
        values, grad = fused_head._functions(True)
        hidden, weight, labels, bias, _ = _inputs(torch.float32, seed=4)
        logp, ent = values(hidden, weight, labels, bias, 0.7, True)
        grad(hidden @ weight.T, labels, bias, 0.7, torch.ones(N), torch.ones(N))
        assert dict(counters["graph_break"]) == {}
        assert torch.equal(logp, fused_head.chunk_values(hidden, weight, labels, bias, 0.7, True)[0])
    finally:
        fused_head._functions.cache_clear()
        torch._dynamo.reset()
