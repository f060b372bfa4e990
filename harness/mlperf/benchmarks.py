"""MLPerf benchmark names, the constants a recipe fixes and the convergence targets of the reference baselines.

The leaf of ``harness.mlperf``: the log writer (the package) and the rule generator (``rules``) both
read it, and it reads neither.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.jsonio import load_json_strict
from harness.paths import ROOT
from harness.records.base import read
from harness.records.baseline import Baseline

LOG_FILE = "mlperf.log"
SYSTEM_DESC_FILE = "system-description.json"
RULESET = "6.1.0"
ORG = "grpo-harness"
EVAL_PREFIX, EVAL_SUFFIX = "val-core/", "/reward/mean"


def benchmark_name(recipe: str, scale: str) -> str:
    return f"grpo_{recipe}_{scale}"


def _precision(dtype: str) -> str:
    return {"bfloat16": "bfloat16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype)


def run_constants(config: dict[str, Any]) -> dict[str, Any]:
    """The MLPerf keys a resolved recipe fixes, in log order (the rules pin each one)."""
    arr = config["actor_rollout_ref"]
    actor, rollout, optim = arr["actor"], arr["rollout"], arr["actor"]["optim"]
    engine = actor.get(actor["strategy"]) if isinstance(actor.get(actor["strategy"]), dict) else {}
    t = config["trainer"]
    world = t["nnodes"] * t["n_gpus_per_node"]
    prompts, n = config["data"]["train_batch_size"], rollout["n"]
    micro = actor.get("ppo_micro_batch_size_per_gpu") or 1
    synthetic = config["data"].get("synthetic") or {}
    precision = _precision(config["model"]["dtype"])
    return {
        "global_batch_size": prompts * n,
        "num_prompts_per_step": prompts,
        "num_generations_per_prompt": n,
        "max_sequence_length": config["data"]["max_prompt_length"] + config["data"]["max_response_length"],
        "gradient_accumulation_steps": max(1, actor["ppo_mini_batch_size"] * n // (micro * world)),
        "micro_batch_size": micro,
        "opt_name": "adamw",
        "opt_base_learning_rate": optim["lr"],
        "opt_adamw_beta_1": optim["betas"][0],
        "opt_adamw_beta_2": optim["betas"][1],
        "opt_adamw_weight_decay": optim["weight_decay"],
        "opt_gradient_clip_norm": optim["clip_grad"],
        "opt_learning_rate_warmup_steps": max(0, optim["lr_warmup_steps"]),
        "opt_learning_rate_decay_schedule": optim["lr_scheduler_type"],
        "generation_training_rollout_temperature": rollout["temperature"],
        "generation_training_rollout_top_p": rollout["top_p"],
        "lowest_numerical_precision_in_linear": precision,
        "lowest_numerical_precision_in_attn": precision,
        "lowest_numerical_precision_in_comm": precision,
        "tensor_parallelism": 1,
        "pipeline_parallelism": 1,
        "context_parallelism": int(engine.get("ulysses_parallel_size") or 1),
        "expert_parallelism": int(engine.get("expert_parallel_size") or 1),
        "train_samples": synthetic.get("train_size"),
        "eval_samples": synthetic.get("val_size"),
    }


@dataclass(frozen=True)
class Reference:
    """The reference baseline of one MLPerf benchmark and the convergence target taken from it."""

    recipe: str
    scale: str
    profile: str
    baseline: str  # relative to the repository root
    target: float


@lru_cache(maxsize=None)
def references() -> dict[str, Reference]:
    """benchmark -> its :class:`Reference`, for every reference baseline (read as its record)."""
    return _references(sorted((ROOT / "baselines").glob("*/*.json"), key=lambda p: p.as_posix()))


def _references(paths: list[Path]) -> dict[str, Reference]:
    """benchmark -> its :class:`Reference` among ``paths`` (the first of them that names it)."""
    out: dict[str, Reference] = {}
    for path in paths:
        if _named(path) in out:  # an earlier baseline names it: this one is not read (a schema check each)
            continue
        baseline = read(path, Baseline, "baseline")  # what harness.judge.baseline.load_baseline reads
        name = benchmark_name(baseline.recipe.name, baseline.scale)
        finals: list[Any] = []  # a null last noise value fails the median, as it always did
        for key, m in baseline.metrics.items():
            if key.startswith(EVAL_PREFIX) and key.endswith(EVAL_SUFFIX):
                finals += [m.values[-1]] + [seed[-1] for seed in m.noise_values]
        if not finals:  # no evaluation in the run (e.g. a reduced scale with test_freq -1): no quality target,
            continue    # so no MLPerf benchmark
        # the median, not the lowest: one reference seed that collapsed (it happens: qwen3_30b_a3b's seed 45 ends
        # at 0.0) would otherwise make any run "converged"
        target = math.floor(0.9 * statistics.median(finals) * 100) / 100
        out[name] = Reference(baseline.recipe.name, baseline.scale, baseline.profile,
                              path.relative_to(ROOT).as_posix(), target)
    return out


def _named(path: Path) -> str | None:
    """The benchmark a baseline file names, from its raw JSON (None where that cannot be told: the file is then
    read, and refused, as a record)."""
    try:
        doc = load_json_strict(path)
        recipe, scale = doc["recipe"]["name"], doc["scale"]
    except (HarnessError, KeyError, TypeError):
        return None
    return benchmark_name(recipe, scale) if isinstance(recipe, str) and isinstance(scale, str) else None


@lru_cache(maxsize=None)
def convergence_target(recipe: str, scale: str) -> float | None:
    """The recipe's target at ``scale``, from its own baselines (``baselines/<recipe>/``, where a baseline of the
    recipe is written): a run reads those, not every recipe's (``references`` holds the same targets)."""
    own = sorted((ROOT / "baselines" / recipe).glob("*.json"), key=lambda p: p.as_posix())
    ref = _references(own).get(benchmark_name(recipe, scale))
    return ref.target if ref else None
