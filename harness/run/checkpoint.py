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

Resume rule:

* ``harness run RECIPE --resume RUN_DIR``: RUN_DIR must hold a run that did not complete. Partial
  checkpoints are deleted, then the run continues from the newest complete checkpoint (with none,
  it starts again from step 0 in the same directory).
* ``trainer.resume_mode: auto`` (without ``--resume``): when ``--out`` names a directory holding a
  run that did not complete, has a complete checkpoint *and* was made from the same resolved config
  (recipe name, profile, scale, config hash), it is continued as with ``--resume``. Any other
  existing run directory is refused (``resume_mode: disable`` never resumes).
* The ``--set`` overrides the checkpoint was trained with are applied again (from its manifest
  copy), and ``--steps`` defaults to the original request. The resolved config is compared key by
  key with the checkpoint's: every key that differs must be given with ``--set`` on the resuming
  command (so it is overridable), else the resume is refused. Recipe name, profile and scale must
  match; so must the world size. A changed recipe file whose resolved config is the same is
  accepted (the manifest then carries the new recipe hash).
* ``metrics.jsonl`` is cut back to the checkpoint's step (rewritten atomically) and appended to, and
  the manifest's ``resumes`` lists ``{from_step, utc, overrides}``.

Test-only hooks (never set them in a real run): ``HARNESS_CKPT_PAUSE_S`` sleeps in the middle of a
checkpoint write (data written, ``COMPLETE`` not yet) so a test can kill the run there;
``HARNESS_STOP_AFTER_STEP=k`` makes every rank send itself SIGTERM after step k.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.config.recipe import Resolved, overridable_keys, parse_override
from harness.core.device import rng_state, set_rng_state
from harness.devices import accelerators
from harness.errors import EXIT_FINDINGS, HarnessError
from harness.jsonio import load_json_strict, write_json_atomic
from harness.run.record import MARKER, utc_now
from harness.run.runtime.spec import RunSpec, set_args
from harness.statefile import check_regular, load_state, restore_like, save_state

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


def verify_layout(path: Path, world: int) -> None:
    """Refuse a checkpoint directory that holds anything but the files this harness writes for ``world`` ranks."""
    try:
        names = {p.name for p in path.iterdir()}
    except OSError as err:
        raise HarnessError(f"cannot list the checkpoint ({err.strerror})", file=str(path)) from None
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


def load_checkpoint(trainer: Any, path: Path) -> dict[str, Any]:
    """Restore the trainer's state (:meth:`GRPOTrainer.load_state_dict`) and this rank's RNG from ``path``."""
    dist = trainer.dist
    state = load_json_strict(path / "trainer-state.json", follow_symlinks=False)
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
    trainer.load_state_dict({"model": restore_like(loaded["model"], like["model"], "model", stem),
                             "optim": restore_like(loaded["optim"], like["optim"], "optim", stem),
                             "scheduler": state["scheduler"], "loader": state["loader"],
                             "tokens_seen": state["tokens_seen"]})
    rng_unpack(loaded["rng"])
    return state


# ----------------------------------------------------------------------------- resume rules
def original_sets(manifest: dict[str, Any]) -> list[str]:
    """The run's ``--set`` overrides as KEY=VALUE (launcher-made ones, with a ``source``, excluded)."""
    return [f"{o['key']}={json.dumps(o['value'])}" for o in manifest.get("overrides") or [] if "source" not in o]


def base_manifest(run_dir: Path) -> dict[str, Any]:
    """The manifest as of the newest complete checkpoint (the run's own when there is none).

    Its overrides are what the checkpoint was trained with: a failed resume attempt that
    changed the live manifest cannot leak into the next resume.
    """
    newest = newest_checkpoint(run_dir)
    if newest is not None and (newest[1] / "manifest.json").is_file():
        return load_json_strict(newest[1] / "manifest.json")
    return read_manifest(run_dir)


def resume_overrides(run_dir: Path, sets: list[str] | tuple[str, ...]) -> list[str]:
    """What a resume resolves with: the checkpoint's ``--set`` overrides, then the ones given now."""
    return original_sets(base_manifest(run_dir)) + list(sets)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    if not (run_dir / "manifest.json").is_file():
        raise HarnessError("not a run directory (no manifest.json)", file=str(run_dir),
                           fix="give the directory of the run to continue")
    return load_json_strict(run_dir / "manifest.json")


def is_finished(run_dir: Path, manifest: dict[str, Any]) -> bool:
    return manifest.get("status") == "complete" and not (run_dir / MARKER).exists()


def auto_resumable(run_dir: Path, res: Resolved) -> bool:
    """``resume_mode: auto``: a run of the same recipe, profile and scale that did not complete and has a
    complete checkpoint (its config and files are checked again by :func:`plan_resume` before anything loads)."""
    try:
        manifest = read_manifest(run_dir)
        same = (manifest["recipe"]["name"], manifest["profile"], manifest["scale"]) == (res.name, res.profile_name,
                                                                                        res.scale)
    except (HarnessError, KeyError, TypeError):
        return False
    return same and not is_finished(run_dir, manifest) and newest_checkpoint(run_dir) is not None


def config_changes(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, old, new) for every leaf that differs."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(old) | set(new)):
            path = f"{prefix}.{key}" if prefix else key
            if key not in old or key not in new:
                out.append((path, old.get(key, "<absent>"), new.get(key, "<absent>")))
            else:
                out += config_changes(old[key], new[key], path)
        return out
    return [] if old == new else [(prefix, old, new)]


@dataclass
class ResumePlan:
    step: int  # 0 = start again from the beginning
    path: Path | None
    manifest: dict[str, Any]  # the run's live manifest
    requested: int
    base_overrides: list[dict[str, Any]]  # what the checkpoint was trained with (incl. launcher-made ones)
    overrides: list[dict[str, Any]] = field(default_factory=list)  # the --set given on this resume


def plan_resume(run_dir: Path, res: Resolved, sets: list[str] | tuple[str, ...], world: int) -> ResumePlan:
    """Check that ``res`` may continue ``run_dir`` (see the module doc) and say from where."""
    manifest = read_manifest(run_dir)
    if is_finished(run_dir, manifest):
        raise HarnessError("the run is complete; nothing to resume", file=str(run_dir),
                           fix="start a new run (another --out)")
    where = str(run_dir)
    for what, was, now in (("recipe", manifest["recipe"]["name"], res.name), ("profile", manifest["profile"],
                           res.profile_name), ("scale", manifest["scale"], res.scale)):
        if was != now:
            raise HarnessError(f"resume refused: the run used {what} '{was}', not '{now}'", file=where,
                               fix=f"resume with {what} '{was}'")
    newest = newest_checkpoint(run_dir)
    saved_world = world
    if newest is not None:
        saved_world = load_json_strict(newest[1] / "trainer-state.json", follow_symlinks=False).get("world_size")
        if not isinstance(saved_world, int) or not 0 < saved_world <= 1 << 16:
            raise HarnessError(f"bad world size {saved_world!r} in the checkpoint", file=str(newest[1] / "trainer-state.json"),
                               key_path="world_size", fix="start a new run")
        verify_layout(newest[1], saved_world)
    old_cfg = (load_json_strict(newest[1] / "resolved-recipe.json", follow_symlinks=False) if newest
               else manifest["resolved_config"])
    given = [dict(zip(("key", "value"), parse_override(s))) for s in sets]
    keys = {o["key"] for o in given}
    bad = [c for c in config_changes(old_cfg, res.config) if c[0] not in keys]
    if bad:
        allowed = set(overridable_keys())
        shown = "; ".join(f"{k}: {o!r} -> {n!r}{'' if k in allowed else ' (not overridable)'}"
                          for k, o, n in bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
        raise HarnessError(f"resume refused: the resolved recipe differs from the checkpoint's ({shown})",
                           file=where, key_path=bad[0][0],
                           fix="resume with the recipe the run used; a changed overridable key must be given "
                               "again with --set KEY=VALUE")
    if newest is not None:
        if saved_world != world:
            raise HarnessError(f"resume refused: the checkpoint was written with world size {saved_world}, this "
                               f"run has {world}", file=where, fix="resume with the same number of processes")
    return ResumePlan(step=newest[0] if newest else 0, path=newest[1] if newest else None, manifest=manifest,
                      requested=int(manifest["steps"]["requested"]),
                      base_overrides=list(base_manifest(run_dir).get("overrides") or []), overrides=given)


# ----------------------------------------------------------------------------- the ckpt-resume check
def metric_mismatch(a: list[dict[str, Any]], b: list[dict[str, Any]],
                    skip: tuple[str, ...] = ("timing_s/", "perf/")) -> dict[str, Any] | None:
    """The first difference between two metric logs (bitwise; keys starting with ``skip`` aside)."""
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b):
            row = (a if i < len(a) else b)[i]
            return {"step": row["step"], "key": "<row>", "straight": "present" if i < len(a) else "missing",
                    "resumed": "present" if i < len(b) else "missing"}
        ra, rb = a[i], b[i]
        for key in sorted(set(ra) | set(rb)):
            if key.startswith(skip):
                continue
            va, vb = ra.get(key, "<missing>"), rb.get(key, "<missing>")
            if json.dumps(va) != json.dumps(vb):
                return {"step": ra.get("step"), "key": key, "straight": va, "resumed": vb}
    return None


def _harness(args: list[str], env: dict[str, str], timeout: float) -> Any:
    from harness.run.runtime.child import harness_run

    return harness_run(args, env=env, capture_output=True, timeout=timeout)


def checkpoint_bytes(config: dict[str, Any]) -> int | None:
    """Estimated size of one checkpoint: the actor's parameters and AdamW state (None when unknown)."""
    from harness.config.safety.memory import (
        DTYPE_BYTES,
        OPTIMIZER_BYTES_FP32,
        OPTIMIZER_BYTES_MIXED,
        MissingKey,
        count_params,
    )

    try:
        n = count_params(config["model"]["architecture"]).total
    except (MissingKey, KeyError, TypeError):
        return None
    b = DTYPE_BYTES.get(config["model"].get("dtype"), 2)
    return n * (b + (OPTIMIZER_BYTES_FP32 if b == 4 else OPTIMIZER_BYTES_MIXED))


def ckpt_resume_check(res: Resolved, workdir: Path, steps: int, *, nproc: int = 1,
                      timeout_s: float = 3600.0) -> dict[str, Any]:
    """Run ``steps`` straight, then ``steps/2`` + SIGTERM + resume; compare the metrics bitwise.

    The straight run writes no checkpoint (it is never resumed); the other checkpoints every
    ``steps // 2`` steps, unless the recipe's overrides set ``trainer.save_freq`` themselves (``-1``: only
    the checkpoint SIGTERM writes — one checkpoint on disk at a time). When two checkpoints would not
    fit in the free space under ``workdir`` (:func:`checkpoint_bytes`), it is ``-1`` by itself, with a
    notice. Returns ``{"pass", "steps", "first_mismatch", "straight", "resumed", "save_freq"}``.
    """
    from harness.run.record import read_metrics

    if steps < 2:
        raise HarnessError(f"ckpt-resume needs at least 2 steps, got {steps}", key_path="--steps",
                           fix="give --steps 2 or more")
    half = steps // 2
    given = [o for o in res.overrides if "source" not in o]
    sets = set_args([o for o in given if o["key"] != "trainer.save_freq"])
    workdir.mkdir(parents=True, exist_ok=True)
    save_freq = next((o["value"] for o in given if o["key"] == "trainer.save_freq"), None)
    if save_freq is None:
        size, free = checkpoint_bytes(res.config), shutil.disk_usage(workdir).free
        save_freq = half
        if size is not None and 2.2 * size > free:
            save_freq = -1
            print(f"notice: two checkpoints of ~{size / 1e9:.0f} GB would not fit in the {free / 1e9:.0f} GB free "
                  f"under {workdir}: the run keeps only the checkpoint SIGTERM writes (trainer.save_freq=-1)",
                  file=sys.stderr)
    spec = RunSpec(str(Path(res.path).resolve()), res.profile_name, res.scale, steps=steps, overrides=sets,
                   stage="train", quiet=True, runtime="torchrun" if nproc > 1 else "local",
                   extra=("--nproc-per-node", str(nproc)) if nproc > 1 else ())
    saving = spec.with_(overrides=(*sets, f"trainer.save_freq={save_freq}"))
    straight, resumed = workdir / "straight", workdir / "resumed"
    straight_spec = spec.with_(overrides=(*sets, "trainer.save_freq=-1"), out=str(straight))
    for d in (straight, resumed):
        shutil.rmtree(d, ignore_errors=True)

    def must(proc: Any, what: str, codes: tuple[int, ...] = (0,)) -> None:
        if proc.returncode not in codes:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise HarnessError(f"ckpt-resume: the {what} run exited {proc.returncode}: {tail}", file=str(workdir),
                               fix="run the same `harness run` by hand to see why", exit_code=EXIT_FINDINGS)

    must(_harness(straight_spec.run_args(), {}, timeout_s), "straight")
    must(_harness(saving.with_(out=str(resumed)).run_args(), {"HARNESS_STOP_AFTER_STEP": str(half)}, timeout_s),
         "interrupted", (128 + int(signal.SIGTERM),))
    must(_harness(saving.with_(resume=str(resumed)).run_args(), {}, timeout_s), "resumed")
    mismatch = metric_mismatch(read_metrics(straight / "metrics.jsonl"), read_metrics(resumed / "metrics.jsonl"))
    return {"pass": mismatch is None, "steps": steps, "first_mismatch": mismatch, "straight": str(straight),
            "resumed": str(resumed), "save_freq": save_freq}


