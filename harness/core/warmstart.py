"""Seed checkpoint: a short seeded SFT that teaches the answer FORMAT only.

From random init a policy never writes ``<think>…</think>\\boxed{…}``, every reward is 0 and
GRPO has no signal. The warm-start fine-tunes on demonstrations whose boxed answers are random
valid choices, so afterwards the format is right and accuracy is at chance: GRPO still has to
learn the task. The result is cached under the hash of everything that produced it, the core's source included:
``<key>.safetensors`` (the weights; no pickle) and ``<key>.json`` (key, SHA-256 of the weights file, SFT losses),
both written atomically under random temporary names. A cache entry is used only when its digest and every tensor's
name, shape and dtype match, its safetensors header passes :func:`harness.statefile.safetensors_index` and tied
tensors (the embedding and an output head that shares it) hold the same values; anything else is reported in one
line and trained again. The digest in ``<key>.json`` only catches accidents (whoever plants weights rewrites it), so
the run's manifest records :func:`weights_sha256` of the weights it started from, a baseline keeps its primary
run's, and a verdict with an unchanged environment fails a run whose warm start differs. A cache directory that cannot
be written (read-only, full, no permission) is found before training, with a one-line notice: the warm start is then
trained for this run only (the manifest's ``warm_start.cached`` is false).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from harness import __version__
from harness.core.data import demo_response
from harness.core.device import adamw_kernel
from harness.core.rollout import RolloutBatch
from harness.core.update import sequence_logprobs
from harness.errors import HarnessError
from harness.jsonio import MiB, load_json_strict, read_bytes_limited, write_bytes_atomic, write_json_atomic
from harness.statefile import safetensors_index

CACHE_LIMIT = 4096 * MiB  # a warm start is for models small enough to train it on the spot

if TYPE_CHECKING:
    from harness.core.trainer import GRPOTrainer
    from harness.core.typed_recipe import WarmStart


def cache_dir() -> Path:
    return Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness") / "warm_start"


def cache_unwritable(directory: Path) -> str | None:
    """Why a cache entry cannot be stored in ``directory`` (a read-only or full file system, no permission: the
    errno text), or None when it can: a probe file is created and removed, before hours of training depend on it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


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
        **cfg.model_dump(mode="json", include={"model", "data", "warm_start"}), "seed": tr.seed,
        "override_config": cfg.actor_rollout_ref.model.override_config.model_dump(mode="json"),
        "tokenizer": hashlib.sha256(tr.tok.backend_tokenizer.to_str().encode()).hexdigest(),
        "harness": __version__, "code": code_fingerprint(), "torch": torch.__version__, "device": tr.device.type,
        "deterministic": cfg.deterministic,
        # the CPU numerics decide the weights' bits: a cache made unpinned never seeds a pinned run
        "numerics": _numerics_key() if tr.device.type == "cpu" else None,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:24]


REPLACED = "it is replaced by a fresh warm start"


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of a model's weights: every state-dict entry's name, dtype, shape and bytes, in name order.

    It depends on the values only (not on a file's layout or metadata), so equal weights give equal digests.
    """
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """State-dict names that share one tensor in ``model`` (a tied embedding and output head), two or more."""
    groups: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for name, t in model.state_dict().items():
        if t.numel():
            groups.setdefault((t.untyped_storage().data_ptr(), tuple(t.shape)), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def load_cached(model: torch.nn.Module, path: Path, key: str, device: torch.device) -> None:
    """Load a cache entry into ``model`` after checking its digest, header, names, shapes, dtypes and tied tensors
    (else HarnessError)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    meta = load_json_strict(path.with_suffix(".json"), 1 * MiB)
    data = read_bytes_limited(path, CACHE_LIMIT, what="warm-start cache file")
    if not isinstance(meta, dict) or meta.get("key") != key or meta.get("sha256") != hashlib.sha256(data).hexdigest():
        raise HarnessError("the digest or key does not match the weights", file=str(path), fix=REPLACED)
    safetensors_index(data, what="warm-start cache file", fix=REPLACED, name=str(path))
    try:
        state = load(data)
    except (SafetensorError, ValueError) as err:
        raise HarnessError(f"unreadable ({err})", file=str(path), fix=REPLACED) from None
    live = model.state_dict()
    bad = sorted(set(live) ^ set(state)) or [k for k in live if (live[k].shape, live[k].dtype) !=
                                              (state[k].shape, state[k].dtype)]
    if bad:
        raise HarnessError(f"does not match the model (tensor {bad[0]!r})", file=str(path), fix=REPLACED)
    for names in _tied_groups(model):
        first = state[names[0]]
        differ = [n for n in names[1:] if not torch.equal(state[n], first)]
        if differ:
            raise HarnessError(f"tensors {names[0]!r} and {differ[0]!r} are tied in the model but hold different "
                               "values here (loading would keep one of them silently)", file=str(path), fix=REPLACED)
    model.load_state_dict({k: v.to(device) for k, v in state.items()})


def _demo_batch(tr: GRPOTrainer, rng: np.random.Generator, size: int) -> tuple[RolloutBatch, list[Any]]:
    picks = rng.integers(len(tr.loader.prompts), size=size)
    prompts = [tr.loader.prompt(int(i)) for i in picks]
    collated, pixels, grids, uids = tr._prompts_on_device(prompts)  # noqa: SLF001 - same collation as rollouts
    R = tr.cfg.data.max_response_length
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


LOCK_WAIT_S = 1800.0  # longest wait for another process training the same warm start; then this one trains it too
LOCK_POLL_S = 0.25


@contextmanager
def training_lock(directory: Path, key: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Held while this process looks for, trains and stores the cache entry ``key``: another run that needs the
    same warm start at the same time (a run started beside it, a seed of ``record-baseline --jobs``, a test worker)
    waits and then loads it, instead of training it too. An advisory lock (``fcntl.flock``) on ``<key>.lock``,
    released by the system if its holder dies. Never a hang: after ``wait_s`` the waiter goes on and trains it
    itself, and where no lock file can be made (a read-only cache) nothing is locked."""
    import fcntl

    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        deadline, told = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    sys.stderr.write(f"notice: another process has been training warm start {key} for over "
                                     f"{wait_s:.0f} s: training it here too\n")
                    break
                if not told:
                    sys.stderr.write(f"waiting for another process that trains the same warm start ({key})\n")
                    told = True
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def run_warm_start(tr: GRPOTrainer) -> dict[str, Any]:
    """Train (or load from cache) the format-only seed checkpoint into ``tr.models.actor`` (one process at a time
    per cache entry: :func:`training_lock`)."""
    ws = tr.cfg.warm_start
    if not ws:
        return {}
    key = cache_key(tr)
    with training_lock(cache_dir(), key):
        return _load_or_train(tr, key, ws)


def _load_or_train(tr: GRPOTrainer, key: str, ws: WarmStart) -> dict[str, Any]:
    path = cache_dir() / f"{key}.safetensors"
    model = tr.models.actor
    if path.exists() or path.with_suffix(".json").exists():
        try:
            load_cached(model, path, key, tr.device)
            return {"key": key, "cached": True, "path": str(path), "weights_sha256": weights_sha256(model)}
        except HarnessError as err:
            sys.stderr.write(f"notice: warm-start cache entry not used, training it again: {err.one_line()}\n")
    unwritable = cache_unwritable(path.parent)
    if unwritable:
        sys.stderr.write(f"notice: the warm-start cache {path.parent} cannot be written ({unwritable}): training "
                         "the warm start without caching it (set HARNESS_CACHE to a writable directory)\n")
    rng = np.random.default_rng([tr.seed, 7])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=ws.lr, weight_decay=0.0,
                            **adamw_kernel(tr.device, deterministic=True))
    model.train()
    losses = []
    for _ in range(ws.steps):
        rb, _ = _demo_batch(tr, rng, ws.batch_size)
        logp, _ = sequence_logprobs(model, rb, bias=tr.bias, temperature=1.0,
                                    image_pad_id=tr.ids["image_pad"])
        mask = rb.response_mask.float()
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    opt.zero_grad(set_to_none=True)  # the gradients go with the warm start: the first step must not hold them
    info = {"key": key, "cached": False, "path": str(path), "weights_sha256": weights_sha256(model),
            "final_loss": losses[-1] if losses else None}
    if unwritable:
        return info
    from safetensors.torch import save

    data = save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, metadata={"key": key})
    try:
        write_bytes_atomic(path, data)
        write_json_atomic(path.with_suffix(".json"), {"key": key, "sha256": hashlib.sha256(data).hexdigest(),
                                                      "losses": losses})
    except HarnessError as err:  # e.g. the disk filled up meanwhile: the run goes on, the next one trains it again
        path.unlink(missing_ok=True)
        sys.stderr.write(f"notice: the warm start was not cached: {err.one_line()}\n")
    return info
