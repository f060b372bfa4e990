"""A verdict: the judgement of one run against its baseline, every check with its numbers."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_serializer
from pydantic.json_schema import SkipJsonSchema

from harness.records.base import Record, field, optional, sha, utc
from harness.records.baseline import LoggedRun
from harness.records.common import FAULT, CheckGroup, Fault, Overrides, Tier

VerdictStatus = Literal["pass", "fail", "refused", "no-baseline"]


class Check(Record):
    """One check with its numbers."""

    @field_serializer("run_value", "ref_value", "tolerance")
    def _finite(self, x: float | None) -> float | None:
        return x if x is None or math.isfinite(x) else None  # JSON has no NaN: the detail keeps the text

    group: CheckGroup = field("Check group.")
    metric: str = field("Metric (or the memory/throughput metric).", min_length=1)
    step: int | None = field("Step the numbers are from (first mismatch or worst step); null for whole-run checks.",
                             ge=0)
    run_value: float | None = field("Run's value (null when missing or not finite).")
    ref_value: float | None = field("Baseline's value.")
    tolerance: float | None = field("Allowed deviation (absolute, metric units); 0 for exact.")
    passed: bool = field("Check outcome.")
    steps_compared: int = field("Steps compared.", ge=0)
    failing_steps: list[Annotated[int, Field(ge=0)]] = field("Steps outside the tolerance.")
    detail: str = field("One line explaining the numbers.", min_length=0)


class Unjudged(Record):
    """A whole-run check the judge could not make on this run, and why (JUnit: a skipped testcase)."""

    group: CheckGroup = field("Check group (throughput or memory).")
    metric: str = field("The metric it would have judged.", min_length=1)
    reason: str = field("Why it was not judged, and what makes it judgeable (also among the notices).", min_length=1)


class GroupCount(Record):
    """Counts of one group."""

    checks: int = field("Checks.", ge=0)
    failed: int = field("Failed.", ge=0)


class RunJudged(Record):
    dir: str = field("Run directory (another trainer's log file: harness compare --log).", min_length=1)
    recipe: str | None = field("Recipe id (null if the manifest is unreadable).")
    profile: str | None = field("Profile.")
    scale: str | None = field("Scale.")
    seed: int | None = field("Seed.", ge=0)
    status: str | None = field("Manifest status.")
    steps_completed: int | None = field("Steps completed.", ge=0)


class BaselineUsed(Record):
    path: str = field("Baseline file.", min_length=1)
    sha256: str = sha("SHA-256 of the baseline file.")
    steps: int = field("Steps recorded.", ge=1)
    primary_seed: int | None = field("Reference seed (null: unknown, a baseline from trainer logs).", ge=0)
    noise_seeds: list[int | None] = field("Noise seeds (null where unknown).")
    steps_compared: int = field("Steps compared (common prefix).", ge=0)


class Change(Record):
    """One difference."""

    key: str = field("What differs (package, device model, driver, numerics pin, …).", min_length=1)
    baseline: Any = field("The baseline's value.")
    run: Any = field("The run's value.")
    blocks_exact: bool = field("Whether it rules out bitwise comparison.")


class Candidate(Record):
    """One candidate run."""

    seed: int = field("Seed.", ge=0)
    dir: str = field("Run directory.", min_length=1)


class ProbeJudged(Record):
    dir: str = field("Probe run directory.", min_length=1)
    steps_compared: int = field("Replayed steps compared.", ge=0)


class CrossCheck(Record):
    """One metric: the run's late-window mean against the baseline seeds' (not gated)."""

    metric: str = field("Metric (harness name).", min_length=1)
    run_value: float = field("The run's mean over the window.")
    centre: float = field("The seeds' olympic mean (plain mean under 5 seeds).")
    sd: float = field("The seeds' spread (population sd; sample sd under 5 seeds).", ge=0)
    seeds_min: float = field("Lowest seed mean.")
    seeds_max: float = field("Highest seed mean.")
    n: int = field("Seeds.", ge=2)
    t: float | None = field("(run - centre) / (sd * sqrt(1 + 1/n)); null when infinite (no spread).")
    bound: float = field("Two-sided t bound at the statistical alpha, Bonferroni over the metrics.", ge=0)
    beyond: bool = field("|t| beyond the bound: the run differs beyond the seeds' spread.")
    window: int = field("Late-window steps averaged.", ge=1)


class Verdict(Record):
    """The judgement of one run against its baseline."""

    model_config = ConfigDict(frozen=False)  # the judge fills it in (harness.judge.compare), then seals it

    schema_version: Literal[1] = field("Verdict format version.")
    status: VerdictStatus = field(
        "pass, fail, refused (not comparable: exit 2) or no-baseline (exit 0; the gate fails it).")
    tier: Tier | None = field("Strictest tier applied (null when refused / no baseline).")
    tiers_applied: list[Tier] = field("Every tier whose checks ran.")
    tier_reason: str = field("Why this tier.", min_length=0)
    forced_tier: Tier | None = field("Tier forced with --tier; null = chosen from the manifests.")
    created_utc: str = utc("When judged.")
    run: RunJudged = field("The run judged.")
    baseline: BaselineUsed | None = field("The baseline used.")
    policy: dict[str, Any] | None = field("The baseline's tolerance policy as applied.")
    overrides: Overrides
    fault_injection: Fault | None = field(FAULT)
    reasons: list[str] = field("Why the run failed or was refused (one line each).")
    notices: list[str] = field("Things to know that do not change the status.")
    changes: list[Change] = field("Every environment difference between the baseline and the run.")
    counts: dict[str, GroupCount] = field("Per check group: checks and failures.")
    checks: list[Check] = field("Every check.")
    unjudged: list[Unjudged] | SkipJsonSchema[None] = optional(
        "Whole-run checks not made on this run, each with why: throughput on a busy machine or on another kind of "
        "machine, memory across a software change, a replay's tokens/s.", min_length=1)
    candidates: list[Candidate] | SkipJsonSchema[None] = optional(
        "Runs of other seeds judged with this one by the statistical tier (their median).")
    replay_probe: ProbeJudged | None | SkipJsonSchema[None] = optional(
        "The replay probe judged with a statistical verdict: the baseline's first steps replayed with the run's "
        "settings (its checks are the replay group); null when there is none.")
    logs: list[LoggedRun] | SkipJsonSchema[None] = optional(
        "Another trainer's logs judged (harness compare --log): the run first, then its candidate runs.",
        min_length=1)
    crosscheck: list[CrossCheck] | SkipJsonSchema[None] = optional(
        "Per metric of the band tier: where the run's late-window mean lies beyond the baseline seeds' spread (a "
        "report, not a gate).")
    summary_line: str = field("The one-line summary printed by run/compare.", min_length=1)

