"""RMSNorm that keeps less for the backward: the input and one float32 scale per row.

The Qwen3 RMSNorm (``x.float()``, mean of squares, ``rsqrt``, scale, cast back, times the weight)
run under autograd keeps three float32 copies of its input for the backward. With a 16 k-token
micro-batch and hidden 2048 that is 0.4 GB per norm call; the q/k norms see every head
(32 × 128 wide): measured on one H200, the norms held 4.2 GB of the update's 50.9 GB peak.

:class:`LeanRMSNorm` computes the forward with the same operations in the same order (the same
bits), saves only the input and the per-row ``rsqrt``, and recomputes the rest in its backward. Its
gradients are the analytic ones, rounded differently from autograd's, so it is used only where a
run is not bitwise-reproducible anyway: on CUDA outside deterministic mode (as the compiled
output head). :func:`use_lean_norms` switches a model's norms over after checking, on a sample,
that each class's forward gives the same bits as its own. On CUDA with Triton a switched norm runs
:mod:`harness.core.fused_norm`'s kernels instead (other bits): without autograd (rollouts, log-prob forwards) its
one-kernel forward, under autograd (the update) :class:`~harness.core.fused_norm.TrainRMSNorm`; the lean norm is
what runs elsewhere (on CUDA without Triton).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor

from harness.core import fused_norm
from harness.core.switch import switch_forward

# transformers' RMSNorm classes with the forward above (checked on a sample before use)
KNOWN = ("Qwen3RMSNorm", "Qwen3MoeRMSNorm", "Qwen3VLTextRMSNorm", "Qwen3VLMoeTextRMSNorm")


def _normalise(x: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    x32 = x.to(torch.float32)
    rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return x32 * rstd, rstd


class LeanRMSNorm(torch.autograd.Function):
    """``weight * (x.float() * rsqrt(mean(x.float()²) + eps)).to(x.dtype)``, saving (x, rstd, weight)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        h, rstd = _normalise(x, eps)
        ctx.save_for_backward(x, rstd, weight)
        return weight * h.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x, rstd, weight = ctx.saved_tensors
        h = x.to(torch.float32) * rstd
        grad_w = None
        if ctx.needs_input_grad[1]:
            dims = tuple(range(grad.dim() - weight.dim()))
            grad_w = (grad * h.to(x.dtype)).to(torch.float32).sum(dims).to(weight.dtype)
        grad_x = None
        if ctx.needs_input_grad[0]:
            g = (grad * weight).to(torch.float32)  # through the cast back to x.dtype
            grad_x = (rstd * (g - h * (g * h).mean(-1, keepdim=True))).to(x.dtype)
        return grad_x, grad_w, None


def _lean_forward(self: torch.nn.Module, hidden_states: Tensor) -> Tensor:
    if torch.is_grad_enabled() and (hidden_states.requires_grad or self.weight.requires_grad):
        if fused_norm.trainable(hidden_states):  # the update on CUDA: a kernel each way instead of ~20 passes
            return fused_norm.TrainRMSNorm.apply(hidden_states, self.weight, float(cast(Any, self.variance_epsilon)))
        return LeanRMSNorm.apply(hidden_states, self.weight, self.variance_epsilon)
    if fused_norm.usable(hidden_states):  # inference on CUDA: one kernel instead of eight
        return fused_norm.rms_norm(hidden_states, cast(Tensor, self.weight), float(cast(Any, self.variance_epsilon)))
    return type(self).forward(self, hidden_states)


def _same_bits(module: Any) -> bool:  # an RMSNorm of a transformers model (weight, variance_epsilon)
    """The lean forward gives the class's own bits on a sample (the check that the class is the one meant)."""
    w = module.weight
    if w.device.type == "meta":  # shapes only (harness plan traces memory): the run checks the bits when it builds
        return True
    n = w.shape[-1]
    x = torch.linspace(-4.0, 4.0, 15 * n, device=w.device).reshape(3, 5, n).sin().to(w.dtype)  # no RNG drawn
    with torch.no_grad():
        own = type(module).forward(module, x)
        h, _ = _normalise(x, module.variance_epsilon)
        lean = w * h.to(x.dtype)
    return own.dtype == lean.dtype and torch.equal(own, lean)


def use_lean_norms(model: torch.nn.Module) -> int:
    """Switch ``model``'s RMSNorms (of :data:`KNOWN` classes that pass the check) to :class:`LeanRMSNorm`.

    Returns how many were switched. Inference (no grad) runs :func:`harness.core.fused_norm.rms_norm` on CUDA
    with Triton, else the class's own forward.
    """
    return switch_forward(model, KNOWN, _same_bits, _lean_forward, lambda module: hasattr(module, "variance_epsilon"))
