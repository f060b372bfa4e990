"""The run records as typed models: the manifest a run writes, the baseline and the verdict, the source of
``schemas/v1/{manifest,baseline,verdict}.schema.json`` (:mod:`harness.config.schema_defs` writes them).

Records are documents (written atomically, read back by other machines and versions), so the judge reads
them as JSON checked by these schemas; the models are where each field is declared, described and bounded.
``Optional`` marks a key that may be absent (older records); ``X | None`` a key that is present and may be
null.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from harness.core.spec import MAX_STEPS, PROFILE_NAME, RECIPE_NAME, Registered, Section, field
from harness.paths import SAFE_NAME

SHA256 = "^[0-9a-f]{64}$"
UTC = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"
Status = Literal["running", "complete", "failed", "interrupted"]
Runtime = Literal["local", "docker", "torchrun"]
Tier = Literal["exact", "replay", "band", "statistical"]
CheckGroup = Literal["exact", "replay", "band", "statistical", "throughput", "memory"]
Dtype = Literal["float32", "bfloat16", "float16", "float64"]
Device = Annotated[str, Registered("device")]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


def optional(desc: str, **kw: Any) -> Any:
    """A key that may be absent (never null; numeric bounds go on the type: ``Annotated[float, Field(ge=0)]``)."""
    return Field(None, description=desc, **kw)


def sha(desc: str) -> Any:
    return field(desc, pattern=SHA256)


def utc(desc: str) -> Any:
    return field(desc, pattern=UTC)


# ----------------------------------------------------------------------------- shared
class Software(Section):
    python: str = field("Python version (platform.python_version()).", min_length=1)
    torch: str = field("torch.__version__ (includes the build, e.g. +cpu).", min_length=1)
    transformers: str = field("transformers version.", min_length=1)
    tokenizers: str = field("tokenizers version.", min_length=1)
    numpy: str = field("numpy version.", min_length=1)
    cuda: str | None = field("CUDA version torch was built with; null on CPU/NPU builds.")
    torch_npu: str | None = field("torch_npu version; null when not installed.")
    threads: int = field("torch intra-op threads (changes CPU reduction order).", ge=1)
    cpu_capability: str = field("CPU instruction set torch dispatches its kernels to "
                                "(torch.backends.cpu.get_cpu_capability(): AVX512, AVX2, DEFAULT …); a different one "
                                "changes CPU bits.", min_length=1)
    cudnn: int | None = field("cuDNN version number; null when unavailable.", ge=0)


class Override(Section):
    """One override."""

    key: str = field("Dotted recipe key.", min_length=1)
    value: float | int | str | None = field("Typed value that was set.")
    source: str | SkipJsonSchema[None] = optional("Set by a launcher rather than a user's --set; absent for --set.",
                                                  min_length=1)


Overrides = Annotated[list[Override], Field(description="--set overrides applied on top of the recipe, in order.")]


class Fault(Section):
    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    flip_advantage: Literal[True] | SkipJsonSchema[None] = Field(None, alias="flip-advantage",
                                                                 description="Advantage sign flipped.")
    slowdown: Annotated[float, Field(ge=0, le=1)] | SkipJsonSchema[None] = optional(
        "Fraction of throughput taken away: each step sleeps x / (1 - x) of its own time.")


FAULT = ("Test-only fault injected through HARNESS_FAULT (null = none). A run with a fault is judged (so mutation "
         "tests work) and its verdict says so.")


class HarnessSource(Section):
    version: str = field("Package version.", min_length=1)
    revision: str | None = field("Git commit (or HARNESS_GIT_REVISION); null when unknown.")
    dirty: bool | None = field("Uncommitted changes to tracked files; null when unknown.")


# ----------------------------------------------------------------------------- manifest
class Machine(Section):
    device_type: Device = field("Accelerator kind found.")
    device_count: int = field("Accelerators on this node (1 for cpu).", ge=1)
    device_model: str = field("Accelerator model name; the CPU model name on cpu.", min_length=1)
    device_memory_gb: float = field("Memory per accelerator in GB (host memory on cpu).", ge=0)
    driver: str | None = field("Accelerator driver version; null when not found.")
    runtime: str | None = field("CUDA / CANN runtime version; null when not found.")
    cpu_cores: int = field("Logical CPU cores.", ge=1)
    host_memory_gb: float = field("Host memory in GB.", ge=0)
    hostname: str = field("Host name.", min_length=0)
    cpu_model: str | SkipJsonSchema[None] = optional("Host CPU model name (/proc/cpuinfo); throughput references are "
                                                     "per CPU model on cpu.", min_length=0)


class RecipeRef(Section):
    name: str = field("Recipe id (a file and directory name: baselines/<name>/).", pattern=RECIPE_NAME)
    path: str = field("Recipe file the run was resolved from.", min_length=1)
    hash: str = sha("SHA-256 of the recipe file's canonical JSON (overrides never change it).")
    config_hash: str = sha("SHA-256 of the resolved config (scale + profile + overrides applied).")


class Steps(Section):
    requested: int = field("GRPO steps asked for.", ge=1, le=MAX_STEPS)
    completed: int = field("GRPO steps written to metrics.jsonl.", ge=0, le=MAX_STEPS)


class Launch(Section):
    kind: Runtime = field("local process, docker container or torchrun job.")
    world_size: int = field("Training processes.", ge=1)
    nnodes: int = field("Nodes.", ge=1)
    image_id: str | None = field("Container image id (HARNESS_IMAGE_ID); null outside a container.")
    lock_sha256: str | None = field("SHA-256 of the image's requirements lock (HARNESS_LOCK_SHA256); null outside a "
                                    "container.", pattern=SHA256)


class Numerics(Section):
    level: Literal["avx2", "native"] = field("avx2 = pinned; native = each library uses the machine's widest ISA.")
    reason: str = field("Why this level (pinned, HARNESS_CPU_ISA=native, unsupported CPU, …).", min_length=1)
    env: dict[str, str | None] = field("The pin's variables as they were in effect.")
    cpu_capability: str = field("ATen's effective CPU capability.", min_length=1)
    isa_class: str | SkipJsonSchema[None] = optional("CPU vendor and widest vector ISA (GenuineIntel/avx512, "
                                                     "AuthenticAMD/avx2, …): bitwise references hold per class.",
                                                     min_length=1)
    threads: int = field("torch intra-op threads.", ge=1)


class ReplayOf(Section):
    baseline: str = field("Baseline file replayed.", min_length=1)
    baseline_sha256: str = sha("SHA-256 of that baseline file.")
    rollouts_sha256: str = sha("SHA-256 of its rollouts archive (checked before loading).")
    baseline_profile: str = field("Profile the baseline was recorded on.", pattern=PROFILE_NAME)


class BuiltModel(Section):
    family: str = field("Architecture family.", min_length=1)
    n_params: int = field("Parameters.", ge=1)
    n_active_params: int = field("Parameters active per token (MoE top-k).", ge=1)
    attn_implementation: str = field("Attention kernel in use.", min_length=1)
    decode_engine: Literal["dynamic", "static", "graph"] | SkipJsonSchema[None] = optional(
        "Rollout decoding: dynamic KV cache (CPU path), static cache, or static cache with each step a CUDA graph "
        "(harness.core.decode).")
    notes: list[str] = field("Departures from the requested settings (e.g. a kernel fallback).")


class WarmStartUsed(Section):
    key: str = field("Cache key (hash of everything that produced it).", min_length=1)
    cached: bool = field("Loaded from the cache (true) or trained now (false).")
    path: str = field("Cache file.", min_length=1)
    final_loss: float | None | SkipJsonSchema[None] = optional("Last SFT loss when trained now.")
    weights_sha256: str | SkipJsonSchema[None] = optional(
        "SHA-256 of the warm-start weights the run started from (every tensor's name, dtype, shape and bytes: "
        "harness.core.warmstart.weights_sha256); absent in older manifests.", pattern=SHA256)


class DataLoaded(Section):
    train_size: int = field("Training examples.", ge=0)
    val_size: int = field("Validation examples.", ge=0)
    num_filtered: int = field("Prompts dropped as overlong.", ge=0)


class Resume(Section):
    """One resume."""

    from_step: int = field("Step of the checkpoint it continued from (0 = started over).", ge=0)
    utc: str = utc("When it resumed (UTC).")
    overrides: Overrides


class Calibration(Section):
    speed_index: float = field("The faster sample: repetitions per second of the workload.", gt=0)
    samples: list[Annotated[float, Field(gt=0, description="Repetitions per second.")]] = field("Start, end.",
                                                                                               min_length=1)
    workload: str = field("The fixed workload timed.", min_length=1)


class Manifest(Section):
    """A run's manifest: what ran, where and how (rewritten atomically while the run goes)."""

    schema_version: Literal[1] = field("Manifest format version.")
    status: Status = field("running until the run ends; complete, failed (error set) or interrupted. A run killed "
                           "hard keeps running (and its INCOMPLETE marker).")
    created_utc: str = utc("When the run started (UTC).")
    finished_utc: str | None = field("When the run ended (UTC); null while running.", pattern=UTC)
    error: str | None = field("One-line error of a failed or interrupted run; null otherwise.")
    recipe: RecipeRef = field("The recipe that ran.")
    profile: str = field("Hardware profile.", pattern=PROFILE_NAME)
    scale: str = field("Recipe scale (a file name part: baselines/<recipe>/<profile>-<scale>.json).",
                       pattern=SAFE_NAME)
    seed: int = field("Global seed of the run (after overrides).", ge=0)
    deterministic: bool = field("Deterministic algorithms were forced.")
    overrides: Overrides
    steps: Steps = field("Progress.")
    harness: HarnessSource = field("The harness source that ran.")
    software: Software = field("Software stack the run used.")
    machine: Machine = field("The live machine as probed at the start of the run.")
    runtime: Launch = field("How the run was launched.")
    env: dict[str, str] = field("Environment variables that change numerics, as set during the run.")
    numerics: Numerics | SkipJsonSchema[None] = optional(
        "The CPU numerics pin in effect (harness.numerics): one instruction-set level and thread count for ATen, "
        "oneMKL and oneDNN, so pinned runs are bitwise comparable across x86-64 CPUs.")
    replay: ReplayOf | None | SkipJsonSchema[None] = optional(
        "Set when the run replayed a baseline's recorded rollouts (teacher-forced); null for a free run.")
    fault_injection: Fault | None = field(FAULT)
    resolved_config: dict[str, Any] = field("The resolved recipe (schema: resolved-recipe).")
    model: BuiltModel | SkipJsonSchema[None] = optional("The model that was built (written once it exists).")
    warm_start: WarmStartUsed | None | SkipJsonSchema[None] = optional("Seed checkpoint used (null = none).")
    data: DataLoaded | SkipJsonSchema[None] = optional("Datasets as loaded.")
    resumes: list[Resume] | SkipJsonSchema[None] = optional(
        "Each time the run was continued from a checkpoint (harness run --resume), in order.")
    calibration: Calibration | SkipJsonSchema[None] = optional(
        "This machine's speed, measured at the run's start and end (written when it completes).")


# ----------------------------------------------------------------------------- checkpoint
class SchedulerState(BaseModel):
    """torch's LambdaLR state: the keys every torch version writes are declared; torch's own private keys vary
    with its version and are checked against the live scheduler's when the checkpoint is loaded."""

    model_config = ConfigDict(extra="allow", frozen=True)

    base_lrs: list[NonNegative] = field("Initial learning rate of each parameter group.", min_length=1)
    last_epoch: int = field("Scheduler steps taken.", ge=0, le=MAX_STEPS)
    lr_lambdas: list[dict[str, Any] | None] = field("Per group: null for a function (its state is not saved).",
                                                    min_length=1)


class LoaderState(Section):
    epoch: int = field("Passes over the prompts started.", ge=0)
    position: int = field("Prompts taken in this pass.", ge=0)
    seed: int = field("Shuffle seed.", ge=0)
    num_prompts: int = field("Prompts in the training set.", ge=0)
    batch_size: int = field("Prompts per step.", ge=1)


class TrainerState(Section):
    """A checkpoint's trainer-state.json: where the run was when the checkpoint was written."""

    step: int = field("GRPO steps done (the checkpoint directory's step-<step>).", ge=1, le=MAX_STEPS)
    tokens_seen: int = field("Tokens trained on so far.", ge=0)
    world_size: int = field("Training processes that wrote it (one state-rank<r> pair each).", ge=1, le=65536)
    utc: str = utc("When it was written (UTC).")
    scheduler: SchedulerState = field("Learning-rate schedule.")
    loader: LoaderState = field("Data loader position.")


# ----------------------------------------------------------------------------- baseline
class BandPolicy(Section):
    rtol: float = field("Relative tolerance.", ge=0)
    atol: float = field("Absolute tolerance.", ge=0)
    k_noise: float = field("Multiple of the seed noise floor.", ge=0)
    noise_window: int = field("The noise floor at step s is the largest seed std within +-noise_window steps (a std "
                              "from a few seeds is itself noisy).", ge=0)
    failures_per_50_steps: int = field("Failing steps allowed per metric per started 50 steps.", ge=0)


class StatisticalPolicy(Section):
    window_fraction: float = field("Fraction of the steps (the last ones) averaged.", gt=0, le=1)
    alpha: float = field("Family-wise significance level.", gt=0, le=0.5)
    practical_floor: float = field("A reward shortfall must also exceed this (metric units) to fail.", ge=0)
    candidate_runs: Annotated[int, Field(ge=1, le=9)] | SkipJsonSchema[None] = optional(
        "Runs a statistical verdict judges by their median: the run and this many minus one of other seeds, which "
        "`harness run` trains (harness.judge.candidates); absent (older baselines): 1.")


class ReplayPolicy(Section):
    k_noise: float = field("Multiple of the measured noise (the fp64 replay's distance, running maximum).", ge=0)
    horizon_steps: int = field("Only the first steps are gated (later ones separate chaotically).", ge=1)
    coarse_atol_factor: float = field("atol multiplier for a run in a coarser dtype than the baseline's.", ge=1)
    rtol_floor: float = field("Smallest tolerance, relative to the metric's RMS over the steps (fp32).", ge=0)
    unit_roundoff: dict[str, Positive] = field("dtype -> unit roundoff (2^-24 for float32, 2^-8 for bfloat16).")
    atol: dict[str, NonNegative] = field("Metric -> absolute floor ('*' for the rest).")
    failures_per_50_steps: int = field("Failing steps allowed per metric per started 50 steps.", ge=0)


class ThroughputPolicy(Section):
    metric: str = field("Per-step throughput metric.", min_length=1)
    quantile: float = field("Quantile of the steady steps compared (0.5 = median).", ge=0, le=1)
    warmup_steps: int = field("First steps skipped.", ge=0)
    min_tolerance: float = field("Smallest allowed relative slowdown.", ge=0, le=1)
    max_tolerance: float = field("Largest allowed relative slowdown (however noisy the recording).", ge=0, le=1)
    spread_factor: float = field("Tolerance = clamp(spread_factor * relative spread).", ge=0)
    refresh_ratio: float = field("Faster than ref * this passes with a notice to refresh the baseline.", ge=1)


class MemoryPolicy(Section):
    metric: str = field("Per-step peak memory metric (GB).", min_length=1)
    tolerance: float = field("Allowed relative increase over the baseline peak.", ge=0)


class Policy(Section):
    band: BandPolicy = field("Per-step band: |run - ref| <= max(atol, rtol*|ref|, k_noise*noise).")
    statistical: StatisticalPolicy = field("Late-window means against the seeds' distribution (olympic mean, one-sided "
                                           "t-test, Bonferroni over the metrics: harness.judge.stats).")
    replay: ReplayPolicy = field("Replay tier: per step (the first horizon_steps) |run - ref| <= max(k_noise * c * "
                                 "noise, rtol_floor * c * rms(ref), atol), c = the run dtype's unit roundoff / the "
                                 "baseline's.")
    throughput: ThroughputPolicy = field("Tokens/s over steady steps (a quantile of the per-step values), one-sided.")
    memory: MemoryPolicy = field("Peak memory, one-sided.")


class MetricSeries(Section):
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


class ThroughputRef(Section):
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


class BaselineRecipe(Section):
    name: str = field("Recipe id.", min_length=1)
    hash: str = sha("Recipe file hash (runs of another hash are refused).")
    config_hash: str = sha("Resolved config hash of the primary run.")


class MachineSummary(Section):
    arch: str = field("CPU architecture (platform.machine).", min_length=1)
    device_type: Device = field("Accelerator kind.")
    device_model: str = field("Accelerator model (CPU model name on cpu).", min_length=1)
    device_count: int = field("Accelerators per node.", ge=1)
    cpu_model: str = field("Host CPU model name.", min_length=0)
    driver: str | None = field("Accelerator driver; null on cpu.")
    runtime: str | None = field("CUDA / CANN runtime; null on cpu.")


class LaunchSummary(Section):
    kind: Runtime = field("Runtime kind.")
    world_size: int = field("Training processes.", ge=1)
    image_id: str | None = field("Container image id; null for a local run.")
    lock_sha256: str | None = field("Requirements lock hash; null for a local run.", pattern=SHA256)


class Environment(Section):
    deterministic: bool = field("Deterministic algorithms were forced.")
    software: Software = field("Software stack the run used.")
    machine: MachineSummary = field("Machine summary.")
    numerics: dict[str, Any] | None = field("The CPU numerics pin that decides bitwise comparability across CPU "
                                            "models (null: none).")
    runtime: LaunchSummary = field("Launch.")
    harness: HarnessSource = field("Harness source.")


class Throughput(Section):
    references: list[ThroughputRef] = field("References, one per device model and thread count (record-baseline "
                                            "--throughput-only adds this machine's); none for a baseline from "
                                            "trainer logs (their machine unknown).")


class Rollouts(Section):
    file: str = field("Archive beside this file (.npz, read without pickle): initial/<parameter> (the policy before "
                      "step 1, float32) and <step>/<field> (each step's rollout).", min_length=1)
    sha256: str = sha("SHA-256 of the archive (checked before it is read).")
    metrics: list[str] = field("Metrics gated under replay.", min_length=1)
    perturbation: str = field("How the noise was measured: the replay repeated with the arithmetic in another order.",
                              min_length=1)
    noise: dict[str, Annotated[list[float | None], Field(description="Per step.")]] = field(
        "Metric -> |perturbed replay - primary run| at each step.")


class Spread(Section):
    value: float = field("Reference: the median of the seeds' peaks.", ge=0)
    seed_values: list[float] = field("Per-seed peak.")
    relative_spread: float = field("Std of the per-seed values / their median.", ge=0)


class WarmStartRef(Section):
    key: str = field("Warm-start cache key of the primary run.", min_length=1)
    weights_sha256: str = sha("SHA-256 of the primary run's warm-start weights: a run with the baseline's seed, "
                              "settings and environment must start from the same (else its verdict fails and names "
                              "the warm-start cache).")


class RecordedRun(Section):
    """One run."""

    seed: int = field("Seed.", ge=0)
    run_dir: str = field("Run directory (as recorded; may be gone).", min_length=1)
    metrics_sha256: str = sha("SHA-256 of its metrics.jsonl.")


class LoggedRun(Section):
    """One run another trainer made, as its log was read (harness.judge.logs)."""

    format: str = field("The log reader (harness compare --log FORMAT:FILE): verl, trl, ...", min_length=1)
    file: str = field("The log file as given (may be gone).", min_length=1)
    sha256: str = sha("SHA-256 of the log file's bytes as read.")
    trainer: str = field("The trainer that wrote it.", min_length=1)
    trainer_version: str | None = field("The trainer's version when the log says it; null when it does not.")
    steps: int = field("The last training step in the log.", ge=1)


class Baseline(Section):
    """Reference metrics of one recipe at one profile and scale, with its noise floor and policy."""

    schema_ref: str | SkipJsonSchema[None] = Field(None, alias="$schema", min_length=1,
                                                   description="Path or URI of this schema (editor hint).")
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


# ----------------------------------------------------------------------------- verdict
class Check(Section):
    """One check with its numbers."""

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


class GroupCount(Section):
    """Counts of one group."""

    checks: int = field("Checks.", ge=0)
    failed: int = field("Failed.", ge=0)


class RunJudged(Section):
    dir: str = field("Run directory (another trainer's log file: harness compare --log).", min_length=1)
    recipe: str | None = field("Recipe id (null if the manifest is unreadable).")
    profile: str | None = field("Profile.")
    scale: str | None = field("Scale.")
    seed: int | None = field("Seed.", ge=0)
    status: str | None = field("Manifest status.")
    steps_completed: int | None = field("Steps completed.", ge=0)


class BaselineUsed(Section):
    path: str = field("Baseline file.", min_length=1)
    sha256: str = sha("SHA-256 of the baseline file.")
    steps: int = field("Steps recorded.", ge=1)
    primary_seed: int | None = field("Reference seed (null: unknown, a baseline from trainer logs).", ge=0)
    noise_seeds: list[int | None] = field("Noise seeds (null where unknown).")
    steps_compared: int = field("Steps compared (common prefix).", ge=0)


class Change(Section):
    """One difference."""

    key: str = field("What differs (package, device model, driver, numerics pin, …).", min_length=1)
    baseline: Any = field("The baseline's value.")
    run: Any = field("The run's value.")
    blocks_exact: bool = field("Whether it rules out bitwise comparison.")


class Candidate(Section):
    """One candidate run."""

    seed: int = field("Seed.", ge=0)
    dir: str = field("Run directory.", min_length=1)


class ProbeJudged(Section):
    dir: str = field("Probe run directory.", min_length=1)
    steps_compared: int = field("Replayed steps compared.", ge=0)


class CrossCheck(Section):
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


class Verdict(Section):
    """The judgement of one run against its baseline."""

    schema_version: Literal[1] = field("Verdict format version.")
    status: Literal["pass", "fail", "refused", "no-baseline"] = field(
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
