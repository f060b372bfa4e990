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

from harness.config.schema import schema_errors
from harness.errors import HarnessError
from harness.jsonio import load_json_strict
from harness.run.record import MARKER

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


def _same_run(primary: dict[str, Any], cand: dict[str, Any]) -> str:
    """Why ``cand`` is not the primary run with another seed ('' when it is)."""
    for key, what in (("profile", "profile"), ("scale", "scale"), ("fault_injection", "fault injection")):
        if cand.get(key) != primary.get(key):
            return f"another {what}"
    if cand["recipe"]["hash"] != primary["recipe"]["hash"]:
        return "another recipe"
    def others(m: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(o["key"], o["value"]) for o in m["overrides"] if o["key"] != "seed"]
    if others(cand) != others(primary):
        return "other overrides"
    if cand["seed"] == primary["seed"]:
        return "the same seed as the run"
    return ""


@dataclass(frozen=True)
class Candidates:
    runs: list[tuple[int, Path]]  # (seed, directory) of each complete candidate, by seed
    notices: list[str]


def find(run_dir: Path, primary: dict[str, Any]) -> Candidates:
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
        why = ""
        if not m or not entry.is_dir() or entry.is_symlink():
            why = "not a candidate run directory (seed-<N>/)"
        elif not (entry / "manifest.json").is_file() or (entry / MARKER).exists():
            why = "unfinished"
        else:
            try:
                manifest = load_json_strict(entry / "manifest.json", follow_symlinks=False)
            except HarnessError as err:
                manifest, why = None, err.one_line()
            if manifest is not None:
                errs = schema_errors(manifest, "manifest")
                if errs:
                    why = f"manifest fails its schema at {errs[0][0]}"
                elif manifest["status"] != "complete":
                    why = f"status {manifest['status']}"
                elif manifest["seed"] != int(m[1]):
                    why = f"holds seed {manifest['seed']}, not {m[1]}"
                else:
                    why = _same_run(primary, manifest)
        if why:
            notices.append(f"candidate {entry} left out: {why}")
        else:
            runs.append((int(m[1]), entry))  # type: ignore[index]
    return Candidates(runs, notices)
