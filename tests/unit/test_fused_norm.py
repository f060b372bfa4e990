"""The Triton RMSNorm (run by its interpreter on the CPU) against transformers' Qwen3 RMSNorm: the one-kernel
forward gives the same values to the output dtype's rounding, for the decoder's shapes (hidden rows, per-head q/k
rows), strided inputs and a float32 weight on bf16 activations; the training pair (:class:`TrainRMSNorm`) gives
those values and float64 autograd's gradients to float32 (bf16) rounding, with more row tiles than programs; a
lean-switched norm takes the one kernel without autograd and the pair under it."""

from __future__ import annotations

import pytest
import torch

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
    slow = model(x.requires_grad_())  # the update without Triton: LeanRMSNorm's autograd, not the kernel
    assert calls == [1] and slow.requires_grad and "LeanRMSNorm" in type(slow.grad_fn).__name__
    torch.testing.assert_close(fast, slow.detach(), rtol=1e-5, atol=1e-5)
    assert not fused_norm.usable(torch.zeros(1))  # a CPU tensor never takes it
    assert not fused_norm.trainable(torch.zeros(1))
    monkeypatch.setattr(fused_norm, "trainable", lambda x: True)  # as on CUDA with Triton
    trained = model(x)
    assert "TrainRMSNorm" in type(trained.grad_fn).__name__
    torch.testing.assert_close(trained.detach(), slow.detach(), rtol=1e-5, atol=1e-5)


def _reference(x: torch.Tensor, weight: torch.Tensor, up: torch.Tensor, eps: float):
    """The module's formula in float64 under autograd: (output, d x, d weight) of sum(output · up)."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = weight.detach().double().requires_grad_(True)
    y = w64 * (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps))
    (y * up.double()).sum().backward()
    return y.detach(), x64.grad, w64.grad


@pytest.mark.parametrize("shape", [(4, 7, 64), (16, 3, 4, 32), (600, 64), (3, 5, 100), (2, 4096)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_training_pair_gives_the_values_and_float64_gradients(shape, dtype, tol):
    m = _norm(shape[-1], dtype)
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(shape, generator=gen) * 3).to(dtype).requires_grad_(True)
    up = torch.randn(shape, generator=gen).to(dtype)
    y = fused_norm.TrainRMSNorm.apply(x, m.weight, m.variance_epsilon)
    with torch.no_grad():
        assert y.dtype == dtype and y.shape == x.shape
        torch.testing.assert_close(y, m(x), rtol=tol, atol=tol)
    (y * up).sum().backward()
    _, want_x, want_w = _reference(x, m.weight, up, m.variance_epsilon)
    for got, want in ((x.grad, want_x), (m.weight.grad, want_w)):
        assert got.dtype == dtype
        assert (got.double() - want).abs().max().item() <= tol * want.abs().max().item()


def test_training_pair_more_tiles_than_programs_and_the_same_bits_twice():
    """700 rows of 64: 11 tiles of 64 rows for 8 programs (2 on the interpreter's 2 "multiprocessors" × 4), so 6
    programs of 2 tiles each, the last tile past the rows; the weight's gradient from the programs' shares summed
    in a fixed order, so a second run gives the same bits."""
    m = _norm(64, torch.float32)
    x = torch.randn(700, 64, generator=torch.Generator().manual_seed(5))
    up = torch.randn(700, 64, generator=torch.Generator().manual_seed(6))
    grads = []
    for _ in range(2):
        xi = x.clone().requires_grad_(True)
        m.weight.grad = None
        (fused_norm.TrainRMSNorm.apply(xi, m.weight, m.variance_epsilon) * up).sum().backward()
        grads.append((xi.grad, m.weight.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    _, want_x, want_w = _reference(x, m.weight, up, m.variance_epsilon)
    assert (grads[0][1].double() - want_w).abs().max().item() <= 1e-5 * want_w.abs().max().item()


def test_training_pair_strided_input_float32_weight_and_no_rows():
    m = _norm(32, torch.float32)
    leaf = torch.randn(8, 64, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16).requires_grad_(True)
    x = leaf[:, ::2]  # strided rows
    y = fused_norm.TrainRMSNorm.apply(x, m.weight, m.variance_epsilon)
    assert y.dtype == torch.float32  # float32 weight × bf16 normalised value
    with torch.no_grad():
        torch.testing.assert_close(y, m(x), rtol=1e-2, atol=1e-2)
    up = torch.randn(8, 32, generator=torch.Generator().manual_seed(8))
    (y * up).sum().backward()
    _, want_x, want_w = _reference(x, m.weight, up, m.variance_epsilon)
    assert m.weight.grad.dtype == torch.float32 and torch.equal(leaf.grad[:, 1::2], torch.zeros(8, 32))
    assert (leaf.grad[:, ::2].double() - want_x).abs().max().item() <= 2e-2 * want_x.abs().max().item()
    assert (m.weight.grad.double() - want_w).abs().max().item() <= 1e-2 * want_w.abs().max().item()
    empty = torch.zeros(0, 32, requires_grad=True)
    m.weight.grad = None
    fused_norm.TrainRMSNorm.apply(empty, m.weight, m.variance_epsilon).sum().backward()
    assert empty.grad.shape == (0, 32) and torch.equal(m.weight.grad, torch.zeros(32))


def test_training_pair_on_meta_tensors_allocates_and_runs_nothing():
    """``harness plan`` traces the update's memory with tensors that hold no data: the pair allocates its buffers
    (the output, one float32 per row; the input gradient and the weight-gradient shares) and launches nothing."""
    w = torch.ones(2048, dtype=torch.bfloat16, device="meta", requires_grad=True)
    x = torch.empty(4, 512, 2048, dtype=torch.bfloat16, device="meta", requires_grad=True)
    y = fused_norm.TrainRMSNorm.apply(x, w, 1e-6)
    assert y.shape == x.shape and y.device.type == "meta"
    y.sum().backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape
