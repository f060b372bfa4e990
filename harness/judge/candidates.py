"""Candidate runs: the statistical tier judges a run together with runs of other seeds, by their median.

One RL run is a noisy sample of its recipe: at the CPU smoke scale about 3 % of clean runs collapse
(every response truncated, whole groups rewarded 0, no advantage left to climb out with), and a
test of one run cannot tell that from a fault that collapses the policy. MLPerf judges a submission
by a set of runs for the same reason. So when the statistical tier decides a verdict, ``harness
run`` also trains the baseline policy's ``candidate_runs - 1`` further seeds of the same run
(same recipe, overrides, environment and runtime) into ``RUN_DIR/candidates/seed-<N>/``, and the
tier tests the median of all their late-window means against the bound of one run
(:func:`harness.judge.stats.prediction_bound`): a collapse must happen in most of the runs to
fail the verdict, while a fault that collapses every run still does. Measured in
``baselines/README.md``.

A candidate's seed is ``seed + i · SEED_STRIDE`` (i = 1, 2, …; wrapped into the seed range, a
baseline seed skipped): far from the seeds a campaign or a user steps through one by one, so two
runs' candidates never coincide with each other's seeds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.jsonio import load_json_strict
from harness.records.run import Manifest
from harness.run.rundir import MARKER
from harness.schema import schema_errors

CANDIDATES_DIR = "candidates"
SEED_STRIDE = 1_000_000
SEED_RANGE = 2**32  # the recipe schema's seed range (NumPy's legacy seeds)
_NAME = re.compile(r"^seed-(\d+)$")


def candidate_seeds(seed: int, runs: int, taken: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """The seeds of the ``runs - 1`` candidates that join a run of ``seed`` (none of them in ``taken``)."""
    out: list[int] = []
    i = 1
    while len(out) < runs - 1:
        s = (seed + i * SEED_STRIDE) % SEED_RANGE
        if s != seed and s not in taken and s not in out:
            out.append(s)
        i += 1
    return out


def candidate_dir(run_dir: Path, seed: int) -> Path:
    return Path(run_dir) / CANDIDATES_DIR / f"seed-{seed}"


def differs(primary: Manifest, other: Manifest) -> str:
    """Why ``other`` is not a run of the primary's recipe, profile, scale, fault and overrides ('' when it is;
    the seed is not compared)."""
    for mine, theirs, what in ((primary.profile, other.profile, "profile"), (primary.scale, other.scale, "scale"),
                               (primary.fault_injection, other.fault_injection, "fault injection")):
        if theirs != mine:
            return f"another {what}"
    if other.recipe.hash != primary.recipe.hash:
        return "another recipe"

    def others(m: Manifest) -> list[tuple[str, Any]]:
        return [(o.key, o.value) for o in m.overrides if o.key != "seed"]
    if others(other) != others(primary):
        return "other overrides"
    return ""


def read_finished(entry: Path) -> tuple[Manifest | None, str]:
    """The manifest of the finished run in ``entry``, or None and why it is not one. Only the manifest is read
    (nothing in a run directory is executed or unpickled)."""
    if not entry.is_dir() or entry.is_symlink():
        return None, "not a run directory"
    if not (entry / "manifest.json").is_file() or (entry / MARKER).exists():
        return None, "unfinished"
    try:
        manifest = load_json_strict(entry / "manifest.json", follow_symlinks=False)
    except HarnessError as err:
        return None, err.one_line()
    errs = schema_errors(manifest, "manifest")
    if errs:
        return None, f"manifest fails its schema at {errs[0][0]}"
    record = Manifest.model_validate(manifest)
    if record.status != "complete":
        return None, f"status {record.status}"
    return record, ""


@dataclass(frozen=True)
class Candidates:
    runs: list[tuple[int, Path]]  # (seed, directory) of each complete candidate, by seed
    notices: list[str]


def find(run_dir: Path, primary: Manifest) -> Candidates:
    """The complete candidate runs under ``run_dir/candidates/`` that are this run with another seed.

    Anything else found there is left out with a notice saying why (nothing there is executed or
    unpickled: only manifests and metrics are read).
    """
    root = Path(run_dir) / CANDIDATES_DIR
    if not root.is_dir() or root.is_symlink():
        return Candidates([], [])
    runs, notices = [], []
    for entry in sorted(root.iterdir()):
        m = _NAME.match(entry.name)
        if not m or not entry.is_dir() or entry.is_symlink():
            notices.append(f"candidate {entry} left out: not a candidate run directory (seed-<N>/)")
            continue
        manifest, why = read_finished(entry)
        if manifest is not None:
            why = (f"holds seed {manifest.seed}, not {m[1]}" if manifest.seed != int(m[1])
                   else "the same seed as the run" if manifest.seed == primary.seed
                   else "a replay, not a free run" if manifest.replay
                   else differs(primary, manifest))
        if why:
            notices.append(f"candidate {entry} left out: {why}")
        else:
            runs.append((int(m[1]), entry))
    return Candidates(runs, notices)
