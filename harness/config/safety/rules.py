"""The config-safety rules. Each one refuses a configuration verl (or this harness) would run wrongly.

A rule reads a :class:`RuleContext` and yields findings; it skips silently when a key it needs is
absent or not a plain value (an imported verl launcher may not set every key, or may hold an
unresolved ``${...}`` interpolation). Rules look first at the recipe's key (the engine block
``actor_rollout_ref.actor.veomni``) and then at verl's FSDP-engine spelling of the same setting.

Where a rule mirrors a verl startup check, its docstring quotes the condition verl asserts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from harness.config.safety import memory
from harness.config.safety.code_loading import is_code_loading_key, is_enabled
from harness.config.safety.registry import Finding, RuleContext, finding, register_rule

ENGINE = "actor_rollout_ref.actor.veomni"
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
SP_KEYS = (f"{ENGINE}.ulysses_parallel_size", f"{ACTOR}.ulysses_sequence_parallel_size",
           f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size")
FSDP_KEYS = (f"{ENGINE}.fsdp_size", f"{ACTOR}.fsdp_config.fsdp_size")
EP_KEYS = (f"{ENGINE}.expert_parallel_size",)
PINNED_REVISION = re.compile(r"[0-9a-f]{40}")


# ----------------------------------------------------------------------------- readers
def _int(ctx: RuleContext, key: str) -> int | None:
    value = ctx.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(ctx: RuleContext, key: str) -> bool | None:
    value = ctx.get(key)
    return value if isinstance(value, bool) else None


def _pick(ctx: RuleContext, keys: tuple[str, ...]) -> tuple[str, int | None]:
    """The first of ``keys`` holding an integer, as (key, value); (keys[0], None) when none does."""
    for key in keys:
        value = _int(ctx, key)
        if value is not None:
            return key, value
    return keys[0], None


def _text(ctx: RuleContext) -> dict[str, Any] | None:
    arch = ctx.architecture
    if not isinstance(arch, dict):
        return None
    text = arch.get("text", arch)
    return text if isinstance(text, dict) else None


def _arch_int(arch: dict[str, Any] | None, key: str) -> int | None:
    value = arch.get(key) if isinstance(arch, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _world(ctx: RuleContext) -> int | None:
    nnodes, per_node = _int(ctx, "trainer.nnodes"), _int(ctx, "trainer.n_gpus_per_node")
    if nnodes is None or per_node is None or nnodes < 1 or per_node < 1:
        return None
    return nnodes * per_node


def _sp(ctx: RuleContext) -> int:
    value = _pick(ctx, SP_KEYS)[1]
    return value if value is not None and value >= 1 else 1


def _effective_max_model_len(ctx: RuleContext) -> int | None:
    """rollout.max_model_len, or prompt + response length when it is null (verl's default)."""
    mml = _int(ctx, f"{ROLLOUT}.max_model_len")
    if mml is None and ctx.get(f"{ROLLOUT}.max_model_len", 0) is None:
        p, r = _int(ctx, "data.max_prompt_length"), _int(ctx, "data.max_response_length")
        if p is not None and r is not None:
            return p + r
    return mml


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------- rules
@register_rule("code-loading-key", "error",
               "a key that makes the trainer import or run code is on without an explicit, pinned opt-in")
def rule_code_loading_key(ctx: RuleContext) -> Iterator[Finding]:
    """``*.trust_remote_code``, custom class/reward/tool/agent paths: off unless the recipe opts in with
    ``security.allow_code_loading`` and a pinned 40-hex ``model.revision`` (then a warning)."""
    allow = ctx.get("security.allow_code_loading") is True
    rev = ctx.get("model.revision")
    pinned = isinstance(rev, str) and PINNED_REVISION.fullmatch(rev) is not None

    def walk(node: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                yield from walk(value, path)
            else:
                yield path, value

    for path, value in walk(ctx.config, ""):
        if not (is_code_loading_key(path) and is_enabled(value)):
            continue
        if allow and pinned:
            yield Finding("code-loading-key", "warning",
                          f"{path} = {_show(value)} loads code (allowed by security.allow_code_loading with "
                          f"model.revision {rev})", "keep it only for reviewed code at that revision",
                          path, ctx.lines.get(path))
            continue
        why = ("security.allow_code_loading is not true" if not allow
               else "model.revision is not a pinned 40-hex commit")
        yield finding("code-loading-key", f"{path} = {_show(value)} makes the trainer import or run code and {why}",
                      f"set {path} to false/null, or review the code and set security.allow_code_loading true "
                      "with a pinned 40-hex model.revision", key=path, ctx=ctx)


@register_rule("max-model-len-too-small", "error",
               "rollout.max_model_len is shorter than max_prompt_length + max_response_length")
def rule_max_model_len_too_small(ctx: RuleContext) -> Iterator[Finding]:
    mml = _int(ctx, f"{ROLLOUT}.max_model_len")
    p, r = _int(ctx, "data.max_prompt_length"), _int(ctx, "data.max_response_length")
    if mml is None or p is None or r is None:
        return
    if mml < p + r:
        yield finding("max-model-len-too-small",
                      f"rollout.max_model_len {mml} < max_prompt_length {p} + max_response_length {r} = {p + r}: "
                      "responses would be truncated silently",
                      f"set {ROLLOUT}.max_model_len >= {p + r} or lower data.max_response_length",
                      key=f"{ROLLOUT}.max_model_len", ctx=ctx)


@register_rule("max-model-len-exceeds-positions", "error",
               "rollout.max_model_len exceeds the model's max_position_embeddings")
def rule_max_model_len_exceeds_positions(ctx: RuleContext) -> Iterator[Finding]:
    """verl: max_model_len <= max_position_embeddings (override_config wins over the model config)."""
    mml = _effective_max_model_len(ctx)
    override = _int(ctx, "actor_rollout_ref.model.override_config.max_position_embeddings")
    limit = override if override is not None else _arch_int(_text(ctx), "max_position_embeddings")
    if mml is None or limit is None:
        return
    if mml > limit:
        src = ("actor_rollout_ref.model.override_config.max_position_embeddings" if override is not None
               else "model.architecture.text.max_position_embeddings")
        yield finding("max-model-len-exceeds-positions",
                      f"rollout max_model_len {mml} > {src} {limit}: positions past the limit are undefined",
                      f"set {ROLLOUT}.max_model_len <= {limit} (and keep prompt + response within it)",
                      key=f"{ROLLOUT}.max_model_len", ctx=ctx)


@register_rule("batched-tokens-below-model-len", "error",
               "chunked prefill is off and max_num_batched_tokens < max_model_len")
def rule_batched_tokens(ctx: RuleContext) -> Iterator[Finding]:
    """vLLM without chunked prefill must fit one whole sequence in a scheduling step."""
    if ctx.get(f"{ROLLOUT}.name", "vllm") != "vllm" or _bool(ctx, f"{ROLLOUT}.enable_chunked_prefill") is not False:
        return
    mbt, mml = _int(ctx, f"{ROLLOUT}.max_num_batched_tokens"), _effective_max_model_len(ctx)
    if mbt is None or mml is None:
        return
    if mbt < mml:
        yield finding("batched-tokens-below-model-len",
                      f"enable_chunked_prefill is false and max_num_batched_tokens {mbt} < max_model_len {mml}: "
                      "vLLM refuses to start",
                      f"set {ROLLOUT}.max_num_batched_tokens >= {mml} or enable_chunked_prefill true",
                      key=f"{ROLLOUT}.max_num_batched_tokens", ctx=ctx)


@register_rule("duplicate-key", "error",
               "a key is given twice, in a JSON object or as two launcher overrides (the later one would win silently)")
def rule_duplicate_key(ctx: RuleContext) -> Iterator[Finding]:
    """Reported by the strict JSON loader (harness.jsonio) while parsing; a parsed dict has none left."""
    return iter(())


@register_rule("devices-per-node", "error",
               "trainer.n_gpus_per_node / trainer.device differ from the hardware profile")
def rule_devices_per_node(ctx: RuleContext) -> Iterator[Finding]:
    prof = ctx.profile
    if not isinstance(prof, dict):
        return
    name = prof.get("name", "?")
    per_node = _int(ctx, "trainer.n_gpus_per_node")
    want = _arch_int(prof.get("accelerator"), "count_per_node")
    if per_node is not None and want is not None and per_node != want:
        yield finding("devices-per-node",
                      f"trainer.n_gpus_per_node {per_node} != {want} devices per node of profile {name}",
                      f"set trainer.n_gpus_per_node to {want}", key="trainer.n_gpus_per_node", ctx=ctx)
    device, want_type = ctx.get("trainer.device"), prof.get("device_type")
    if isinstance(device, str) and isinstance(want_type, str) and device != want_type:
        yield finding("devices-per-node", f"trainer.device '{device}' != profile {name} device_type '{want_type}'",
                      f"set trainer.device to '{want_type}'", key="trainer.device", ctx=ctx)


@register_rule("batch-divisible-by-world", "error", "train_batch_size × rollout.n is not divisible by the world size")
def rule_batch_divisible(ctx: RuleContext) -> Iterator[Finding]:
    """verl: data.train_batch_size * rollout.n % (nnodes * n_gpus_per_node) == 0."""
    tb, n, world = _int(ctx, "data.train_batch_size"), _int(ctx, f"{ROLLOUT}.n"), _world(ctx)
    if tb is None or n is None or world is None:
        return
    if (tb * n) % world:
        yield finding("batch-divisible-by-world",
                      f"train_batch_size {tb} × rollout.n {n} = {tb * n} responses is not divisible by world size "
                      f"{world} (nnodes × n_gpus_per_node)",
                      "change data.train_batch_size (or rollout.n) to make the product a multiple of the world size",
                      key="data.train_batch_size", ctx=ctx)


@register_rule("mini-batch-vs-train-batch", "error",
               "ppo_mini_batch_size does not split train_batch_size, the world or the micro-batch evenly")
def rule_mini_batch(ctx: RuleContext) -> Iterator[Finding]:
    """verl normalises per rank: mini = ppo_mini_batch_size * n // (world / sp) and then asserts
    ``mini % ppo_micro_batch_size_per_gpu == 0``; it also requires train_batch_size >= ppo_mini_batch_size.
    Here the mini-batch must also divide train_batch_size and (mini × n) divide world / sp exactly."""
    key = f"{ACTOR}.ppo_mini_batch_size"
    mini, tb = _int(ctx, key), _int(ctx, "data.train_batch_size")
    if mini is None or tb is None or mini < 1:
        return
    if mini > tb:
        yield finding("mini-batch-vs-train-batch", f"ppo_mini_batch_size {mini} > train_batch_size {tb}",
                      f"set {key} <= {tb}", key=key, ctx=ctx)
        return
    if tb % mini:
        yield finding("mini-batch-vs-train-batch",
                      f"train_batch_size {tb} is not a multiple of ppo_mini_batch_size {mini}",
                      f"set {key} to a divisor of {tb}", key=key, ctx=ctx)
    n, world, sp = _int(ctx, f"{ROLLOUT}.n"), _world(ctx), _sp(ctx)
    if n is None or world is None or world % sp:
        return
    dp = world // sp
    if (mini * n) % dp:
        yield finding("mini-batch-vs-train-batch",
                      f"ppo_mini_batch_size {mini} × rollout.n {n} = {mini * n} is not divisible by world / sp = {dp}",
                      f"set {key} so that {key} × n is a multiple of {dp}", key=key, ctx=ctx)
        return
    if _bool(ctx, f"{ACTOR}.use_dynamic_bsz") is True:
        return
    per_rank = mini * n // dp
    micro_key = f"{ACTOR}.ppo_micro_batch_size_per_gpu"
    micro = _int(ctx, micro_key)
    if micro is None:
        glob = _int(ctx, f"{ACTOR}.ppo_micro_batch_size")
        if glob is None:
            return
        micro_key, micro = f"{ACTOR}.ppo_micro_batch_size", glob // dp
        if micro < 1:
            yield finding("mini-batch-vs-train-batch",
                          f"ppo_micro_batch_size {glob} < world / sp = {dp}: less than one sample per rank",
                          f"set {micro_key} >= {dp}", key=micro_key, ctx=ctx)
            return
    if micro >= 1 and per_rank % micro:
        yield finding("mini-batch-vs-train-batch",
                      f"per-rank mini-batch ppo_mini_batch_size × n // (world / sp) = {mini} × {n} // {dp} = "
                      f"{per_rank} is not divisible by the micro-batch {micro} (verl asserts "
                      "ppo_mini_batch_size * n // (world / sp) % ppo_micro_batch_size_per_gpu == 0)",
                      f"set {micro_key} to a divisor of {per_rank}", key=micro_key, ctx=ctx)


def _exclusive(ctx: RuleContext, section: str, glob: str, per_gpu: str, dynamic: str) -> Iterator[Finding]:
    g_key, p_key = f"{section}.{glob}", f"{section}.{per_gpu}"
    if not (ctx.has(g_key) or ctx.has(p_key)):
        return
    g_val, p_val = ctx.get(g_key), ctx.get(p_key)
    if g_val is not None and p_val is not None:
        yield finding("micro-batch-exclusive", f"both {g_key} ({g_val}) and {p_key} ({p_val}) are set",
                      f"set {g_key} to null and keep {p_key}", key=g_key, ctx=ctx)
    elif g_val is None and p_val is None and _bool(ctx, f"{section}.{dynamic}") is not True:
        yield finding("micro-batch-exclusive", f"neither {p_key} nor {glob} is set and {dynamic} is off",
                      f"set {p_key} (e.g. 1)", key=p_key, ctx=ctx)


@register_rule("micro-batch-exclusive", "error",
               "exactly one of micro_batch_size / micro_batch_size_per_gpu must be set (unless dynamic batching)")
def rule_micro_batch_exclusive(ctx: RuleContext) -> Iterator[Finding]:
    """verl check_mutually_exclusive for actor, ref and rollout micro-batch settings."""
    yield from _exclusive(ctx, ACTOR, "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", "use_dynamic_bsz")
    uses_ref = ctx.get(f"{ACTOR}.use_kl_loss") is not False or ctx.get("algorithm.use_kl_in_reward") is True
    if uses_ref:
        yield from _exclusive(ctx, "actor_rollout_ref.ref", "log_prob_micro_batch_size",
                              "log_prob_micro_batch_size_per_gpu", "log_prob_use_dynamic_bsz")
    yield from _exclusive(ctx, ROLLOUT, "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu",
                          "log_prob_use_dynamic_bsz")


@register_rule("sp-needs-remove-padding", "error", "sequence parallelism > 1 needs use_remove_padding")
def rule_sp_needs_remove_padding(ctx: RuleContext) -> Iterator[Finding]:
    """verl: FSDP with ulysses_sequence_parallel_size > 1 asserts use_remove_padding."""
    sp_key, sp = _pick(ctx, SP_KEYS)
    if sp is not None and sp > 1 and _bool(ctx, "actor_rollout_ref.model.use_remove_padding") is False:
        yield finding("sp-needs-remove-padding", f"{sp_key} is {sp} but use_remove_padding is false",
                      "set actor_rollout_ref.model.use_remove_padding true (or the sequence-parallel size to 1)",
                      key="actor_rollout_ref.model.use_remove_padding", ctx=ctx)


@register_rule("ulysses-heads", "error", "attention / KV heads are not divisible by the sequence-parallel size")
def rule_ulysses_heads(ctx: RuleContext) -> Iterator[Finding]:
    """verl: heads % sp == 0 and (kv_heads % sp == 0 or sp % kv_heads == 0)."""
    sp_key, sp = _pick(ctx, SP_KEYS)
    text = _text(ctx)
    if sp is None or sp <= 1 or text is None:
        return
    heads, kv = _arch_int(text, "num_attention_heads"), _arch_int(text, "num_key_value_heads")
    if heads is not None and heads % sp:
        yield finding("ulysses-heads", f"num_attention_heads {heads} is not divisible by {sp_key} {sp}",
                      f"set {sp_key} to a divisor of {heads}", key=sp_key, ctx=ctx)
    if kv is not None and kv % sp and sp % kv:
        yield finding("ulysses-heads",
                      f"num_key_value_heads {kv} and {sp_key} {sp}: neither divides the other",
                      f"set {sp_key} to a divisor or a multiple of {kv}", key=sp_key, ctx=ctx)


@register_rule("dp-vs-fsdp-size", "error", "data-parallel size (world / sp) is not divisible by fsdp_size")
def rule_dp_vs_fsdp(ctx: RuleContext) -> Iterator[Finding]:
    """verl: dp = world / sp; fsdp_size -1 or >= dp shards over all of dp, else dp % fsdp_size == 0."""
    world = _world(ctx)
    sp_key, sp = _pick(ctx, SP_KEYS)
    fsdp_key, fsdp = _pick(ctx, FSDP_KEYS)
    if world is None:
        return
    if sp is not None and sp > 1 and world % sp:
        yield finding("dp-vs-fsdp-size", f"world size {world} is not divisible by {sp_key} {sp}",
                      f"set {sp_key} to a divisor of {world}", key=sp_key, ctx=ctx)
        return
    if fsdp is None:
        return
    dp = world // _sp(ctx)
    if fsdp == 0:
        yield finding("dp-vs-fsdp-size", f"{fsdp_key} is 0", f"set {fsdp_key} to -1 (all of dp) or a divisor of {dp}",
                      key=fsdp_key, ctx=ctx)
    elif 0 < fsdp < dp and dp % fsdp:
        yield finding("dp-vs-fsdp-size", f"data-parallel size {dp} (world {world} / sp) is not divisible by "
                      f"{fsdp_key} {fsdp}", f"set {fsdp_key} to -1 or a divisor of {dp}", key=fsdp_key, ctx=ctx)


@register_rule("experts-vs-ep", "error", "num_experts or the world size is not divisible by expert_parallel_size")
def rule_experts_vs_ep(ctx: RuleContext) -> Iterator[Finding]:
    ep_key, ep = _pick(ctx, EP_KEYS)
    if ep is None or ep <= 1:
        return
    text, world = _text(ctx), _world(ctx)
    experts = _arch_int(text.get("moe") if text else None, "num_experts")
    if experts is not None and experts % ep:
        yield finding("experts-vs-ep", f"num_experts {experts} is not divisible by {ep_key} {ep}",
                      f"set {ep_key} to a divisor of {experts}", key=ep_key, ctx=ctx)
    if world is not None and world % ep:
        yield finding("experts-vs-ep", f"world size {world} is not divisible by {ep_key} {ep}",
                      f"set {ep_key} to a divisor of {world}", key=ep_key, ctx=ctx)


@register_rule("rollout-tp-fits", "error",
               "rollout tensor_model_parallel_size does not divide the world, spans nodes or splits heads")
def rule_rollout_tp_fits(ctx: RuleContext) -> Iterator[Finding]:
    """A TP group lives inside one node and divides the world; vLLM shards attention heads (KV heads
    are replicated when TP > KV heads: kv % tp == 0 or tp % kv == 0) and the vision tower's heads."""
    key = f"{ROLLOUT}.tensor_model_parallel_size"
    tp = _int(ctx, key)
    if tp is None or tp < 1:
        return
    world, per_node = _world(ctx), _int(ctx, "trainer.n_gpus_per_node")
    if world is not None and world % tp:
        yield finding("rollout-tp-fits", f"tensor_model_parallel_size {tp} does not divide world size {world}",
                      f"set {key} to a divisor of {world}", key=key, ctx=ctx)
    if per_node is not None and tp > per_node:
        yield finding("rollout-tp-fits", f"tensor_model_parallel_size {tp} > {per_node} devices per node "
                      "(a TP group never spans nodes)", f"set {key} <= {per_node}", key=key, ctx=ctx)
    text = _text(ctx)
    heads, kv = _arch_int(text, "num_attention_heads"), _arch_int(text, "num_key_value_heads")
    if heads is not None and heads % tp:
        yield finding("rollout-tp-fits", f"num_attention_heads {heads} is not divisible by tensor_model_parallel_size "
                      f"{tp}", f"set {key} to a divisor of {heads}", key=key, ctx=ctx)
    if kv is not None and kv % tp and tp % kv:
        yield finding("rollout-tp-fits", f"num_key_value_heads {kv} and tensor_model_parallel_size {tp}: neither "
                      "divides the other", f"set {key} to a divisor or a multiple of {kv}", key=key, ctx=ctx)
    vision = ctx.architecture.get("vision") if isinstance(ctx.architecture, dict) else None
    v_heads = _arch_int(vision, "num_heads")
    if v_heads is not None and v_heads % tp:
        yield finding("rollout-tp-fits", f"vision num_heads {v_heads} is not divisible by tensor_model_parallel_size "
                      f"{tp}", f"set {key} to a divisor of {v_heads}", key=key, ctx=ctx)


@register_rule("kl-in-reward-unsupported", "error", "algorithm.use_kl_in_reward is not supported (KL as a loss only)")
def rule_kl_in_reward(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.get("algorithm.use_kl_in_reward") is True:
        yield finding("kl-in-reward-unsupported",
                      "algorithm.use_kl_in_reward is true: this engine supports KL as a loss term only",
                      "set algorithm.use_kl_in_reward false and use actor_rollout_ref.actor.use_kl_loss / "
                      "kl_loss_coef", key="algorithm.use_kl_in_reward", ctx=ctx)


@register_rule("unsupported-parallelism", "error",
               "sequence or expert parallelism > 1 (not supported by this engine)")
def rule_unsupported_parallelism(ctx: RuleContext) -> Iterator[Finding]:
    """This harness trains with FSDP2 only: refuse a degree it would otherwise silently ignore."""
    for keys, what in ((SP_KEYS, "Ulysses sequence parallelism"), (EP_KEYS, "expert parallelism")):
        key, value = _pick(ctx, keys)
        if value is not None and value > 1:
            yield finding("unsupported-parallelism", f"{key} is {value}: {what} is not supported by this engine",
                          f"set {key} to 1", key=key, ctx=ctx)


@register_rule("vocab-covers-tokenizer", "error", "the model's vocab_size is smaller than the tokenizer's vocabulary")
def rule_vocab_covers_tokenizer(ctx: RuleContext) -> Iterator[Finding]:
    vocab = _arch_int(_text(ctx), "vocab_size")
    if vocab is None:
        return
    try:
        from harness.core.tokenizer import shipped_tokenizer_size
    except ImportError:
        return
    try:
        size = shipped_tokenizer_size()
    except Exception:  # noqa: BLE001 - no tokenizer available: nothing to compare against
        return
    if vocab < size:
        yield finding("vocab-covers-tokenizer",
                      f"architecture text.vocab_size {vocab} < the tokenizer's {size} tokens: ids past the "
                      "embedding table would index out of range",
                      f"set model.architecture.text.vocab_size >= {size}", key="model.architecture.text.vocab_size",
                      ctx=ctx)


register_rule("memory-preflight", "error", memory.RULE_SUMMARY)(memory.rule_memory_preflight)
