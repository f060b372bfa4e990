"""Policy and reference models: real transformers architectures, built offline.

The recipe's ``model.architecture`` block becomes a transformers config
(``Qwen3VLMoeForConditionalGeneration``, ``Qwen3MoeForCausalLM`` or ``Qwen3ForCausalLM``) with
seeded random weights, or weights are loaded from a local directory (``model.path``). Nothing
is ever fetched from a hub and no repository code runs (``trust_remote_code`` is never passed).

Also here: the per-token forward the rollout and the trainer share, so that generation-time
and recomputed log-probabilities see identical positions, masks and banned tokens.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import Tensor
from torch.utils._python_dispatch import _get_current_dispatch_mode

from harness.core.typed_recipe import Recipe, TextArch
from harness.core.vision_attention import use_batched_vision_attention
from harness.core.vision_cache import image_inputs
from harness.errors import HarnessError
from harness.jsonio import TENSOR_INDEX_KEYS, MiB, load_json_strict
from harness.statefile import safetensors_index

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}



# A transformers model (PreTrainedModel): its config, submodules and cache layers are dynamic attributes that a
# type checker cannot follow through torch.nn.Module (which types every attribute as Tensor | Module).
HFModel = Any


class ModelInputs(TypedDict):
    """What a log-prob forward takes: full sequences, and the vision inputs when the batch has images."""

    input_ids: Tensor
    attention_mask: Tensor
    pixel_values: Tensor | None
    image_grid_thw: Tensor | None
    mm_token_type_ids: Tensor | None


def upcast(x: Tensor) -> Tensor:
    """At least float32 (float64 stays float64): log-softmax and sampling never run in bf16."""
    return x if x.dtype == torch.float64 else x.float()
# recipe moe_implementation -> transformers experts implementation (fused = grouped GEMM)
EXPERTS = {"fused": "grouped_mm", "eager": "eager"}
BANNED_LOGIT = -1e9  # large finite negative: -inf would make 0 * -inf = NaN at padded positions


@dataclass(frozen=True)
class BuiltModules:
    actor: torch.nn.Module
    ref: torch.nn.Module | None
    is_vlm: bool
    attn_implementation: str  # what is really used
    notes: tuple[str, ...]
    n_params: int
    n_active_params: int  # MoE: experts counted at top-k / num_experts
    gather_once: bool = False  # sharded: every unit all-gathered once per rollout (harness.core.gather.gathered)
    fused_sampler: bool = False  # plain sampling draws with harness.core.fused_sampler (ready_models decides)


def _rope(text: TextArch) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(text.rope_theta)}
    if text.mrope_section:
        rope["mrope_section"] = list(text.mrope_section)
        rope["mrope_interleaved"] = bool(text.mrope_interleaved)
    return rope


def build_config(cfg: Recipe, token_ids: dict[str, int]) -> Any:
    """transformers config for the resolved recipe ``cfg`` and the tokenizer's special ids."""
    import transformers

    model = cfg.model
    arch = model.architecture
    text = arch.text
    max_pos = cfg.actor_rollout_ref.model.override_config.max_position_embeddings or text.max_position_embeddings
    moe = text.moe
    common: dict[str, Any] = dict(
        vocab_size=text.vocab_size, hidden_size=text.hidden_size, intermediate_size=text.intermediate_size,
        num_hidden_layers=text.num_hidden_layers, num_attention_heads=text.num_attention_heads,
        num_key_value_heads=text.num_key_value_heads, head_dim=text.head_dim, max_position_embeddings=max_pos,
        rms_norm_eps=text.rms_norm_eps, rope_parameters=_rope(text), tie_word_embeddings=text.tie_word_embeddings,
        pad_token_id=token_ids["pad"], eos_token_id=token_ids["eos"], bos_token_id=None,
        attention_bias=False, use_cache=True,
    )
    if moe:
        common.update(num_experts=moe.num_experts, num_experts_per_tok=moe.num_experts_per_tok,
                      moe_intermediate_size=moe.moe_intermediate_size, decoder_sparse_step=moe.decoder_sparse_step,
                      router_aux_loss_coef=moe.router_aux_loss_coef, mlp_only_layers=[])
    family = model.family
    if family == "qwen3":
        return transformers.Qwen3Config(**common)
    if family == "qwen3_moe":
        assert moe is not None, "a qwen3_moe recipe has an expert block (harness.core.typed_recipe.Model checks it)"
        return transformers.Qwen3MoeConfig(norm_topk_prob=moe.norm_topk_prob, **common)
    # qwen3_vl_moe
    assert arch.vision is not None, "a qwen3_vl_moe recipe has a vision tower (harness.core.typed_recipe.Model checks it)"
    vis = arch.vision.model_dump()
    vision_config = {k: vis[k] for k in ("depth", "hidden_size", "intermediate_size", "num_heads", "patch_size",
                                         "temporal_patch_size", "spatial_merge_size", "out_hidden_size",
                                         "num_position_embeddings", "deepstack_visual_indexes", "in_channels")}
    text_config = {k: v for k, v in common.items() if k not in ("tie_word_embeddings",)}
    return transformers.Qwen3VLMoeConfig(
        text_config=text_config, vision_config=vision_config, tie_word_embeddings=text.tie_word_embeddings,
        image_token_id=token_ids["image_pad"], video_token_id=token_ids["video_pad"],
        vision_start_token_id=token_ids["vision_start"], vision_end_token_id=token_ids["vision_end"],
    )


def _model_class(family: str) -> Any:
    import transformers

    return {"qwen3": transformers.Qwen3ForCausalLM, "qwen3_moe": transformers.Qwen3MoeForCausalLM,
            "qwen3_vl_moe": transformers.Qwen3VLMoeForConditionalGeneration}[family]


def pick_attention(asked: str, device: torch.device) -> tuple[str, list[str]]:
    """The attention kernel to use: flash-attn only when installed and on CUDA; eager only when asked."""
    if asked == "flash_attention_2":
        if device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
            return asked, []
        return "sdpa", [f"flash_attention_2 asked but not available on {device.type} (flash_attn "
                        f"{'missing' if importlib.util.find_spec('flash_attn') is None else 'needs CUDA'}): using sdpa"]
    return asked, []


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    """(total, active) parameters; routed-expert weights count at top-k / num_experts when active."""
    cfg = getattr(model.config, "text_config", model.config)
    k, e = getattr(cfg, "num_experts_per_tok", None), getattr(cfg, "num_experts", None)
    total = active = 0
    for name, p in model.named_parameters():
        n = p.numel()
        total += n
        active += n * k / e if (k and e and ".experts." in f"{name}.") else n
    return total, int(active)


# What a local config.json must agree on with the recipe's model.architecture: every size that decides the
# weights' shapes and the memory the pre-flight estimated (recipe field -> transformers config field).
TEXT_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "intermediate_size", "vocab_size", "tie_word_embeddings")
MOE_FIELDS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step")
VISION_FIELDS = ("depth", "hidden_size", "intermediate_size", "num_heads", "patch_size", "temporal_patch_size",
                 "spatial_merge_size", "out_hidden_size", "num_position_embeddings", "in_channels")
MODEL_JSON_LIMIT = 16 * MiB  # config.json, generation_config.json, the shard index
WEIGHTS_FIX = "save the model with save_pretrained(safe_serialization=True)"


def _mismatch(cfg_file: Path, key: str, value: Any, recipe_key: str, want: Any) -> HarnessError:
    name = key.rsplit("/", 1)[-1]
    return HarnessError(f"{name} {value!r} but the recipe's {recipe_key} is {want!r}", file=str(cfg_file),
                        key_path=key, fix="point model.path at weights of the architecture the recipe describes, "
                                          "or describe that model in model.architecture")


def check_model_dir(cfg: Recipe, path: Path) -> Any:
    """The transformers config of a local model directory, checked before any weight is read or built.

    ``config.json`` (strict JSON) must be of the recipe's family and agree with ``model.architecture`` on every
    size (the memory pre-flight estimated the recipe's); each ``*.safetensors`` file (and a shard index) must
    pass :func:`harness.statefile.safetensors_index`. Any departure is a one-line error.
    """
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise HarnessError("model directory not found or has no config.json", file=str(path),
                           key_path="/model/path", fix="point model.path at a local directory saved with "
                           "save_pretrained (config.json + *.safetensors), or set it to null for random init")
    doc = load_json_strict(cfg_file, MODEL_JSON_LIMIT)
    if not isinstance(doc, dict):
        raise HarnessError("config.json is not a JSON object", file=str(cfg_file), fix=WEIGHTS_FIX)
    family = cfg.model.family
    if doc.get("model_type") != family:
        raise HarnessError(f"model_type {doc.get('model_type')!r} but the recipe's model.family is {family!r}",
                           file=str(cfg_file), key_path="/model_type",
                           fix="point model.path at a model of the recipe's family, or change model.family")
    try:
        config = _model_class(family).config_class.from_dict(doc)
    except Exception as err:  # noqa: BLE001 - a foreign config transformers cannot read: one line
        raise HarnessError(f"config.json cannot be read as a {family} config ({type(err).__name__}: "
                           f"{str(err).splitlines()[0] if str(err) else ''})", file=str(cfg_file), fix=WEIGHTS_FIX
                           ) from None
    arch = cfg.model.architecture
    text_cfg, text_key = (config.text_config, "/text_config/") if family == "qwen3_vl_moe" else (config, "/")
    checks: list[tuple[Any, str, str, Any]] = []
    for name in TEXT_FIELDS:
        src = config if name == "tie_word_embeddings" else text_cfg
        checks.append((src, ("/" if src is config else text_key) + name, f"model.architecture.text.{name}",
                       getattr(arch.text, name)))
    if arch.text.moe is not None:
        checks += [(text_cfg, text_key + n, f"model.architecture.text.moe.{n}", getattr(arch.text.moe, n))
                   for n in MOE_FIELDS]
    if arch.vision is not None:
        checks += [(config.vision_config, "/vision_config/" + n, f"model.architecture.vision.{n}",
                    getattr(arch.vision, n)) for n in VISION_FIELDS]
    for src, key, recipe_key, want in checks:
        value = getattr(src, key.rsplit("/", 1)[-1], None)
        if value != want:
            raise _mismatch(cfg_file, key, value, recipe_key, want)
    for extra in ("generation_config.json", "model.safetensors.index.json"):
        if (path / extra).exists():
            load_json_strict(path / extra, MODEL_JSON_LIMIT, max_object_keys=TENSOR_INDEX_KEYS)
    weights = sorted(p for p in path.iterdir() if p.name.endswith(".safetensors"))
    if not weights:
        raise HarnessError("model directory has no *.safetensors weights", file=str(path), key_path="/model/path",
                           fix=WEIGHTS_FIX)
    for w in weights:
        safetensors_index(w, what="model weights", fix=WEIGHTS_FIX)
    return config


def build_models(cfg: Recipe, token_ids: dict[str, int], device: torch.device, seed: int,
                 with_ref: bool) -> BuiltModules:
    """Actor (trainable) and frozen reference copy, in the recipe's dtype, on ``device``."""
    model_cfg = cfg.model
    dtype = DTYPES[model_cfg.dtype]
    runs_on = cfg.trainer.device if device.type == "meta" else device.type  # harness plan builds on "meta"
    # the attention kernel is the run's device's (a plan of an NPU run picks the CPU's: no torch kernels of its own)
    kernels = device if device.type != "meta" else torch.device("cuda" if runs_on == "cuda" else "cpu")
    attn, notes = pick_attention(model_cfg.attn_implementation, kernels)
    experts = EXPERTS.get(cfg.actor_rollout_ref.actor.veomni.moe_implementation)
    if experts == "grouped_mm" and dtype == torch.float64:  # e.g. a baseline's float64 replay-noise run
        experts = "eager"
        notes = [*notes, "experts: eager, not grouped_mm (it has no float64 kernel)"]
    cls = _model_class(model_cfg.family)
    if model_cfg.path:
        path = Path(model_cfg.path).expanduser()
        config = check_model_dir(cfg, path)
        try:
            actor = cls.from_pretrained(path, config=config, local_files_only=True, trust_remote_code=False,
                                        dtype=dtype, attn_implementation=attn, use_safetensors=True)
        except Exception as err:  # noqa: BLE001 - SafetensorError, OSError, shape errors...: one line, never a traceback
            first = str(err).splitlines()[0] if str(err) else ""
            raise HarnessError(f"cannot load weights ({type(err).__name__}: {first})", file=str(path),
                               key_path="/model/path", fix=WEIGHTS_FIX) from None
    else:
        config = build_config(cfg, token_ids)
        config._attn_implementation = attn  # noqa: SLF001 - transformers' documented way before init
        if experts is not None and hasattr(config, "_experts_implementation"):
            config._experts_implementation = experts  # noqa: SLF001
        with torch.random.fork_rng(devices=[]), (torch.device("meta") if device.type == "meta" else nullcontext()):
            torch.manual_seed(seed)  # on "meta" (harness plan): shapes only, nothing allocated
            actor = cls(config).to(dtype=dtype)
    actor.to(device)
    if cfg.actor_rollout_ref.model.enable_gradient_checkpointing:
        actor.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    actor.config.use_cache = True
    batched = use_batched_vision_attention(actor) if runs_on == "cpu" else 0  # the same bits, fewer calls
    if batched:
        notes = [*notes, f"{batched} vision attention modules batched per image length"]
    ref = None
    if with_ref:
        ref = copy.deepcopy(actor).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
    total, active = count_params(actor)
    return BuiltModules(actor, ref, model_cfg.family == "qwen3_vl_moe", attn, tuple(notes), total, active)


# ----------------------------------------------------------------------------- shared forward
def _cache_kwarg(model: torch.nn.Module) -> str:
    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _inner(model: torch.nn.Module) -> Any:
    """The module holding ``get_rope_index`` (Qwen3-VL: ``model.model``), or None for text models."""
    inner = getattr(model, "model", None)
    return inner if inner is not None and hasattr(inner, "get_rope_index") else None


def position_ids(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, mm_token_type_ids: Tensor | None,
                 image_grid_thw: Tensor | None) -> Tensor:
    """Positions for a left/right padded batch: (B, L) for text models, (3, B, L) multimodal RoPE.

    The multimodal index is a Python loop over rows and images that reads their lengths back (``tolist``, ``item``,
    boolean masks): on an accelerator every row waits for the device several times. Its inputs and result are
    integers, so it runs on host copies and the result moves to the device once — the same values (unit-tested).
    Not under a dispatch mode (``harness plan`` traces the run's own ops on fake devices).
    """
    inner = _inner(model)
    if inner is None:
        return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    device = input_ids.device
    on_host = index_on_host(input_ids)
    if on_host:
        input_ids, attention_mask = input_ids.cpu(), attention_mask.cpu()
        mm_token_type_ids = None if mm_token_type_ids is None else mm_token_type_ids.cpu()
        image_grid_thw = None if image_grid_thw is None else image_grid_thw.cpu()
    kwargs = dict(input_ids=input_ids, image_grid_thw=image_grid_thw, video_grid_thw=None,
                  attention_mask=attention_mask)
    if "mm_token_type_ids" in inspect.signature(inner.get_rope_index).parameters:  # no image: all text (0)
        kwargs["mm_token_type_ids"] = torch.zeros_like(input_ids) if mm_token_type_ids is None else mm_token_type_ids
    pos, _ = inner.get_rope_index(**kwargs)
    return pos.to(device) if on_host else pos


def index_on_host(input_ids: Tensor) -> bool:
    """Whether :func:`position_ids` computes the multimodal index on host copies: the batch is on an accelerator and
    no dispatch mode traces the ops."""
    return input_ids.device.type != "cpu" and _get_current_dispatch_mode() is None


_MASKED_POSITION: dict[type, int] = {}


def masked_position(model: torch.nn.Module) -> int:
    """The position multimodal RoPE gives a padding token (transformers versions differ); probed once per class."""
    cls = type(model)
    if cls not in _MASKED_POSITION:
        device = next(model.parameters()).device
        ids = torch.zeros((1, 2), dtype=torch.long, device=device)
        mask = torch.tensor([[0, 1]], device=device)
        _MASKED_POSITION[cls] = int(position_ids(model, ids, mask, None, None)[0, 0, 0])
    return _MASKED_POSITION[cls]


def next_positions(pos: Tensor, attention_mask: Tensor) -> Tensor:
    """Per-row position after the last valid token: (B,) from (B, L) or (3, B, L) positions."""
    p = pos if pos.dim() == 2 else pos.max(dim=0).values
    return torch.where(attention_mask.bool(), p, torch.zeros_like(p)).max(dim=-1).values + 1


def forward_logits(model: HFModel, *, input_ids: Tensor, attention_mask: Tensor, pos: Tensor,
                   pixel_values: Tensor | None = None, image_grid_thw: Tensor | None = None,
                   mm_token_type_ids: Tensor | None = None, cache: Any = None, logits_to_keep: int = 0) -> tuple[Tensor, Any]:
    """One forward; returns (logits, cache). Images only on the first (prefill) call."""
    kwargs: dict[str, Any] = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos,
                                  use_cache=cache is not None, logits_to_keep=logits_to_keep)
    if cache is not None:
        kwargs[_cache_kwarg(model)] = cache
    if pixel_values is not None:
        kwargs.update(image_inputs(model, pixel_values, image_grid_thw))  # the tower's metadata cached per layout
    if mm_token_type_ids is not None:
        kwargs["mm_token_type_ids"] = mm_token_type_ids
    out = model(**kwargs)
    return out.logits, cache


def forward_hidden(model: HFModel, *, input_ids: Tensor, attention_mask: Tensor, pos: Tensor,
                   pixel_values: Tensor | None = None, image_grid_thw: Tensor | None = None,
                   mm_token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The decoder's last hidden states (B, L, H) and the output head's weight (V, H), no logits.

    The same inputs as :func:`forward_logits` without a cache; the caller applies the head (for
    log-probs chunk by chunk, so that no (B, L, V) tensor exists).
    """
    kwargs: dict[str, Any] = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos,
                                  use_cache=False)
    if pixel_values is not None:
        kwargs.update(image_inputs(model, pixel_values, image_grid_thw))  # the tower's metadata cached per layout
    if mm_token_type_ids is not None:
        kwargs["mm_token_type_ids"] = mm_token_type_ids
    out = model.model(**kwargs)
    return out.last_hidden_state, model.get_output_embeddings().weight


def banned_bias(vocab_size: int, banned: list[int], device: torch.device) -> Tensor:
    """(V,) bias: 0, or BANNED_LOGIT at tokens a response may never contain (cast to the logits' dtype)."""
    bias = torch.zeros(vocab_size, dtype=torch.float64, device=device)
    ids = [i for i in banned if i < vocab_size]
    if ids:
        bias[ids] = BANNED_LOGIT
    return bias
