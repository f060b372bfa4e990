"""A gate's record, ``gate.json``: every recipe the gate ran on one profile, with its verdict and the gate's own
checks (:mod:`harness.commands.gate`). The JUnit XML and the Markdown summary are written from it."""

from __future__ import annotations

from typing import Literal

from harness.records.base import PROFILE_NAME, RECIPE_NAME, Record, field
from harness.records.verdict import Check, Unjudged, Verdict


class GateEntry(Record):
    """One recipe of the gate."""

    recipe: str = field("Recipe id.", pattern=RECIPE_NAME)
    status: Literal["pass", "fail", "refused", "no-baseline", "error"] = field(
        "The verdict's status; error when the run ended without one.")
    summary_line: str = field("The verdict's summary line, or what stopped the run.", min_length=1)
    run_dir: str | None = field("Run directory (null when nothing ran).")
    verdict: Verdict | None = field("The run's verdict (null when the run wrote none).")
    checks: list[Check] = field("The gate's own checks of this recipe (checkpoint resume).")
    reasons: list[str] = field("Why it did not pass (one line each).")

    def all_checks(self) -> list[Check]:
        """Every check of the recipe: its verdict's (every tier, the replay probe's and the candidates' included),
        then the gate's own."""
        return [*(self.verdict.checks if self.verdict else []), *self.checks]

    def unjudged(self) -> list[Unjudged]:
        """The whole-run checks its verdict could not make (each with why)."""
        return (self.verdict.unjudged or []) if self.verdict else []

    def unjudged_groups(self) -> set[str]:
        """The check groups with a whole-run check its verdict could not make."""
        return {u.group for u in self.unjudged()}

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per check group: (checks, failed)."""
        out: dict[str, tuple[int, int]] = {}
        for c in self.all_checks():
            n, bad = out.get(c.group, (0, 0))
            out[c.group] = (n + 1, bad + (not c.passed))
        return out


class Gate(Record):
    """The verdicts of one gate: each recipe at one scale on one profile."""

    schema_version: Literal[1] = field("Gate record format version.")
    profile: str = field("Hardware profile.", pattern=PROFILE_NAME)
    scale: str = field("Recipe scale.", min_length=1)
    entries: list[GateEntry] = field("One per recipe, in the order they ran.")
