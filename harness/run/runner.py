"""Run one resolved recipe in this process (or as one rank of a torchrun job) and record it.

``train()`` is what ``harness run --runtime local`` does and what each torchrun rank does:
seed → build → (warm-start) → [restore a checkpoint] → loop (step, log, validate every
``test_freq`` steps and after the last, checkpoint every ``save_freq``) → finish the record.
SIGTERM / SIGINT finish the current step, checkpoint, mark the run ``interrupted`` and exit
128 + signal (130 / 143); ``--resume`` continues it bit for bit (:mod:`harness.run.resume`).
Test-only fault injection (``HARNESS_FAULT``) exists so the gate's mutation tests can prove it
catches a flipped advantage sign or a slowdown; a run with a fault is marked as such in its
manifest.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from harness import __version__, numerics
from harness.config.profiles import device_processes, probe_machine
from harness.config.recipe import Resolved
from harness.core.device import (
    CALIBRATION_WORKLOAD,
    calibrate_every,
    calibrated_speed,
    numerics_env,
    resolve_device,
    set_determinism,
    speed_index,
)
from harness.core.replay import (
    ReplaySource,
    merge_ranks,
    replay_storable,
    rollout_arrays,
    save_initial,
    save_step,
)
from harness.core.trainer import Dist, GRPOTrainer
from harness.core.warmstart import run_warm_start
from harness.errors import HarnessError
from harness.jsonio import file_sha256
from harness.records.base import dump, read
from harness.records.baseline import ROLLOUTS_KEY, Baseline
from harness.records.run import SPEED_METRIC
from harness.run.checkpoint import Interrupted, clean_partial, load_checkpoint, save_checkpoint
from harness.run.cpuload import StepLoad
from harness.run.hooks import callbacks_from_env, parse_fault
from harness.run.resume import ResumePlan, plan_resume
from harness.run.rundir import RunRecord, git_revision, software_versions, utc_now


def runtime_info(kind: str, world: int) -> dict[str, Any]:
    return {"kind": kind, "world_size": world, "nnodes": launchers(world),
            "image_id": os.environ.get("HARNESS_IMAGE_ID"), "lock_sha256": os.environ.get("HARNESS_LOCK_SHA256")}


def launchers(world: int) -> int:
    """Nodes of the job: the world over torchrun's processes per launcher (``LOCAL_WORLD_SIZE``), so two simulated
    nodes on one machine count as two; ``NNODES`` (or 1) outside torchrun."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    if local > 0 and world % local == 0:
        return world // local
    return int(os.environ.get("NNODES", "1") or 1)


def base_manifest(res: Resolved, *, steps: int, runtime: str, world: int, fault: dict[str, Any]) -> dict[str, Any]:
    return {
        "recipe": {"name": res.name, "path": res.path, "hash": res.recipe_hash, "config_hash": res.config_hash},
        "profile": res.profile_name, "scale": res.scale, "seed": res.spec.seed,
        "deterministic": res.spec.deterministic, "overrides": res.overrides,
        "steps": {"requested": steps, "completed": 0},
        "harness": {"version": __version__, **git_revision()},
        "software": software_versions(), "machine": dump(probe_machine()),
        "runtime": runtime_info(runtime, world), "env": numerics_env(), "numerics": numerics.record(),
        "fault_injection": fault or None, "resolved_config": res.config,
        **({"simulated": res.simulation} if res.simulation else {}),
    }


class _Progress:
    """A live bar on a terminal; one plain line per step otherwise (CI logs)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled
        self.total = total
        self.rich = None
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.rich = Progress(TextColumn("[bold]GRPO"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.description}"), transient=False)
            self.task = self.rich.add_task("", total=total)
            self.rich.start()

    def update(self, step: int, m: dict[str, float]) -> None:
        if not self.enabled:
            return
        text = (f"reward {m.get('critic/score/mean', float('nan')):.3f}  loss {m.get('actor/pg_loss', float('nan')):+.4f}"
                f"  kl {m.get('actor/kl_loss', 0.0):.4f}  {m.get('perf/throughput', 0.0):,.0f} tok/s")
        if self.rich is not None:
            self.rich.update(self.task, completed=step, description=text)
        else:
            print(f"step {step}/{self.total}  {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.rich is not None:
            self.rich.stop()


class StoppedEarly(HarnessError):
    """SIGTERM / SIGINT before the first training step: stop at once (also out of a blocking read)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name} before training started; no checkpoint",
                         fix="start the run again", exit_code=128 + signum)


class _StopSignals:
    """SIGTERM / SIGINT ask the loop to stop after the current step; the handlers live for the whole run.

    Until :meth:`arm` (set-up: building models, reading data, warm start, restoring a checkpoint) a
    signal raises :class:`StoppedEarly` at once, so a read that blocks cannot keep the run alive.
    """

    def __init__(self) -> None:
        self.signum = 0
        self.armed = False
        self._old: dict[int, Any] = {}

    def arm(self) -> None:
        self.armed = True

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.armed:
            raise StoppedEarly(signum)
        if not self.signum:
            self.signum = signum
            sys.stderr.write(f"notice: {signal.Signals(signum).name} received; stopping after this step with a "
                             "checkpoint\n")

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def agreed(self, dist: Dist) -> int:
        """The signal any rank got (0 = none): the same answer on every rank."""
        return self.signum if dist.world == 1 else max(dist.all_gather_objects(self.signum))


def _resume_record(run_dir: Path, res: Resolved, plan: ResumePlan, total: int) -> RunRecord:
    """Reopen the run directory for a resume (rank 0): partial checkpoints go, metrics are cut back."""
    clean_partial(run_dir)
    overrides = list(plan.base_overrides)
    for o in plan.overrides:
        same_key = [x for x in overrides if x["key"] == o["key"]]
        if not same_key or same_key[-1]["value"] != o["value"]:
            overrides.append(o)
    updates = {"overrides": overrides, "resolved_config": res.config, "steps": {"requested": total},
               "recipe": {**plan.manifest["recipe"], "hash": res.recipe_hash, "config_hash": res.config_hash}}
    entry = {"from_step": plan.step, "utc": utc_now(), "overrides": plan.overrides}
    return RunRecord.resume(run_dir, from_step=plan.step, entry=entry, updates=updates)


def open_replay(baseline_path: Path) -> tuple[ReplaySource, dict[str, Any]]:
    """The recorded rollouts a baseline names (checksummed), and the manifest's ``replay`` block."""
    baseline = read(baseline_path, Baseline, "baseline")
    rep = baseline.replay
    if not rep:
        raise HarnessError("the baseline has no recorded rollouts to replay", file=str(baseline_path),
                           fix="re-record it with this version (`harness record-baseline … --force`)")
    source = ReplaySource.open(Path(baseline_path).parent / rep.file, rep.sha256, baseline.steps)
    return source, {"baseline": str(baseline_path), "baseline_sha256": file_sha256(Path(baseline_path)),
                    "rollouts_sha256": rep.sha256, "baseline_profile": baseline.profile}


def train(res: Resolved, run_dir: Path, *, steps: int | None = None, runtime: str = "local", progress: bool = True,
          dist: Dist | None = None, local_rank: int = 0, resume: list[str] | None = None,
          replay: Path | None = None) -> dict[str, Any]:
    """Train ``res`` for ``steps`` (default: the recipe's total) and record it; returns the manifest.

    ``resume`` (the ``--set`` overrides given on the resuming command) continues the run already in
    ``run_dir`` from its newest complete checkpoint (rules: :mod:`harness.run.resume`).
    """
    cfg = res.spec
    dist = dist or Dist()
    source, replay_info = open_replay(replay) if replay is not None else (None, None)
    if source is not None and resume is not None:
        raise HarnessError("a replay runs from the start", key_path="--tier replay", fix="replay without --resume")
    if source is not None and not steps:
        steps = source.steps
    plan = plan_resume(run_dir, res, resume, dist.world) if resume is not None else None
    total = int(steps or (plan.requested if plan else 0) or cfg.trainer.total_training_steps)
    start = plan.step if plan else 0
    if start > total:
        raise HarnessError(f"the checkpoint is at step {start}, beyond the {total} steps asked for", file=str(run_dir),
                           fix=f"give --steps {start} or more")
    fault = parse_fault(os.environ.get("HARNESS_FAULT"))
    callbacks = callbacks_from_env(fault)  # fault injection and test hooks (harness.run.hooks)
    sharers = device_processes(cfg.trainer.device) if dist.rank == 0 else None  # before this process touches it
    numerics.activate()
    set_determinism(int(cfg.seed), bool(cfg.deterministic))
    device = resolve_device(cfg.trainer.device, local_rank)
    speeds = [speed_index(device)] if dist.rank == 0 else []  # machine speed: at the start, during, at the end
    record: RunRecord | None = None
    bar = _Progress(total, False)
    with _StopSignals() as stop:  # before the record is opened: a signal during set-up is one line, never a hang
        try:
            if dist.rank == 0:
                record = _resume_record(run_dir, res, plan, total) if plan else \
                    RunRecord(run_dir, {**base_manifest(res, steps=total, runtime=runtime, world=dist.world,
                                                        fault=fault), ROLLOUTS_KEY: replay_info})
            bar = _Progress(total, progress and record is not None)
            hw = res.hardware
            trainer = GRPOTrainer(cfg, device=device, peak_tflops=hw.accelerator.peak_bf16_tflops, dist=dist,
                                  device_memory_gb=None if hw.device_type == "cpu" else hw.accelerator.memory_gb,
                                  warm_start_fn=None if source is not None else run_warm_start)  # replay: its policy
            for cb in callbacks:
                cb.on_start(trainer)
            trainer.replay = source
            # every rank decides alike (a sharded job gathers its rows on rank 0): nothing here depends on the rank
            keep_rollouts = source is None
            too_big = replay_storable(trainer.models.actor) if keep_rollouts else None
            keep_rollouts = keep_rollouts and not too_big
            if source is not None:  # start from the baseline's own policy (and reference)
                for model in (trainer.models.actor, trainer.models.ref):
                    if model is not None:
                        source.load_initial(model)
            elif keep_rollouts and start == 0:
                save_initial(run_dir if record is not None else None, trainer.models.actor)
            if plan is not None and plan.path is not None:
                load_checkpoint(trainer, plan.path)
            if record is not None and start == 0:
                record.update(model={"family": cfg.model.family, "n_params": trainer.models.n_params,
                                     "n_active_params": trainer.models.n_active_params,
                                     "attn_implementation": trainer.models.attn_implementation,
                                     "decode_engine": trainer.decode_engine,
                                     "notes": list(trainer.models.notes) + ([too_big] if too_big else [])},
                              warm_start=trainer.warm_start_info or None,
                              data={"train_size": len(trainer.train_examples), "val_size": len(trainer.val_examples),
                                    "num_filtered": trainer.loader.num_filtered})
            test_freq, save_freq = cfg.trainer.test_freq, cfg.trainer.save_freq
            if source is not None:
                test_freq = 0  # a replay does not sample, so it has no validation either
            if cfg.trainer.val_before_train and test_freq > 0 and start == 0:
                val = trainer.validate(0)
                if record is not None:
                    record.metrics.write(0, val)
            if record is not None:
                record.mlperf.run_start()
            stop.arm()
            load = StepLoad(own_cpu(dist))
            every = calibrate_every(device)
            for step in range(start + 1, total + 1):
                before = speed_index(device) if dist.rank == 0 and every == 1 else None  # not inside the step's time
                load.start()
                metrics = trainer.step(step)
                metrics.update(load.stop())  # who else used the CPUs meanwhile (judges throughput fairly)
                if before is not None:
                    metrics[SPEED_METRIC] = before
                    speeds.append(before)
                if keep_rollouts and trainer.last_rollout is not None:
                    keep_step(trainer, run_dir if record is not None else None, step)
                for cb in callbacks:
                    cb.on_step(step, metrics, dist.world)
                if test_freq > 0 and (step % test_freq == 0 or step == total):
                    metrics.update(trainer.validate(step))
                if record is not None:
                    record.metrics.write(step, metrics)
                    record.mlperf.step(step, metrics)
                    record.manifest["steps"]["completed"] = step
                    if step == total or step % 5 == 0:
                        record.save()
                bar.update(step, metrics)
                if dist.rank == 0 and every > 1 and step % every == 0 and step < total:
                    speeds.append(speed_index(device))  # between steps: no step's timing includes it
                for cb in callbacks:
                    cb.on_recorded(step)
                signum = stop.agreed(dist) if step < total else 0
                if signum or (save_freq > 0 and (step % save_freq == 0 or step == total)):
                    if record is not None:
                        record.save()
                    save_checkpoint(trainer, run_dir, step, config=res.config, manifest=record.manifest if record else None,
                                    keep=cfg.trainer.max_actor_ckpt_to_keep)
                if signum:
                    err = Interrupted(signum, step, run_dir)
                    if record is not None:
                        record.finish("interrupted", err.one_line())
                    dist.all_gather_objects(None)  # no rank leaves before the record is final
                    raise err
        except Interrupted:
            bar.close()
            raise
        except StoppedEarly as err:
            bar.close()
            if record is not None:
                record.finish("interrupted", err.one_line())
            raise
        except KeyboardInterrupt:
            bar.close()
            if record is not None:
                record.finish("interrupted", "interrupted by the user")
            raise
        except HarnessError as err:
            bar.close()
            if record is not None:
                record.finish("failed", err.one_line())
            raise
        except Exception as err:  # noqa: BLE001 - recorded, then re-raised for the caller's one-line report
            bar.close()
            if record is not None:
                record.finish("failed", f"{type(err).__name__}: {err}")
            raise
    bar.close()
    if record is None:
        return {}
    speeds.append(speed_index(device))
    record.update(calibration={"speed_index": calibrated_speed(speeds), "samples": speeds,
                               "workload": CALIBRATION_WORKLOAD,
                               **({"device_processes": sharers} if sharers is not None else {})})
    record.finish("complete")
    return record.manifest


def keep_step(trainer: GRPOTrainer, run_dir: Path | None, step: int) -> None:
    """Record the step's rollout for replay (``rollouts/step-NNNNNN.npz``): the rows of a sharded job are gathered
    in the batch's own order, as one process records them (:func:`harness.core.replay.merge_ranks`)."""
    assert trainer.last_rollout is not None
    arrays = rollout_arrays(*trainer.last_rollout)
    if trainer.dist.world > 1:
        parts = trainer.dist.all_gather_objects((trainer.last_rows, arrays))
        arrays = merge_ranks(parts, trainer.ids["pad"])
    if run_dir is not None:
        save_step(run_dir, step, arrays)


def own_cpu(dist: Dist) -> Any:
    """This run's CPU seconds on this machine: the process's, or the sum over the ranks sharing its host."""
    if dist.world == 1:
        return time.process_time
    host = socket.gethostname()

    def node_sum() -> float:
        return sum(s for h, s in dist.all_gather_objects((host, time.process_time())) if h == host)
    return node_sum


def torch_threads_note() -> str:
    return f"torch threads {torch.get_num_threads()}"
