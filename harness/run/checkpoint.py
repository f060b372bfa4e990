"""Checkpoints and resume: an interrupted run continues bit for bit.

Layout, under ``RUN_DIR/checkpoints/``::

    step-000010/               one complete checkpoint (the newest trainer.max_actor_ckpt_to_keep are kept)
      state-rank<r>.safetensors  rank r's actor + optimizer state (FSDP2: its local shards) and every
      state-rank<r>.json         RNG state (Python, NumPy, torch CPU, CUDA / NPU): tensors + a JSON tree,
                                 no pickle anywhere (:mod:`harness.statefile`)
      trainer-state.json       step, tokens seen, LR scheduler, data-loader position, world size
      resolved-recipe.json     the resolved config that produced it
      manifest.json            a copy of the run manifest at that step
      COMPLETE                 written last and fsynced; a directory without it is never used
    step-000020.tmp-<nonce>/   being written; renamed to step-000020 once complete

Checkpoints are taken every ``trainer.save_freq`` steps, after the last step (when save_freq > 0) and
when SIGTERM / SIGINT stops the run. The reference policy is not saved: it is rebuilt from the
recipe (initial weights and the cached warm start), exactly as at the start of the run.

Loading never deserialises code: a checkpoint directory must hold exactly the files above (regular
files, no links) for the world size it was written with; anything else in it — e.g. a
``torch.distributed.checkpoint`` ``.metadata`` pickle — refuses the resume before a byte of it is read.
What is read is checked before it is applied: ``trainer-state.json`` against its schema
(``schemas/v1/trainer-state.schema.json``), the LR scheduler's state against the live scheduler's keys and
types (torch would take any key into the scheduler object) and every RNG state against this process's own
(:func:`check_rng`: shapes, types and the generators' ranges), so a damaged checkpoint is one line, never a
traceback half-way through a restore.

The rule for continuing a run from these is :mod:`harness.run.resume`; the ``ckpt-resume``
check is :mod:`harness.run.resume_check`.

Test-only hooks (never set them in a real run): ``HARNESS_CKPT_PAUSE_S`` sleeps in the middle of a
checkpoint write (data written, ``COMPLETE`` not yet) so a test can kill the run there;
``HARNESS_STOP_AFTER_STEP=k`` makes every rank send itself SIGTERM after step k.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.devices import accelerators
from harness.errors import HarnessError
from harness.jsonio import load_json_strict, write_json_atomic
from harness.lazyimport import lazy_import
from harness.run.rundir import utc_now
from harness.schema import check
from harness.statefile import check_regular, load_state, restore_like, save_state

if TYPE_CHECKING:
    import torch
else:  # a refused run (bad --out, a hostile --resume) answers without loading torch
    torch = lazy_import("torch")

CKPT_DIR = "checkpoints"
COMPLETE = "COMPLETE"
STEP_DIR = re.compile(r"^step-(\d{6,})$")
COMMON_FILES = ("trainer-state.json", "resolved-recipe.json", "manifest.json", COMPLETE)


def rank_stem(rank: int) -> str:
    return f"state-rank{rank}"


def expected_files(world: int) -> set[str]:
    return set(COMMON_FILES) | {f"{rank_stem(r)}{ext}" for r in range(world) for ext in (".safetensors", ".json")}


def ckpt_name(step: int) -> str:
    return f"step-{step:06d}"


class Interrupted(HarnessError):
    """The run stopped on a signal after a step, with a checkpoint; exit code 128 + signal."""

    def __init__(self, signum: int, step: int, run_dir: Path) -> None:
        self.signum, self.step = signum, step
        super().__init__(f"interrupted by {signal.Signals(signum).name} after step {step}; checkpoint saved",
                         file=str(run_dir), fix=f"continue it with `harness run RECIPE --resume {run_dir}`",
                         exit_code=128 + signum)


def interrupt_exit_code(error: str | None) -> int:
    """Exit code of an interrupted run from its manifest error line (130 SIGINT, 143 SIGTERM)."""
    match = re.search(r"interrupted by (SIG[A-Z]+)", error or "")
    return 128 + int(signal.Signals[match.group(1)]) if match else 128 + int(signal.SIGTERM)


# ----------------------------------------------------------------------------- files
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete checkpoint, oldest first."""
    root = run_dir / CKPT_DIR
    out = []
    for d in root.iterdir() if root.is_dir() else []:
        m = STEP_DIR.match(d.name)
        if m and d.is_dir() and (d / COMPLETE).is_file():
            out.append((int(m.group(1)), d))
    return sorted(out)


def newest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def clean_partial(run_dir: Path) -> list[str]:
    """Delete what an interrupted write or prune left behind (temp dirs, dirs without COMPLETE)."""
    root = run_dir / CKPT_DIR
    gone = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if d.is_dir() and not (STEP_DIR.match(d.name) and (d / COMPLETE).is_file()):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d.name)
    return gone


def _remove(root: Path, d: Path) -> None:
    """Rename first (atomic), then delete: a half-deleted checkpoint never looks complete."""
    doomed = root / f"{d.name}.tmp-delete-{secrets.token_hex(4)}"
    os.rename(d, doomed)
    _fsync_dir(root)
    shutil.rmtree(doomed, ignore_errors=True)


def prune(run_dir: Path, keep: int | None) -> None:
    if keep is None:
        return
    found = complete_checkpoints(run_dir)
    for _, d in found[: max(0, len(found) - keep)]:
        _remove(run_dir / CKPT_DIR, d)


# ----------------------------------------------------------------------------- state
def rng_pack() -> dict[str, Any]:
    """Every RNG state of this process, as plain types and tensors (loadable with weights_only)."""
    from harness.core.device import rng_state

    state = rng_state()
    version, internal, gauss = state["python"]
    kind, keys, pos, has_gauss, cached = state["numpy"]
    out: dict[str, Any] = {"python": [int(version), [int(x) for x in internal], gauss],
                           "numpy": {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
                                     "pos": int(pos), "has_gauss": int(has_gauss), "cached": float(cached)},
                           "torch": state["torch"]}
    if "cuda" in state:
        out["cuda"] = list(state["cuda"])
    for kind in accelerators():  # every other accelerator torch can see (cuda is in rng_state already)
        mod = getattr(torch, kind.module or "", None)
        if kind.name != "cuda" and mod is not None and mod.is_available():
            out[kind.name] = list(mod.get_rng_state_all())
    return out


def rng_unpack(packed: dict[str, Any]) -> None:
    from harness.core.device import set_rng_state

    n = packed["numpy"]
    set_rng_state({"python": (packed["python"][0], tuple(packed["python"][1]), packed["python"][2]),
                   "numpy": (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]),
                   "torch": packed["torch"], **({"cuda": packed["cuda"]} if "cuda" in packed else {})})
    for kind in accelerators():
        mod = getattr(torch, kind.module or "", None)
        if kind.name != "cuda" and kind.name in packed and mod is not None and mod.is_available():
            mod.set_rng_state_all(packed[kind.name])


def save_checkpoint(trainer: Any, run_dir: Path, step: int, *, config: dict[str, Any],
                    manifest: dict[str, Any] | None, keep: int | None) -> Path:
    """Write ``checkpoints/step-<step>/`` (collective: every rank calls it) and prune to ``keep``."""
    dist, root, name = trainer.dist, run_dir / CKPT_DIR, ckpt_name(step)
    nonce = None
    if dist.rank == 0:
        nonce = secrets.token_hex(6)
        (root / f"{name}.tmp-{nonce}").mkdir(parents=True)
    tmp = root / f"{name}.tmp-{dist.all_gather_objects(nonce)[0]}"  # also a barrier: the directory exists
    # every tensor is copied to host memory (synchronously) as it is encoded: this rank's shards only
    sd = trainer.state_dict()
    save_state({"model": sd.pop("model"), "optim": sd.pop("optim"), "rng": rng_pack()}, tmp / rank_stem(dist.rank))
    dist.all_gather_objects(None)  # every rank's share is on disk
    if dist.rank == 0:
        pause = float(os.environ.get("HARNESS_CKPT_PAUSE_S") or 0)
        if pause > 0:
            time.sleep(pause)  # test-only: a window to kill the run mid-write
        write_json_atomic(tmp / "trainer-state.json", {
            "step": step, "tokens_seen": sd["tokens_seen"], "world_size": dist.world, "utc": utc_now(),
            "scheduler": sd["scheduler"], "loader": sd["loader"]})
        write_json_atomic(tmp / "resolved-recipe.json", config)
        if manifest is not None:
            write_json_atomic(tmp / "manifest.json", manifest)
        _write_synced(tmp / COMPLETE, f"{name} written {utc_now()}\n".encode())
        _fsync_dir(tmp)
        final = root / name
        if final.exists():
            _remove(root, final)
        os.rename(tmp, final)
        _fsync_dir(root)
        prune(run_dir, keep)
    dist.all_gather_objects(None)
    return root / name


def _names(path: Path) -> set[str]:
    try:
        return {p.name for p in path.iterdir()}
    except OSError as err:
        raise HarnessError(f"cannot list the checkpoint ({err.strerror})", file=str(path)) from None


RANK_FILE = re.compile(r"^state-rank(0|[1-9]\d{0,4})\.(safetensors|json)$")


def verify_layout(path: Path, world: int | None) -> None:
    """Refuse a checkpoint directory that holds anything but the files this harness writes for ``world`` ranks
    (``None``: for any world size — the check made before ``trainer-state.json``, which says it, is read)."""
    names = _names(path)
    if world is None:
        extra = sorted(n for n in names if n not in COMMON_FILES and not RANK_FILE.match(n))
        if extra:
            raise HarnessError(f"resume refused: unexpected file '{extra[0]}' in the checkpoint (not written by this "
                               "harness; nothing was loaded)", file=str(path),
                               fix="resume only run directories this harness wrote, or start a new run")
        return
    extra, missing = sorted(names - expected_files(world)), sorted(expected_files(world) - names - {"manifest.json"})
    if extra:
        raise HarnessError(f"resume refused: unexpected file '{extra[0]}' in the checkpoint (not written by this "
                           f"harness for world size {world}; nothing was loaded)", file=str(path),
                           fix="resume only run directories this harness wrote, or start a new run")
    if missing:
        raise HarnessError(f"resume refused: the checkpoint lacks '{missing[0]}' (written by another format or "
                           f"world size; nothing was loaded)", file=str(path), fix="start a new run")
    for name in sorted(names):
        check_regular(path / name)


def load_trainer_state(path: Path, step: int | None = None) -> dict[str, Any]:
    """A checkpoint's ``trainer-state.json``, checked against its schema (``trainer-state``) and, with ``step``,
    against the directory it is in: a one-line error otherwise, before anything in it is used."""
    file = path / "trainer-state.json"
    check_regular(file)
    state = load_json_strict(file, follow_symlinks=False)
    check(state, "trainer-state", str(file))
    if step is not None and state["step"] != step:
        raise HarnessError(f"the checkpoint of step {step} says step {state['step']}", file=str(file), key_path="/step",
                           fix="resume only run directories this harness wrote, or start a new run")
    return state


def check_like(loaded: Any, live: Any, where: str, file: Path) -> None:
    """``loaded`` has the keys, list lengths and scalar types of ``live`` (a state the running code made)."""
    bad = None
    if isinstance(live, dict):
        if not isinstance(loaded, dict) or set(loaded) != set(live):
            extra = sorted(set(loaded) ^ set(live)) if isinstance(loaded, dict) else []
            bad = f"expected the keys {sorted(live)}" + (f" (differs in {extra[0]!r})" if extra else "")
        else:
            for k in live:
                check_like(loaded[k], live[k], f"{where}.{k}", file)
    elif isinstance(live, (list, tuple)):
        if not isinstance(loaded, (list, tuple)) or len(loaded) != len(live):
            bad = f"expected a list of {len(live)} items"
        else:
            for i, (a, b) in enumerate(zip(loaded, live)):
                check_like(a, b, f"{where}[{i}]", file)
    elif isinstance(live, torch.Tensor):
        if not isinstance(loaded, torch.Tensor) or loaded.dtype != live.dtype or loaded.shape != live.shape:
            bad = f"expected a {live.dtype} tensor of shape {tuple(live.shape)}"
    elif live is not None and (type(loaded) is not type(live)):
        bad = f"expected a {type(live).__name__}, got {type(loaded).__name__}"
    if bad:
        raise HarnessError(f"corrupt training state: {where}: {bad}", file=str(file),
                           fix="resume from another checkpoint, or start a new run")


def check_rng(packed: Any, file: Path) -> None:
    """Every RNG state in a checkpoint shaped as this process's own (:func:`rng_pack`: keys, list lengths, tensor
    dtypes and shapes, scalar types) and within its generator's ranges, so that restoring it cannot fail half-way
    (one line otherwise). A generator this process lacks (an accelerator not present) is left out, as on restore."""
    live = rng_pack()
    live["python"][2] = None  # a cached Gaussian (float) or none: checked below
    bad = "not an object" if not isinstance(packed, dict) else \
        next((f"no {k!r} state" for k in ("python", "numpy", "torch") if k not in packed), None)
    if bad is None:
        for key in sorted(set(live) & set(packed)):
            check_like(packed[key], live[key], f"rng.{key}", file)
        version, words, gauss = packed["python"]
        n = packed["numpy"]
        if version != 3 or not all(0 <= w < 1 << 32 for w in words[:-1]) or not 0 <= words[-1] < len(words) \
                or not (gauss is None or isinstance(gauss, float)):
            bad = "rng.python: not a version-3 Mersenne Twister state"
        elif n["kind"] != "MT19937" or not 0 <= n["pos"] <= n["keys"].numel() or n["has_gauss"] not in (0, 1) \
                or bool(((n["keys"] < 0) | (n["keys"] >= 1 << 32)).any()):
            bad = "rng.numpy: not an MT19937 state"
    if bad:
        raise HarnessError(f"corrupt training state: {bad}", file=str(file),
                           fix="resume from another checkpoint, or start a new run")


def load_checkpoint(trainer: Any, path: Path) -> dict[str, Any]:
    """Restore the trainer's state (:meth:`GRPOTrainer.load_state_dict`) and this rank's RNG from ``path``.

    Everything is checked before any of it is applied: the trainer state against its schema, the scheduler
    against the live one's keys and types, the RNG states against this process's (:func:`check_rng`)."""
    dist = trainer.dist
    verify_layout(path, None)
    state = load_trainer_state(path)
    if state["world_size"] != dist.world:
        raise HarnessError(f"checkpoint was written with world size {state['world_size']}, this run has "
                           f"{dist.world}", file=str(path), fix="resume with the same number of processes")
    verify_layout(path, dist.world)
    stem = path / rank_stem(dist.rank)
    loaded = load_state(stem)
    if not isinstance(loaded, dict) or set(loaded) != {"model", "optim", "rng"}:
        raise HarnessError("corrupt training state: expected model, optim and rng", file=str(stem) + ".json",
                           fix="resume from another checkpoint, or start a new run")
    like = trainer.state_dict()  # shapes, dtypes and shards the saved tensors must match
    check_like(state["scheduler"], like["scheduler"], "scheduler", path / "trainer-state.json")
    check_rng(loaded["rng"], Path(str(stem) + ".json"))
    trainer.load_state_dict({"model": restore_like(loaded["model"], like["model"], "model", stem),
                             "optim": restore_like(loaded["optim"], like["optim"], "optim", stem),
                             "scheduler": state["scheduler"], "loader": state["loader"],
                             "tokens_seen": state["tokens_seen"]})
    rng_unpack(loaded["rng"])
    return state
