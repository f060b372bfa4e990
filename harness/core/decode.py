"""Decoding over a static KV cache; on CUDA each decode step is one captured CUDA graph.

The dynamic-cache loop in :mod:`harness.core.rollout` launches every kernel of every layer from
Python for every token, so on a GPU a decode step is bound by launch overhead, not by the weights
it reads. Here the cache is preallocated for prompt + response (transformers' ``StaticCache``),
every per-step input lives in a fixed buffer (next token, position, key mask, step index,
sampler uniforms), and one step — forward, banned-token bias, inverse-CDF sampling, EOS
bookkeeping, position advance — is a pure function of those buffers. On CUDA it is captured once
and replayed; elsewhere (and where capture is impossible) the same step runs eagerly.

Semantics are those of the dynamic loop: the same pre-drawn uniforms, the same masks (a key slot
is valid from the prompt's mask, then for each response token while its row is alive), the same
positions. Whether the rows have all stopped is read back only every ``check_every`` steps; steps
after every row stopped only write padding, so the result does not depend on ``check_every``.
The mask is built here as a 4-D boolean tensor, which transformers passes to the attention as is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from harness.core.model_builder import HFModel, ModelInputs, forward_logits

# (raw logits (B, V), banned-token bias (V,), uniforms (B,)) -> (tokens, log-probs)
Sampler = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


# The attention kernel the static engines decode with in place of the model's own: flash-attn takes no 4-D boolean
# mask (the static cache's), sdpa computes the same attention. The log-prob and update forwards keep flash-attn.
DECODE_ATTENTION = {"flash_attention_2": "sdpa"}


def pick_engine(model: HFModel, device: torch.device, *, sharded: bool) -> tuple[str, str | None]:
    """(engine, a note for the run): ``graph`` on one CUDA device where every op of a step can be captured.

    The CPU keeps the dynamic loop (its metrics are the committed baselines'). ``sharded`` models (whose
    forwards all-gather parameters layer by layer) keep it too; a sharded model gathered once for the whole
    rollout is not ``sharded`` here (:func:`harness.core.gather.gathered`). So do MoE experts other than
    ``grouped_mm`` (the eager experts read routing counts back to the host, which a graph cannot hold) and the
    attention kernels other than sdpa, except flash-attn: a model on ``flash_attention_2`` decodes over sdpa
    (:data:`DECODE_ATTENTION`, :func:`decode_attention`) and the gap between its rollout's log-probs and its
    training forward's shows in ``training/rollout_probs_diff_*``.
    """
    if device.type != "cuda":
        return "dynamic", None
    cfg = model.config
    text = getattr(cfg, "text_config", cfg)
    if sharded:
        return "dynamic", "decode: dynamic KV cache (units gathered layer by layer; graphs need the whole model)"
    attn = str(getattr(cfg, "_attn_implementation", None))
    if DECODE_ATTENTION.get(attn, attn) != "sdpa":
        return "dynamic", f"decode: dynamic KV cache ({attn} attention; graphs need sdpa)"
    experts = {getattr(c, "_experts_implementation", None) for c in (cfg, text)}
    if getattr(text, "num_experts", None) and "grouped_mm" not in experts:
        return "dynamic", "decode: dynamic KV cache (eager MoE experts synchronise; graphs need grouped_mm)"
    if attn in DECODE_ATTENTION:
        return "graph", (f"decode: CUDA graphs over {DECODE_ATTENTION[attn]} ({attn} in the log-prob and update "
                         "forwards; the gap: training/rollout_probs_diff_*)")
    return "graph", None


@contextmanager
def decode_attention(model: torch.nn.Module) -> Iterator[None]:
    """Within: every config of ``model`` on an attention kernel of :data:`DECODE_ATTENTION` on its replacement
    (the configs the attention layers read at each call; a captured graph keeps what it captured)."""
    configs = {id(c): c for c in (getattr(m, "config", None) for m in model.modules()) if c is not None}
    switched = [(c, a) for c in configs.values() if (a := getattr(c, "_attn_implementation_internal", None))
                in DECODE_ATTENTION]
    for cfg, attn in switched:
        cfg._attn_implementation_internal = DECODE_ATTENTION[attn]
    try:
        yield
    finally:
        for sub, attn in switched:
            sub._attn_implementation_internal = attn


def prefill_mask(prompt_mask: Tensor, cache_len: int) -> Tensor:
    """(B, 1, P, L) boolean: causal over the prompt's valid tokens; padding queries see themselves only."""
    B, P = prompt_mask.shape
    dev = prompt_mask.device
    q = torch.arange(P, device=dev)
    k = torch.arange(cache_len, device=dev)
    valid = torch.zeros(B, cache_len, dtype=torch.bool, device=dev)
    valid[:, :P] = prompt_mask.bool()
    causal = k[None, :] <= q[:, None]  # (P, L)
    diagonal = k[None, :] == q[:, None]  # keeps a fully padded query row finite
    return ((causal[None] & valid[:, None, :]) | diagonal[None])[:, None]


@dataclass
class _State:
    """The buffers one decode step reads and writes (fixed addresses: a captured graph replays on them)."""

    tok: Tensor  # (B, 1) the token fed to the next forward
    pos: Tensor  # (B, 1) or (3, B, 1) its position
    key_valid: Tensor  # (B, L) which cache slots a query may attend to
    step: Tensor  # (1,) index of the response token the next step samples
    alive: Tensor  # (B,) rows that have not emitted EOS
    responses: Tensor  # (B, R)
    resp_mask: Tensor  # (B, R)
    logps: Tensor  # (B, R)

    def mutable(self) -> list[Tensor]:
        return [self.tok, self.pos, self.key_valid, self.step, self.alive]


class StaticDecoder:
    """Prefill eagerly, then decode ``max_new_tokens`` tokens step by step over a static cache.

    Built once per shape (:func:`decoder_for`) and :meth:`load`-ed for every rollout: the cache,
    the buffers and the captured graph are reused, so a graph is captured once per run, not per
    step. Loading zeroes the cache and refills every buffer, which is the state a new decoder has.
    """

    def __init__(self, model: HFModel, *, batch: int, prompt_len: int, max_new_tokens: int, pos_3d: bool,
                 vocab: int, device: torch.device, eos_id: int, pad_id: int, ignore_eos: bool,
                 logits_dtype: torch.dtype) -> None:
        from transformers import StaticCache

        self.model = model
        B, P, R = batch, prompt_len, max_new_tokens
        self.P, self.R = P, R
        self.cache: Any = StaticCache(config=model.config, max_cache_len=P + R)  # layers: transformers-internal
        self.eos_id, self.pad_id, self.ignore_eos = eos_id, pad_id, ignore_eos
        self.sampler: Sampler | None = None
        self.bias = torch.zeros(vocab, dtype=logits_dtype, device=device)  # in the logits' dtype once, not per step
        self.uniforms = torch.zeros((R, B), dtype=torch.float32, device=device)
        self.next_pos = torch.zeros(B, dtype=torch.long, device=device)
        self.state = _State(
            tok=torch.full((B, 1), pad_id, dtype=torch.long, device=device),
            pos=torch.zeros((3, B, 1) if pos_3d else (B, 1), dtype=torch.long, device=device),
            key_valid=torch.zeros(B, P + R, dtype=torch.bool, device=device),
            step=torch.zeros(1, dtype=torch.long, device=device),
            alive=torch.ones(B, dtype=torch.bool, device=device),
            responses=torch.full((B, R), pad_id, dtype=torch.long, device=device),
            resp_mask=torch.zeros((B, R), dtype=torch.long, device=device),
            logps=torch.zeros((B, R), dtype=logits_dtype, device=device))
        self.graph: Any = None
        self.weights: tuple[int, ...] = ()  # the parameters' addresses the graph was captured on (none yet: empty)

    def load(self, *, prompt_mask: Tensor, next_pos: Tensor, uniforms: Tensor, bias: Tensor, sampler: Sampler) -> None:
        """A new rollout's inputs into the fixed buffers (a captured graph reads them there)."""
        s = self.state
        self.cache.reset()
        self.sampler = sampler
        self.bias.copy_(bias)
        self.uniforms.copy_(uniforms)
        self.next_pos.copy_(next_pos)
        s.tok.fill_(self.pad_id)
        s.pos.zero_()
        s.key_valid.zero_()
        s.key_valid[:, :self.P] = prompt_mask.bool()
        s.step.zero_()
        s.alive.fill_(True)
        s.responses.fill_(self.pad_id)
        s.resp_mask.zero_()
        s.logps.zero_()

    # ------------------------------------------------------------------ one step
    def _record(self, logits: Tensor) -> None:
        """Sample response token ``step`` from ``logits`` (B, 1, V) and prepare the next forward's inputs."""
        s = self.state
        u = self.uniforms.index_select(0, s.step).squeeze(0)  # (B,)
        assert self.sampler is not None, "load() before stepping"
        tok, lp = self.sampler(logits[:, -1, :], self.bias, u)  # the bias is in the upcast logits' dtype
        tok = torch.where(s.alive, tok, torch.full_like(tok, self.pad_id))
        s.responses.index_copy_(1, s.step, tok[:, None])
        s.resp_mask.index_copy_(1, s.step, s.alive.long()[:, None])
        s.logps.index_copy_(1, s.step, torch.where(s.alive, lp, torch.zeros_like(lp)).to(s.logps.dtype)[:, None])
        if not self.ignore_eos:
            s.alive.logical_and_(tok != self.eos_id)
        # the token just sampled is the next forward's input, at slot P + step, valid while its row lives
        s.key_valid.index_copy_(1, s.step + self.P, s.alive[:, None])
        s.tok.copy_(tok[:, None])
        s.pos.copy_((self.next_pos + s.step)[..., None].expand_as(s.pos))  # (B, 1) or (3, B, 1)
        s.step.add_(1)

    def _step(self) -> None:
        s = self.state
        mask = s.key_valid[:, None, None, :]  # (B, 1, 1, L)
        logits, _ = forward_logits(self.model, input_ids=s.tok, attention_mask=mask, pos=s.pos, cache=self.cache,
                                   logits_to_keep=1)
        self._record(logits)

    # ------------------------------------------------------------------ driver
    def prefill(self, prompt_ids: Tensor, prompt_mask: Tensor, pos: Tensor, vision: ModelInputs) -> None:
        logits, _ = forward_logits(self.model, input_ids=prompt_ids,
                                   attention_mask=prefill_mask(prompt_mask, self.P + self.R), pos=pos,
                                   pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"],
                                   mm_token_type_ids=vision["mm_token_type_ids"], cache=self.cache, logits_to_keep=1)
        self._record(logits)

    def capture(self, warmup: int = 2) -> None:
        """Capture one decode step as a CUDA graph (after :meth:`prefill`); warm-up runs leave no trace.

        A graph captured on an earlier rollout of the same shape is replayed on its buffers while the model's
        parameters stay where they were; a sharded model gathered anew for this rollout may hold them elsewhere,
        and then the step is captured again."""
        weights = _addresses(self.model)
        if self.graph is not None and weights == self.weights:
            return
        self.graph = None  # frees the old graph's memory before the new capture
        saved = [t.clone() for t in self.state.mutable()]
        lengths = [layer.cumulative_length.clone() for layer in self.cache.layers]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(0 if self.weights else warmup):  # a recapture finds the libraries initialised
                self._step()
                self._restore(saved, lengths)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        self._restore(saved, lengths)  # capture records without running; restore anyway, cheaply
        self.graph, self.weights = graph, weights

    def _restore(self, saved: list[Tensor], lengths: list[Tensor]) -> None:
        for t, v in zip(self.state.mutable(), saved):
            t.copy_(v)
        for layer, v in zip(self.cache.layers, lengths):
            layer.cumulative_length.copy_(v)

    def run(self, *, run_to_length: bool, check_every: int) -> tuple[Tensor, Tensor, Tensor]:
        """Steps 1 … R-1; returns copies of (responses, response mask, log-probs): the buffers are reused."""
        s = self.state
        for t in range(1, self.R):
            if not run_to_length and not self.ignore_eos and t % check_every == 0 and not bool(s.alive.any()):
                break
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        return s.responses.clone(), s.resp_mask.clone(), s.logps.clone()


def _addresses(model: torch.nn.Module) -> tuple[int, ...]:
    return tuple(p.data_ptr() for p in model.parameters())


DECODERS_ATTR = "_harness_decoders"  # on the model: its decoders live and die with it
KEEP_DECODERS = 2  # per model: the training rollout's shape and the validation's


def decoder_for(model: HFModel, key: tuple, **kwargs: Any) -> StaticDecoder:
    """The decoder of ``model`` for ``key`` (every shape and sampling setting a captured graph bakes in).

    Made on first use and kept on the model (the most recently used :data:`KEEP_DECODERS`), so that a
    run captures its decode graph once instead of once per rollout. A decoder refers to its model, so it is
    kept *on* the model (a reference cycle the collector frees with the model), never in a table keyed by it:
    a weak-keyed table whose values hold their keys would keep every model of the process alive.
    """
    per_model: dict[tuple, StaticDecoder] = model.__dict__.setdefault(DECODERS_ATTR, {})
    dec = per_model.pop(key, None) or StaticDecoder(model, **kwargs)
    per_model[key] = dec  # most recently used last
    while len(per_model) > KEEP_DECODERS:
        per_model.pop(next(iter(per_model)))
    return dec
