"""One run as data: what ``harness run`` is asked to do, and the one place its argument list is built.

Every child run — a container's inner run, a torchrun rank, record-baseline's seeds and replay-noise
run, the gate's runs, ckpt-resume's three runs, a Slurm node — is a :class:`RunSpec` turned into
arguments here, so an option reaches all of them or none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class RunSpec:
    recipe: str                       # a recipe name or file (as the child sees it)
    profile: str
    scale: str
    out: str | None = None            # --out RUN_DIR
    steps: int | None = None
    overrides: tuple[str, ...] = ()   # KEY=VALUE, as --set takes them
    runtime: str | None = None        # --runtime
    stage: str | None = None          # "train": the child trains only; the caller judges
    quiet: bool = False
    tier: str | None = None
    baseline: str | None = None       # --baseline FILE
    resume: str | None = None         # --resume RUN_DIR (``harness run``); the rank entry takes it as a flag
    extra: tuple[str, ...] = field(default=())  # launcher options that follow (torchrun's --nproc-per-node N)
    simulate: bool = False            # --simulate: the profile's layout on CPU ranks (harness.run.simulate)
    nnodes: int | None = None         # --nnodes N: nodes simulated

    def with_(self, **changes: Any) -> RunSpec:
        return replace(self, **changes)

    def _common(self) -> list[str]:
        out = [self.recipe, "--profile", self.profile, "--scale", self.scale]
        out += ["--steps", str(self.steps)] if self.steps else []
        for o in self.overrides:
            out += ["--set", o]
        out += ["--simulate"] if self.simulate else []
        out += ["--nnodes", str(self.nnodes)] if self.nnodes else []
        return out

    def run_args(self) -> list[str]:
        """The arguments of ``harness run`` (without the word ``run``)."""
        out = self._common()
        if self.out is not None:
            out += ["--out", self.out]
        if self.resume is not None:
            out += ["--resume", self.resume]
        for flag, value in (("--runtime", self.runtime), ("--stage", self.stage), ("--tier", self.tier),
                            ("--baseline", self.baseline)):
            if value is not None:
                out += [flag, value]
        out += ["--quiet"] if self.quiet else []
        return out + list(self.extra)

    def rank_args(self, replay: str | None = None) -> list[str]:
        """The arguments of one torchrun rank (``python -m harness.run.runtime.rank``): it trains the run in --out
        (``replay``: on that baseline's recorded rollouts)."""
        if self.out is None:
            raise ValueError("a rank needs the run directory (out)")
        return self._common() + ["--out", self.out] + (["--quiet"] if self.quiet else []) \
            + (["--resume"] if self.resume is not None else []) + (["--replay", replay] if replay else [])


def set_args(overrides: list[dict[str, Any]]) -> tuple[str, ...]:
    """A resolved recipe's ``--set`` overrides as KEY=VALUE strings (scale and profile patches excluded)."""
    return tuple(f"{o['key']}={json.dumps(o['value'])}" for o in overrides if "source" not in o)
