"""Hardware certification as typed models: the ``suite`` a profile is certified with and the ``certificate``, the
source of ``schemas/v1/{suite,certificate}.schema.json`` (:mod:`harness.config.schema_defs` writes them).

A suite (``recipes/certification/<profile>.json``) lists what to run on the profile and what each run must
achieve: numerics against a named reference baseline (which may belong to another vendor's profile), a
throughput floor per device, an MFU floor against the profile's peak, peak memory within the device budget,
and optionally a determinism repeat. A certificate records the machine, every check with its numbers, and
SHA-256 digests of every input and result file so it can be verified elsewhere (``harness
verify-certificate``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from harness.records.base import PROFILE_NAME, SHA256, UTC, Record, Registered, field, optional
from harness.records.common import HarnessSource, Interconnect

ENTRY_ID = r"^[a-z0-9][a-z0-9_.-]*$"
# A path relative to the repository root (inputs) or the certificate's directory (results): no leading slash,
# no '..' segment.
REL_PATH = r"^(?!/)(?!.*(^|/)\.\.(/|$)).+$"
Tier = Annotated[str, Registered("certifiable-tier")]  # tiers a certificate can ask for


class Doc(Record):
    """A section of a suite or certificate (Python's regular expressions: REL_PATH needs look-ahead)."""

    model_config = ConfigDict(regex_engine="python-re")


# ----------------------------------------------------------------------------- suite
class NumericsCriterion(Doc):
    tier: Tier = field("Strictest compare tier to apply (looser ones run too). A reference from another profile "
                       "(cross-vendor) allows replay, band or statistical. replay: the entry's runs replay the "
                       "reference's recorded rollouts (teacher-forced), so a one-device reference judges a node of "
                       "any world size.")
    reference_baseline: str = field("Baseline file relative to the repository root "
                                    "(baselines/<recipe>/<profile>-<scale>.json); may be another profile's, e.g. an "
                                    "NPU suite names the GPU reference.", pattern=r"^baselines/.+\.json$")


class SuiteEntry(Doc):
    """One certification entry: a recipe run on the profile and its pass criteria."""

    id: str = field("Entry id (names the run directories).", pattern=ENTRY_ID)
    recipe: str = field("Recipe name (recipes/<name>.json).", pattern=ENTRY_ID)
    scale: str = field("Recipe scale.", min_length=1)
    steps: int | None = field("GRPO steps per run; null = the recipe's trainer.total_training_steps at that scale. "
                              "Numerics compare the common prefix with the baseline.", ge=3)
    numerics: NumericsCriterion = field("Numerics against a reference baseline.")
    throughput_floor_tokens_per_s_per_device: float = field(
        "Minimum tokens/s per device (the baseline policy's quantile over steady steps of perf/throughput).", gt=0)
    mfu_floor: float = field("Minimum model FLOPs utilisation against the profile's peak_bf16_tflops (same quantile "
                             "over steady steps of perf/mfu).", ge=0, le=1)
    memory_budget_fraction: float = field("Peak memory per device (perf/max_memory_allocated_gb; peak RSS on cpu) "
                                          "must stay within this fraction of the profile's accelerator.memory_gb.",
                                          gt=0, le=1)
    determinism_repeat: bool = field("Run twice and require bitwise-equal non-timing metrics (when the resolved "
                                     "recipe is deterministic; otherwise the check is not applicable).")
    notes: str | SkipJsonSchema[None] = optional("Where the floors come from (measured, or a documented estimate).",
                                                 min_length=1)


class Suite(Doc):
    """A certification suite: what a hardware profile must run and achieve."""

    schema_ref: str | SkipJsonSchema[None] = optional("Path or URI of this schema (editor hint).", alias="$schema",
                                                      min_length=1)
    schema_version: Literal[1] = field("Suite format version.")
    profile: str = field("Hardware profile certified (file name without .json).", pattern=PROFILE_NAME)
    description: str = field("What passing this suite means.", min_length=1)
    notes: list[Annotated[str, Field(description="One note.", min_length=1)]] = field(
        "Provenance of the criteria: which floors are measured and which are documented estimates.", min_length=1)
    entries: list[SuiteEntry] = field("Certification entries, run in order.", min_length=1)


# ----------------------------------------------------------------------------- certificate
class DigestInput(Doc):
    """A digested input: a file relative to the repository root, or a literal value."""

    role: Literal["suite", "profile", "recipe", "baseline", "lock", "image-id"] = field("What this input is.")
    path: str | None = field("File relative to the repository root; null for a literal value.", pattern=REL_PATH)
    value: str | None = field("The literal (e.g. the image id) when path is null.", min_length=1)
    sha256: str = field("SHA-256 of the file's bytes, or of the value's UTF-8 bytes.", pattern=SHA256)


class DigestResult(Doc):
    """A digested result file, relative to the certificate's directory: every file a run left."""

    role: Literal["manifest", "metrics", "verdict", "mlperf-log", "other"] = field(
        "What this file is (other: any further file the run left, e.g. INCOMPLETE after a failure).")
    entry: str = field("Suite entry id.", pattern=ENTRY_ID)
    path: str = field("File relative to the certificate's directory.", pattern=REL_PATH)
    sha256: str = field("SHA-256 of the file's bytes.", pattern=SHA256)


class CertCheck(Doc):
    """One certification check with its numbers."""

    entry: str = field("Suite entry id.", pattern=ENTRY_ID)
    name: Literal["numerics", "throughput", "mfu", "memory", "determinism"] = field("Check kind.")
    run: str = field("Run directory the numbers come from, relative to the certificate's directory.",
                     pattern=REL_PATH)
    value: float | None = field("Measured value (numerics and determinism: count of failures).")
    threshold: float | None = field("Limit the value is compared with.")
    comparison: Literal[">=", "<="] | None = field("value <comparison> threshold must hold.")
    unit: str = field("Unit of value and threshold.", min_length=0)
    outcome: Literal["pass", "fail", "not-applicable"] = field(
        "pass, fail, or not-applicable (does not fail the certificate).")
    detail: str = field("One line explaining the numbers.", min_length=0)


class AcceleratorFound(Doc):
    vendor: str = field("Vendor (from the profile).", min_length=1)
    model: str = field("Model as the driver reports it (the CPU architecture on cpu).", min_length=1)
    count: int = field("Devices on this node.", ge=1)
    memory_gb: float = field("Memory per device in GB (host memory on cpu).", ge=0)
    peak_bf16_tflops: float = field("Peak used for MFU (from the profile).", gt=0)


class HostFound(Doc):
    cpu_cores: int = field("Logical cores.", ge=1)
    memory_gb: float = field("Host memory in GB.", ge=0)
    hostname: str = field("Host name.", min_length=0)


class SuiteRuntime(Doc):
    kind: Literal["local", "torchrun", "docker"] = field("local, torchrun or docker.")
    image: str | None = field("Image reference given with --image (as typed; the image id is the bound value); null "
                              "outside a container.")
    image_id: str | None = field("Image id the runs used; null outside a container.")
    lock_sha256: str | None = field("The image's requirements-lock hash; null outside a container.")


class System(Doc):
    accelerator: AcceleratorFound = field("Accelerators as found on the machine.")
    nodes: int = field("Nodes (from the profile).", ge=1)
    host: HostFound = field("Host side.")
    interconnect: Interconnect = field("Links (from the profile).")
    collective_backend: str = field("torch.distributed backend (from the profile).", min_length=1)
    software: dict[str, str | int | None] = field("Software stack from the first run's manifest, plus the "
                                                  "accelerator driver and runtime (CUDA / CANN) versions found.")
    runtime: SuiteRuntime = field("How the suite ran.")


class EntryRun(Doc):
    """One suite entry as run."""

    id: str = field("Entry id.", pattern=ENTRY_ID)
    recipe: str = field("Recipe name.", min_length=1)
    scale: str = field("Scale.", min_length=1)
    steps: int = field("Steps per run.", ge=1)
    reference_baseline: str = field("Baseline file relative to the repository root.", pattern=REL_PATH)
    tier: Tier = field("Numerics tier asked for.")
    runs: list[Annotated[str, Field(description="Run directory.", pattern=REL_PATH)]] = field(
        "Run directories relative to the certificate's directory.", min_length=1)


class ProfileRef(Doc):
    name: str = field("Profile name.", pattern=PROFILE_NAME)
    path: str = field("Profile file relative to the repository root.", pattern=REL_PATH)
    description: str = field("Profile description.", min_length=1)


class SuiteRef(Doc):
    path: str = field("Suite file relative to the repository root.", pattern=REL_PATH)
    notes: list[str] = field("The suite's notes.")


class Summary(Doc):
    checks: int = field("Checks.", ge=0)
    failed: int = field("Failed checks.", ge=0)
    not_applicable: int = field("Checks not applicable.", ge=0)


class SimulatedCert(Doc):
    """Set when the suite ran with ``--simulate``: CPU processes stood in for the profile's devices."""

    statement: str = field("What a simulated certificate shows and does not.", min_length=1)
    left_out: list[Annotated[str, Field(pattern=ENTRY_ID)]] = field(
        "Ids of the suite's entries not run: scales other than smoke need the profile's devices.")


class Certificate(Doc):
    """A hardware certificate: a profile's suite run on a live machine, with digests of every input and result."""

    schema_version: Literal[1] = field("Certificate format version.")
    created_utc: str = field("When the certificate was written (UTC).", pattern=UTC)
    command: str = field("The command that produced it.", min_length=1)
    harness: HarnessSource = field("The harness that certified.")
    profile: ProfileRef = field("The profile certified.")
    suite: SuiteRef = field("The suite run.")
    system: System = field("The system under test, MLPerf-style: machine, software and container as the runs' "
                           "manifests recorded (every run must agree), vendor, peak, nodes, interconnect and backend "
                           "from the profile. verify-certificate re-derives it.")
    entries: list[EntryRun] = field("Entries as run.", min_length=1)
    checks: list[CertCheck] = field("Every check, in entry order.", min_length=1)
    inputs: list[DigestInput] = field("Digests of every input (their copies under the certificate's inputs/ are "
                                      "subjects of the signed Statement with the same digests).", min_length=1)
    results: list[DigestResult] = field("Digests of every file under the runs' directories (a run that failed to "
                                        "start has none).")
    summary: Summary = field("Counts.")
    result: Literal["pass", "fail"] = field("pass when no check failed; re-derived by verify-certificate.")
    simulated: SimulatedCert | SkipJsonSchema[None] = optional(
        "Present on a simulated certificate (harness certify --simulate): it certifies that the profile's layout "
        "executes and trains what the reference trains, and nothing about the hardware. Never signed.")
