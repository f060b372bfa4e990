"""The lean RMSNorm: the model's own forward bits, autograd's gradients up to rounding, less kept.

The norm computes in float32 whatever the input (as the model's does), hence float32 tolerances for float64.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeRMSNorm

from harness.core.lean_norm import LeanRMSNorm, use_lean_norms


def _norm(width: int, dtype: torch.dtype) -> Qwen3MoeRMSNorm:
    torch.manual_seed(0)
    norm = Qwen3MoeRMSNorm(width, eps=1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(width) + 0.5)
    return norm


def _saved_bytes(fn, *args) -> int:
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return sum(seen.values())


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float64, 1e-6)])
def test_same_forward_bits_and_gradients(dtype: torch.dtype, tol: float) -> None:
    norm = _norm(64, dtype)
    x = (torch.randn(4, 7, 64, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    up = torch.randn(4, 7, 64, generator=torch.Generator().manual_seed(2)).to(dtype)

    x1 = x.clone().requires_grad_(True)
    own = norm(x1)
    (own * up).sum().backward()
    g_x, g_w = x1.grad.clone(), norm.weight.grad.clone()
    norm.weight.grad = None

    x2 = x.clone().requires_grad_(True)
    lean = LeanRMSNorm.apply(x2, norm.weight, norm.variance_epsilon)
    assert torch.equal(own, lean)  # bit for bit
    (lean * up).sum().backward()
    scale = lambda t: t.float().abs().max().item()  # noqa: E731
    assert (x2.grad.float() - g_x.float()).abs().max().item() <= tol * scale(g_x)
    assert (norm.weight.grad.float() - g_w.float()).abs().max().item() <= tol * scale(g_w)


def test_keeps_less_for_the_backward() -> None:
    norm = _norm(256, torch.bfloat16)
    x = torch.randn(8, 128, 256).to(torch.bfloat16).requires_grad_(True)
    own = _saved_bytes(norm, x)
    lean = _saved_bytes(LeanRMSNorm.apply, x, norm.weight, norm.variance_epsilon)
    # the input (bf16) and one float32 per row, against float32 copies of the input
    assert lean <= x.numel() * 2 + 8 * 128 * 4 + 256 * 2
    assert own >= 2.5 * lean  # measured: 2.98x


def test_use_lean_norms_switches_known_classes_only_under_grad() -> None:
    model = torch.nn.Sequential(_norm(32, torch.float32), torch.nn.LayerNorm(32), _norm(32, torch.float32))
    assert use_lean_norms(model) == 2
    assert use_lean_norms(model) == 0  # already switched
    x = torch.randn(2, 32, requires_grad=True)
    y = model[0](x)
    assert y.grad_fn is not None and "LeanRMSNorm" in type(y.grad_fn).__name__
    with torch.no_grad():
        assert torch.equal(model[0](x), Qwen3MoeRMSNorm.forward(model[0], x))
