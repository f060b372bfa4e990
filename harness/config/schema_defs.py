"""The source of the recipe and hardware-profile JSON Schemas (2020-12) in ``schemas/v1/``.

The JSON files are generated from these definitions (``python -m harness.config.schema_defs``) and
committed; a test fails when they drift. Generating them lets enums come from the registries
and keeps every field's description next to its type. ``x-overridable: true`` marks the
leaves that ``--set dotted.path=value`` may change (numeric hyperparameters, steps, seed,
batch and length settings); every other key, and every code-loading key, is refused.

Training sections use verl's key names and nesting (``data``, ``algorithm``,
``actor_rollout_ref``, ``trainer``) so a verl user recognises them and the safety rules can
read a recipe and an imported verl launcher alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.devices import device_names

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE = "https://harness.invalid/schemas/v1/"

# Registered names the schema enums must equal (a test checks them against the registries).
FAMILIES = ["qwen3", "qwen3_moe", "qwen3_vl_moe"]


def registered(kind: str) -> list[str]:
    """The names registered for ``kind`` (the schema's enums follow the registries; imported only when a
    schema is built, so reading this module stays light)."""
    from harness.core import algos, reward, tasks

    names = {"adv_estimator": algos.ADV_ESTIMATOR_REGISTRY.names(), "policy_loss": algos.POLICY_LOSS_REGISTRY.names(),
             "kl": algos.KL_REGISTRY.names(), "agg_mode": algos.AGG_MODES, "reward": reward.reward_names(),
             "task": tasks.task_names()}
    return sorted(names[kind])
PROFILE_NAME = r"^[a-z0-9][a-z0-9.-]*$"


# ----------------------------------------------------------------------------- builders
def _leaf(kind: str | list[str], desc: str, override: bool = False, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "description": desc}
    out.update(kw)
    if override:
        out["x-overridable"] = True
    return out


# Upper bounds: a size the harness would try to allocate or loop over is refused by the schema, not
# discovered by running out of memory. Every other recipe integer is capped at INT32_MAX (_capped).
MAX_EXAMPLES = 1_000_000  # synthetic examples are generated (with their images) in memory
MAX_IMAGE_SIDE = 4096
MAX_BATCH = 65_536
MAX_TOKENS = 1 << 20
MAX_STEPS = 10_000_000
MAX_GROUP = 1024
MAX_SEED = 2**32 - 1  # NumPy's legacy seed range
INT32_MAX = 2**31 - 1


def _capped(node: Any) -> Any:
    """``node`` with ``maximum: INT32_MAX`` on every integer leaf that has no maximum of its own."""
    if isinstance(node, dict):
        out = {k: _capped(v) for k, v in node.items()}
        kind = node.get("type")
        if (kind == "integer" or (isinstance(kind, list) and "integer" in kind)) and "maximum" not in node:
            out["maximum"] = INT32_MAX
        return out
    if isinstance(node, list):
        return [_capped(v) for v in node]
    return node


def integer(desc: str, minimum: int | None = None, maximum: int | None = None, *, override: bool = False,
            nullable: bool = False) -> dict[str, Any]:
    kw = {k: v for k, v in (("minimum", minimum), ("maximum", maximum)) if v is not None}
    return _leaf(["integer", "null"] if nullable else "integer", desc, override, **kw)


def number(desc: str, minimum: float | None = None, maximum: float | None = None, *, exclusive_min: float | None = None,
           override: bool = False) -> dict[str, Any]:
    kw = {k: v for k, v in (("minimum", minimum), ("maximum", maximum), ("exclusiveMinimum", exclusive_min))
          if v is not None}
    return _leaf("number", desc, override, **kw)


def boolean(desc: str) -> dict[str, Any]:
    return _leaf("boolean", desc)


def string(desc: str, *, enum: list[str] | None = None, pattern: str | None = None, nullable: bool = False,
           min_length: int | None = None, override: bool = False) -> dict[str, Any]:
    kind: str | list[str] = ["string", "null"] if nullable else "string"
    out = _leaf(kind, desc, override and enum is not None)  # only enumerated strings can be overridden
    if enum is not None:
        out["enum"] = enum + ([None] if nullable else [])
    if pattern is not None:
        out["pattern"] = pattern
    if min_length is not None:
        out["minLength"] = min_length
    return out


def code_path(desc: str) -> dict[str, Any]:
    """A key that makes verl import user code: null unless the recipe opts in (rule code-loading-key)."""
    return string(desc + " Loads code: must stay null unless security.allow_code_loading is true and the model "
                  "revision is pinned (rule code-loading-key).", nullable=True, min_length=1)


def obj(desc: str, props: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "description": desc,
        "properties": props,
        "required": [k for k in props if k not in optional],
        "additionalProperties": False,
    }


def array(desc: str, items: dict[str, Any], min_items: int | None = None, max_items: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "description": desc, "items": items}
    if min_items is not None:
        out["minItems"] = min_items
    if max_items is not None:
        out["maxItems"] = max_items
    return out


def patch(desc: str) -> dict[str, Any]:
    """A deep-merge patch: any object; checked by validating the merged result."""
    return {"type": "object", "description": desc}


# ----------------------------------------------------------------------------- sections
def _architecture() -> dict[str, Any]:
    moe = obj("Mixture-of-experts block; null for a dense model.", {
        "num_experts": integer("Routed experts per MoE layer.", 1),
        "num_experts_per_tok": integer("Experts each token is routed to (top-k).", 1),
        "moe_intermediate_size": integer("Hidden width of each expert's FFN.", 1),
        "norm_topk_prob": boolean("Renormalise the top-k routing weights to sum to 1."),
        "router_aux_loss_coef": number("Load-balancing auxiliary loss coefficient (0 disables it).", 0),
        "decoder_sparse_step": integer("Every n-th decoder layer is MoE (1 = all).", 1),
    })
    text = obj("Language-model dimensions (transformers config field names).", {
        "hidden_size": integer("Model width.", 1),
        "num_hidden_layers": integer("Decoder layers.", 1),
        "num_attention_heads": integer("Query heads.", 1),
        "num_key_value_heads": integer("Key/value heads (grouped-query attention).", 1),
        "head_dim": integer("Width of one attention head.", 1),
        "intermediate_size": integer("Dense FFN width (dense layers).", 1),
        "vocab_size": integer("Embedding rows; must cover the tokenizer.", 1),
        "max_position_embeddings": integer("Longest position the model is configured for.", 1),
        "rope_theta": number("RoPE base frequency.", exclusive_min=0),
        "rms_norm_eps": number("RMSNorm epsilon.", exclusive_min=0),
        "tie_word_embeddings": boolean("Share input embedding and LM head weights."),
        "mrope_section": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0},
                          "description": "Multimodal RoPE split of head_dim/2 over (t, h, w); null for text models."},
        "mrope_interleaved": boolean("Interleave the multimodal RoPE sections (Qwen3-VL)."),
        "moe": {**moe, "type": ["object", "null"]},
    })
    vision = obj("Vision tower dimensions (transformers Qwen3-VL vision config names).", {
        "depth": integer("Vision transformer blocks.", 1),
        "hidden_size": integer("Vision width.", 1),
        "intermediate_size": integer("Vision MLP width.", 1),
        "num_heads": integer("Vision attention heads.", 1),
        "patch_size": integer("Pixels per patch side.", 1),
        "temporal_patch_size": integer("Frames per temporal patch (images are repeated).", 1),
        "spatial_merge_size": integer("Patches merged per side into one LM token.", 1),
        "out_hidden_size": integer("Width of merged vision tokens fed to the LM (= text hidden_size).", 1),
        "num_position_embeddings": integer("Learned vision position embeddings.", 1),
        "deepstack_visual_indexes": array("Vision blocks whose features are injected into early LM layers.",
                                          {"type": "integer", "minimum": 0}),
        "in_channels": integer("Image channels.", 1, 4),
        "min_pixels": integer("Smallest image area the processor resizes to.", 1),
        "max_pixels": integer("Largest image area the processor resizes to.", 1),
    })
    return obj("The model's real architecture; scales shrink it.", {
        "text": text,
        "vision": {**vision, "type": ["object", "null"]},
    })


def _model() -> dict[str, Any]:
    return obj("What to train.", {
        "family": string("Architecture family; picks the transformers class.", enum=FAMILIES),
        "name": string("The published model this recipe stands for (a label; never downloaded).", min_length=1),
        "path": string("Local directory with config.json + safetensors weights; null = seeded random init. "
                       "Never a hub id.", nullable=True, min_length=1),
        "revision": string("Pinned 40-hex commit of the weights; required before any code-loading opt-in.",
                           nullable=True, pattern="^[0-9a-f]{40}$"),
        "dtype": string("Parameter and compute dtype (float64: a numerics reference mode for equivalence tests; "
                        "overridable, e.g. to replay an fp32 baseline on an accelerator profile).",
                        enum=["float32", "bfloat16", "float16", "float64"], override=True),
        "attn_implementation": string("Attention kernel: sdpa, flash_attention_2 (when installed) or eager.",
                                      enum=["sdpa", "flash_attention_2", "eager"]),
        "architecture": _architecture(),
    })


def _data() -> dict[str, Any]:
    synthetic = obj("Seeded synthetic visual/text reasoning data in geo3k's format (used when train_files is null).", {
        "tasks": array("Task generators, round-robin.", {"type": "string", "enum": registered("task")}, min_items=1),
        "train_size": integer("Training examples.", 1, MAX_EXAMPLES, override=True),
        "val_size": integer("Held-out validation examples.", 1, MAX_EXAMPLES, override=True),
        "image_size": integer("Image side in pixels (multiple of 16).", 16, MAX_IMAGE_SIDE),
    })
    return obj("Prompts and lengths (verl data.*).", {
        "dataset": string("Dataset this recipe stands for (label, e.g. geo3k).", min_length=1),
        "train_files": string("Local parquet/jsonl with geo3k fields; null = synthetic.", nullable=True, min_length=1),
        "val_files": string("Local parquet/jsonl for validation; null = synthetic.", nullable=True, min_length=1),
        "synthetic": synthetic,
        "train_batch_size": integer("Prompts per GRPO step.", 1, MAX_BATCH, override=True),
        "val_batch_size": integer("Prompts per validation batch; null = all.", 1, MAX_BATCH, override=True,
                                  nullable=True),
        "max_prompt_length": integer("Longest prompt in tokens (image tokens included).", 1, MAX_TOKENS,
                                     override=True),
        "max_response_length": integer("Longest sampled response in tokens.", 1, MAX_TOKENS, override=True),
        "filter_overlong_prompts": boolean("Drop (and count) prompts longer than max_prompt_length."),
        "truncation": string("What to do with an overlong prompt that is not filtered.",
                             enum=["error", "left", "right"]),
        "shuffle": boolean("Shuffle the training prompts each epoch (seeded)."),
        "image_key": string("Column holding the images.", min_length=1),
        "trust_remote_code": boolean("Let the tokenizer/processor run repository code. Loads code "
                                     "(rule code-loading-key)."),
        "custom_cls": obj("verl custom dataset class.", {
            "path": code_path("File defining a custom dataset class."),
            "name": string("Class name in that file.", nullable=True),
        }),
    })


def _actor() -> dict[str, Any]:
    optim = obj("AdamW optimiser and LR schedule (verl actor.optim.*).", {
        "lr": number("Peak learning rate.", exclusive_min=0, override=True),
        "lr_scheduler_type": string("LR schedule after warmup.", enum=["constant", "cosine"]),
        "lr_warmup_steps": integer("Linear warmup steps (-1 = use lr_warmup_steps_ratio).", -1, override=True),
        "lr_warmup_steps_ratio": number("Warmup as a fraction of total steps.", 0, 1, override=True),
        "min_lr_ratio": number("Cosine floor as a fraction of lr.", 0, 1, override=True),
        "weight_decay": number("Decoupled weight decay.", 0, override=True),
        "betas": array("AdamW (beta1, beta2).", {"type": "number", "minimum": 0, "exclusiveMaximum": 1}, 2, 2),
        "clip_grad": number("Max global gradient norm.", exclusive_min=0, override=True),
    })
    veomni = obj("Engine sharding/offload settings (verl actor.veomni.*).", {
        "param_offload": boolean("Keep parameters in host memory between uses."),
        "optimizer_offload": boolean("Keep optimizer state in host memory."),
        "enable_full_shard": boolean("Shard parameters, gradients and optimizer state (ZeRO-3 / FSDP full shard)."),
        "fsdp_size": {**integer("Devices one model replica is sharded over: -1 = all data-parallel ranks, else a positive count "
                                   "(0 is not allowed).", -1),
                      "not": {"const": 0}},
        "ulysses_parallel_size": integer("Ulysses sequence-parallel degree.", 1),
        "expert_parallel_size": integer("Expert-parallel degree.", 1),
        "attn_implementation": string("Attention kernel the engine asks for.",
                                      enum=["flash_attention_2", "sdpa", "eager"]),
        "moe_implementation": string("Expert kernel (fused grouped GEMM or eager loop).", enum=["fused", "eager"]),
    })
    return obj("Policy being trained (verl actor_rollout_ref.actor.*).", {
        "strategy": string("Training engine verl runs (this harness trains with its own FSDP2 core).",
                           enum=["veomni", "fsdp", "fsdp2"]),
        "optim": optim,
        "ppo_mini_batch_size": integer("Prompts per optimiser step (× n responses).", 1, override=True),
        "ppo_micro_batch_size": integer("Global micro-batch (deprecated in verl; exclusive with _per_gpu).", 1,
                                        override=True, nullable=True),
        "ppo_micro_batch_size_per_gpu": integer("Responses per forward/backward per device.", 1, override=True,
                                                nullable=True),
        "use_dynamic_bsz": boolean("Token-budget micro-batches instead of fixed sizes."),
        "ppo_epochs": integer("Passes over each rollout batch.", 1, override=True),
        "clip_ratio_low": number("PPO clip below 1.", 0, 1, override=True),
        "clip_ratio_high": number("PPO clip above 1.", 0, override=True),
        "clip_ratio_c": number("Dual-clip constant (> 1).", exclusive_min=1, override=True),
        "loss_agg_mode": string("How token losses become one number.", enum=registered("agg_mode")),
        "entropy_coeff": number("Entropy bonus coefficient.", 0, override=True),
        "use_kl_loss": boolean("Add KL to the reference model to the actor loss."),
        "kl_loss_coef": number("KL loss coefficient.", 0, override=True),
        "kl_loss_type": string("KL estimator.", enum=registered("kl")),
        "policy_loss": obj("Policy loss choice.",
                           {"loss_mode": string("Registered policy loss.", enum=registered("policy_loss"))}),
        "veomni": veomni,
    })


def _rollout() -> dict[str, Any]:
    val_kwargs = obj("Sampling for validation.", {
        "temperature": number("0 = greedy.", 0, override=True),
        "top_p": number("Nucleus mass.", exclusive_min=0, maximum=1, override=True),
        "top_k": integer("Top-k (-1 or 0 = off).", -1, override=True),
        "do_sample": boolean("Sample (true) or greedy (false)."),
        "n": integer("Responses per validation prompt.", 1, MAX_GROUP, override=True),
    })
    return obj("Response sampling (verl actor_rollout_ref.rollout.*).", {
        "name": string("Inference engine verl uses; this harness samples with its own KV-cached engine.",
                       enum=["vllm", "sglang", "hf"]),
        "n": integer("Responses per prompt (GRPO group size).", 1, MAX_GROUP, override=True),
        "temperature": number("Sampling temperature.", exclusive_min=0, override=True),
        "top_p": number("Nucleus mass.", exclusive_min=0, maximum=1, override=True),
        "top_k": integer("Top-k (-1 or 0 = off).", -1, override=True),
        "tensor_model_parallel_size": integer("Rollout tensor parallel degree.", 1),
        "max_model_len": integer("Longest sequence the rollout engine serves (prompt + response).", 1,
                                 override=True, nullable=True),
        "max_num_batched_tokens": integer("Tokens per engine scheduling step.", 1, override=True),
        "gpu_memory_utilization": number("Fraction of device memory the engine may take.", exclusive_min=0,
                                         maximum=1, override=True),
        "enable_chunked_prefill": boolean("Split long prefills across steps."),
        "enable_prefix_caching": boolean("Reuse KV blocks of shared prefixes."),
        "free_cache_engine": boolean("Release the KV cache between rollout and training."),
        "log_prob_micro_batch_size_per_gpu": integer("Responses per old-log-prob forward per device.", 1,
                                                     override=True, nullable=True),
        "val_kwargs": val_kwargs,
        "multi_turn": obj("Tool-calling multi-turn rollout (not run by this harness).", {
            "enable": boolean("Enable multi-turn."),
            "tool_config_path": code_path("Tool config file."),
            "function_tool_path": code_path("Python file with tool functions."),
        }),
        "agent": obj("Agent loop settings.", {
            "agent_loop_config_path": code_path("Agent loop config file."),
            "custom_async_server": obj("Custom async rollout server.", {
                "path": code_path("File defining the server class."),
            }),
        }),
    })


def _recipe_props() -> dict[str, Any]:
    return {
        "$schema": string("Path or URI of this schema (editor hint).", min_length=1),
        "schema_version": {"const": 1, "description": "Recipe format version."},
        "name": string("Recipe id (file name without .json).", pattern=r"^[a-z0-9_]+$"),
        "description": string("What this recipe reproduces.", min_length=1),
        "source": obj("Where the published settings come from.", {
            "launcher": string("Launcher script the values follow.", min_length=1),
            "reference": string("Pull request / paper / model card.", min_length=1),
        }),
        "seed": integer("Global seed (data order, init, sampling).", 0, MAX_SEED, override=True),
        "deterministic": boolean("Deterministic algorithms and seeded everything: the same run twice gives "
                                 "bitwise-identical metrics on the same machine."),
        "security": obj("Explicit opt-ins.", {
            "allow_code_loading": boolean("Permit code-loading keys (needs model.revision pinned). "
                                          "Never settable by an override."),
        }),
        "model": _model(),
        "warm_start": {**obj("Seed checkpoint: a short seeded SFT that teaches the answer FORMAT only (random "
                             "answers), cached by the hash of its inputs; null = start from the raw init.", {
            "steps": integer("SFT steps.", 1, MAX_STEPS, override=True),
            "batch_size": integer("SFT batch size.", 1, MAX_BATCH, override=True),
            "lr": number("SFT AdamW learning rate.", exclusive_min=0, override=True),
        }), "type": ["object", "null"]},
        "data": _data(),
        "algorithm": obj("Advantage estimation (verl algorithm.*).", {
            "adv_estimator": string("Registered advantage estimator.", enum=registered("adv_estimator")),
            "norm_adv_by_std_in_grpo": boolean("Divide by the group std (false = Dr.GRPO)."),
            "use_kl_in_reward": boolean("KL penalty in the reward (not supported by GRPO here: must be false)."),
            "kl_penalty": string("KL estimator for an in-reward penalty.", enum=registered("kl")),
            "kl_ctrl": obj("In-reward KL controller.", {
                "type": string("Controller.", enum=["fixed"]),
                "kl_coef": number("In-reward KL coefficient.", 0, override=True),
            }),
        }),
        "actor_rollout_ref": obj("Actor, reference and rollout (verl actor_rollout_ref.*).", {
            "model": obj("Model loading options (verl actor_rollout_ref.model.*).", {
                "use_remove_padding": boolean("Train on unpadded (packed) sequences."),
                "enable_gradient_checkpointing": boolean("Recompute activations in backward."),
                "trust_remote_code": boolean("Run model repository code. Loads code (rule code-loading-key)."),
                "external_lib": code_path("Python module imported before model creation."),
                "override_config": obj("Model config overrides.", {
                    "max_position_embeddings": integer("Position limit override.", 1),
                }),
            }),
            "actor": _actor(),
            "ref": obj("Frozen reference policy for the KL loss.", {
                "log_prob_micro_batch_size_per_gpu": integer("Responses per reference forward per device.", 1,
                                                             override=True, nullable=True),
                "param_offload": boolean("Keep reference parameters in host memory."),
            }),
            "rollout": _rollout(),
        }),
        "custom_reward_function": obj("verl custom reward function.", {
            "path": code_path("File defining the reward function."),
            "name": string("Function name.", nullable=True),
        }),
        "reward": obj("Rule-based reward.", {"name": string("Registered reward function.", enum=registered("reward"))}),
        "trainer": obj("Run length, devices, checkpoints (verl trainer.*).", {
            "device": string("Device kind.", enum=device_names()),
            "nnodes": integer("Nodes.", 1),
            "n_gpus_per_node": integer("Devices per node (GPUs or NPUs).", 1),
            "total_training_steps": integer("GRPO steps.", 1, MAX_STEPS, override=True),
            "save_freq": integer("Checkpoint every n steps (-1 = never).", -1, override=True),
            "test_freq": integer("Validate every n steps (-1 = never).", -1, override=True),
            "val_before_train": boolean("Validate before the first step."),
            "resume_mode": string("auto: continue from the newest complete checkpoint; disable: start fresh.",
                                  enum=["auto", "disable"]),
            "max_actor_ckpt_to_keep": integer("Checkpoints kept (null = all).", 1, nullable=True),
        }),
    }


def recipe_schema(resolved: bool) -> dict[str, Any]:
    props = _recipe_props()
    if not resolved:
        props["scales"] = {
            "type": "object", "description": "Scale name → patch deep-merged over the recipe (full = as published).",
            "properties": {"full": patch("Published scale (usually empty)."),
                           "smoke": patch("Same family, shrunk to run GRPO on a 2-core CPU in about a minute.")},
            "required": ["full", "smoke"],
            "additionalProperties": patch("Another named scale."),
        }
        props["profiles"] = {
            "type": "object",
            "description": "Hardware profile → {scale → patch}: the (profile, scale) pairs this recipe supports.",
            "propertyNames": {"pattern": PROFILE_NAME},
            "additionalProperties": {"type": "object", "minProperties": 1,
                                     "description": "Scale → settings patch for this profile.",
                                     "additionalProperties": patch("Settings for this profile at this scale.")},
            "minProperties": 1,
        }
    schema = obj("A GRPO recipe." if not resolved else "A recipe resolved for one profile and scale.", _capped(props),
                 optional=("$schema",))
    name = "resolved-recipe" if resolved else "recipe"
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_BASE + f"{name}.schema.json", "title": name, **schema}


def profile_schema() -> dict[str, Any]:
    schema = obj("A hardware profile: one node type, described MLPerf-style.", {
        "$schema": string("Path or URI of this schema (editor hint).", min_length=1),
        "name": string("Profile id (file name without .json).", pattern=PROFILE_NAME),
        "description": string("What machine this is.", min_length=1),
        "device_type": string("torch device kind.", enum=device_names()),
        "accelerator": obj("Accelerators of one node.", {
            "vendor": string("Vendor.", enum=["nvidia", "huawei", "none"]),
            "model": string("Model name as the driver reports it (substring match).", min_length=1),
            "count_per_node": integer("Devices per node.", 1),
            "memory_gb": number("Memory per device in GB (10^9 bytes); host RAM budget for cpu.", exclusive_min=0),
            "peak_bf16_tflops": number("Dense bf16 peak per device (for MFU); measured or datasheet.",
                                       exclusive_min=0),
        }),
        "nodes": integer("Nodes this profile describes (a certification unit).", 1),
        "interconnect": obj("Links.", {
            "intra_node": string("Device-to-device link within a node.", min_length=1),
            "inter_node": string("Node-to-node network.", min_length=1),
        }),
        "collective_backend": string("torch.distributed backend.", enum=["nccl", "hccl", "gloo"]),
        "host": obj("Host side of one node.", {
            "cpu_cores": integer("Cores (minimum expected).", 1),
            "memory_gb": number("Host memory in GB.", exclusive_min=0),
        }),
        "software": obj("Stack the profile is certified with (null = not checked).", {
            "driver": string("Accelerator driver version prefix.", nullable=True),
            "runtime": string("CUDA / CANN version prefix.", nullable=True),
        }),
        "container_image": obj("Pinned image the profile runs in.", {
            "kind": string("Image directory under images/.", enum=["cpu", "cuda", "ascend"]),
            "reference": string("Image reference (tag@digest, or the local tag for the CPU image).", min_length=1),
        }),
    }, optional=("$schema",))
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_BASE + "profile.schema.json", "title": "profile", **schema}


def all_schemas() -> dict[str, dict[str, Any]]:
    """File name → schema, for every generated schema."""
    return {
        "recipe.schema.json": recipe_schema(resolved=False),
        "resolved-recipe.schema.json": recipe_schema(resolved=True),
        "profile.schema.json": profile_schema(),
        **__import__("harness.config.schema_defs_records", fromlist=["record_schemas"]).record_schemas(),
        **__import__("harness.config.schema_defs_cert", fromlist=["cert_schemas"]).cert_schemas(),
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def main() -> None:
    from harness.paths import SCHEMAS_DIR

    for name, schema in all_schemas().items():
        Path(SCHEMAS_DIR / name).write_text(render(schema), encoding="utf-8")
        print(f"wrote {SCHEMAS_DIR / name}")


if __name__ == "__main__":
    main()
