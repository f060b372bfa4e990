"""Log-prob forwards and the actor update (mini-batches × micro-batches, gradient accumulation).

Loss scaling: each micro-batch's loss is aggregated with the *mini-batch's* global
denominators (token count for ``token-mean``, valid-sequence count for the ``seq-*`` modes),
so the sum over micro-batches — and over data-parallel ranks, whose counts are all-reduced —
equals the loss of the whole mini-batch for every aggregation mode.

On-policy (one PPO epoch over one mini-batch), the old log-probs *are* the current ones: as in
verl's actor, the update then takes them from its own forward (detached), and the trainer skips
the separate old-log-prob forward (:func:`is_on_policy`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from harness.core import algos, fused_head
from harness.core.device import cuda_triton, fast_kernels
from harness.core.gather import is_fsdp
from harness.core.model_builder import (
    ModelInputs,
    forward_hidden,
    forward_logits,
    masked_position,
    next_positions,
    position_ids,
    upcast,
)
from harness.core.rollout import PROMPT_POSITIONS, RolloutBatch


@dataclass(frozen=True)
class LossConfig:
    clip_low: float
    clip_high: float
    clip_ratio_c: float
    agg_mode: str
    entropy_coeff: float
    use_kl_loss: bool
    kl_coef: float
    kl_type: str
    temperature: float
    policy_loss: str = "vanilla"


def is_on_policy(batch_size: int, mini_size: int, epochs: int) -> bool:
    """One epoch over a single mini-batch: the policy that sampled is the one being updated, once."""
    return epochs == 1 and mini_size >= batch_size


def micro_batches(n: int, size: int) -> list[list[int]]:
    size = max(1, size)
    return [list(range(i, min(n, i + size))) for i in range(0, n, size)]


# A micro-batch whose float32 logits would exceed this is projected by the output head in chunks of
# about this size (each recomputed in the backward), so the peak follows the hidden size, not V. A chunk's
# backward holds several logit-sized buffers at once (measured on an H200: ~6 GB at 1 GiB chunks, the update's
# largest single item after the gradients), so the chunk is kept small; 256 MiB is still ~440 rows of a 152k
# vocabulary, a GEMM large enough to run at full speed.
LOGIT_CHUNK_BYTES = 256 << 20


def head_kind(device: torch.device) -> str:
    """``compiled`` on CUDA outside deterministic mode (where Triton is there), else ``eager``.

    The chunk's dozen full-vocabulary float32 passes (upcast, bias, temperature, log-softmax,
    entropy, and their backward) become a few fused kernels, and under autograd the chunks share one
    weight gradient (:class:`harness.core.fused_head.ChunkedHead`). Deterministic mode keeps the eager
    kernels: its runs must reproduce baselines recorded with them bit for bit.
    """
    fast = fast_kernels(device, torch.are_deterministic_algorithms_enabled())
    return "compiled" if fast and cuda_triton(device) else "eager"


def _checkpointed_chunk(*args: Any) -> tuple[Tensor, ...]:
    """A head chunk whose logits are recomputed in the backward rather than kept."""
    return checkpoint(fused_head.chunk_values, *args, use_reentrant=False)


def logprobs_from_hidden(hidden: Tensor, weight: Tensor, labels: Tensor, *, bias: Tensor, temperature: float,
                         chunk_rows: int, with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    """Log-probs and entropies (B, R) of ``labels`` from hidden states (B, R, H) and the head (V, H).

    ``chunk_rows`` positions at a time. With gradients on, the logits are recomputed in the backward
    rather than kept: eagerly each chunk is checkpointed; compiled (:func:`head_kind`), the chunks run
    as one :class:`~harness.core.fused_head.ChunkedHead`.
    """
    B, R, H = hidden.shape
    flat_h, flat_y = hidden.reshape(B * R, H), labels.reshape(B * R)
    compiled, grad = head_kind(hidden.device) == "compiled", torch.is_grad_enabled()
    if compiled and grad:
        out = fused_head.ChunkedHead.apply(flat_h, weight, flat_y, bias, temperature, chunk_rows, with_entropy, True)
    else:
        chunk = fused_head.compiled_values() if compiled else _checkpointed_chunk if grad else fused_head.chunk_values
        out = fused_head.over_chunks(chunk, flat_h, weight, flat_y, bias, temperature, chunk_rows, with_entropy)
    return out[0].reshape(B, R), out[1].reshape(B, R) if with_entropy else None


POSITIONS = "positions"  # batch.tensors key: the full sequences' positions, (B, L) or (B, 3, L)


def full_positions(model: torch.nn.Module, batch: RolloutBatch, inputs: ModelInputs) -> Tensor:
    """Positions of prompt + response: (B, L), or (3, B, L) multimodal RoPE; from the batch when attached."""
    cached = batch.tensors.get(POSITIONS)
    if cached is not None:
        return cached if cached.dim() == 2 else cached.permute(1, 0, 2)
    return position_ids(model, inputs["input_ids"], inputs["attention_mask"], inputs["mm_token_type_ids"],
                        inputs["image_grid_thw"])


def attach_positions(model: torch.nn.Module, batch: RolloutBatch, image_pad_id: int) -> None:
    """Compute the positions once for the whole batch; every sub-batch then selects its rows.

    Qwen3-VL's multimodal RoPE index is a Python loop over rows; the old, reference and update
    forwards would otherwise each run it for every micro-batch. A rollout knows its prompts'
    positions, and a response continues them one text token at a time (as it was sampled), padding
    at the position the index gives padding; otherwise (a replayed batch) the index runs once here.
    Row-wise integers either way: tested equal to the index on every sub-batch.
    """
    prompt_pos = batch.tensors.get(PROMPT_POSITIONS)
    if prompt_pos is not None and prompt_pos.dim() == 3:
        pp = prompt_pos.permute(1, 0, 2)  # (3, B, P)
        R = batch.response_ids.shape[1]
        step = torch.arange(R, device=pp.device, dtype=pp.dtype)
        resp = (next_positions(pp, batch.prompt_mask)[:, None] + step)[None].expand(3, -1, -1)  # (3, B, R)
        valid = torch.cat([batch.prompt_mask, batch.response_mask], dim=1).bool()[None]  # (1, B, P + R)
        pos = torch.where(valid, torch.cat([pp, resp], dim=-1), masked_position(model))
    else:
        pos = full_positions(model, batch, batch.model_inputs(image_pad_id))
    batch.tensors[POSITIONS] = pos if pos.dim() == 2 else pos.permute(1, 0, 2)


def sequence_logprobs(model: torch.nn.Module, batch: RolloutBatch, *, bias: Tensor, temperature: float,
                      image_pad_id: int, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """Log-probs (B, R) of the response tokens (and entropies (B, R)) under ``model``.

    Where the micro-batch's float32 logits would exceed :data:`LOGIT_CHUNK_BYTES` (and the model is
    not sharded), the head is applied chunk by chunk (:func:`logprobs_from_hidden`).
    """
    inputs = batch.model_inputs(image_pad_id)
    pos = full_positions(model, batch, inputs)
    B, R = batch.response_ids.shape
    vocab = bias.shape[-1]
    if B * R * vocab * 4 > LOGIT_CHUNK_BYTES and not is_fsdp(model):  # FSDP2's root hooks must run: no head on its own
        hidden, weight = forward_hidden(model, input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                        pos=pos, pixel_values=inputs["pixel_values"],
                                        image_grid_thw=inputs["image_grid_thw"],
                                        mm_token_type_ids=inputs["mm_token_type_ids"])
        return logprobs_from_hidden(hidden[:, -(R + 1):-1, :], weight, batch.response_ids, bias=bias,
                                    temperature=temperature, chunk_rows=max(1, LOGIT_CHUNK_BYTES // (vocab * 4)),
                                    with_entropy=with_entropy)
    logits, _ = forward_logits(model, input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], pos=pos,
                               pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"],
                               mm_token_type_ids=inputs["mm_token_type_ids"], logits_to_keep=R + 1)
    logits = upcast(logits[:, :-1, :])
    logits = (logits + bias.to(logits.dtype)) / temperature  # (B, R, V): position t predicts response token t
    logp = algos.logprobs_from_logits(logits, batch.response_ids)
    ent = algos.entropy_from_logits(logits) if with_entropy else None
    return logp, ent


@torch.no_grad()
def batched_logprobs(model: torch.nn.Module, batch: RolloutBatch, micro: int, **kw: Any) -> Tensor:
    parts = [sequence_logprobs(model, batch.select(idx), **kw)[0] for idx in micro_batches(batch.size, micro)]
    return torch.cat(parts, dim=0)


def _count(mask: Tensor, all_reduce: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
    tokens = mask.sum().to(torch.float64)
    seqs = (mask.sum(-1) > 0).sum().to(torch.float64)
    both = all_reduce(torch.stack([tokens, seqs]))
    return both[0], both[1]


def update_actor(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, batch: RolloutBatch, *,
                 cfg: LossConfig, mini_size: int, micro_size: int, epochs: int, clip_grad: float, bias: Tensor,
                 image_pad_id: int,
                 all_reduce: Callable[[Tensor], Tensor] = lambda t: t, grad_scale: float = 1.0,
                 on_policy: bool = False) -> dict[str, float]:
    """PPO epochs over mini-batches; one optimiser step per mini-batch. Returns averaged metrics.

    ``grad_scale`` compensates a data-parallel gradient *average* (FSDP divides by world size):
    the losses here are sums over ranks, so the backward is scaled by the world size. ``on_policy``
    (only with :func:`is_on_policy`): the old log-probs are the update's own, detached, and are
    handed back in ``batch.tensors["old_logp"]``.
    """
    loss_fn = algos.get_policy_loss(cfg.policy_loss)
    kl_fn = algos.get_kl(cfg.kl_type) if cfg.use_kl_loss else None
    sums: dict[str, float] = {}
    n_steps = 0
    if on_policy and not is_on_policy(batch.size, mini_size, epochs):
        raise ValueError("on_policy needs one PPO epoch over one mini-batch; otherwise give old_logp")
    own_logp: list[Tensor] = []  # on-policy: the old log-probs, from the update's own forwards
    for _ in range(epochs):
        for mini_idx in micro_batches(batch.size, mini_size):
            mini = batch.select(mini_idx)
            g_tokens, g_seqs = _count(mini.response_mask, all_reduce)
            agg = algos.AggCounts(global_tokens=g_tokens, global_seqs=g_seqs)  # every loss term: the batch's counts
            optimizer.zero_grad(set_to_none=True)
            acc: dict[str, float] = {}
            for idx in micro_batches(mini.size, micro_size):
                mb = mini.select(idx)
                mask = mb.response_mask
                logp, ent = sequence_logprobs(model, mb, bias=bias, temperature=cfg.temperature,
                                              image_pad_id=image_pad_id, with_entropy=True)
                if on_policy:
                    own_logp.append(logp.detach())
                old_logp = own_logp[-1] if on_policy else mb.tensors["old_logp"]
                pg, stats = loss_fn(old_logp, logp, mb.tensors["advantages"], mask,
                                    clip_low=cfg.clip_low, clip_high=cfg.clip_high, clip_ratio_c=cfg.clip_ratio_c,
                                    agg_mode=cfg.agg_mode, **agg)
                assert ent is not None  # asked for with_entropy
                ent_loss = algos.agg_loss(ent, mask, cfg.agg_mode, **agg)
                loss = pg - cfg.entropy_coeff * ent_loss
                if kl_fn is not None:
                    kl = algos.agg_loss(kl_fn(logp, mb.tensors["ref_logp"]), mask, cfg.agg_mode, **agg)
                    loss = loss + cfg.kl_coef * kl
                    acc["actor/kl_loss"] = acc.get("actor/kl_loss", 0.0) + float(kl.detach())
                (loss * grad_scale).backward()
                # token-weighted metric sums (divided by the mini-batch token count below)
                w = float(mask.sum())
                acc["actor/pg_loss"] = acc.get("actor/pg_loss", 0.0) + float(pg.detach())
                acc["actor/entropy"] = acc.get("actor/entropy", 0.0) + float(ent_loss.detach())
                for k in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"):
                    acc[f"actor/{k}"] = acc.get(f"actor/{k}", 0.0) + float(stats[k]) * w
            # losses are partial sums over ranks (global denominators); clip stats are token-weighted
            names = ["actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/pg_clipfrac", "actor/ppo_kl",
                     "actor/pg_clipfrac_lower"]
            local = torch.tensor([acc.get(k, 0.0) for k in names] + [float(mini.response_mask.sum())],
                                 dtype=torch.float64)
            total = all_reduce(local)
            acc = {k: float(total[i]) for i, k in enumerate(names) if k in acc}
            for k in names[3:]:
                acc[k] = acc[k] / max(float(total[-1]), 1.0)
            grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None],
                                                       clip_grad)
            full = getattr(grad_norm, "full_tensor", None)  # FSDP2: a DTensor norm over all shards
            grad_norm_f = float(full() if callable(full) else grad_norm)
            if torch.isfinite(torch.tensor(grad_norm_f)):
                optimizer.step()
            else:
                acc["actor/grad_norm_nonfinite"] = 1.0
            acc["actor/grad_norm"] = grad_norm_f
            acc["actor/lr"] = float(optimizer.param_groups[0]["lr"])
            for k, v in acc.items():
                sums[k] = sums.get(k, 0.0) + v
            n_steps += 1
    optimizer.zero_grad(set_to_none=True)  # the gradients are freed now, not held through the next rollout
    if scheduler is not None:
        scheduler.step()
    if on_policy:
        batch.tensors["old_logp"] = torch.cat(own_logp, dim=0)  # rows in batch order: one mini-batch, in order
    return {k: v / n_steps for k, v in sums.items()}
