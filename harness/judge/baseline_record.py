"""Recording a baseline: N seeded runs, the primary run's rollouts, the replay noise, throughput.

``record`` makes every seed's run in its own process (as a user's run is made), packs the primary
run's initial policy and per-step rollouts into ``<profile>-<scale>.rollouts.npz`` beside the
baseline, and measures the replay tier's noise floor: the primary rollouts are replayed once in
float64, and each training metric's distance from the recorded run is stored per step — the
rounding error of the baseline's own arithmetic, which any other correct implementation makes too. The baseline JSON is written last, once,
atomically: a killed recording never leaves a partial baseline.

``record_throughput`` adds (or, with ``force``, replaces) this machine's throughput reference to
an existing baseline: a throughput floor only ever applies to runs on the same device model with
the same thread count.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.config.profiles import device_processes
from harness.errors import HarnessError
from harness.jsonio import load_json_strict, write_json_atomic
from harness.judge.baseline import (
    DEFAULT_POLICY,
    build_baseline,
    load_baseline,
    load_series,
    refuse_shared_device,
    throughput_reference,
    write_baseline,
)
from harness.judge.tiers import REPLAY, same_speed_kind
from harness.records.base import dump, read
from harness.records.baseline import ROLLOUTS_KEY, Baseline, Policy, ThroughputRef
from harness.records.run import Manifest
from harness.run.environment import summary
from harness.run.runtime.run_args import RunSpec
from harness.schema import check

PERTURBATION = ("the same replay in float64 (--set model.dtype=float64): its distance from the recorded run is the "
                "rounding error of the baseline's own arithmetic, which any other implementation also makes")


def rollouts_path(baseline_path: Path) -> Path:
    return baseline_path.with_name(baseline_path.stem + ".rollouts.npz")


def _child(spec: RunSpec, run_dir: Path, what: str, progress: bool) -> None:
    from harness.run.runtime.child import harness_run

    proc = harness_run(spec, stdout=None if progress else subprocess.DEVNULL,
                       stderr=None if progress else subprocess.PIPE)
    if proc.returncode != 0:
        last = ((proc.stderr or "").strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise HarnessError(f"{what} failed: {last}", file=str(run_dir), fix="fix the run (see its output), then record "
                                                                            "again")


def side_by_side_env(jobs: int, env: Mapping[str, str]) -> dict[str, str]:
    """What the environment gets when ``jobs`` CPU runs go side by side: OpenMP threads that sleep between parallel
    regions instead of spinning (each run has two threads: spinning, two runs on two cores took 90-126 s where
    passive took 27 s; bench/results/omp-wait-epyc-2026-12-07/). A wait policy the user set is kept; the numbers
    are the same either way."""
    return {"OMP_WAIT_POLICY": "PASSIVE"} if jobs > 1 and "OMP_WAIT_POLICY" not in env else {}


def _seed_runs(primary: Any, profile: str, scale: str, seeds: int, steps: int | None, runs_dir: Path,
               progress: bool, log: Callable[[str], None], jobs: int = 1) -> list[Path]:
    """One run per seed (``seed + k``), ``jobs`` at a time, each in its own process."""
    import concurrent.futures as cf

    base_seed = int(primary.config["seed"])
    dirs = [runs_dir / f"seed-{base_seed + k}" for k in range(seeds)]
    for run_dir in dirs:
        if (run_dir / "manifest.json").exists():
            raise HarnessError("run directory already holds a run", file=str(run_dir), fix="choose another --runs-dir")

    if jobs > 1 and primary.hardware.device_type != "cpu":
        raise HarnessError(f"--jobs {jobs} would run seeds side by side on one {primary.hardware.accelerator.model}: "
                           "their throughput would not be a solo run's", key_path="--jobs", fix="use --jobs 1")

    os.environ.update(side_by_side_env(jobs, os.environ))  # the run zygote and every seed's run start with it

    def one(k: int) -> None:
        busy = device_processes(primary.hardware.device_type)
        if busy:
            raise HarnessError(f"{busy} other process(es) hold the device: a throughput reference recorded now would "
                               "not be a solo run's", key_path="--profile",
                               fix="record when nothing else runs on the device (nvidia-smi shows none)")
        log(f"record-baseline: seed {base_seed + k} ({k + 1}/{seeds}) -> {dirs[k]}")
        spec = RunSpec(str(primary.path), profile, scale, out=str(dirs[k]), steps=steps or None,
                       overrides=(f"seed={base_seed + k}",) if k else (), runtime="local", stage="train",
                       quiet=not (progress and jobs == 1))
        _child(spec, dirs[k], f"seed {base_seed + k} run", progress and jobs == 1)

    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for fut in [pool.submit(one, k) for k in range(seeds)]:
            fut.result()
    return dirs


def replay_noise(primary: Any, profile: str, scale: str, baseline_path: Path, doc: dict[str, Any], runs_dir: Path,
                 progress: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """Replay the primary rollouts with the arithmetic reordered; the per-step deviation of each metric."""
    run_dir = runs_dir / "replay-noise"
    rollouts = doc[ROLLOUTS_KEY]
    log(f"record-baseline: replay noise ({rollouts['perturbation']}) -> {run_dir}")
    horizon = min(doc["steps"], DEFAULT_POLICY.replay.horizon_steps)  # only these steps are gated
    spec = RunSpec(str(primary.path), profile, scale, out=str(run_dir), steps=horizon, overrides=("model.dtype=float64",),
                   runtime="local", stage="train", tier=REPLAY.name, baseline=str(baseline_path),
                   quiet=not progress)
    _child(spec, run_dir, "replay-noise run", progress)
    replayed = load_series(run_dir)
    noise: dict[str, list[float | None]] = {}
    for name in rollouts["metrics"]:
        spec = doc["metrics"][name]
        row = []
        for k, v in zip(spec["steps"], spec["values"]):
            r = replayed.get(name, {}).get(k)
            row.append(abs(r - v) if r is not None and math.isfinite(r) else None)
        noise[name] = row
    return noise


def need_steady_steps(steps: int, policy: Policy) -> None:
    """Refuse, before anything trains, runs too short to leave a steady step past the throughput warm-up."""
    warmup = policy.throughput.warmup_steps
    if steps <= warmup:
        raise HarnessError(f"{steps} steps leave no steady step to measure throughput (the first {warmup} are "
                           "warm-up)", key_path="--steps", fix=f"record at least {warmup + 1} steps")


def record(recipe: str, profile: str, scale: str, *, seeds: int, steps: int | None, out: Path, runs_dir: Path,
           command: str, progress: bool = True, force: bool = False, jobs: int = 1,
           log: Callable[[str], None] = print) -> Baseline:
    """Seeded runs → baseline (with rollouts and replay noise), written to ``out`` at the very end.

    With ``jobs`` > 1 the seeds run concurrently and their throughput is not a solo run's: follow
    with :func:`record_throughput` (``--throughput-only --force``) on an otherwise idle machine.
    """
    from harness.config.recipe import resolve
    from harness.core.replay import NOT_KEPT, pack

    if os.environ.get("HARNESS_FAULT"):
        raise HarnessError("HARNESS_FAULT is set; a baseline must not be recorded with a fault injected",
                           key_path="HARNESS_FAULT", fix="unset HARNESS_FAULT")
    if seeds < 1:
        raise HarnessError(f"--seeds must be >= 1, got {seeds}", key_path="--seeds", fix="give e.g. --seeds 5")
    if out.exists() and not force:
        raise HarnessError("a baseline already exists", file=str(out),
                           fix="pass --force to replace it (review the diff before committing)")
    primary = resolve(recipe, profile, scale)
    need_steady_steps(steps or primary.spec.trainer.total_training_steps, DEFAULT_POLICY)
    dirs = _seed_runs(primary, profile, scale, seeds, steps, runs_dir, progress, log, jobs)
    refuse_shared_device([read(d / "manifest.json", Manifest, "manifest") for d in dirs], dirs)
    doc = build_baseline(dirs, command=command)
    scratch = runs_dir / out.name
    not_kept = [n for n in load_json_strict(dirs[0] / "manifest.json").get("model", {}).get("notes", [])
                if n.startswith(NOT_KEPT)]
    if not_kept:  # a model at real width: no replay tier for this baseline (the verdict falls back to statistical)
        log(f"record-baseline: no replay tier — {not_kept[0]}")
    else:  # the rollouts go beside a scratch copy first; the replay-noise run reads them from there
        sha = pack(dirs[0], doc["steps"], rollouts_path(scratch))
        metrics = sorted(n for n, m in doc["metrics"].items() if REPLAY.name in m["tiers"])
        doc[ROLLOUTS_KEY] = {"file": rollouts_path(out).name, "sha256": sha, "metrics": metrics,
                             "perturbation": PERTURBATION, "noise": {}}
        write_json_atomic(scratch, doc)
        doc[ROLLOUTS_KEY]["noise"] = replay_noise(primary, profile, scale, scratch, doc, runs_dir, progress, log)
    check(doc, "baseline", str(out))  # before anything is moved into place
    if out.exists() and not force:
        raise HarnessError("a baseline appeared while recording", file=str(out), fix="pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    if not not_kept:
        os.replace(rollouts_path(scratch), rollouts_path(out))
    elif rollouts_path(out).exists():
        rollouts_path(out).unlink()  # a replaced baseline's old archive would no longer match
    return write_baseline(out, doc)


def record_throughput(recipe: str, profile: str, scale: str, *, runs: int, steps: int | None, out: Path,
                      runs_dir: Path, progress: bool = True, force: bool = False,
                      log: Callable[[str], None] = print) -> ThroughputRef:
    """Add this machine's throughput reference (``runs`` runs, one after another) to an existing baseline."""
    from harness.config.recipe import resolve

    if not out.is_file():
        raise HarnessError("no baseline to add a throughput reference to", file=str(out),
                           fix="record the baseline first (without --throughput-only)")
    doc = load_baseline(out)
    primary = resolve(recipe, profile, scale)
    need_steady_steps(steps or doc.steps, doc.policy)
    dirs = _seed_runs(primary, profile, scale, runs, steps or doc.steps, runs_dir, progress, log)
    manifests = [read(d / "manifest.json", Manifest, "manifest") for d in dirs]
    refuse_shared_device(manifests, dirs)
    if manifests[0].recipe.hash != doc.recipe.hash:
        raise HarnessError("the recipe changed since the baseline was recorded", file=str(out),
                           fix="re-record the whole baseline")
    pol = doc.policy.throughput
    ref = throughput_reference(summary(manifests[0]), [load_series(d) for d in dirs], pol, steps or doc.steps,
                               manifests[0].runtime.kind, manifests)
    refs = doc.throughput.references
    # one reference per device model, thread count and kind of host speed: a host whose calibration is of another
    # kind (tiers.same_speed_kind; a slow H200 host beside a fast one) adds its own beside the other's
    same = [r for r in refs if (r.device_model, r.threads) == (ref.device_model, ref.threads)
            and same_speed_kind(r.speed_index, ref.speed_index)]
    if same and not force:
        raise HarnessError(f"the baseline already has a throughput reference for {ref.device_model} "
                           f"({ref.threads} threads) on a host of this speed", file=str(out),
                           fix="pass --force to replace it")
    raw = load_json_strict(out)  # the file as it is, only its references replaced
    raw["throughput"]["references"] = [dump(r) for r in refs if r not in same] + [dump(ref)]
    write_baseline(out, raw)
    return ref
