"""What a run writes: its manifest (rewritten atomically while the run goes) and each checkpoint's trainer state."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from harness.paths import SAFE_NAME
from harness.records.base import MAX_STEPS, PROFILE_NAME, RECIPE_NAME, SHA256, UTC, Record, field, optional, sha, utc
from harness.records.common import (
    FAULT,
    Device,
    Fault,
    HarnessSource,
    NonNegative,
    Overrides,
    Runtime,
    Software,
    Status,
)


class Machine(Record):
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


class RecipeRef(Record):
    name: str = field("Recipe id (a file and directory name: baselines/<name>/).", pattern=RECIPE_NAME)
    path: str = field("Recipe file the run was resolved from.", min_length=1)
    hash: str = sha("SHA-256 of the recipe file's canonical JSON (overrides never change it).")
    config_hash: str = sha("SHA-256 of the resolved config (scale + profile + overrides applied).")


class Steps(Record):
    requested: int = field("GRPO steps asked for.", ge=1, le=MAX_STEPS)
    completed: int = field("GRPO steps written to metrics.jsonl.", ge=0, le=MAX_STEPS)


class Launch(Record):
    kind: Runtime = field("local process, docker container or torchrun job.")
    world_size: int = field("Training processes.", ge=1)
    nnodes: int = field("Nodes.", ge=1)
    image_id: str | None = field("Container image id (HARNESS_IMAGE_ID); null outside a container.")
    lock_sha256: str | None = field("SHA-256 of the image's requirements lock (HARNESS_LOCK_SHA256); null outside a "
                                    "container.", pattern=SHA256)


class Simulation(Record):
    """An accelerator profile's layout executed on CPU ranks (``--simulate``, :mod:`harness.run.simulate`)."""

    profile_device: Device = field("The profile's device kind the CPU processes stood in for.")
    device: Literal["cpu"] = field("What ran.")
    nnodes: int = field("Nodes simulated (one torchrun launcher each, on this machine).", ge=1)
    devices_per_node: int = field("Ranks per node.", ge=1)
    world_size: int = field("Ranks in all.", ge=1)
    backend: Literal["gloo"] = field("Collective backend that ran.")
    profile_backend: str = field("The profile's collective backend.", min_length=1)
    sharding: str = field("Sharding of actor and reference: full shard, or HSDP replicas x shard.", min_length=1)
    substitutions: list[str] = field("KEY=VALUE each setting the CPU ranks ran instead of the profile's.")


class Numerics(Record):
    level: Literal["avx2", "native"] = field("avx2 = pinned; native = each library uses the machine's widest ISA.")
    reason: str = field("Why this level (pinned, HARNESS_CPU_ISA=native, unsupported CPU, …).", min_length=1)
    env: dict[str, str | None] = field("The pin's variables as they were in effect.")
    cpu_capability: str = field("ATen's effective CPU capability.", min_length=1)
    isa_class: str | SkipJsonSchema[None] = optional("CPU vendor and widest vector ISA (GenuineIntel/avx512, "
                                                     "AuthenticAMD/avx2, …): bitwise references hold per class.",
                                                     min_length=1)
    threads: int = field("torch intra-op threads.", ge=1)


class ReplayOf(Record):
    baseline: str = field("Baseline file replayed.", min_length=1)
    baseline_sha256: str = sha("SHA-256 of that baseline file.")
    rollouts_sha256: str = sha("SHA-256 of its rollouts archive (checked before loading).")
    baseline_profile: str = field("Profile the baseline was recorded on.", pattern=PROFILE_NAME)


class BuiltModel(Record):
    family: str = field("Architecture family.", min_length=1)
    n_params: int = field("Parameters.", ge=1)
    n_active_params: int = field("Parameters active per token (MoE top-k).", ge=1)
    attn_implementation: str = field("Attention kernel in use.", min_length=1)
    decode_engine: Literal["dynamic", "static", "graph"] | SkipJsonSchema[None] = optional(
        "Rollout decoding: dynamic KV cache (CPU path), static cache, or static cache with each step a CUDA graph "
        "(harness.core.decode).")
    notes: list[str] = field("Departures from the requested settings (e.g. a kernel fallback).")


class WarmStartUsed(Record):
    key: str = field("Cache key (hash of everything that produced it).", min_length=1)
    cached: bool = field("Loaded from the cache (true) or trained now (false).")
    path: str = field("Cache file.", min_length=1)
    final_loss: float | None | SkipJsonSchema[None] = optional("Last SFT loss when trained now.")
    weights_sha256: str | SkipJsonSchema[None] = optional(
        "SHA-256 of the warm-start weights the run started from (every tensor's name, dtype, shape and bytes: "
        "harness.core.warmstart.weights_sha256); absent in older manifests.", pattern=SHA256)


class DataLoaded(Record):
    train_size: int = field("Training examples.", ge=0)
    val_size: int = field("Validation examples.", ge=0)
    num_filtered: int = field("Prompts dropped as overlong.", ge=0)


class Resume(Record):
    """One resume."""

    from_step: int = field("Step of the checkpoint it continued from (0 = started over).", ge=0)
    utc: str = utc("When it resumed (UTC).")
    overrides: Overrides


SPEED_METRIC = "perf/speed_index"  # an accelerator run's calibration sample taken just before each step


class Calibration(Record):
    speed_index: float = field("The median of the samples: repetitions per second of the workload.", gt=0)
    samples: list[Annotated[float, Field(gt=0, description="Repetitions per second.")]] = field(
        "At the start, before every step on an accelerator (each also the step's perf/speed_index) or every 10 "
        "steps on a CPU (harness.core.device.calibrate_every), and at the end.", min_length=1)
    workload: str = field("The fixed workload timed.", min_length=1)
    device_processes: Annotated[int, Field(ge=0)] | None = optional(
        "Other processes holding the accelerator when the run started (nvidia-smi); absent on the CPU or when "
        "unknown. A throughput reference is only recorded from runs that had it to themselves.")


class Manifest(Record):
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
    simulated: Simulation | SkipJsonSchema[None] = optional(
        "Set when the profile's layout ran on CPU ranks (--simulate): it proves the layout trains, and measures "
        "nothing of the profile's hardware.")
    resolved_config: dict[str, Any] = field("The resolved recipe (schema: resolved-recipe).")
    model: BuiltModel | SkipJsonSchema[None] = optional("The model that was built (written once it exists).")
    warm_start: WarmStartUsed | None | SkipJsonSchema[None] = optional("Seed checkpoint used (null = none).")
    data: DataLoaded | SkipJsonSchema[None] = optional("Datasets as loaded.")
    resumes: list[Resume] | SkipJsonSchema[None] = optional(
        "Each time the run was continued from a checkpoint (harness run --resume), in order.")
    calibration: Calibration | SkipJsonSchema[None] = optional(
        "This machine's speed, measured at the run's start and end (written when it completes).")

    @property
    def architecture(self) -> dict[str, Any]:
        """The resolved recipe's ``model.architecture``."""
        return dict(self.resolved_config["model"]["architecture"])

    @property
    def dtype(self) -> str:
        """The resolved recipe's ``model.dtype``."""
        return str(self.resolved_config["model"]["dtype"])


class SchedulerState(BaseModel):
    """torch's LambdaLR state: the keys every torch version writes are declared; torch's own private keys vary
    with its version and are checked against the live scheduler's when the checkpoint is loaded."""

    model_config = ConfigDict(extra="allow", frozen=True)

    base_lrs: list[NonNegative] = field("Initial learning rate of each parameter group.", min_length=1)
    last_epoch: int = field("Scheduler steps taken.", ge=0, le=MAX_STEPS)
    lr_lambdas: list[dict[str, Any] | None] = field("Per group: null for a function (its state is not saved).",
                                                    min_length=1)


class LoaderState(Record):
    epoch: int = field("Passes over the prompts started.", ge=0)
    position: int = field("Prompts taken in this pass.", ge=0)
    seed: int = field("Shuffle seed.", ge=0)
    num_prompts: int = field("Prompts in the training set.", ge=0)
    batch_size: int = field("Prompts per step.", ge=1)


class TrainerState(Record):
    """A checkpoint's trainer-state.json: where the run was when the checkpoint was written."""

    step: int = field("GRPO steps done (the checkpoint directory's step-<step>).", ge=1, le=MAX_STEPS)
    tokens_seen: int = field("Tokens trained on so far.", ge=0)
    world_size: int = field("Training processes that wrote it (one state-rank<r> pair each).", ge=1, le=65536)
    utc: str = utc("When it was written (UTC).")
    scheduler: SchedulerState = field("Learning-rate schedule.")
    loader: LoaderState = field("Data loader position.")


