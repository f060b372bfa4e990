"""The MoE routing kernels (run here by Triton's interpreter on the CPU) against transformers' ``grouped_mm``
experts: the same expert order as a stable sort, the same offsets, and the experts' output and gradients within
float32 rounding of transformers' forward and its autograd."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

import transformers  # noqa: E402
from transformers.integrations.moe import grouped_mm_experts_forward  # noqa: E402

from harness.core import fused_moe  # noqa: E402
from harness.core.fused_moe import Combine, Dispatch, gather_sum, route, use_fused_moe  # noqa: E402


def _ids(tokens: int, k: int, experts: int, seed: int, skew: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if skew:  # most pairs on two experts, some experts with none
        return torch.where(torch.rand(tokens, k, generator=g) < 0.8, torch.randint(0, 2, (tokens, k), generator=g),
                           torch.randint(0, experts, (tokens, k), generator=g))
    return torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)])  # distinct per token


def _check_route(ids: torch.Tensor, experts: int) -> None:
    slot, token, offsets = route(ids, experts)
    flat = ids.reshape(-1)
    order = torch.sort(flat, stable=True).indices  # row r of the expert order holds pair order[r]
    want_slot = torch.empty_like(order)
    want_slot[order] = torch.arange(len(order))
    assert slot.dtype == token.dtype == torch.int64 and offsets.dtype == torch.int32
    assert torch.equal(slot, want_slot)
    assert torch.equal(token, order // ids.shape[1])
    assert torch.equal(offsets, torch.bincount(flat, minlength=experts).cumsum(0).to(torch.int32))


# 128 x 8 pairs: one tile of 32 chunks' counts; 140 x 8: 35 chunks, two tiles, 128 experts
@pytest.mark.parametrize("tokens,k,experts", [(1, 1, 4), (5, 2, 6), (128, 8, 128), (140, 8, 128), (33, 3, 17)])
def test_the_expert_order_is_a_stable_sorts(tokens, k, experts):
    _check_route(_ids(tokens, k, experts, seed=tokens + k), experts)


def test_skewed_routing_and_many_chunks():
    """Empty experts, one expert holding most pairs, and more chunks than one tile of counts (and chunks grown
    past ``CHUNK`` so that there are at most ``MAX_CHUNKS``)."""
    assert fused_moe.CHUNK == 32 and fused_moe.MAX_CHUNKS == 256
    _check_route(_ids(300, 4, 12, seed=1, skew=True), 12)  # 1,200 pairs: 38 chunks of 32, two tiles of counts
    _check_route(_ids(1040, 8, 12, seed=2, skew=True), 12)  # 8,320 pairs, over 256 x 32: 130 chunks of 64


def test_gather_sum_against_the_reference():
    g = torch.Generator().manual_seed(5)
    ids = _ids(40, 3, 8, seed=3)
    slot, _, _ = route(ids, 8)
    src = torch.randn(120, 50, generator=g)
    w = torch.rand(40, 3, generator=g)
    want = (src[slot].view(40, 3, 50) * w[..., None]).sum(1)
    torch.testing.assert_close(gather_sum(src, slot, 3, w, torch.float32), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(gather_sum(src, slot, 3, None, torch.float32), src[slot].view(40, 3, 50).sum(1),
                               rtol=1e-6, atol=1e-6)
    assert gather_sum(src, slot, 3, w, torch.bfloat16).dtype == torch.bfloat16


def test_dispatch_and_combine_gradients():
    """Through a product of the two (with a per-row map between them), gradients equal autograd's of the plain
    indexing formulation: the dispatch's rows summed back per token, each weight's dot product."""
    g = torch.Generator().manual_seed(7)
    T, k, E, H = 24, 4, 10, 40
    ids = _ids(T, k, E, seed=8)
    slot, token, _ = route(ids, E)
    x = torch.randn(T, H, generator=g, requires_grad=True)
    w = torch.rand(T, k, generator=g, requires_grad=True)
    scale = torch.randn(T * k, H, generator=g)
    up = torch.randn(T, H, generator=g)

    out = Combine.apply(Dispatch.apply(x, token, slot, k) * scale, w, slot, torch.float32)
    (out * up).sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()

    x.grad = w.grad = None
    order = torch.sort(ids.reshape(-1), stable=True).indices
    y = x[order // k] * scale  # expert order
    back = torch.empty_like(y)
    back[order] = y  # pair order
    ref = (back.view(T, k, H) * w[..., None]).sum(1)
    (ref * up).sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, w.grad, rtol=1e-5, atol=1e-5)


def _experts_layer() -> torch.nn.Module:
    cfg = transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=8,
                                      num_experts_per_tok=3, moe_intermediate_size=16, decoder_sparse_step=1,
                                      mlp_only_layers=[])
    cfg._experts_implementation = "grouped_mm"  # noqa: SLF001
    torch.manual_seed(0)
    return transformers.Qwen3MoeForCausalLM(cfg).to(torch.float32)


def test_the_experts_forward_and_backward_match_transformers(monkeypatch):
    """A tiny Qwen3-MoE switched by ``use_fused_moe``: logits and every parameter's gradient within float32
    rounding of transformers' ``grouped_mm`` experts (the kernels made usable on the CPU by the interpreter)."""
    ids = torch.randint(2, 60, (3, 11), generator=torch.Generator().manual_seed(9))

    def run(model: torch.nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logits = model(input_ids=ids).logits
        (logits.float().square().mean()).backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref_logits, ref_grads = run(_experts_layer())
    model = _experts_layer()
    assert use_fused_moe(model) == 2 and use_fused_moe(model) == 0  # once per experts module
    monkeypatch.setattr(fused_moe, "usable", lambda x: True)
    calls = []
    real_route = fused_moe.route
    monkeypatch.setattr(fused_moe, "route", lambda *a: calls.append(1) or real_route(*a))
    logits, grads = run(model)
    assert len(calls) == 2, "the fused path did not run"
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_only_cuda_with_triton_and_only_grouped_mm_experts(monkeypatch):
    """On the CPU the switched module runs transformers' forward (the same bits); eager experts and modules
    with biases are not switched."""
    model = _experts_layer()
    experts = model.model.layers[0].mlp.experts
    x = torch.randn(7, 32, generator=torch.Generator().manual_seed(1))
    idx, w = _ids(7, 3, 8, seed=4), torch.rand(7, 3)
    with torch.no_grad():
        want = grouped_mm_experts_forward(experts, x, idx, w)
        use_fused_moe(model)
        assert torch.equal(experts(x, idx, w), want)  # not usable on the CPU: transformers' own
    eager = _experts_layer()
    eager.config._experts_implementation = "eager"  # noqa: SLF001
    assert use_fused_moe(eager) == 0
    biased = _experts_layer()
    biased.model.layers[0].mlp.experts.has_bias = True
    assert use_fused_moe(biased) == 1


def test_a_traced_call_allocates_the_buffers_and_launches_nothing():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        slot, token, offsets = route(torch.zeros(64, 8, dtype=torch.int64), 128)
        out = gather_sum(torch.empty(512, 32), slot, 8, torch.empty(64, 8), torch.bfloat16)
    assert slot.shape == token.shape == (512,) and offsets.shape == (128,) and out.shape == (64, 32)
    slot, _, _ = route(torch.zeros(4, 2, dtype=torch.int64, device="meta"), 8)
    assert slot.is_meta
