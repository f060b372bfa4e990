"""JSON Schemas of hardware certification: the ``suite`` a profile is certified with and the ``certificate``.

Generated into ``schemas/v1/`` with the other schemas (``python -m harness.config.schema_defs``).

A suite (``recipes/certification/<profile>.json``) lists what to run on the profile and what each run
must achieve: numerics against a named reference baseline (which may belong to another vendor's
profile), a throughput floor per device, an MFU floor against the profile's peak, peak memory within
the device budget, and optionally a determinism repeat. A certificate records the machine, every
check with its numbers, and SHA-256 digests of every input and result file so it can be verified
elsewhere (``harness verify-certificate``).
"""

from __future__ import annotations

from typing import Any

from harness.config.schema_defs import (
    PROFILE_NAME,
    SCHEMA_BASE,
    SCHEMA_DIALECT,
    array,
    boolean,
    integer,
    number,
    obj,
    string,
)

SHA256 = "^[0-9a-f]{64}$"
UTC = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"
ENTRY_ID = r"^[a-z0-9][a-z0-9_.-]*$"
# A path relative to the repository root (inputs) or the certificate's directory (results): no
# leading slash, no '..' segment.
REL_PATH = r"^(?!/)(?!.*(^|/)\.\.(/|$)).+$"
TIERS = ["exact", "band", "statistical"]
CHECK_NAMES = ["numerics", "throughput", "mfu", "memory", "determinism"]
OUTCOMES = ["pass", "fail", "not-applicable"]
COMPARISONS = [">=", "<="]
INPUT_ROLES = ["suite", "profile", "recipe", "baseline", "lock", "image-id"]
RESULT_ROLES = ["manifest", "metrics", "verdict"]


def _top(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_BASE + f"{name}.schema.json", "title": name, **schema}


def _entry() -> dict[str, Any]:
    numerics = obj("Numerics against a reference baseline.", {
        "tier": string("Strictest compare tier to apply (looser ones run too). A reference from another profile "
                       "(cross-vendor) allows band or statistical only.", enum=TIERS),
        "reference_baseline": string("Baseline file relative to the repository root "
                                     "(baselines/<recipe>/<profile>-<scale>.json); may be another profile's, e.g. "
                                     "an NPU suite names the GPU reference.", pattern=r"^baselines/.+\.json$"),
    })
    return obj("One certification entry: a recipe run on the profile and its pass criteria.", {
        "id": string("Entry id (names the run directories).", pattern=ENTRY_ID),
        "recipe": string("Recipe name (recipes/<name>.json).", pattern=ENTRY_ID),
        "scale": string("Recipe scale.", min_length=1),
        "steps": integer("GRPO steps per run; null = the recipe's trainer.total_training_steps at that scale. "
                         "Numerics compare the common prefix with the baseline.", 3, nullable=True),
        "numerics": numerics,
        "throughput_floor_tokens_per_s_per_device": number(
            "Minimum tokens/s per device (the baseline policy's quantile over steady steps of perf/throughput).",
            exclusive_min=0),
        "mfu_floor": number("Minimum model FLOPs utilisation against the profile's peak_bf16_tflops (same "
                            "quantile over steady steps of perf/mfu).", 0, 1),
        "memory_budget_fraction": number("Peak memory per device (perf/max_memory_allocated_gb; peak RSS on cpu) "
                                         "must stay within this fraction of the profile's accelerator.memory_gb.",
                                         exclusive_min=0, maximum=1),
        "determinism_repeat": boolean("Run twice and require bitwise-equal non-timing metrics (when the resolved "
                                      "recipe is deterministic; otherwise the check is not applicable)."),
        "notes": string("Where the floors come from (measured, or a documented estimate).", min_length=1),
    }, optional=("notes",))


def suite_schema() -> dict[str, Any]:
    schema = obj("A certification suite: what a hardware profile must run and achieve.", {
        "$schema": string("Path or URI of this schema (editor hint).", min_length=1),
        "schema_version": {"const": 1, "description": "Suite format version."},
        "profile": string("Hardware profile certified (file name without .json).", pattern=PROFILE_NAME),
        "description": string("What passing this suite means.", min_length=1),
        "notes": array("Provenance of the criteria: which floors are measured and which are documented "
                       "estimates.", string("One note.", min_length=1), min_items=1),
        "entries": array("Certification entries, run in order.", _entry(), min_items=1),
    }, optional=("$schema",))
    return _top("suite", schema)


def certificate_schema() -> dict[str, Any]:
    num = {"type": ["number", "null"]}
    digest_input = obj("A digested input: a file relative to the repository root, or a literal value.", {
        "role": string("What this input is.", enum=INPUT_ROLES),
        "path": string("File relative to the repository root; null for a literal value.", pattern=REL_PATH,
                       nullable=True),
        "value": string("The literal (e.g. the image id) when path is null.", nullable=True, min_length=1),
        "sha256": string("SHA-256 of the file's bytes, or of the value's UTF-8 bytes.", pattern=SHA256),
    })
    digest_result = obj("A digested result file, relative to the certificate's directory.", {
        "role": string("What this file is.", enum=RESULT_ROLES),
        "entry": string("Suite entry id.", pattern=ENTRY_ID),
        "path": string("File relative to the certificate's directory.", pattern=REL_PATH),
        "sha256": string("SHA-256 of the file's bytes.", pattern=SHA256),
    })
    check = obj("One certification check with its numbers.", {
        "entry": string("Suite entry id.", pattern=ENTRY_ID),
        "name": string("Check kind.", enum=CHECK_NAMES),
        "run": string("Run directory the numbers come from, relative to the certificate's directory.",
                      pattern=REL_PATH),
        "value": {**num, "description": "Measured value (numerics and determinism: count of failures)."},
        "threshold": {**num, "description": "Limit the value is compared with."},
        "comparison": string("value <comparison> threshold must hold.", enum=COMPARISONS, nullable=True),
        "unit": string("Unit of value and threshold.", min_length=0),
        "outcome": string("pass, fail, or not-applicable (does not fail the certificate).", enum=OUTCOMES),
        "detail": string("One line explaining the numbers.", min_length=0),
    })
    accel = obj("Accelerators as found on the machine.", {
        "vendor": string("Vendor (from the profile).", min_length=1),
        "model": string("Model as the driver reports it (the CPU architecture on cpu).", min_length=1),
        "count": integer("Devices on this node.", 1),
        "memory_gb": number("Memory per device in GB (host memory on cpu).", 0),
        "peak_bf16_tflops": number("Peak used for MFU (from the profile).", exclusive_min=0),
    })
    system = obj("The system under test, MLPerf-style: machine, software and container as the runs' manifests "
                 "recorded (every run must agree), vendor, peak, nodes, interconnect and backend from the profile. "
                 "verify-certificate re-derives it.", {
        "accelerator": accel,
        "nodes": integer("Nodes (from the profile).", 1),
        "host": obj("Host side.", {
            "cpu_cores": integer("Logical cores.", 1),
            "memory_gb": number("Host memory in GB.", 0),
            "hostname": string("Host name.", min_length=0),
        }),
        "interconnect": obj("Links (from the profile).", {
            "intra_node": string("Device-to-device link.", min_length=1),
            "inter_node": string("Node-to-node network.", min_length=1),
        }),
        "collective_backend": string("torch.distributed backend (from the profile).", min_length=1),
        "software": {"type": "object", "additionalProperties": {"type": ["string", "integer", "null"]},
                     "description": "Software stack from the first run's manifest, plus the accelerator driver "
                                    "and runtime (CUDA / CANN) versions found."},
        "runtime": obj("How the suite ran.", {
            "kind": string("local, torchrun or docker.", enum=["local", "torchrun", "docker"]),
            "image": string("Image reference given with --image (as typed; the image id is the bound value); null "
                        "outside a container.", nullable=True),
            "image_id": string("Image id the runs used; null outside a container.", nullable=True),
            "lock_sha256": string("The image's requirements-lock hash; null outside a container.", nullable=True),
        }),
    })
    entry = obj("One suite entry as run.", {
        "id": string("Entry id.", pattern=ENTRY_ID),
        "recipe": string("Recipe name.", min_length=1),
        "scale": string("Scale.", min_length=1),
        "steps": integer("Steps per run.", 1),
        "reference_baseline": string("Baseline file relative to the repository root.", pattern=REL_PATH),
        "tier": string("Numerics tier asked for.", enum=TIERS),
        "runs": array("Run directories relative to the certificate's directory.",
                      string("Run directory.", pattern=REL_PATH), min_items=1),
    })
    schema = obj("A hardware certificate: a profile's suite run on a live machine, with digests of every input "
                 "and result.", {
        "schema_version": {"const": 1, "description": "Certificate format version."},
        "created_utc": string("When the certificate was written (UTC).", pattern=UTC),
        "command": string("The command that produced it.", min_length=1),
        "harness": obj("The harness that certified.", {
            "version": string("Package version.", min_length=1),
            "revision": string("Git commit; null when unknown.", nullable=True),
            "dirty": {"type": ["boolean", "null"], "description": "Uncommitted changes; null when unknown."},
        }),
        "profile": obj("The profile certified.", {
            "name": string("Profile name.", pattern=PROFILE_NAME),
            "path": string("Profile file relative to the repository root.", pattern=REL_PATH),
            "description": string("Profile description.", min_length=1),
        }),
        "suite": obj("The suite run.", {
            "path": string("Suite file relative to the repository root.", pattern=REL_PATH),
            "notes": array("The suite's notes.", {"type": "string"}),
        }),
        "system": system,
        "entries": array("Entries as run.", entry, min_items=1),
        "checks": array("Every check, in entry order.", check, min_items=1),
        "inputs": array("Digests of every input.", digest_input, min_items=1),
        "results": array("Digests of every result file the runs wrote (a run that failed to start has none).",
                         digest_result),
        "summary": obj("Counts.", {"checks": integer("Checks.", 0), "failed": integer("Failed checks.", 0),
                                   "not_applicable": integer("Checks not applicable.", 0)}),
        "result": string("pass when no check failed; re-derived by verify-certificate.", enum=["pass", "fail"]),
    })
    return _top("certificate", schema)


def cert_schemas() -> dict[str, dict[str, Any]]:
    return {"suite.schema.json": suite_schema(), "certificate.schema.json": certificate_schema()}
