"""The replay probe: a statistical verdict also replays the baseline's first steps with the run's settings.

The statistical tier tests an outcome (the late-window reward of the run and its candidates,
:mod:`harness.judge.candidates`) and sees only faults that move it beyond the seeds' spread. At the
CPU smoke scale a KL coefficient of 0 or a clip range of 0.5 does not (bench/fault_effects.py: no
metric or window separates them from fresh seeds), while both change the update at once. So when
the statistical tier decides, ``harness run`` also replays the baseline's recorded rollouts
(:mod:`harness.core.replay`) over the replay tier's gated horizon, with the run's recipe,
overrides (its seed aside: a replay starts from the baseline's own policy) and injected fault, into
``RUN_DIR/replay-probe/``, and the verdict holds those steps to the replay tolerances
(:func:`harness.judge.tiers.replay_tier`). A probe does not depend on the run's seed, so it
PASSes or FAILs every seed of a machine alike: it adds no false alarms that the replay tier's
own measurements do not show (baselines/README.md).

No probe without recorded rollouts in the baseline, or for a run that was not local (a replay runs
in one local process); the verdict says so in a notice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.judge.candidates import differs, read_finished
from harness.records.baseline import Baseline
from harness.records.run import Manifest

PROBE_DIR = "replay-probe"


def probe_dir(run_dir: Path) -> Path:
    return Path(run_dir) / PROBE_DIR


def probe_steps(baseline: Baseline) -> int:
    """How many steps a probe replays: the replay tier's gated horizon (later steps are not gated)."""
    return min(baseline.steps, baseline.policy.replay.horizon_steps)


def unavailable(baseline: Baseline, runtime: str | None) -> str:
    """Why a run judged against ``baseline`` gets no probe ('' when it can have one)."""
    if not baseline.replay:
        return "the baseline has no recorded rollouts (re-record it to add them)"
    if runtime not in (None, "local"):
        return f"the run ran with the {runtime} runtime, and a replay runs locally"
    return ""


@dataclass(frozen=True)
class Wanted:
    """A probe the verdict lacks and can have: what ``harness run`` trains (decided once, by the judge)."""

    baseline: Path
    primary_seed: int  # a replay starts from the baseline's own policy
    steps: int


@dataclass(frozen=True)
class Probe:
    dir: Path | None  # the probe run, None when there is none to use
    manifest: Manifest | None
    notices: list[str]


def find(run_dir: Path, primary: Manifest, baseline_sha256: str) -> Probe:
    """The finished probe of this run (same recipe, profile, scale, overrides but the seed, and fault; a replay
    of the baseline with this SHA-256) in ``run_dir/replay-probe/``; anything else there is left out with a
    notice saying why."""
    entry = probe_dir(run_dir)
    if not entry.exists() and not entry.is_symlink():
        return Probe(None, None, [])
    manifest, why = read_finished(entry)
    if manifest is not None:
        replayed = manifest.replay
        why = ("not a replay of the baseline's rollouts" if not replayed
               else "replayed another baseline" if replayed.baseline_sha256 != baseline_sha256
               else differs(primary, manifest))
    if why:
        return Probe(None, None, [f"replay probe {entry} left out: {why}"])
    return Probe(entry, manifest, [])
