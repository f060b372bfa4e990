"""The typed recipe the engine takes: pydantic models, the single source of the recipe's JSON Schemas.

``schemas/v1/{recipe,resolved-recipe}.schema.json`` are generated from these models (with the recipe
file's scale and profile patches from :mod:`harness.config.typed_files`; :mod:`harness.config.schema_defs`
writes them) and committed; a test fails when they drift. Each field carries
its description, bounds and, where ``--set dotted.path=value`` may change it, ``x-overridable``
(numeric hyperparameters, steps, seed, batch and length settings, ``model.dtype``). Enums of
registered implementations (estimators, losses, KL kinds, rewards, tasks, device kinds) come from
the engine's registries, so adding one is a decorated function and its test.

Documents are validated by the generated JSON Schema first (one line per error, all errors at once:
:mod:`harness.schema`), then read into :class:`Recipe`, which the trainer and every stage take.
Training sections keep verl's key names and nesting (``data``, ``algorithm``, ``actor_rollout_ref``,
``trainer``) so a verl user recognises them and the safety rules read a recipe and an imported verl
launcher alike.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from harness.records.base import MAX_STEPS, RECIPE_NAME, Record, Registered, field
from harness.registry import kind_names

# Upper bounds: a size the harness would try to allocate or loop over is refused by the schema, not
# discovered by running out of memory. Every other recipe integer is capped at INT32_MAX (schema_defs).
MAX_EXAMPLES = 1_000_000  # synthetic examples are generated (with their images) in memory
MAX_IMAGE_SIDE = 4096
MAX_BATCH = 65_536
MAX_TOKENS = 1 << 20
MAX_GROUP = 1024
MAX_SEED = 2**32 - 1  # NumPy's legacy seed range
ONE_LINE = r"^[^\u0000-\u001f\u007f-\u009f]+$"  # no control character: text an exported launcher copies
ONE_LINE_FIX = {"x-fix": "write it on one line, without control characters (newline, tab, escape, ...)"}
Family = Literal["qwen3", "qwen3_moe", "qwen3_vl_moe"]  # each picks a transformers class (harness.core.model_builder)
FAMILIES: tuple[str, ...] = get_args(Family)
CODE_NOTE = (" Loads code: must stay null unless security.allow_code_loading is true and the model revision is "
             "pinned (rule code-loading-key).")


registered = kind_names  # the names registered for a kind: the schema enums follow the registries


def code_path(desc: str) -> Any:
    """A key that makes verl import user code: null unless the recipe opts in (rule code-loading-key)."""
    return field(desc + CODE_NOTE, min_length=1)


class Section(Record):
    """A closed recipe section: unknown keys are errors; read-only once built."""


# ----------------------------------------------------------------------------- model
class Moe(Section):
    num_experts: int = field("Routed experts per MoE layer.", ge=1)
    num_experts_per_tok: int = field("Experts each token is routed to (top-k).", ge=1)
    moe_intermediate_size: int = field("Hidden width of each expert's FFN.", ge=1)
    norm_topk_prob: bool = field("Renormalise the top-k routing weights to sum to 1.")
    router_aux_loss_coef: float = field("Load-balancing auxiliary loss coefficient (0 disables it).", ge=0)
    decoder_sparse_step: int = field("Every n-th decoder layer is MoE (1 = all).", ge=1)


class TextArch(Section):
    hidden_size: int = field("Model width.", ge=1)
    num_hidden_layers: int = field("Decoder layers.", ge=1)
    num_attention_heads: int = field("Query heads.", ge=1)
    num_key_value_heads: int = field("Key/value heads (grouped-query attention).", ge=1)
    head_dim: int = field("Width of one attention head.", ge=1)
    intermediate_size: int = field("Dense FFN width (dense layers).", ge=1)
    vocab_size: int = field("Embedding rows; must cover the tokenizer.", ge=1)
    max_position_embeddings: int = field("Longest position the model is configured for.", ge=1)
    rope_theta: float = field("RoPE base frequency.", gt=0)
    rms_norm_eps: float = field("RMSNorm epsilon.", gt=0)
    tie_word_embeddings: bool = field("Share input embedding and LM head weights.")
    mrope_section: list[Annotated[int, Field(ge=0)]] | None = field(
        "Multimodal RoPE split of head_dim/2 over (t, h, w); null for text models.")
    mrope_interleaved: bool = field("Interleave the multimodal RoPE sections (Qwen3-VL).")
    moe: Moe | None = field("Mixture-of-experts block; null for a dense model.")


class VisionArch(Section):
    depth: int = field("Vision transformer blocks.", ge=1)
    hidden_size: int = field("Vision width.", ge=1)
    intermediate_size: int = field("Vision MLP width.", ge=1)
    num_heads: int = field("Vision attention heads.", ge=1)
    patch_size: int = field("Pixels per patch side.", ge=1)
    temporal_patch_size: int = field("Frames per temporal patch (images are repeated).", ge=1)
    spatial_merge_size: int = field("Patches merged per side into one LM token.", ge=1)
    out_hidden_size: int = field("Width of merged vision tokens fed to the LM (= text hidden_size).", ge=1)
    num_position_embeddings: int = field("Learned vision position embeddings.", ge=1)
    deepstack_visual_indexes: list[Annotated[int, Field(ge=0)]] = field(
        "Vision blocks whose features are injected into early LM layers.")
    in_channels: int = field("Image channels.", ge=1, le=4)
    min_pixels: int = field("Smallest image area the processor resizes to.", ge=1)
    max_pixels: int = field("Largest image area the processor resizes to.", ge=1)


class Architecture(Section):
    text: TextArch = field("Language-model dimensions (transformers config field names).")
    vision: VisionArch | None = field("Vision tower dimensions (transformers Qwen3-VL vision config names).")


class Model(Section):
    family: Family = field("Architecture family; picks the transformers class.")
    name: str = field("The published model this recipe stands for (a label; never downloaded).", min_length=1)
    path: str | None = field("Local directory with config.json + safetensors weights; null = seeded random init. "
                             "Never a hub id.", min_length=1)
    revision: str | None = field("Pinned 40-hex commit of the weights; required before any code-loading opt-in.",
                                 pattern="^[0-9a-f]{40}$")
    dtype: Literal["float32", "bfloat16", "float16", "float64"] = field(
        "Parameter and compute dtype (float64: a numerics reference mode for equivalence tests; overridable, e.g. "
        "to replay an fp32 baseline on an accelerator profile).", over=True)
    attn_implementation: Literal["sdpa", "flash_attention_2", "eager"] = field(
        "Attention kernel: sdpa, flash_attention_2 (when installed) or eager.")
    architecture: Architecture = field("The model's real architecture; scales shrink it.")

    @model_validator(mode="after")
    def _family_has_its_parts(self) -> Model:
        arch = self.architecture
        if self.family == "qwen3_vl_moe" and arch.vision is None:
            raise ValueError("family qwen3_vl_moe needs architecture.vision (its vision tower); give one or use "
                             "family qwen3_moe")
        if self.family == "qwen3_moe" and arch.text.moe is None:
            raise ValueError("family qwen3_moe needs architecture.text.moe (its expert block); give one or use "
                             "family qwen3")
        return self


# ----------------------------------------------------------------------------- data
class Synthetic(Section):
    tasks: list[Annotated[str, Registered("task")]] = field("Task generators, round-robin.", min_length=1)
    train_size: int = field("Training examples.", ge=1, le=MAX_EXAMPLES, over=True)
    val_size: int = field("Held-out validation examples.", ge=1, le=MAX_EXAMPLES, over=True)
    image_size: int = field("Image side in pixels (multiple of 16).", ge=16, le=MAX_IMAGE_SIDE)


class CustomClass(Section):
    path: str | None = code_path("File defining a custom dataset class.")
    name: str | None = field("Class name in that file.")


class Data(Section):
    dataset: str = field("Dataset this recipe stands for (label, e.g. geo3k).", min_length=1)
    train_files: str | None = field("Local parquet/jsonl with geo3k fields; null = synthetic.", min_length=1)
    val_files: str | None = field("Local parquet/jsonl for validation; null = synthetic.", min_length=1)
    synthetic: Synthetic = field("Seeded synthetic visual/text reasoning data in geo3k's format (used when "
                                 "train_files is null).")
    train_batch_size: int = field("Prompts per GRPO step.", ge=1, le=MAX_BATCH, over=True)
    val_batch_size: int | None = field("Prompts per validation batch; null = all.", ge=1, le=MAX_BATCH, over=True)
    max_prompt_length: int = field("Longest prompt in tokens (image tokens included).", ge=1, le=MAX_TOKENS,
                                   over=True)
    max_response_length: int = field("Longest sampled response in tokens.", ge=1, le=MAX_TOKENS, over=True)
    filter_overlong_prompts: bool = field("Drop (and count) prompts longer than max_prompt_length.")
    truncation: Literal["error", "left", "right"] = field("What to do with an overlong prompt that is not filtered.")
    shuffle: bool = field("Shuffle the training prompts each epoch (seeded).")
    image_key: str = field("Column holding the images.", min_length=1)
    trust_remote_code: bool = field("Let the tokenizer/processor run repository code. Loads code "
                                    "(rule code-loading-key).")
    custom_cls: CustomClass = field("verl custom dataset class.")


# ----------------------------------------------------------------------------- actor, reference, rollout
class Optim(Section):
    lr: float = field("Peak learning rate.", gt=0, over=True)
    lr_scheduler_type: Literal["constant", "cosine"] = field("LR schedule after warmup.")
    lr_warmup_steps: int = field("Linear warmup steps (-1 = use lr_warmup_steps_ratio).", ge=-1, over=True)
    lr_warmup_steps_ratio: float = field("Warmup as a fraction of total steps.", ge=0, le=1, over=True)
    min_lr_ratio: float = field("Cosine floor as a fraction of lr.", ge=0, le=1, over=True)
    weight_decay: float = field("Decoupled weight decay.", ge=0, over=True)
    betas: list[Annotated[float, Field(ge=0, lt=1)]] = field("AdamW (beta1, beta2).", min_length=2, max_length=2)
    clip_grad: float = field("Max global gradient norm.", gt=0, over=True)


class Veomni(Section):
    param_offload: bool = field("Keep parameters in host memory between uses.")
    optimizer_offload: bool = field("Keep optimizer state in host memory.")
    enable_full_shard: bool = field("Shard parameters, gradients and optimizer state (ZeRO-3 / FSDP full shard).")
    fsdp_size: int = field("Devices one model replica is sharded over: -1 = all data-parallel ranks, else a positive "
                           "count (0 is not allowed).", ge=-1, extra={"not": {"const": 0}})
    ulysses_parallel_size: int = field("Ulysses sequence-parallel degree.", ge=1)
    expert_parallel_size: int = field("Expert-parallel degree.", ge=1)
    attn_implementation: Literal["flash_attention_2", "sdpa", "eager"] = field("Attention kernel the engine asks for.")
    moe_implementation: Literal["fused", "eager"] = field("Expert kernel (fused grouped GEMM or eager loop).")

    @field_validator("fsdp_size")
    @classmethod
    def _not_zero(cls, value: int) -> int:
        if value == 0:
            raise ValueError("fsdp_size 0 shards over nothing; give -1 (all data-parallel ranks) or a positive count")
        return value


class PolicyLoss(Section):
    loss_mode: Annotated[str, Registered("policy_loss")] = field("Registered policy loss.")


class Actor(Section):
    strategy: Literal["veomni", "fsdp", "fsdp2"] = field(
        "Training engine verl runs (this harness trains with its own FSDP2 core).")
    optim: Optim = field("AdamW optimiser and LR schedule (verl actor.optim.*).")
    ppo_mini_batch_size: int = field("Prompts per optimiser step (× n responses).", ge=1, over=True)
    ppo_micro_batch_size: int | None = field("Global micro-batch (deprecated in verl; exclusive with _per_gpu).",
                                             ge=1, over=True)
    ppo_micro_batch_size_per_gpu: int | None = field("Responses per forward/backward per device.", ge=1, over=True)
    use_dynamic_bsz: bool = field("Token-budget micro-batches instead of fixed sizes.")
    ppo_epochs: int = field("Passes over each rollout batch.", ge=1, over=True)
    clip_ratio_low: float = field("PPO clip below 1.", ge=0, le=1, over=True)
    clip_ratio_high: float = field("PPO clip above 1.", ge=0, over=True)
    clip_ratio_c: float = field("Dual-clip constant (> 1).", gt=1, over=True)
    loss_agg_mode: Annotated[str, Registered("agg_mode")] = field("How token losses become one number.")
    entropy_coeff: float = field("Entropy bonus coefficient.", ge=0, over=True)
    use_kl_loss: bool = field("Add KL to the reference model to the actor loss.")
    kl_loss_coef: float = field("KL loss coefficient.", ge=0, over=True)
    kl_loss_type: Annotated[str, Registered("kl")] = field("KL estimator.")
    policy_loss: PolicyLoss = field("Policy loss choice.")
    veomni: Veomni = field("Engine sharding/offload settings (verl actor.veomni.*).")


class ValKwargs(Section):
    temperature: float = field("0 = greedy.", ge=0, over=True)
    top_p: float = field("Nucleus mass.", gt=0, le=1, over=True)
    top_k: int = field("Top-k (-1 or 0 = off).", ge=-1, over=True)
    do_sample: bool = field("Sample (true) or greedy (false).")
    n: int = field("Responses per validation prompt.", ge=1, le=MAX_GROUP, over=True)


class MultiTurn(Section):
    enable: bool = field("Enable multi-turn.")
    tool_config_path: str | None = code_path("Tool config file.")
    function_tool_path: str | None = code_path("Python file with tool functions.")


class CustomServer(Section):
    path: str | None = code_path("File defining the server class.")


class Agent(Section):
    agent_loop_config_path: str | None = code_path("Agent loop config file.")
    custom_async_server: CustomServer = field("Custom async rollout server.")


class Rollout(Section):
    name: Literal["vllm", "sglang", "hf"] = field(
        "Inference engine verl uses; this harness samples with its own KV-cached engine.")
    n: int = field("Responses per prompt (GRPO group size).", ge=1, le=MAX_GROUP, over=True)
    temperature: float = field("Sampling temperature.", gt=0, over=True)
    top_p: float = field("Nucleus mass.", gt=0, le=1, over=True)
    top_k: int = field("Top-k (-1 or 0 = off).", ge=-1, over=True)
    tensor_model_parallel_size: int = field("Rollout tensor parallel degree.", ge=1)
    max_model_len: int | None = field("Longest sequence the rollout engine serves (prompt + response).", ge=1,
                                      over=True)
    max_num_batched_tokens: int = field("Tokens per engine scheduling step.", ge=1, over=True)
    gpu_memory_utilization: float = field("Fraction of device memory the engine may take.", gt=0, le=1, over=True)
    enable_chunked_prefill: bool = field("Split long prefills across steps.")
    enable_prefix_caching: bool = field("Reuse KV blocks of shared prefixes.")
    free_cache_engine: bool = field("Release the KV cache between rollout and training.")
    log_prob_micro_batch_size_per_gpu: int | None = field("Responses per old-log-prob forward per device.", ge=1,
                                                          over=True)
    val_kwargs: ValKwargs = field("Sampling for validation.")
    multi_turn: MultiTurn = field("Tool-calling multi-turn rollout (not run by this harness).")
    agent: Agent = field("Agent loop settings.")


class ModelOverride(Section):
    max_position_embeddings: int = field("Position limit override.", ge=1)


class ModelLoading(Section):
    use_remove_padding: bool = field("Train on unpadded (packed) sequences.")
    enable_gradient_checkpointing: bool = field("Recompute activations in backward.")
    trust_remote_code: bool = field("Run model repository code. Loads code (rule code-loading-key).")
    external_lib: str | None = code_path("Python module imported before model creation.")
    override_config: ModelOverride = field("Model config overrides.")


class Ref(Section):
    log_prob_micro_batch_size_per_gpu: int | None = field("Responses per reference forward per device.", ge=1,
                                                          over=True)
    param_offload: bool = field("Keep reference parameters in host memory.")


class ActorRolloutRef(Section):
    model: ModelLoading = field("Model loading options (verl actor_rollout_ref.model.*).")
    actor: Actor = field("Policy being trained (verl actor_rollout_ref.actor.*).")
    ref: Ref = field("Frozen reference policy for the KL loss.")
    rollout: Rollout = field("Response sampling (verl actor_rollout_ref.rollout.*).")


# ----------------------------------------------------------------------------- the rest of a recipe
class KlCtrl(Section):
    type: Literal["fixed"] = field("Controller.")
    kl_coef: float = field("In-reward KL coefficient.", ge=0, over=True)


class Algorithm(Section):
    adv_estimator: Annotated[str, Registered("adv_estimator")] = field("Registered advantage estimator.")
    norm_adv_by_std_in_grpo: bool = field("Divide by the group std (false = Dr.GRPO).")
    use_kl_in_reward: bool = field("KL penalty in the reward (not supported by GRPO here: must be false).")
    kl_penalty: Annotated[str, Registered("kl")] = field("KL estimator for an in-reward penalty.")
    kl_ctrl: KlCtrl = field("In-reward KL controller.")


class Source(Section):
    launcher: str = field("Launcher script the values follow (one line: no control characters; "
                          "`harness export-verl` copies it into a comment).", min_length=1, pattern=ONE_LINE,
                          extra=ONE_LINE_FIX)
    reference: str = field("Pull request / paper / model card (one line: no control characters).", min_length=1,
                           pattern=ONE_LINE, extra=ONE_LINE_FIX)


class Security(Section):
    allow_code_loading: bool = field("Permit code-loading keys (needs model.revision pinned). "
                                     "Never settable by an override.")


class WarmStart(Section):
    steps: int = field("SFT steps.", ge=1, le=MAX_STEPS, over=True)
    batch_size: int = field("SFT batch size.", ge=1, le=MAX_BATCH, over=True)
    lr: float = field("SFT AdamW learning rate.", gt=0, over=True)


class CustomReward(Section):
    path: str | None = code_path("File defining the reward function.")
    name: str | None = field("Function name.")


class Reward(Section):
    name: Annotated[str, Registered("reward")] = field("Registered reward function.")


class Trainer(Section):
    device: Annotated[str, Registered("device")] = field("Device kind.")
    nnodes: int = field("Nodes.", ge=1)
    n_gpus_per_node: int = field("Devices per node (GPUs or NPUs).", ge=1)
    total_training_steps: int = field("GRPO steps.", ge=1, le=MAX_STEPS, over=True)
    save_freq: int = field("Checkpoint every n steps (-1 = never).", ge=-1, over=True)
    test_freq: int = field("Validate every n steps (-1 = never).", ge=-1, over=True)
    val_before_train: bool = field("Validate before the first step.")
    resume_mode: Literal["auto", "disable"] = field(
        "auto: continue from the newest complete checkpoint; disable: start fresh.")
    max_actor_ckpt_to_keep: int | None = field("Checkpoints kept (null = all).", ge=1)


class Recipe(Section):
    """A recipe resolved for one profile and scale."""

    schema_ref: str | SkipJsonSchema[None] = Field(None, alias="$schema", min_length=1,
                                                   description="Path or URI of this schema (editor hint).")
    schema_version: Literal[1] = field("Recipe format version.")
    name: str = field("Recipe id (file name without .json).", pattern=RECIPE_NAME)
    description: str = field("What this recipe reproduces.", min_length=1)
    source: Source = field("Where the published settings come from.")
    seed: int = field("Global seed (data order, init, sampling).", ge=0, le=MAX_SEED, over=True)
    deterministic: bool = field("Deterministic algorithms and seeded everything: the same run twice gives "
                                "bitwise-identical metrics on the same machine.")
    security: Security = field("Explicit opt-ins.")
    model: Model = field("What to train.")
    warm_start: WarmStart | None = field("Seed checkpoint: a short seeded SFT that teaches the answer FORMAT only "
                                         "(random answers), cached by the hash of its inputs; null = start from the "
                                         "raw init.")
    data: Data = field("Prompts and lengths (verl data.*).")
    algorithm: Algorithm = field("Advantage estimation (verl algorithm.*).")
    actor_rollout_ref: ActorRolloutRef = field("Actor, reference and rollout (verl actor_rollout_ref.*).")
    custom_reward_function: CustomReward = field("verl custom reward function.")
    reward: Reward = field("Rule-based reward.")
    trainer: Trainer = field("Run length, devices, checkpoints (verl trainer.*).")
