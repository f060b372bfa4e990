"""One run, decided once: :class:`RunPlan`.

``harness run`` (and certification) builds a plan from its command line before anything starts: the
resolved recipe, the run directory, where it runs (local, docker, torchrun), whether it replays a
baseline's recorded rollouts, the tier forced, the candidates and replay probe a statistical verdict may
ask for, whether it is simulated. The run layer trains a plan (:func:`harness.run.runtime.launch.train_stage`),
the judge says what more it needs (:class:`harness.judge.compare.Needs`), and the plan makes the runs that
fill it (:meth:`RunPlan.variant`): nothing is rebuilt from an argument namespace along the way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.config.recipe import Resolved, parse_override, resolve


@dataclass(frozen=True)
class RunPlan:
    recipe: str  # as given: a recipe name or file (variants resolve it again with their overrides)
    res: Resolved
    run_dir: Path
    runtime: str  # local, docker or torchrun (chosen, never "auto")
    image: str | None = None  # the container image for docker
    steps: int | None = None  # None: the recipe's trainer.total_training_steps
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE, in order (a resume's original ones first)
    quiet: bool = False
    resume: Path | None = None  # the unfinished run continued (its directory)
    nproc_per_node: int | None = None  # torchrun processes per node on the cpu profile
    replay: Path | None = None  # the baseline whose recorded rollouts this run replays; None: a free run
    tier: str | None = None  # forced with --tier; None: the judge chooses
    baseline: Path | None = None  # --baseline; None: the recipe's own
    candidates: int | None = None  # runs a statistical verdict judges together; None: the baseline's policy
    probe: bool = True  # train the replay probe a statistical verdict asks for
    report: bool = True  # render report.html
    train_only: bool = False  # a child's stage: train and record; the caller judges
    simulated: bool = False  # ranks simulated on this machine's CPU (not the profile's devices)
    memory_plan: dict[str, Any] | None = None  # what `harness plan` traced for an accelerator profile (plan.json)

    def variant(self, sets: Sequence[str], run_dir: Path, *, steps: int | None = None,
                replay: Path | None = None) -> RunPlan:
        """The same run with other ``--set`` overrides into ``run_dir``, from its start: a candidate of another
        seed (a free run), or the replay probe (``replay``: the baseline it replays, locally)."""
        res = resolve(self.recipe, self.res.profile_name, self.res.scale, tuple(sets))
        where = ("local", None) if replay is not None else (self.runtime, self.image)
        return replace(self, res=res, run_dir=run_dir, overrides=tuple(sets), resume=None, replay=replay,
                       steps=self.steps if steps is None else steps, runtime=where[0], image=where[1])

    def without_seed(self) -> list[str]:
        """The overrides but a seed."""
        return [o for o in self.overrides if parse_override(o)[0] != "seed"]
