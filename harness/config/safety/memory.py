"""Memory pre-flight: a per-device peak estimate for one GRPO step, before any device is touched.

The estimate is deliberately simple, so it can be checked by hand and later compared with the
peaks measured on real devices. All numbers are bytes per device; ``GB`` means 10^9 bytes.

Parameter count ``P`` (from the architecture; biases and tiny norms of the vision tower ignored)::

    text   = V·h (embeddings) + V·h (LM head, unless tied) + h (final norm)
             + Σ_layers [ h·H·d + 2·h·K·d + H·d·h        (attention q, k, v, o; d = head_dim)
                          + 2·d + 2·h                      (q/k norms, two RMSNorms)
                          + FFN ]
    FFN    = 3·h·I                                         (dense SwiGLU)
           | E·3·h·I_moe + h·E                             (MoE layer: experts + router;
                                                             every decoder_sparse_step-th layer)
    vision = depth·(4·h_v² + 2·h_v·I_v)                    (blocks)
             + C·T·p²·h_v + N_pos·h_v                      (patch and position embeddings)
             + (1 + #deepstack)·(m² + m·h_out), m = h_v·s² (merger + deepstack mergers)

Bytes: ``b`` = 2 for bfloat16/float16, 4 for float32. ``S`` = FSDP shard group: fsdp_size when
0 < fsdp_size < world, else the world size (nnodes × n_gpus_per_node); 1 without
enable_full_shard. ``U`` = the largest FSDP unit (one decoder layer, the embeddings or the LM head).

Training phase (policy forward/backward + optimizer step)::

    params     = P·b/S                  (0 with param_offload: kept on the host)
    grads      = P·b/S                  (0 with param_offload)
    optimizer  = P·12/S for bf16/fp16   (AdamW m and v in fp32 + an fp32 master copy = 12 bytes per
                 P·8/S  for fp32         parameter; 0 with optimizer_offload: state and step on the host)
    gathered   = 3·U·b                  (all-gathered unit + prefetched next unit + unsharded grads of
                                          one unit; only when S > 1 or parameters are offloaded)
    ref        = P·b/S                  (frozen reference when use_kl_loss; 2·U·b with ref.param_offload)
    activations= t·h·b·L + t·h·b·17     with gradient checkpointing (one checkpoint per layer + one
                 t·h·b·17·L             layer's full activations), else every layer's
                                          (17 elements per token and hidden unit ≈ 34 bytes/(token·h) in
                                          bf16 with flash attention; Korthikanti et al. 2022)
    logits     = t·V·4                  (fp32 logits of one micro-batch)
    t          = micro-batch × (max_prompt_length + max_response_length) / ulysses size

Rollout phase (colocated engine; training state stays where the offload flags put it)::

    resident   = params + grads + optimizer + ref      (what is not offloaded stays on the device;
                                                         ref counts 0 with ref.param_offload)
    engine     = gpu_memory_utilization × device memory (vLLM / SGLang preallocate weights + KV cache)
               | KV cache of this rank's rollout batch (t_r × max_model_len) on a cpu profile or with
                 rollout.name "hf" (sampling with the policy's own weights; no reservation),
                 t_r = ceil(train_batch_size × n / world)

KV cache per token = 2·L·ceil(K/TP)·d·b. The engine's reservation must also hold its TP-sharded
weights (P·b/TP) and the KV cache of one max_model_len sequence. With free_cache_engine the engine releases its memory during training;
without it the reservation is added to the training phase. Peak = max(training, rollout).

Budget = 0.95 × accelerator memory_gb × 10^9 (the cpu profile: 0.95 × host memory). With any
offload, the host must hold the offloaded shards of every device of a node (checked against the
profile's host memory). Not modelled: vision activations, allocator fragmentation, communication
buffers, CUDA context (covered by the 5 % reserve).

Offload means what an FSDP2 engine with a CPU offload policy does: offloaded parameters live on the
host and are gathered one unit at a time for compute; offloaded optimizer state is stepped on the
host. (verl's own param_offload moves state to the host between phases instead; its training phase
then holds params + grads + optimizer like the non-offloaded case.)

Worked example, qwen3_vl_30b at full scale on gpu-8x-h100-80g (P = 31.07 B, bf16, S = 16): with
the recipe's offload the rollout phase peaks at 48.0 (0.6 × 80) + 3.9 (ref) = 51.9 GB ≤ 76.0;
without offload it is 48.0 + 3.9 + 3.9 + 23.3 + 3.9 = 83.0 GB > 76.0 (training phase 41.4 GB).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.config.safety.registry import Finding, RuleContext, finding

GB = 1e9
USABLE_FRACTION = 0.95
ACT_ELEMENTS_PER_TOKEN_HIDDEN = 17
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
OPTIMIZER_BYTES_MIXED = 12  # AdamW m, v (fp32) + fp32 master weights
OPTIMIZER_BYTES_FP32 = 8  # AdamW m, v; the parameters are the master copy
ENGINE = "actor_rollout_ref.actor.veomni"
FIX = ("enable actor_rollout_ref.actor.veomni.param_offload/optimizer_offload, raise fsdp_size, "
       "or use a larger profile")


class MissingKey(LookupError):
    """A key the estimate needs is absent or not a number (the rule then skips)."""


def _get(config: dict[str, Any], dotted: str, default: Any = MissingKey) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is MissingKey:
                raise MissingKey(dotted)
            return default
        node = node[part]
    return node


def _num(config: dict[str, Any], dotted: str, default: Any = MissingKey) -> Any:
    """A finite number at ``dotted``; ``default`` when absent or not a number (MissingKey without one)."""
    value = _get(config, dotted, None)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        if default is MissingKey:
            raise MissingKey(dotted)
        return default
    return value


def _pos_int(arch: dict[str, Any], key: str) -> int:
    value = arch.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MissingKey(f"architecture.{key}")
    return value


@dataclass(frozen=True)
class ParamCount:
    total: int
    largest_unit: int  # biggest FSDP unit: one decoder layer, the embeddings or the LM head
    num_layers: int


def count_params(architecture: dict[str, Any]) -> ParamCount:
    """Parameter count of the model described by ``architecture`` ({"text": ..., "vision": ...})."""
    text = architecture.get("text", architecture)
    if not isinstance(text, dict):
        raise MissingKey("architecture.text")
    h, n_layers = _pos_int(text, "hidden_size"), _pos_int(text, "num_hidden_layers")
    heads, kv = _pos_int(text, "num_attention_heads"), _pos_int(text, "num_key_value_heads")
    head_dim = text.get("head_dim") or h // heads
    vocab = _pos_int(text, "vocab_size")
    embed = vocab * h
    lm_head = 0 if text.get("tie_word_embeddings") else vocab * h
    attn = h * heads * head_dim + 2 * h * kv * head_dim + heads * head_dim * h + 2 * head_dim + 2 * h
    moe = text.get("moe")
    n_moe, moe_ffn, dense_ffn = 0, 0, 0
    if isinstance(moe, dict):
        step = moe.get("decoder_sparse_step") or 1
        step = step if isinstance(step, int) and step >= 1 else 1
        n_moe = n_layers // step  # layer i is MoE when (i + 1) % step == 0
        experts = _pos_int(moe, "num_experts")
        moe_ffn = experts * 3 * h * _pos_int(moe, "moe_intermediate_size") + h * experts
    if n_moe < n_layers:
        dense_ffn = 3 * h * _pos_int(text, "intermediate_size")
    layer_sizes = [attn + dense_ffn] * (n_layers > n_moe) + [attn + moe_ffn] * (n_moe > 0)
    layers_total = (n_layers - n_moe) * (attn + dense_ffn) + n_moe * (attn + moe_ffn)
    total = embed + lm_head + layers_total + h
    vision = architecture.get("vision")
    if isinstance(vision, dict):
        vh, depth, vi = (_pos_int(vision, k) for k in ("hidden_size", "depth", "intermediate_size"))
        patch = (vision.get("in_channels") or 3) * (vision.get("temporal_patch_size") or 1) \
            * _pos_int(vision, "patch_size") ** 2 * vh
        merged = vh * (vision.get("spatial_merge_size") or 1) ** 2
        merger = merged * merged + merged * (vision.get("out_hidden_size") or h)
        n_mergers = 1 + len(vision.get("deepstack_visual_indexes") or [])
        total += depth * (4 * vh * vh + 2 * vh * vi) + patch + (vision.get("num_position_embeddings") or 0) * vh \
            + n_mergers * merger
    return ParamCount(total, max(*layer_sizes, embed, lm_head), n_layers)


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-device bytes of one GRPO step; ``total`` is the larger of the two phases."""

    n_params: int
    dtype: str
    shard: int
    params: float
    grads: float
    optimizer: float
    gathered: float
    ref: float
    activations: float
    logits: float
    train_total: float
    engine_reserve: float  # rollout engine memory (vLLM reservation or KV cache)
    engine_needs: float  # TP-sharded weights + KV of one max_model_len sequence
    rollout_resident: float  # training state left on the device during rollout
    rollout_total: float
    total: float
    budget: float
    host_offload: float = 0.0  # bytes per node kept on the host by offloading
    host_budget: float = 0.0

    @property
    def phase(self) -> str:
        return "rollout" if self.rollout_total > self.train_total else "training"

    @property
    def fits(self) -> bool:
        return self.total <= self.budget

    def explain(self) -> str:
        def g(x: float) -> str:
            return f"{x / GB:.1f}"

        return (f"peak {g(self.total)} GB per device ({self.phase} phase) vs {g(self.budget)} GB budget; "
                f"training {g(self.train_total)} = params {g(self.params)} + grads {g(self.grads)} + optimizer "
                f"{g(self.optimizer)} + ref {g(self.ref)} + gathered {g(self.gathered)} + activations "
                f"{g(self.activations)} + logits {g(self.logits)}; rollout {g(self.rollout_total)} = engine "
                f"{g(self.engine_reserve)} + resident {g(self.rollout_resident)}; "
                f"{self.n_params / 1e9:.2f} B params, {self.dtype}, shard group {self.shard}")


def _flag(config: dict[str, Any], dotted: str, default: bool) -> bool:
    value = _get(config, dotted, default)
    return value if isinstance(value, bool) else default


def estimate_memory(config: dict[str, Any], profile: dict[str, Any],
                    architecture: dict[str, Any] | None = None) -> MemoryEstimate:
    """Estimate per-device memory of ``config`` on ``profile`` (formula in the module docstring).

    Raises :class:`MissingKey` when a key the estimate needs is absent.
    """
    arch = architecture if architecture is not None else _get(config, "model.architecture")
    if not isinstance(arch, dict) or not isinstance(profile, dict):
        raise MissingKey("model.architecture")
    text = arch.get("text", arch)
    pc = count_params(arch)
    dtype = _get(config, "model.dtype", "bfloat16")
    b = DTYPE_BYTES.get(dtype, 2)
    opt_b = OPTIMIZER_BYTES_FP32 if b == 4 else OPTIMIZER_BYTES_MIXED
    world = int(_num(config, "trainer.nnodes")) * int(_num(config, "trainer.n_gpus_per_node"))
    if world < 1:
        raise MissingKey("trainer.n_gpus_per_node")
    fsdp = int(_num(config, f"{ENGINE}.fsdp_size", -1))
    shard = (fsdp if 0 < fsdp < world else world) if _flag(config, f"{ENGINE}.enable_full_shard", True) else 1
    p_off = _flag(config, f"{ENGINE}.param_offload", False)
    o_off = _flag(config, f"{ENGINE}.optimizer_offload", False)
    P, U = pc.total, pc.largest_unit
    params = 0.0 if p_off else P * b / shard
    grads = 0.0 if p_off else P * b / shard
    optimizer = 0.0 if o_off else P * opt_b / shard
    gathered = 3.0 * U * b if (shard > 1 or p_off) else 0.0
    use_ref = _flag(config, "actor_rollout_ref.actor.use_kl_loss", False) or \
        _flag(config, "algorithm.use_kl_in_reward", False)
    ref_off = _flag(config, "actor_rollout_ref.ref.param_offload", False)
    ref = (2.0 * U * b if ref_off else P * b / shard) if use_ref else 0.0

    seq = int(_num(config, "data.max_prompt_length")) + int(_num(config, "data.max_response_length"))
    sp = max(1, int(_num(config, f"{ENGINE}.ulysses_parallel_size", 1)))
    micro = _get(config, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", None)
    if not isinstance(micro, int) or isinstance(micro, bool) or micro < 1:
        glob = _get(config, "actor_rollout_ref.actor.ppo_micro_batch_size", None)
        micro = max(1, glob // max(1, world // sp)) if isinstance(glob, int) and not isinstance(glob, bool) else 1
    tokens = micro * seq / sp
    h, n_layers, vocab = text["hidden_size"], pc.num_layers, text["vocab_size"]
    per_layer = tokens * h * b
    if _flag(config, "actor_rollout_ref.model.enable_gradient_checkpointing", False):
        activations = per_layer * n_layers + per_layer * ACT_ELEMENTS_PER_TOKEN_HIDDEN
    else:
        activations = per_layer * ACT_ELEMENTS_PER_TOKEN_HIDDEN * n_layers
    logits = tokens * vocab * 4.0

    device_type = profile.get("device_type")
    acc, host = profile.get("accelerator") or {}, profile.get("host") or {}
    mem_gb = host.get("memory_gb") if device_type == "cpu" else acc.get("memory_gb")
    if not isinstance(mem_gb, (int, float)) or isinstance(mem_gb, bool) or mem_gb <= 0:
        raise MissingKey("profile accelerator.memory_gb")
    device_mem = mem_gb * GB
    budget = USABLE_FRACTION * device_mem

    tp = max(1, int(_num(config, "actor_rollout_ref.rollout.tensor_model_parallel_size", 1)))
    kv_heads = -(-text["num_key_value_heads"] // tp)  # ceil: KV heads are replicated when TP > KV heads
    head_dim = text.get("head_dim") or h // text["num_attention_heads"]
    kv_per_token = 2 * n_layers * kv_heads * head_dim * b
    max_len = _get(config, "actor_rollout_ref.rollout.max_model_len", None)
    if not isinstance(max_len, int) or isinstance(max_len, bool):
        max_len = seq
    engine_needs = P * b / tp + kv_per_token * max_len
    if device_type == "cpu" or _get(config, "actor_rollout_ref.rollout.name", "vllm") == "hf":
        batch = int(_num(config, "data.train_batch_size")) * int(_num(config, "actor_rollout_ref.rollout.n", 1))
        engine = kv_per_token * max_len * -(-batch // world)
        engine_needs = 0.0
    else:
        engine = float(_num(config, "actor_rollout_ref.rollout.gpu_memory_utilization", 0.5)) * device_mem
    rollout_resident = params + grads + optimizer + (0.0 if ref_off else ref)
    rollout_total = rollout_resident + engine
    train_total = params + grads + optimizer + gathered + ref + activations + logits
    if not _flag(config, "actor_rollout_ref.rollout.free_cache_engine", True):
        train_total += engine
    host_offload = 0.0
    if device_type != "cpu" and (p_off or o_off or ref_off):
        per_device = (2 * P * b / shard if p_off else 0) + (P * opt_b / shard if o_off else 0) \
            + (P * b / shard if (use_ref and ref_off) else 0)
        host_offload = per_device * int(_num(config, "trainer.n_gpus_per_node"))
    host_gb = host.get("memory_gb")
    host_budget = USABLE_FRACTION * host_gb * GB if isinstance(host_gb, (int, float)) else 0.0
    return MemoryEstimate(n_params=P, dtype=str(dtype), shard=shard, params=params, grads=grads,
                          optimizer=optimizer, gathered=gathered, ref=ref, activations=activations,
                          logits=logits, train_total=train_total, engine_reserve=engine,
                          engine_needs=engine_needs, rollout_resident=rollout_resident,
                          rollout_total=rollout_total, total=max(train_total, rollout_total), budget=budget,
                          host_offload=host_offload, host_budget=host_budget)


RULE_SUMMARY = "estimated per-device peak memory (training or rollout phase) exceeds the profile's device memory"


def rule_memory_preflight(ctx: RuleContext) -> Iterator[Finding]:
    """Rule ``memory-preflight`` (registered by harness.config.safety.rules, after the others)."""
    if ctx.profile is None:
        return
    try:
        est = estimate_memory(ctx.config, ctx.profile, ctx.architecture)
    except (MissingKey, KeyError, TypeError, ValueError, ArithmeticError):
        return

    def g(x: float) -> str:
        return f"{x / GB:.1f}"

    if not est.fits:
        if est.phase == "rollout":
            parts = (f"rollout phase: engine {g(est.engine_reserve)} + resident training state "
                     f"{g(est.rollout_resident)} (params {g(est.params)}, grads {g(est.grads)}, optimizer "
                     f"{g(est.optimizer)}, ref {g(est.ref)}); training phase {g(est.train_total)}")
        else:
            parts = (f"training phase: params {g(est.params)}, grads {g(est.grads)}, optimizer {g(est.optimizer)}, "
                     f"ref {g(est.ref)}, gathered {g(est.gathered)}, activations {g(est.activations)}, "
                     f"logits {g(est.logits)}")
        yield finding("memory-preflight",
                      f"needs {g(est.total)} GB per device > {g(est.budget)} GB budget ({parts}; "
                      f"{est.n_params / 1e9:.2f} B params in {est.dtype}, shard group {est.shard})",
                      FIX, key=f"{ENGINE}.param_offload", ctx=ctx)
    if est.engine_needs > est.engine_reserve:
        yield finding("memory-preflight",
                      f"rollout engine reservation {g(est.engine_reserve)} GB cannot hold its tensor-parallel "
                      f"weights and one max_model_len sequence of KV cache ({g(est.engine_needs)} GB)",
                      "raise actor_rollout_ref.rollout.gpu_memory_utilization or tensor_model_parallel_size",
                      key="actor_rollout_ref.rollout.gpu_memory_utilization", ctx=ctx)
    if est.host_budget and est.host_offload > est.host_budget:
        yield finding("memory-preflight",
                      f"offloaded state needs {g(est.host_offload)} GB of host memory per node > "
                      f"{g(est.host_budget)} GB budget",
                      "raise fsdp_size, turn an offload off, or use a profile with more host memory",
                      key=f"{ENGINE}.optimizer_offload", ctx=ctx)
