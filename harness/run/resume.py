"""Resume policy: whether and from where a run continues (the checkpoints themselves: :mod:`harness.run.checkpoint`).

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
* Nothing of the run directory is used unchecked: the manifest (and the checkpoint's copy) must pass the
  ``manifest`` schema, the checkpoint's ``trainer-state.json`` the ``trainer-state`` schema and its
  ``resolved-recipe.json`` the ``resolved-recipe`` one; ``metrics.jsonl`` and ``mlperf.log`` must be regular
  files (a FIFO is refused without blocking) and every line of ``mlperf.log`` a well-formed event. Each
  refusal is one line, before anything is trained, and leaves the run as it was.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.recipe import Resolved, overridable_keys, parse_override
from harness.errors import HarnessError
from harness.jsonio import load_json_strict
from harness.mlperf import LOG_FILE, read_events
from harness.run.checkpoint import load_trainer_state, newest_checkpoint, verify_layout
from harness.run.rundir import MARKER
from harness.schema import check

RECORD_FILES = ("metrics.jsonl", LOG_FILE)


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
        return checked_manifest(newest[1] / "manifest.json")
    return read_manifest(run_dir)


def resume_overrides(run_dir: Path, sets: list[str] | tuple[str, ...]) -> list[str]:
    """What a resume resolves with: the checkpoint's ``--set`` overrides, then the ones given now."""
    return original_sets(base_manifest(run_dir)) + list(sets)


def checked_manifest(path: Path) -> dict[str, Any]:
    """A manifest (strict JSON, no link followed) that passes its schema, else a one-line error: nothing of a run
    directory is used before its record is known to be well formed."""
    manifest = load_json_strict(path, follow_symlinks=False)
    check(manifest, "manifest", str(path))
    return manifest


def read_manifest(run_dir: Path) -> dict[str, Any]:
    if not os.path.lexists(run_dir / "manifest.json"):
        raise HarnessError("not a run directory (no manifest.json)", file=str(run_dir),
                           fix="give the directory of the run to continue")
    return checked_manifest(run_dir / "manifest.json")


def is_finished(run_dir: Path, manifest: dict[str, Any]) -> bool:
    return manifest.get("status") == "complete" and not (run_dir / MARKER).exists()


def auto_resumable(run_dir: Path, res: Resolved) -> bool:
    """``resume_mode: auto``: a run of the same recipe, profile and scale that did not complete and has a
    complete checkpoint (its config and files are checked again by :func:`plan_resume` before anything loads)."""
    if not os.path.lexists(run_dir / "manifest.json"):
        return False
    manifest = read_manifest(run_dir)  # a run directory whose manifest is damaged is refused, saying why
    same = (manifest["recipe"]["name"], manifest["profile"], manifest["scale"]) == (res.name, res.profile_name,
                                                                                    res.scale)
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
    for name in RECORD_FILES:  # appended to when the run continues: only regular files (a FIFO would block)
        if os.path.lexists(run_dir / name) and not stat.S_ISREG(os.lstat(run_dir / name).st_mode):
            raise HarnessError("not a regular file (a FIFO, device, socket, directory or link); the run cannot be "
                               "continued", file=str(run_dir / name),
                               fix="put the run's own file back, or start a new run")
    if os.path.lexists(run_dir / LOG_FILE):
        read_events(run_dir / LOG_FILE)  # a damaged log is refused now, not after the models are built
    for what, was, now in (("recipe", manifest["recipe"]["name"], res.name), ("profile", manifest["profile"],
                           res.profile_name), ("scale", manifest["scale"], res.scale)):
        if was != now:
            raise HarnessError(f"resume refused: the run used {what} '{was}', not '{now}'", file=where,
                               fix=f"resume with {what} '{was}'")
    newest = newest_checkpoint(run_dir)
    saved_world = world
    old_cfg = manifest["resolved_config"]
    if newest is not None:
        verify_layout(newest[1], None)  # nothing but the harness's own file names, before any is read
        saved_world = load_trainer_state(newest[1], newest[0])["world_size"]
        verify_layout(newest[1], saved_world)
        old_cfg = load_json_strict(newest[1] / "resolved-recipe.json", follow_symlinks=False)
        check(old_cfg, "resolved-recipe", str(newest[1] / "resolved-recipe.json"))
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
