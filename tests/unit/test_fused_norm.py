"""The one-kernel RMSNorm (Triton, run by its interpreter on the CPU) against transformers' Qwen3 RMSNorm: the
same values to the output dtype's rounding, for the decoder's shapes (hidden rows, per-head q/k rows), strided
inputs and a float32 weight on bf16 activations; a lean-switched norm uses it only without autograd."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")  # read when Triton is imported: the kernels run on CPU tensors
pytest.importorskip("triton")

from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeRMSNorm  # noqa: E402

from harness.core import fused_norm  # noqa: E402
from harness.core.lean_norm import use_lean_norms  # noqa: E402


def _norm(n: int, dtype: torch.dtype) -> Qwen3MoeRMSNorm:
    m = Qwen3MoeRMSNorm(n, eps=1e-6)
    with torch.no_grad():
        m.weight.copy_(torch.linspace(0.5, 1.5, n))
    return m.to(dtype)


@pytest.mark.parametrize("shape", [(16, 1, 64), (16, 1, 4, 32), (3, 5, 100)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_one_kernel_gives_the_modules_values(shape, dtype):
    m = _norm(shape[-1], dtype)
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    with torch.no_grad():
        want = m(x)
    got = fused_norm.rms_norm(x, m.weight, m.variance_epsilon)
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5  # bf16: up to two ulps (two roundings, as the module)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_strided_input_and_a_float32_weight_on_bf16_activations():
    m = _norm(32, torch.float32)
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)[:, ::2]  # strided rows
    with torch.no_grad():
        want = m(x)  # float32 weight × bf16 normalised value: float32
    got = fused_norm.rms_norm(x, m.weight, m.variance_epsilon)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_a_lean_norm_uses_the_kernel_only_without_autograd(monkeypatch):
    model = torch.nn.Sequential(_norm(64, torch.float32))
    assert use_lean_norms(model) == 1
    calls = []
    real = fused_norm.rms_norm
    monkeypatch.setattr(fused_norm, "usable", lambda x: not torch.is_grad_enabled())  # as on CUDA with Triton
    monkeypatch.setattr(fused_norm, "rms_norm", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(4, 1, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        fast = model(x)
    assert calls == [1]
    slow = model(x.requires_grad_())  # the update: LeanRMSNorm's autograd, not the kernel
    assert calls == [1] and slow.requires_grad
    torch.testing.assert_close(fast, slow.detach(), rtol=1e-5, atol=1e-5)
    assert not fused_norm.usable(torch.zeros(1))  # a CPU tensor never takes it
