"""Where a run's training happens: this process, a sealed container, or torchrun — chosen and started.

``choose_runtime`` turns ``--runtime auto|local|docker|torchrun`` into the runtime and image a
resolved recipe can use; ``train_stage`` runs the training there (the verdict is the caller's).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.config.recipe import Resolved
from harness.errors import EXIT_FINDINGS, HarnessError
from harness.run.plan import RunPlan
from harness.run.runtime.run_args import RunSpec

# What a container inherits from the host's environment: the fault hook (tests) and OpenMP's wait policy. The wait
# policy changes no result, only how idle threads wait: a sealed run on a shared CI runner with the host's PASSIVE
# spun instead, against its CPU quota: the docker test (a local and a sealed 4-step run) beside one busy neighbour
# took 330 s, 84 s with the policy passed on.
CONTAINER_ENV = ("HARNESS_FAULT", "OMP_WAIT_POLICY")


def choose_runtime(requested: str, res: Resolved, image: str | None) -> tuple[str, str | None]:
    """(runtime, image) — ``auto`` becomes docker when usable, else local with a one-line notice."""
    world = res.spec.trainer.nnodes * res.spec.trainer.n_gpus_per_node
    if requested == "auto":
        from harness.run.runtime.docker import docker_status

        ref = image or res.hardware.container_image.reference
        ok, why = docker_status(ref)  # also False for an image built from other sources
        if ok:
            return ("docker", ref)
        local = "torchrun" if world > 1 else "local"
        sys.stderr.write(f"notice: running {local} ({why})\n")
        return (local, None)
    if requested == "local" and world > 1:
        raise HarnessError(f"the resolved recipe needs {world} processes; --runtime local runs one",
                           key_path="--runtime", fix="use --runtime torchrun (or docker)")
    return (requested, image or (res.hardware.container_image.reference if requested == "docker" else None))


def train_stage(plan: RunPlan) -> None:
    """Train ``plan`` where it runs: this process, a container or torchrun ranks (the verdict is the caller's)."""
    res, run_dir = plan.res, plan.run_dir
    if plan.runtime == "local":
        from harness.run.runner import train

        resume = list(plan.overrides) if plan.resume is not None else None
        train(res, run_dir, steps=plan.steps, runtime=os.environ.get("HARNESS_RUNTIME", "local"),
              progress=not plan.quiet, resume=resume, replay=plan.replay)
    elif plan.runtime == "docker":
        from harness.run.runtime.docker import recipe_target, run_in_docker

        recipe_file = Path(res.path).resolve()
        inner = ["run", *RunSpec(recipe_target(recipe_file), res.profile_name, res.scale, out="/run-dir",
                                 steps=plan.steps, overrides=plan.overrides, runtime="local", stage="train",
                                 quiet=plan.quiet, resume="/run-dir" if plan.resume is not None else None).run_args()]
        env = {k: os.environ[k] for k in CONTAINER_ENV if k in os.environ}
        code = run_in_docker(inner, image=plan.image or "", run_dir=run_dir.absolute(), recipe_file=recipe_file,
                             devices=res.spec.trainer.device,
                             device_count=res.spec.trainer.n_gpus_per_node, env=env)
        if code != 0:
            raise HarnessError(f"the run inside the container failed (exit {code})", file=str(run_dir),
                               fix="read the container output above; the run directory keeps what was written",
                               exit_code=code if code in (1, 2) else EXIT_FINDINGS)
    else:  # torchrun
        from harness.run.runtime.torchrun import launch

        launch(res, plan, run_dir)
