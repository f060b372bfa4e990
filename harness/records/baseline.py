"""A baseline: reference metrics of one recipe at one profile and scale, their noise floor, and the policy runs are
judged by."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from harness.records.base import PROFILE_NAME, SHA256, Record, field, optional, sha, utc
from harness.records.common import (
    Device,
    Dtype,
    HarnessSource,
    NonNegative,
    Positive,
    Runtime,
    Software,
    Tier,
)

ROLLOUTS_KEY = "replay"  # the key of a baseline's recorded rollouts (and of a replay run's manifest section)


class BandPolicy(Record):
    rtol: float = field("Relative tolerance.", ge=0)
    atol: float = field("Absolute tolerance.", ge=0)
    k_noise: float = field("Multiple of the seed noise floor.", ge=0)
    noise_window: int = field("The noise floor at step s is the largest seed std within +-noise_window steps (a std "
                              "from a few seeds is itself noisy).", ge=0)
    failures_per_50_steps: int = field("Failing steps allowed per metric per started 50 steps.", ge=0)


class StatisticalPolicy(Record):
    window_fraction: float = field("Fraction of the steps (the last ones) averaged.", gt=0, le=1)
    alpha: float = field("Family-wise significance level.", gt=0, le=0.5)
    practical_floor: float = field("A reward shortfall must also exceed this (metric units) to fail.", ge=0)
    candidate_runs: Annotated[int, Field(ge=1, le=9)] | SkipJsonSchema[None] = optional(
        "Runs a statistical verdict judges by their median: the run and this many minus one of other seeds, which "
        "`harness run` trains (harness.judge.candidates); absent (older baselines): 1.")


class ReplayPolicy(Record):
    k_noise: float = field("Multiple of the measured noise (the fp64 replay's distance, running maximum).", ge=0)
    horizon_steps: int = field("Only the first steps are gated (later ones separate chaotically).", ge=1)
    coarse_atol_factor: float = field("atol multiplier for a run in a coarser dtype than the baseline's.", ge=1)
    rtol_floor: float = field("Smallest tolerance, relative to the metric's RMS over the steps (fp32).", ge=0)
    unit_roundoff: dict[str, Positive] = field("dtype -> unit roundoff (2^-24 for float32, 2^-8 for bfloat16).")
    atol: dict[str, NonNegative] = field("Metric -> absolute floor ('*' for the rest).")
    failures_per_50_steps: int = field("Failing steps allowed per metric per started 50 steps.", ge=0)


class ThroughputPolicy(Record):
    metric: str = field("Per-step throughput metric.", min_length=1)
    quantile: float = field("Quantile of the steady steps compared (0.5 = median).", ge=0, le=1)
    warmup_steps: int = field("First steps skipped.", ge=0)
    min_tolerance: float = field("Smallest allowed relative slowdown.", ge=0, le=1)
    max_tolerance: float = field("Largest allowed relative slowdown (however noisy the recording).", ge=0, le=1)
    spread_factor: float = field("Tolerance = clamp(spread_factor * relative spread).", ge=0)
    refresh_ratio: float = field("Faster than ref * this passes with a notice to refresh the baseline.", ge=1)


class MemoryPolicy(Record):
    metric: str = field("Per-step peak memory metric (GB).", min_length=1)
    tolerance: float = field("Allowed relative increase over the baseline peak.", ge=0)


class Policy(Record):
    band: BandPolicy = field("Per-step band: |run - ref| <= max(atol, rtol*|ref|, k_noise*noise).")
    statistical: StatisticalPolicy = field("Late-window means against the seeds' distribution (olympic mean, one-sided "
                                           "t-test, Bonferroni over the metrics: harness.judge.stats).")
    replay: ReplayPolicy = field("Replay tier: per step (the first horizon_steps) |run - ref| <= max(k_noise * c * "
                                 "noise, rtol_floor * c * rms(ref), atol), c = the run dtype's unit roundoff / the "
                                 "baseline's.")
    throughput: ThroughputPolicy = field("Tokens/s over steady steps (a quantile of the per-step values), one-sided.")
    memory: MemoryPolicy = field("Peak memory, one-sided.")


class MetricSeries(Record):
    """One metric: the primary seed's values (the exact/band reference) and the noise seeds'."""

    tiers: list[Tier] = field("Tiers this metric is gated in.", min_length=1)
    transform: Literal["identity", "log", "asin-sqrt"] | SkipJsonSchema[None] = optional(
        "Statistical tier: the scale the window mean was to be tested on when recorded (informational: the tier "
        "applies the harness's current rule; log: older baselines).")
    stat_floor: NonNegative | SkipJsonSchema[None] = optional(
        "Statistical tier: per-metric practical floor (overrides the policy's).")
    steps: list[Annotated[int, Field(ge=0)]] = field("Steps with a value (ascending).")
    values: list[float] = field("Primary-seed value at each step (exact JSON floats).")
    noise_values: list[Annotated[list[float | None], Field(description="One noise seed.")]] = field(
        "Each noise seed's values at the same steps (null where a seed lacks one).")
    noise_std: list[float] = field("Std across all seeds (ddof 1) at each step: the noise floor; 0 with one seed.")
    rtol: NonNegative | SkipJsonSchema[None] = optional("Per-metric override of policy.band.rtol.")
    atol: NonNegative | SkipJsonSchema[None] = optional("Per-metric override of policy.band.atol.")
    direction: Literal["higher-is-better", "lower-is-better", "two-sided"] | SkipJsonSchema[None] = optional(
        "Statistical tier: which way is a regression.")
    seed_window_means: list[float] | SkipJsonSchema[None] = optional(
        "Statistical tier: each seed's mean over the last window steps.")


class PerStepThroughput(Record):
    """The seeds' throughput with each steady step's tokens/s scaled to the reference's machine speed by the
    calibration sample taken just before that step (``perf/speed_index``, on accelerators): step * speed_index /
    sample. Where a launch-bound run's host speeds up and slows down from step to step, this follows it."""

    value: float = field("The policy's quantile of those scaled values over all runs' steady steps.", ge=0)
    seed_values: list[float] = field("Per-run quantile of them.")
    relative_spread: float = field("Std of the per-run values / their median.", ge=0)


class ThroughputRef(Record):
    """One throughput reference, valid only for runs on this device model with this thread count."""

    device_model: str = field("Device model (CPU model name on cpu) it was measured on.", min_length=1)
    threads: int = field("torch threads of those runs.", ge=1)
    runtime: Runtime = field("Runtime kind of those runs.")
    value: float = field("The policy's quantile of tokens/s over all runs' steady steps.", ge=0)
    seed_values: list[float] = field("Per-run quantile.")
    relative_spread: float = field("Std of the per-run values / their median.", ge=0)
    recorded_utc: str = utc("When measured.")
    speed_index: Positive | SkipJsonSchema[None] = optional(
        "Median machine speed of those runs (manifest calibration); a run's floor is scaled by its own speed / "
        "this.")
    solo: bool | SkipJsonSchema[None] = optional(
        "How it was measured: true when its runs went one at a time on an accelerator no other process held "
        "(their manifests' calibration.device_processes all 0); absent when unknown (the CPU: see each run's "
        "cpu_load).")
    per_step: PerStepThroughput | SkipJsonSchema[None] = optional(
        "Present when scaling each step by its own calibration sample narrowed the seeds' spread (measured on "
        "an H200 host: 13 % -> 5 %): a run with a sample before every steady step is then judged on that scale, "
        "both ways (a faster moment raises the step's bar as a slower one lowers it). Absent: the run-level rule "
        "(its median calibration only lowers the floor).")


class BaselineRecipe(Record):
    name: str = field("Recipe id.", min_length=1)
    hash: str = sha("Recipe file hash (runs of another hash are refused).")
    config_hash: str = sha("Resolved config hash of the primary run.")


class MachineSummary(Record):
    arch: str = field("CPU architecture (platform.machine).", min_length=1)
    device_type: Device = field("Accelerator kind.")
    device_model: str = field("Accelerator model (CPU model name on cpu).", min_length=1)
    device_count: int = field("Accelerators per node.", ge=1)
    cpu_model: str = field("Host CPU model name.", min_length=0)
    driver: str | None = field("Accelerator driver; null on cpu.")
    runtime: str | None = field("CUDA / CANN runtime; null on cpu.")


class LaunchSummary(Record):
    kind: Runtime = field("Runtime kind.")
    world_size: int = field("Training processes.", ge=1)
    image_id: str | None = field("Container image id; null for a local run.")
    lock_sha256: str | None = field("Requirements lock hash; null for a local run.", pattern=SHA256)


class Environment(Record):
    deterministic: bool = field("Deterministic algorithms were forced.")
    software: Software = field("Software stack the run used.")
    machine: MachineSummary = field("Machine summary.")
    numerics: dict[str, Any] | None = field("The CPU numerics pin that decides bitwise comparability across CPU "
                                            "models (null: none).")
    runtime: LaunchSummary = field("Launch.")
    harness: HarnessSource = field("Harness source.")


class Throughput(Record):
    references: list[ThroughputRef] = field("References, one per device model and thread count (record-baseline "
                                            "--throughput-only adds this machine's); none for a baseline from "
                                            "trainer logs (their machine unknown).")


class Rollouts(Record):
    file: str = field("Archive beside this file (.npz, read without pickle): initial/<parameter> (the policy before "
                      "step 1, float32) and <step>/<field> (each step's rollout).", min_length=1)
    sha256: str = sha("SHA-256 of the archive (checked before it is read).")
    metrics: list[str] = field("Metrics gated under replay.", min_length=1)
    perturbation: str = field("How the noise was measured: the replay repeated with the arithmetic in another order.",
                              min_length=1)
    noise: dict[str, Annotated[list[float | None], Field(description="Per step.")]] = field(
        "Metric -> |perturbed replay - primary run| at each step.")


class Spread(Record):
    value: float = field("Reference: the median of the seeds' peaks.", ge=0)
    seed_values: list[float] = field("Per-seed peak.")
    relative_spread: float = field("Std of the per-seed values / their median.", ge=0)


class WarmStartRef(Record):
    key: str = field("Warm-start cache key of the primary run.", min_length=1)
    weights_sha256: str = sha("SHA-256 of the primary run's warm-start weights: a run with the baseline's seed, "
                              "settings and environment must start from the same (else its verdict fails and names "
                              "the warm-start cache).")


class RecordedRun(Record):
    """One run."""

    seed: int = field("Seed.", ge=0)
    run_dir: str = field("Run directory (as recorded; may be gone).", min_length=1)
    metrics_sha256: str = sha("SHA-256 of its metrics.jsonl.")


class LoggedRun(Record):
    """One run another trainer made, as its log was read (harness.judge.logs)."""

    format: str = field("The log reader (harness compare --log FORMAT:FILE): verl, trl, ...", min_length=1)
    file: str = field("The log file as given (may be gone).", min_length=1)
    sha256: str = sha("SHA-256 of the log file's bytes as read.")
    trainer: str = field("The trainer that wrote it.", min_length=1)
    trainer_version: str | None = field("The trainer's version when the log says it; null when it does not.")
    steps: int = field("The last training step in the log.", ge=1)


class Baseline(Record):
    """Reference metrics of one recipe at one profile and scale, with its noise floor and policy."""

    schema_ref: str | SkipJsonSchema[None] = optional("Path or URI of this schema (editor hint).", alias="$schema",
                                                      min_length=1)
    schema_version: Literal[2] = field("Baseline format version (2: replay rollouts, per-model throughput "
                                       "references, numerics pin).")
    recipe: BaselineRecipe = field("The recipe recorded.")
    profile: str = field("Hardware profile.", pattern=PROFILE_NAME)
    scale: str = field("Recipe scale.", min_length=1)
    architecture: dict[str, Any] = field("model.architecture of the resolved config (runs of another architecture "
                                         "are refused).")
    dtype: Dtype = field("model.dtype of the recorded runs (the replay tier scales its tolerance by a run's coarser "
                         "dtype).")
    steps: int = field("GRPO steps recorded per seed.", ge=1)
    created_utc: str = utc("When the baseline was written.")
    command: str = field("Command that recorded it.", min_length=1)
    primary_seed: int | None = field("The recipe's seed: its values are the exact/band reference; null for a "
                                     "baseline from trainer logs (the seed unknown).", ge=0)
    noise_seeds: list[Annotated[int, Field(ge=0)] | None] = field(
        "Further seeds (seed + k, via --set seed=...) for the noise floor; null where unknown (trainer logs).")
    environment: Environment | None = field("Manifest summary of the primary run (decides exact-tier eligibility); "
                                            "null for a baseline from trainer logs (unknown: never exact).")
    policy: Policy = field("How runs are judged against this baseline (copied into every verdict).")
    metrics: dict[str, MetricSeries] = field("Metric name (verl naming) -> series. Timing metrics are never here.",
                                             extra={"minProperties": 1})
    throughput: Throughput = field("perf/throughput over steady steps (tokens/s), per device model.")
    replay: Rollouts | SkipJsonSchema[None] = optional(
        "The primary run's initial policy and rollouts for the replay tier, and the reorder noise measured on them.")
    warm_start: WarmStartRef | SkipJsonSchema[None] = optional(
        "The primary run's warm start (absent: none, or a baseline recorded before warm starts were recorded).")
    memory: Spread = field("Peak perf/max_memory_allocated_gb per seed (GB).")
    runs: list[RecordedRun] = field("The recorded harness runs, primary first (none for a baseline from trainer "
                                    "logs: see logs).")
    logs: list[LoggedRun] | SkipJsonSchema[None] = optional(
        "The trainer logs it was recorded from (record-baseline --from-log), primary first; absent for harness "
        "runs.", min_length=2)


