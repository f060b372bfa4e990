"""The vision tower's image metadata, computed once per image layout.

Every forward of a Qwen3-VL model rebuilds, from ``image_grid_thw`` alone, the rotary position ids of every
patch, the taps that resample the learned position-embedding table to each image's grid and the packed
attention's sequence boundaries. The position ids are a Python loop of small tensor ops per image: on an H200 host
the GPU smoke spent 5.1 s of its 54 s profiled wall in them (365 vision forwards of ~57 images, 20,800
per-image loops) and 0.8 s in the interpolation taps. They depend on the grid alone, and a run's micro-batches
repeat the same few layouts, so they are computed once per (tower, device, grid) with transformers' own
helpers and handed to the tower as its documented precomputed inputs (``vision_utils``: each helper returns a
precomputed value given under its key). The tower output is then passed to the model as ``mm_encoder_outputs``:
the same computation on the same values, bit for bit (``tests/unit/test_vision_cache.py``).

A model whose forward takes no ``mm_encoder_outputs``, whose tower lacks the attributes used here (another
architecture or transformers release) or whose parameters are FSDP shards (gathered by the model's own forward
only) is called as before.
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import Tensor

_CACHE: dict[tuple[tuple[Any, ...], str, tuple[tuple[int, ...], ...]], dict[str, Any]] = {}
_CACHE_LIMIT = 256  # layouts kept (a run has a few; a cap keeps an unusual run's memory bounded)
_TOWER_ATTRS = ("num_grid_per_side", "interpolation_mode", "interpolation_align_corners", "spatial_merge_size",
                "config")
_TAKES_ENCODER_OUTPUTS: dict[type, bool] = {}


def _tower(model: Any) -> Any | None:
    """The model's vision tower when its metadata can be precomputed here, else None."""
    inner = getattr(model, "model", None)
    visual = getattr(inner, "visual", None)
    if visual is None or not hasattr(inner, "get_image_features") or not all(hasattr(visual, a) for a in _TOWER_ATTRS):
        return None
    cls = type(model)
    if cls not in _TAKES_ENCODER_OUTPUTS:
        try:
            from transformers import vision_utils  # noqa: F401
            takes = "mm_encoder_outputs" in inspect.signature(model.forward).parameters
        except ImportError:
            takes = False
        _TAKES_ENCODER_OUTPUTS[cls] = takes
    if not _TAKES_ENCODER_OUTPUTS[cls] or _sharded(visual):
        return None
    return visual


def _sharded(visual: Any) -> bool:
    """Whether the tower's parameters are shards (FSDP2's DTensors): only the model's own forward gathers them (its
    pre-forward hooks), so the tower is then not called on its own."""
    from torch.distributed.tensor import DTensor

    first = next(visual.parameters(), None)
    return isinstance(first, DTensor)


def _layout(visual: Any) -> tuple[Any, ...]:
    """What the metadata depends on besides the grid: the tower's table size, resampling, merge size and attention
    kernel (a flash kernel also takes the longest sequence). Towers alike (the actor's and the reference's) share."""
    return (visual.num_grid_per_side, visual.interpolation_mode, visual.interpolation_align_corners,
            visual.spatial_merge_size, visual.config.spatial_merge_size,
            str(getattr(visual.config, "_attn_implementation", None)))


def metadata(visual: Any, grid: Tensor) -> dict[str, Any]:
    """The tower's precomputed inputs for ``grid`` (cached): the keys its helpers take."""
    from transformers.vision_utils import (
        get_vision_attention_seqlens,
        get_vision_interpolation_indices_and_weights,
        get_vision_position_ids,
    )

    key = (_layout(visual), str(grid.device), tuple(tuple(int(x) for x in row) for row in grid.tolist()))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    indices, weights = get_vision_interpolation_indices_and_weights(
        grid, num_grid_per_side=visual.num_grid_per_side, mode=visual.interpolation_mode,
        align_corners=visual.interpolation_align_corners, spatial_merge_size=visual.config.spatial_merge_size)
    cu_seqlens, max_seqlen = get_vision_attention_seqlens(grid, visual.config)
    meta: dict[str, Any] = {"interp_indices": indices, "interp_weights": weights,
                            "position_ids": get_vision_position_ids(grid, visual.spatial_merge_size),
                            "cu_seqlens": cu_seqlens}
    if max_seqlen is not None:
        meta["max_seqlen"] = max_seqlen
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = meta
    return meta


def image_inputs(model: Any, pixel_values: Tensor, image_grid_thw: Tensor | None) -> dict[str, Any]:
    """The keyword arguments that give ``model`` its images: the tower's output as ``mm_encoder_outputs`` (its
    metadata from the cache) where the model takes it, else ``pixel_values`` and ``image_grid_thw`` as they are."""
    if image_grid_thw is None or (visual := _tower(model)) is None:
        return {"pixel_values": pixel_values, "image_grid_thw": image_grid_thw}
    out = model.model.get_image_features(pixel_values, image_grid_thw, return_dict=True,
                                         **metadata(visual, image_grid_thw))
    return {"mm_encoder_outputs": {"image": out}, "image_grid_thw": image_grid_thw}
