"""Rollout: n samples per prompt with the model's own KV cache, and the batch they form.

Groups are built by repeating each prompt (and its pixels) n times contiguously. Prompts are
left-padded, responses right-padded to exactly ``max_new_tokens``; a response is masked after
its first EOS (the EOS itself counts). Special tokens a response may never contain (image pad,
vision start/end, …) get a large finite negative logit in sampling and in every log-prob
recompute, so generation-time and recomputed log-probs agree.

Sampling is a bare loop — one forward per token, ``torch.multinomial`` with a seeded generator —
rather than ``generate``: it does the same work with far less per-step overhead, and the
distribution sampled is exactly ``softmax(logits / T)`` restricted by top-k / top-p.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from harness.core.decode import decode_attention, decoder_for
from harness.core.fused_sampler import fused_sample
from harness.core.model_builder import HFModel, ModelInputs, forward_logits, next_positions, position_ids, upcast

PROMPT_POSITIONS = "prompt_positions"  # tensors key: the prompts' positions (B, P) or (B, 3, P), rows first


@dataclass
class RolloutBatch:
    """B = prompts × n sequences. Shapes: prompt (B, P), response (B, R)."""

    prompt_ids: Tensor  # (B, P) left-padded
    prompt_mask: Tensor  # (B, P)
    response_ids: Tensor  # (B, R) right-padded with pad
    response_mask: Tensor  # (B, R) 1 up to and including the first EOS
    rollout_logp: Tensor  # (B, R) log-prob of each sampled token at generation time
    group_ids: list[Any]  # (B,) same id = same prompt
    pixels: list[Tensor | None]  # per sequence: its prompt's pixel patches
    grids: list[Tensor | None]  # per sequence: its prompt's image_grid_thw rows
    tensors: dict[str, Tensor] = field(default_factory=dict)  # old_logp, ref_logp, advantages, scores …

    @property
    def size(self) -> int:
        return self.prompt_ids.shape[0]

    def select(self, idx: Tensor | list[int]) -> RolloutBatch:
        """The sub-batch of rows ``idx`` (pixels follow their sequences)."""
        idx_t = torch.as_tensor(idx, dtype=torch.long)
        rows = idx_t.tolist()
        dev = self.prompt_ids.device
        take = idx_t.to(dev)
        return replace(
            self,
            prompt_ids=self.prompt_ids[take], prompt_mask=self.prompt_mask[take],
            response_ids=self.response_ids[take], response_mask=self.response_mask[take],
            rollout_logp=self.rollout_logp[take], group_ids=[self.group_ids[i] for i in rows],
            pixels=[self.pixels[i] for i in rows], grids=[self.grids[i] for i in rows],
            tensors={k: v[take.to(v.device)] for k, v in self.tensors.items()},
        )

    def model_inputs(self, image_pad_id: int) -> ModelInputs:
        """Full sequences (prompt + response) for a log-prob forward."""
        input_ids = torch.cat([self.prompt_ids, self.response_ids], dim=1)  # (B, P + R)
        attention_mask = torch.cat([self.prompt_mask, self.response_mask], dim=1)
        return _vision_inputs(input_ids, attention_mask, self.pixels, self.grids, image_pad_id)


def _vision_inputs(input_ids: Tensor, attention_mask: Tensor, pixels: list[Tensor | None], grids: list[Tensor | None],
                   image_pad_id: int) -> ModelInputs:
    with_px = [p for p in pixels if p is not None]
    if not with_px:
        return {"input_ids": input_ids, "attention_mask": attention_mask, "pixel_values": None,
                "image_grid_thw": None, "mm_token_type_ids": None}
    device = input_ids.device
    return {
        "input_ids": input_ids, "attention_mask": attention_mask,
        "pixel_values": torch.cat(with_px, dim=0).to(device),
        "image_grid_thw": torch.cat([g for g in grids if g is not None], dim=0).to(device),
        "mm_token_type_ids": ((input_ids == image_pad_id) & attention_mask.bool()).long(),
    }


def sample_from_logits(logits: Tensor, *, temperature: float, top_k: int, top_p: float, uniforms: Tensor
                       ) -> tuple[Tensor, Tensor]:
    """Sample one token per row by inverse CDF with the given uniforms (B,) in [0, 1).

    Returns (tokens (B,), log-prob under softmax(logits / T) (B,)). The log-prob is the
    unfiltered tempered softmax (what the loss recomputes); top-k / top-p only restrict which
    tokens can be drawn (top_k ≤ 0 and top_p = 1 turn them off). Uniforms drawn for the whole
    global batch make a row's sample independent of how rows are split over ranks.
    """
    scaled = upcast(logits)  # (B, V)
    if temperature != 1.0:  # x / 1 is x exactly: one full-vocabulary pass less per token
        scaled = scaled / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)
    filtered = scaled
    if top_k and top_k > 0 and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, descending=True, dim=-1)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) > top_p  # keep the token that crosses top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    cdf = torch.softmax(filtered, dim=-1).cumsum(-1)  # (B, V)
    target = uniforms.to(cdf.dtype)[:, None] * cdf[:, -1:]
    tokens = (cdf <= target).sum(-1).clamp(max=cdf.shape[-1] - 1)  # first index with cdf > u
    return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)


def draw_uniforms(generator: torch.Generator, steps: int, global_batch: int, rows: list[int], device: torch.device
                  ) -> Tensor:
    """(steps, local B) uniforms: drawn for the whole global batch on the CPU, this rank's rows kept."""
    u = torch.rand((steps, global_batch), generator=generator, dtype=torch.float64)
    return u[:, rows].to(device=device, dtype=torch.float32)


@torch.no_grad()
def generate(model: HFModel, prompts: dict[str, Tensor], *, n: int, max_new_tokens: int, temperature: float,
             top_k: int, top_p: float, eos_id: int, pad_id: int, image_pad_id: int, bias: Tensor,
             uniforms: Tensor, group_ids: list[Any], pixels: list[Tensor | None],
             grids: list[Tensor | None], greedy: bool = False, ignore_eos: bool = False,
             run_to_length: bool = False, engine: str = "dynamic", check_every: int = 8,
             fused_sampler: bool = False) -> RolloutBatch:
    """Sample ``n`` responses for each prompt of ``prompts`` (collated, left-padded, on device).

    ``pixels``/``grids`` are per prompt; ``bias`` (V,) bans tokens; ``uniforms`` (R, B) drive the
    sampler. ``ignore_eos`` forces every response to ``max_new_tokens`` (benchmarks doing fixed
    work); ``run_to_length`` keeps stepping after every row has stopped (sharded models need
    every rank to run the same number of forwards). ``engine``: ``dynamic`` (the loop below, the
    CPU path), ``static`` (a static KV cache, eager) or ``graph`` (static, each decode step one CUDA
    graph; see :mod:`harness.core.decode`); ``check_every`` is how often the static engines read
    back whether every row has stopped; ``fused_sampler`` draws with :mod:`harness.core.fused_sampler`
    (the same distribution, other bits: only where :func:`harness.core.fused_sampler.usable`).
    """
    from transformers import DynamicCache

    device = prompts["input_ids"].device
    rep = lambda t: t.repeat_interleave(n, dim=0)  # noqa: E731 - groups contiguous
    prompt_ids, prompt_mask = rep(prompts["input_ids"]), rep(prompts["attention_mask"])
    seq_pixels = [p for p in pixels for _ in range(n)]
    seq_grids = [g for g in grids for _ in range(n)]
    seq_groups = [g for g in group_ids for _ in range(n)]
    inputs = _vision_inputs(prompt_ids, prompt_mask, seq_pixels, seq_grids, image_pad_id)
    # positions of each distinct prompt, then repeated (row-wise integers: what the n copies would give)
    once = _vision_inputs(prompts["input_ids"], prompts["attention_mask"], pixels, grids, image_pad_id)
    pos = position_ids(model, prompts["input_ids"], prompts["attention_mask"], once["mm_token_type_ids"],
                       once["image_grid_thw"]).repeat_interleave(n, dim=-2)  # (B, P) or (3, B, P)
    next_pos = next_positions(pos, prompt_mask)  # (B,)

    def sampler(raw: Tensor, bias: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """Tokens and log-probs from one step's raw logits (B, V) and the banned-token bias (V,)."""
        if fused_sampler:
            return fused_sample(raw, bias, u, temperature)
        step_logits = upcast(raw)
        step_logits = step_logits + bias.to(step_logits.dtype)  # (B, V)
        if greedy:
            tok = step_logits.argmax(-1)
            return tok, torch.log_softmax(step_logits, -1).gather(-1, tok[:, None]).squeeze(-1)
        return sample_from_logits(step_logits, temperature=temperature, top_k=top_k, top_p=top_p, uniforms=u)

    if engine != "dynamic":
        B, P = prompt_ids.shape
        logits_dtype = upcast(torch.zeros((), dtype=model.dtype)).dtype
        key = (engine, B, P, max_new_tokens, pos.dim() == 3, bias.shape[-1], str(device), logits_dtype, eos_id,
               pad_id, ignore_eos, greedy, temperature, top_k, top_p, fused_sampler)  # what a graph bakes in
        dec = decoder_for(model, key, batch=B, prompt_len=P, max_new_tokens=max_new_tokens, pos_3d=pos.dim() == 3,
                          vocab=bias.shape[-1], device=device, eos_id=eos_id, pad_id=pad_id, ignore_eos=ignore_eos,
                          logits_dtype=logits_dtype)
        dec.load(prompt_mask=prompt_mask, next_pos=next_pos, uniforms=uniforms, bias=bias, sampler=sampler)
        with decode_attention(model):  # flash-attn takes no 4-D mask: sdpa for the prefill and the steps
            dec.prefill(prompt_ids, prompt_mask, pos, inputs)
            if engine == "graph":
                dec.capture()
            responses, resp_mask, logps = dec.run(run_to_length=run_to_length, check_every=check_every)
        return RolloutBatch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=responses,
                            response_mask=resp_mask, rollout_logp=logps, group_ids=seq_groups, pixels=seq_pixels,
                            grids=seq_grids, tensors={PROMPT_POSITIONS: _rows_first(pos)})

    B = prompt_ids.shape[0]
    cache = DynamicCache(config=model.config) if _cache_takes_config() else DynamicCache()
    logits, cache = forward_logits(model, input_ids=prompt_ids, attention_mask=prompt_mask, pos=pos,
                                   pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"],
                                   mm_token_type_ids=inputs["mm_token_type_ids"], cache=cache, logits_to_keep=1)
    responses = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=device)
    resp_mask = torch.zeros((B, max_new_tokens), dtype=torch.long, device=device)
    logps = torch.zeros((B, max_new_tokens), dtype=upcast(logits).dtype, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    attn = prompt_mask
    for t in range(max_new_tokens):
        tok, lp = sampler(logits[:, -1, :], bias, uniforms[t])
        tok = torch.where(alive, tok, torch.full_like(tok, pad_id))
        responses[:, t] = tok
        resp_mask[:, t] = alive.long()
        logps[:, t] = torch.where(alive, lp, torch.zeros_like(lp))
        if not ignore_eos:
            alive = alive & (tok != eos_id)
        if t == max_new_tokens - 1 or (not run_to_length and not bool(alive.any())):
            break
        attn = torch.cat([attn, alive.long()[:, None]], dim=1)
        step_pos = (next_pos + t)[:, None]  # (B, 1)
        if pos.dim() == 3:
            step_pos = step_pos[None].expand(3, -1, -1)
        logits, cache = forward_logits(model, input_ids=tok[:, None], attention_mask=attn, pos=step_pos, cache=cache)
    return RolloutBatch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=responses,
                        response_mask=resp_mask, rollout_logp=logps, group_ids=seq_groups, pixels=seq_pixels,
                        grids=seq_grids, tensors={PROMPT_POSITIONS: _rows_first(pos)})


def _rows_first(pos: Tensor) -> Tensor:
    """(B, L) as is, (3, B, L) as (B, 3, L): batch tensors are indexed by row on dim 0."""
    return pos if pos.dim() == 2 else pos.permute(1, 0, 2)


def _cache_takes_config() -> bool:
    import inspect

    from transformers import DynamicCache

    return "config" in inspect.signature(DynamicCache.__init__).parameters
