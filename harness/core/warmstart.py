"""Seed checkpoint: a short seeded SFT that teaches the answer FORMAT only.

From random init a policy never writes ``<think>…</think>\\boxed{…}``, every reward is 0 and
GRPO has no signal. The warm-start fine-tunes on demonstrations whose boxed answers are random
valid choices, so afterwards the format is right and accuracy is at chance: GRPO still has to
learn the task. The result is cached under the hash of everything that produced it, the core's source included.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from harness import __version__
from harness.core.data import demo_response
from harness.core.rollout import RolloutBatch
from harness.core.update import sequence_logprobs
from harness.jsonio import write_text_atomic

if TYPE_CHECKING:
    from harness.core.trainer import GRPOTrainer


def cache_dir() -> Path:
    return Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness") / "warm_start"


def code_fingerprint() -> str:
    """SHA-256 over the training core's source: a changed core never reuses a stale warm start."""
    h = hashlib.sha256()
    for src in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    return h.hexdigest()


def _numerics_key() -> dict[str, Any]:
    from harness import numerics

    rec = numerics.record()
    return {k: rec[k] for k in ("level", "env", "cpu_capability", "threads")}


def cache_key(tr: GRPOTrainer) -> str:
    cfg = tr.cfg
    blob = {
        "model": cfg["model"], "data": cfg["data"], "warm_start": cfg["warm_start"], "seed": tr.seed,
        "override_config": cfg["actor_rollout_ref"]["model"]["override_config"],
        "tokenizer": hashlib.sha256(tr.tok.backend_tokenizer.to_str().encode()).hexdigest(),
        "harness": __version__, "code": code_fingerprint(), "torch": torch.__version__, "device": tr.device.type,
        "deterministic": cfg["deterministic"],
        # the CPU numerics decide the weights' bits: a cache made unpinned never seeds a pinned run
        "numerics": _numerics_key() if tr.device.type == "cpu" else None,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:24]


def _demo_batch(tr: GRPOTrainer, rng: np.random.Generator, size: int) -> tuple[RolloutBatch, list[Any]]:
    picks = rng.integers(len(tr.loader.prompts), size=size)
    prompts = [tr.loader.prompts[int(i)] for i in picks]
    collated, pixels, grids, uids = tr._prompts_on_device(prompts)  # noqa: SLF001 - same collation as rollouts
    R = tr.cfg["data"]["max_response_length"]
    resp = torch.full((size, R), tr.ids["pad"], dtype=torch.long)
    mask = torch.zeros((size, R), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids = tr.tok.encode(demo_response(p.example, rng), add_special_tokens=False)[: R - 1] + [tr.ids["eos"]]
        resp[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
    rb = RolloutBatch(prompt_ids=collated["input_ids"], prompt_mask=collated["attention_mask"],
                      response_ids=resp.to(tr.device), response_mask=mask.to(tr.device),
                      rollout_logp=torch.zeros((size, R), device=tr.device), group_ids=uids, pixels=pixels,
                      grids=grids)
    return rb, prompts


def run_warm_start(tr: GRPOTrainer) -> dict[str, Any]:
    """Train (or load from cache) the format-only seed checkpoint into ``tr.models.actor``."""
    ws = tr.cfg["warm_start"]
    if not ws:
        return {}
    key = cache_key(tr)
    path = cache_dir() / f"{key}.pt"
    model = tr.models.actor
    if path.is_file():
        try:
            model.load_state_dict(torch.load(path, map_location=tr.device, weights_only=True))
            return {"key": key, "cached": True, "path": str(path)}
        except (RuntimeError, OSError, EOFError, ValueError):
            pass  # unreadable cache entry: recompute and replace it
    rng = np.random.default_rng([tr.seed, 7])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=ws["lr"], weight_decay=0.0,
                            foreach=False)
    model.train()
    losses = []
    for _ in range(ws["steps"]):
        rb, _ = _demo_batch(tr, rng, ws["batch_size"])
        logp, _ = sequence_logprobs(model, rb, bias=tr.bias, temperature=1.0,
                                    image_pad_id=tr.ids["image_pad"])
        mask = rb.response_mask.float()
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)
    os.replace(tmp, path)
    write_text_atomic(path.with_suffix(".json"), json.dumps({"key": key, "losses": losses}) + "\n")
    return {"key": key, "cached": False, "path": str(path), "final_loss": losses[-1] if losses else None}
