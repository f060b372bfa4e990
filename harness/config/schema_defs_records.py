"""JSON Schemas of the records a run produces and judges: ``manifest``, ``baseline``, ``verdict``.

Generated into ``schemas/v1/`` with the recipe and profile schemas (``python -m harness.config.schema_defs``).
All three are strict (``additionalProperties: false`` everywhere a shape is known) so a field
that drifts between the writer and the reader is caught at the first judged run.
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
    recipe_schema,
    string,
)
from harness.devices import device_names

SHA256 = "^[0-9a-f]{64}$"
UTC = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"
STATUSES = ["running", "complete", "failed", "interrupted"]
RUNTIMES = ["local", "docker", "torchrun"]
DEVICE_TYPES = device_names()
TIERS = ["exact", "replay", "band", "statistical"]
VERDICT_STATUSES = ["pass", "fail", "refused", "no-baseline"]
CHECK_GROUPS = ["exact", "replay", "band", "statistical", "throughput", "memory"]


def _top(name: str, title: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_BASE + f"{name}.schema.json", "title": title, **schema}


def _utc(desc: str, nullable: bool = False) -> dict[str, Any]:
    return string(desc, pattern=UTC, nullable=nullable)


def _sha(desc: str, nullable: bool = False) -> dict[str, Any]:
    return string(desc, pattern=SHA256, nullable=nullable)


def _software(extra: bool) -> dict[str, Any]:
    props: dict[str, Any] = {
        "python": string("Python version (platform.python_version()).", min_length=1),
        "torch": string("torch.__version__ (includes the build, e.g. +cpu).", min_length=1),
        "transformers": string("transformers version.", min_length=1),
        "tokenizers": string("tokenizers version.", min_length=1),
        "numpy": string("numpy version.", min_length=1),
        "cuda": string("CUDA version torch was built with; null on CPU/NPU builds.", nullable=True),
        "torch_npu": string("torch_npu version; null when not installed.", nullable=True),
    }
    props["threads"] = integer("torch intra-op threads (changes CPU reduction order).", 1)
    props["cpu_capability"] = string("CPU instruction set torch dispatches its kernels to "
                                     "(torch.backends.cpu.get_cpu_capability(): AVX512, AVX2, DEFAULT …); "
                                     "a different one changes CPU bits.", min_length=1)
    if extra:
        props["cudnn"] = integer("cuDNN version number; null when unavailable.", 0, nullable=True)
    return obj("Software stack the run used.", props)


def _numerics() -> dict[str, Any]:
    return obj("The CPU numerics pin in effect (harness.numerics): one instruction-set level and thread count for "
               "ATen, oneMKL and oneDNN, so pinned runs are bitwise comparable across x86-64 CPUs.", {
                   "level": string("avx2 = pinned; native = each library uses the machine's widest ISA.",
                                   enum=["avx2", "native"]),
                   "reason": string("Why this level (pinned, HARNESS_CPU_ISA=native, unsupported CPU, …).",
                                    min_length=1),
                   "env": {"type": "object", "additionalProperties": {"type": ["string", "null"]},
                           "description": "The pin's variables as they were in effect."},
                   "cpu_capability": string("ATen's effective CPU capability.", min_length=1),
                   "isa_class": string("CPU vendor and widest vector ISA (GenuineIntel/avx512, AuthenticAMD/avx2, "
                                       "…): bitwise references hold per class.", min_length=1),
                   "threads": integer("torch intra-op threads.", 1),
               }, optional=("isa_class",))


def _fault() -> dict[str, Any]:
    return {"type": ["object", "null"], "additionalProperties": False, "minProperties": 1,
            "description": "Test-only fault injected through HARNESS_FAULT (null = none). A run with a fault is "
                           "judged (so mutation tests work) and its verdict says so.",
            "properties": {"flip-advantage": {"const": True, "description": "Advantage sign flipped."},
                           "slowdown": number("Fraction of throughput taken away: each step sleeps x / (1 - x) of its "
                                               "own time.", 0, 1)}}


def _overrides() -> dict[str, Any]:
    return array("--set overrides applied on top of the recipe, in order.", obj("One override.", {
        "key": string("Dotted recipe key.", min_length=1),
        "value": {"type": ["number", "integer", "string", "null"], "description": "Typed value that was set."},
        "source": string("Set by a launcher rather than a user's --set; absent for --set.", min_length=1),
    }, optional=("source",)))


def manifest_schema() -> dict[str, Any]:
    resolved = recipe_schema(resolved=True)
    resolved = {k: v for k, v in resolved.items() if k not in ("$schema", "$id", "title")}
    machine = obj("The live machine as probed at the start of the run.", {
        "device_type": string("Accelerator kind found.", enum=DEVICE_TYPES),
        "device_count": integer("Accelerators on this node (1 for cpu).", 1),
        "device_model": string("Accelerator model name; the CPU model name on cpu.",
                               min_length=1),
        "device_memory_gb": number("Memory per accelerator in GB (host memory on cpu).", 0),
        "driver": string("Accelerator driver version; null when not found.", nullable=True),
        "runtime": string("CUDA / CANN runtime version; null when not found.", nullable=True),
        "cpu_cores": integer("Logical CPU cores.", 1),
        "host_memory_gb": number("Host memory in GB.", 0),
        "hostname": string("Host name.", min_length=0),
        "cpu_model": string("Host CPU model name (/proc/cpuinfo); throughput references are per CPU model on "
                            "cpu.", min_length=0),
    }, optional=("cpu_model",))
    schema = obj("A run's manifest: what ran, where and how (rewritten atomically while the run goes).", {
        "schema_version": {"const": 1, "description": "Manifest format version."},
        "status": string("running until the run ends; complete, failed (error set) or interrupted. A run killed "
                         "hard keeps running (and its INCOMPLETE marker).", enum=STATUSES),
        "created_utc": _utc("When the run started (UTC)."),
        "finished_utc": _utc("When the run ended (UTC); null while running.", nullable=True),
        "error": string("One-line error of a failed or interrupted run; null otherwise.", nullable=True),
        "recipe": obj("The recipe that ran.", {
            "name": string("Recipe id.", min_length=1),
            "path": string("Recipe file the run was resolved from.", min_length=1),
            "hash": _sha("SHA-256 of the recipe file's canonical JSON (overrides never change it)."),
            "config_hash": _sha("SHA-256 of the resolved config (scale + profile + overrides applied)."),
        }),
        "profile": string("Hardware profile.", pattern=PROFILE_NAME),
        "scale": string("Recipe scale.", min_length=1),
        "seed": integer("Global seed of the run (after overrides).", 0),
        "deterministic": boolean("Deterministic algorithms were forced."),
        "overrides": _overrides(),
        "steps": obj("Progress.", {
            "requested": integer("GRPO steps asked for.", 1),
            "completed": integer("GRPO steps written to metrics.jsonl.", 0),
        }),
        "harness": obj("The harness source that ran.", {
            "version": string("Package version.", min_length=1),
            "revision": string("Git commit (or HARNESS_GIT_REVISION); null when unknown.", nullable=True),
            "dirty": {"type": ["boolean", "null"], "description": "Uncommitted changes to tracked files; null when "
                                                                  "unknown."},
        }),
        "software": _software(extra=True),
        "machine": machine,
        "runtime": obj("How the run was launched.", {
            "kind": string("local process, docker container or torchrun job.", enum=RUNTIMES),
            "world_size": integer("Training processes.", 1),
            "nnodes": integer("Nodes.", 1),
            "image_id": string("Container image id (HARNESS_IMAGE_ID); null outside a container.", nullable=True),
            "lock_sha256": _sha("SHA-256 of the image's requirements lock (HARNESS_LOCK_SHA256); null outside a "
                                "container.", nullable=True),
        }),
        "env": {"type": "object", "additionalProperties": {"type": "string"},
                "description": "Environment variables that change numerics, as set during the run."},
        "numerics": _numerics(),
        "replay": {**obj("Set when the run replayed a baseline's recorded rollouts (teacher-forced); null for a "
                         "free run.", {
                             "baseline": string("Baseline file replayed.", min_length=1),
                             "baseline_sha256": _sha("SHA-256 of that baseline file."),
                             "rollouts_sha256": _sha("SHA-256 of its rollouts archive (checked before loading)."),
                             "baseline_profile": string("Profile the baseline was recorded on.", pattern=PROFILE_NAME),
                         }), "type": ["object", "null"]},
        "fault_injection": _fault(),
        "resolved_config": resolved,
        "model": obj("The model that was built (written once it exists).", {
            "family": string("Architecture family.", min_length=1),
            "n_params": integer("Parameters.", 1),
            "n_active_params": integer("Parameters active per token (MoE top-k).", 1),
            "attn_implementation": string("Attention kernel in use.", min_length=1),
            "decode_engine": {"enum": ["dynamic", "static", "graph"],
                              "description": "Rollout decoding: dynamic KV cache (CPU path), static cache, or static "
                                             "cache with each step a CUDA graph (harness.core.decode)."},
            "notes": array("Departures from the requested settings (e.g. a kernel fallback).", {"type": "string"}),
        }, optional=("decode_engine",)),
        "warm_start": {**obj("Seed checkpoint used (null = none).", {
            "key": string("Cache key (hash of everything that produced it).", min_length=1),
            "cached": boolean("Loaded from the cache (true) or trained now (false)."),
            "path": string("Cache file.", min_length=1),
            "final_loss": {"type": ["number", "null"], "description": "Last SFT loss when trained now."},
        }, optional=("final_loss",)), "type": ["object", "null"]},
        "data": obj("Datasets as loaded.", {
            "train_size": integer("Training examples.", 0),
            "val_size": integer("Validation examples.", 0),
            "num_filtered": integer("Prompts dropped as overlong.", 0),
        }),
        "resumes": array("Each time the run was continued from a checkpoint (harness run --resume), in order.",
                         obj("One resume.", {
                             "from_step": integer("Step of the checkpoint it continued from (0 = started over).", 0),
                             "utc": _utc("When it resumed (UTC)."),
                             "overrides": _overrides(),
                         })),
        "calibration": obj("This machine's speed, measured at the run's start and end (written when it completes).", {
            "speed_index": number("The faster sample: repetitions per second of the workload.", exclusive_min=0),
            "samples": array("Start, end.", number("Repetitions per second.", exclusive_min=0), min_items=1),
            "workload": string("The fixed workload timed.", min_length=1),
        }),
    }, optional=("model", "warm_start", "data", "resumes", "numerics", "replay", "calibration"))
    return _top("manifest", "manifest", schema)


# ----------------------------------------------------------------------------- baseline
def _policy() -> dict[str, Any]:
    return obj("How runs are judged against this baseline (copied into every verdict).", {
        "band": obj("Per-step band: |run - ref| <= max(atol, rtol*|ref|, k_noise*noise).", {
            "rtol": number("Relative tolerance.", 0),
            "atol": number("Absolute tolerance.", 0),
            "k_noise": number("Multiple of the seed noise floor.", 0),
            "noise_window": integer("The noise floor at step s is the largest seed std within +-noise_window "
                                    "steps (a std from a few seeds is itself noisy).", 0),
            "failures_per_50_steps": integer("Failing steps allowed per metric per started 50 steps.", 0),
        }),
        "statistical": obj("Late-window means against the seeds' distribution (olympic mean, one-sided t-test, "
                           "Bonferroni over the metrics: harness.judge.stats).", {
            "window_fraction": number("Fraction of the steps (the last ones) averaged.", exclusive_min=0, maximum=1),
            "alpha": number("Family-wise significance level.", exclusive_min=0, maximum=0.5),
            "practical_floor": number("A reward shortfall must also exceed this (metric units) to fail.", 0),
            "candidate_runs": integer("Runs a statistical verdict judges by their median: the run and this many "
                                      "minus one of other seeds, which `harness run` trains (harness.judge."
                                      "candidates); absent (older baselines): 1.", 1, 9),
        }, optional=("candidate_runs",)),
        "replay": obj("Replay tier: per step (the first horizon_steps) |run - ref| <= max(k_noise * c * noise, "
                      "rtol_floor * c * rms(ref), atol), c = the run dtype's unit roundoff / the baseline's.", {
            "k_noise": number("Multiple of the measured noise (the fp64 replay's distance, running maximum).", 0),
            "horizon_steps": integer("Only the first steps are gated (later ones separate chaotically).", 1),
            "coarse_atol_factor": number("atol multiplier for a run in a coarser dtype than the baseline's.", 1),
            "rtol_floor": number("Smallest tolerance, relative to the metric's RMS over the steps (fp32).", 0),
            "unit_roundoff": {"type": "object", "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
                              "description": "dtype -> unit roundoff (2^-24 for float32, 2^-8 for bfloat16)."},
            "atol": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0},
                     "description": "Metric -> absolute floor ('*' for the rest)."},
            "failures_per_50_steps": integer("Failing steps allowed per metric per started 50 steps.", 0),
        }),
        "throughput": obj("Tokens/s over steady steps (a quantile of the per-step values), one-sided.", {
            "metric": string("Per-step throughput metric.", min_length=1),
            "quantile": number("Quantile of the steady steps compared (0.5 = median).", 0, 1),
            "warmup_steps": integer("First steps skipped.", 0),
            "min_tolerance": number("Smallest allowed relative slowdown.", 0, 1),
            "max_tolerance": number("Largest allowed relative slowdown (however noisy the recording).", 0, 1),
            "spread_factor": number("Tolerance = clamp(spread_factor * relative spread).", 0),
            "refresh_ratio": number("Faster than ref * this passes with a notice to refresh the baseline.", 1),
        }),
        "memory": obj("Peak memory, one-sided.", {
            "metric": string("Per-step peak memory metric (GB).", min_length=1),
            "tolerance": number("Allowed relative increase over the baseline peak.", 0),
        }),
    })


def _series(desc: str) -> dict[str, Any]:
    return array(desc, {"type": "number"})


def baseline_schema() -> dict[str, Any]:
    metric = obj("One metric: the primary seed's values (the exact/band reference) and the noise seeds'.", {
        "tiers": array("Tiers this metric is gated in.", {"type": "string", "enum": TIERS}, min_items=1),
        "transform": string("Statistical tier: the scale the window mean was to be tested on when recorded "
                            "(informational: the tier applies the harness's current rule; log: older baselines).",
                            enum=["identity", "log", "asin-sqrt"]),
        "stat_floor": number("Statistical tier: per-metric practical floor (overrides the policy's).", 0),
        "steps": array("Steps with a value (ascending).", {"type": "integer", "minimum": 0}),
        "values": _series("Primary-seed value at each step (exact JSON floats)."),
        "noise_values": array("Each noise seed's values at the same steps (null where a seed lacks one).",
                              array("One noise seed.", {"type": ["number", "null"]})),
        "noise_std": _series("Std across all seeds (ddof 1) at each step: the noise floor; 0 with one seed."),
        "rtol": number("Per-metric override of policy.band.rtol.", 0),
        "atol": number("Per-metric override of policy.band.atol.", 0),
        "direction": string("Statistical tier: which way is a regression.", enum=["higher-is-better",
                                                                                   "lower-is-better", "two-sided"]),
        "seed_window_means": _series("Statistical tier: each seed's mean over the last window steps."),
    }, optional=("rtol", "atol", "direction", "seed_window_means", "transform", "stat_floor"))
    spread = {"value": number("Reference: the median of the seeds' peaks.", 0),
              "seed_values": _series("Per-seed peak."),
              "relative_spread": number("Std of the per-seed values / their median.", 0)}
    tp_ref = obj("One throughput reference, valid only for runs on this device model with this thread count.", {
        "device_model": string("Device model (CPU model name on cpu) it was measured on.", min_length=1),
        "threads": integer("torch threads of those runs.", 1),
        "runtime": string("Runtime kind of those runs.", enum=RUNTIMES),
        "value": number("The policy's quantile of tokens/s over all runs' steady steps.", 0),
        "seed_values": _series("Per-run quantile."),
        "relative_spread": number("Std of the per-run values / their median.", 0),
        "recorded_utc": _utc("When measured."),
        "speed_index": number("Median machine speed of those runs (manifest calibration); a run's floor is scaled "
                              "by its own speed / this.", exclusive_min=0),
    }, optional=("speed_index",))
    schema = obj("Reference metrics of one recipe at one profile and scale, with its noise floor and policy.", {
        "$schema": string("Path or URI of this schema (editor hint).", min_length=1),
        "schema_version": {"const": 2, "description": "Baseline format version (2: replay rollouts, per-model "
                                                      "throughput references, numerics pin)."},
        "recipe": obj("The recipe recorded.", {"name": string("Recipe id.", min_length=1),
                                               "hash": _sha("Recipe file hash (runs of another hash are refused)."),
                                               "config_hash": _sha("Resolved config hash of the primary run.")}),
        "profile": string("Hardware profile.", pattern=PROFILE_NAME),
        "scale": string("Recipe scale.", min_length=1),
        "architecture": {"type": "object", "description": "model.architecture of the resolved config (runs of "
                                                          "another architecture are refused)."},
        "dtype": string("model.dtype of the recorded runs (the replay tier scales its tolerance by a run's "
                        "coarser dtype).", enum=["float32", "bfloat16", "float16", "float64"]),
        "steps": integer("GRPO steps recorded per seed.", 1),
        "created_utc": _utc("When the baseline was written."),
        "command": string("Command that recorded it.", min_length=1),
        "primary_seed": integer("The recipe's seed: its values are the exact/band reference.", 0),
        "noise_seeds": array("Further seeds (seed + k, via --set seed=...) for the noise floor.",
                             {"type": "integer", "minimum": 0}),
        "environment": obj("Manifest summary of the primary run (decides exact-tier eligibility).", {
            "deterministic": boolean("Deterministic algorithms were forced."),
            "software": _software(extra=True),
            "machine": obj("Machine summary.", {
                "arch": string("CPU architecture (platform.machine).", min_length=1),
                "device_type": string("Accelerator kind.", enum=DEVICE_TYPES),
                "device_model": string("Accelerator model (CPU model name on cpu).", min_length=1),
                "device_count": integer("Accelerators per node.", 1),
                "cpu_model": string("Host CPU model name.", min_length=0),
                "driver": string("Accelerator driver; null on cpu.", nullable=True),
                "runtime": string("CUDA / CANN runtime; null on cpu.", nullable=True),
            }),
            "numerics": {"type": ["object", "null"], "description": "The CPU numerics pin that decides bitwise "
                                                                    "comparability across CPU models (null: none)."},
            "runtime": obj("Launch.", {
                "kind": string("Runtime kind.", enum=RUNTIMES),
                "world_size": integer("Training processes.", 1),
                "image_id": string("Container image id; null for a local run.", nullable=True),
                "lock_sha256": _sha("Requirements lock hash; null for a local run.", nullable=True),
            }),
            "harness": obj("Harness source.", {
                "version": string("Package version.", min_length=1),
                "revision": string("Git commit.", nullable=True),
                "dirty": {"type": ["boolean", "null"], "description": "Uncommitted changes."},
            }),
        }),
        "policy": _policy(),
        "metrics": {"type": "object", "minProperties": 1, "additionalProperties": metric,
                    "description": "Metric name (verl naming) -> series. Timing metrics are never here."},
        "throughput": obj("perf/throughput over steady steps (tokens/s), per device model.", {
            "references": array("References, one per device model and thread count (record-baseline "
                                "--throughput-only adds this machine's).", tp_ref, min_items=1)}),
        "replay": obj("The primary run's initial policy and rollouts for the replay tier, and the reorder noise "
                      "measured on them.", {
            "file": string("Archive beside this file (.npz, read without pickle): initial/<parameter> (the policy "
                           "before step 1, float32) and <step>/<field> (each step's rollout).", min_length=1),
            "sha256": _sha("SHA-256 of the archive (checked before it is read)."),
            "metrics": array("Metrics gated under replay.", {"type": "string"}, min_items=1),
            "perturbation": string("How the noise was measured: the replay repeated with the arithmetic in another "
                                   "order.", min_length=1),
            "noise": {"type": "object", "additionalProperties": array("Per step.", {"type": ["number", "null"]}),
                      "description": "Metric -> |perturbed replay - primary run| at each step."},
        }),
        "memory": obj("Peak perf/max_memory_allocated_gb per seed (GB).", spread),
        "runs": array("The recorded runs, primary first.", obj("One run.", {
            "seed": integer("Seed.", 0),
            "run_dir": string("Run directory (as recorded; may be gone).", min_length=1),
            "metrics_sha256": _sha("SHA-256 of its metrics.jsonl."),
        }), min_items=1),
    }, optional=("$schema", "replay"))
    return _top("baseline", "baseline", schema)


# ----------------------------------------------------------------------------- verdict
def verdict_schema() -> dict[str, Any]:
    num = {"type": ["number", "null"]}
    check = obj("One check with its numbers.", {
        "group": string("Check group.", enum=CHECK_GROUPS),
        "metric": string("Metric (or the memory/throughput metric).", min_length=1),
        "step": integer("Step the numbers are from (first mismatch or worst step); null for whole-run checks.",
                        0, nullable=True),
        "run_value": {**num, "description": "Run's value (null when missing or not finite)."},
        "ref_value": {**num, "description": "Baseline's value."},
        "tolerance": {**num, "description": "Allowed deviation (absolute, metric units); 0 for exact."},
        "passed": boolean("Check outcome."),
        "steps_compared": integer("Steps compared.", 0),
        "failing_steps": array("Steps outside the tolerance.", {"type": "integer", "minimum": 0}),
        "detail": string("One line explaining the numbers.", min_length=0),
    })
    group_count = obj("Counts of one group.", {"checks": integer("Checks.", 0), "failed": integer("Failed.", 0)})
    schema = obj("The judgement of one run against its baseline.", {
        "schema_version": {"const": 1, "description": "Verdict format version."},
        "status": string("pass, fail, refused (not comparable: exit 2) or no-baseline (exit 0; the gate fails it).",
                         enum=VERDICT_STATUSES),
        "tier": string("Strictest tier applied (null when refused / no baseline).", enum=TIERS, nullable=True),
        "tiers_applied": array("Every tier whose checks ran.", {"type": "string", "enum": TIERS}),
        "tier_reason": string("Why this tier.", min_length=0),
        "forced_tier": string("Tier forced with --tier; null = chosen from the manifests.", enum=TIERS,
                              nullable=True),
        "created_utc": _utc("When judged."),
        "run": obj("The run judged.", {
            "dir": string("Run directory.", min_length=1),
            "recipe": string("Recipe id (null if the manifest is unreadable).", nullable=True),
            "profile": string("Profile.", nullable=True),
            "scale": string("Scale.", nullable=True),
            "seed": integer("Seed.", 0, nullable=True),
            "status": string("Manifest status.", nullable=True),
            "steps_completed": integer("Steps completed.", 0, nullable=True),
        }),
        "baseline": {**obj("The baseline used.", {
            "path": string("Baseline file.", min_length=1),
            "sha256": _sha("SHA-256 of the baseline file."),
            "steps": integer("Steps recorded.", 1),
            "primary_seed": integer("Reference seed.", 0),
            "noise_seeds": array("Noise seeds.", {"type": "integer"}),
            "steps_compared": integer("Steps compared (common prefix).", 0),
        }), "type": ["object", "null"]},
        "policy": {"type": ["object", "null"], "description": "The baseline's tolerance policy as applied."},
        "overrides": _overrides(),
        "fault_injection": _fault(),
        "reasons": array("Why the run failed or was refused (one line each).", {"type": "string"}),
        "notices": array("Things to know that do not change the status.", {"type": "string"}),
        "changes": array("Every environment difference between the baseline and the run.", obj("One difference.", {
            "key": string("What differs (package, device model, driver, numerics pin, …).", min_length=1),
            "baseline": {"description": "The baseline's value."},
            "run": {"description": "The run's value."},
            "blocks_exact": boolean("Whether it rules out bitwise comparison."),
        })),
        "counts": {"type": "object", "additionalProperties": group_count,
                   "description": "Per check group: checks and failures."},
        "checks": array("Every check.", check),
        "candidates": array("Runs of other seeds judged with this one by the statistical tier (their median).",
                            obj("One candidate run.", {"seed": integer("Seed.", 0),
                                                       "dir": string("Run directory.", min_length=1)})),
        "replay_probe": {**obj("The replay probe judged with a statistical verdict: the baseline's first steps "
                               "replayed with the run's settings (its checks are the replay group); null when "
                               "there is none.", {
                                   "dir": string("Probe run directory.", min_length=1),
                                   "steps_compared": integer("Replayed steps compared.", 0),
                               }), "type": ["object", "null"]},
        "summary_line": string("The one-line summary printed by run/compare.", min_length=1),
    }, optional=("candidates", "replay_probe"))
    return _top("verdict", "verdict", schema)


def record_schemas() -> dict[str, dict[str, Any]]:
    return {"manifest.schema.json": manifest_schema(), "baseline.schema.json": baseline_schema(),
            "verdict.schema.json": verdict_schema()}
