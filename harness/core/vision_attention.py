"""The vision tower's attention in one kernel call per run of equal-length images, not one per image.

transformers' Qwen3-VL vision attention takes the images packed (every image's patch rows one after the other,
``cu_seqlens`` marking where each starts). A flash kernel takes those boundaries. Any other kernel (``sdpa``, which
the CPU runs and the GPU smoke use) gets one call per image: the rows are split per image, each piece attends on its
own, and the outputs are concatenated. A ``qwen3_vl_30b`` smoke step feeds 128 images of 16 patches each through
each of the tower's blocks per log-prob forward, so that is 128 kernel calls of 16 rows each, and as many again in
the backward.

:func:`use_batched_vision_attention` gives each vision attention module of a :data:`KNOWN` class a forward that
calls the same attention function once per run of consecutive images of one length. The call gets an
(images, heads, length, head_dim) batch, with the same projections, rotary embedding and output projection as the
class's own forward. Each (image, head) pair attends over the same rows in the same order as in its own call, so the
output and every gradient are the same bits. That is checked per class, on a sample (forward and backward, images
of two lengths), before any module is switched. A class that fails the check keeps transformers' forward. The check
draws no random numbers. Flash kernels and attention functions other than ``sdpa`` keep the class's forward too.

Models are switched on the CPU only (:func:`harness.core.model_builder.build_models`). On CUDA the sample would
not settle it: an accelerator's attention kernels may split their work by the batch's size, so a check on a few
images does not vouch for a batch of a hundred, and the GPU baselines are judged bit for bit.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import Tensor

from harness.core.switch import switch_forward

KNOWN = ("Qwen3VLMoeVisionAttention", "Qwen3VLVisionAttention")
BATCHED_KERNELS = ("sdpa",)


def _runs(lengths: list[int]) -> list[tuple[int, int]]:
    """``lengths`` as runs of consecutive equal lengths: (images in the run, their length) in order."""
    runs: list[tuple[int, int]] = []
    for n in lengths:
        if runs and runs[-1][1] == n:
            runs[-1] = (runs[-1][0] + 1, n)
        else:
            runs.append((1, n))
    return runs


def _batched_forward(self: Any, hidden_states: Tensor, cu_seqlens: Tensor,
                     position_embeddings: tuple[Tensor, Tensor] | None = None, max_seqlen: int | None = None,
                     **kwargs: Any) -> Tensor:
    impl = getattr(self.config, "_attn_implementation", None)
    if impl not in BATCHED_KERNELS or position_embeddings is None:
        return type(self).forward(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    rope = sys.modules[type(self).__module__].apply_rotary_pos_emb_vision
    rows, heads = hidden_states.shape[0], self.num_heads
    q, k, v = self.qkv(hidden_states).reshape(rows, 3, heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    q, k = rope(q, k, cos, sin)
    attend = ALL_ATTENTION_FUNCTIONS[impl]
    outs, start = [], 0
    for n, length in _runs((cu_seqlens[1:] - cu_seqlens[:-1]).tolist()):
        end = start + n * length
        # each of q, k, v as (images, heads, length, head_dim)
        qb, kb, vb = (t[start:end].reshape(n, length, heads, -1).transpose(1, 2) for t in (q, k, v))
        out, _ = attend(self, qb, kb, vb, attention_mask=None, scaling=self.scaling,
                        dropout=0.0 if not self.training else self.attention_dropout, is_causal=False, **kwargs)
        outs.append(out.reshape(end - start, -1))  # (images, length, heads, head_dim) -> rows
        start = end
    attn_output = (outs[0] if len(outs) == 1 else torch.cat(outs)).contiguous()
    return self.proj(attn_output)


SAMPLE_LENGTHS = (4, 4, 4, 2, 2, 3)  # images of the sample: runs of three lengths


def _same_bits(module: Any) -> bool:
    """The batched forward gives the class's own output and gradients (input and weights) on a sample."""
    w = module.qkv.weight
    if w.device.type == "meta":  # shapes only (harness plan traces memory): the run checks the bits when it builds
        return True
    if getattr(module.config, "_attn_implementation", None) not in BATCHED_KERNELS:
        return False
    rows, dim, head_dim = sum(SAMPLE_LENGTHS), w.shape[-1], w.shape[-1] // module.num_heads
    grid = torch.arange(rows * dim, device=w.device, dtype=torch.float64)
    x = (grid * 0.37).sin().reshape(rows, dim).to(w.dtype)  # no RNG drawn
    angles = torch.arange(rows * head_dim, device=w.device, dtype=torch.float64).reshape(rows, head_dim) * 0.01
    pos = (angles.cos().to(w.dtype), angles.sin().to(w.dtype))
    cu = torch.tensor([0, *torch.tensor(SAMPLE_LENGTHS).cumsum(0).tolist()], device=w.device, dtype=torch.int32)
    grad = (grid * 0.11).cos().reshape(rows, dim).to(w.dtype)
    params = [p for p in module.parameters() if p.requires_grad]
    results = []
    for fwd in (type(module).forward, _batched_forward):
        xi = x.clone().requires_grad_(True)
        with torch.enable_grad():
            out = fwd(module, xi, cu, pos)
            grads = torch.autograd.grad(out, [xi, *params], grad, allow_unused=True)
        results.append((out.detach(), grads))
    (a, ga), (b, gb) = results
    return torch.equal(a, b) and all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
                                     for x, y in zip(ga, gb))


def use_batched_vision_attention(model: torch.nn.Module) -> int:
    """Switch ``model``'s vision attention modules (of :data:`KNOWN` classes that pass the check) to the batched
    forward. Returns how many were switched."""
    return switch_forward(model, KNOWN, _same_bits, _batched_forward, _applies)


def _applies(module: Any) -> bool:
    return hasattr(module, "qkv") and hasattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb_vision")
