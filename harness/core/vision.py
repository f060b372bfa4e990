"""Qwen-VL image processing: resize to a patch grid, normalise, patchify.

The processor is transformers' own slow (PIL/numpy) Qwen2-VL image processor, which needs no
torchvision and no network:

* transformers 5.x (5.17 .. 5.24 at least) names it ``Qwen2VLImageProcessorPil``; the plain
  ``Qwen2VLImageProcessor`` there is the torchvision backend (without torchvision 5.24 falls back to
  the PIL class with a warning, so the PIL class is asked for by name first);
* transformers 4.x named the slow class ``Qwen2VLImageProcessor`` (the torchvision one was ``...Fast``).

If neither can be built, :class:`NumpyQwenImageProcessor` implements the same recipe
(smart resize → rescale → normalise → temporal tiling → merge-ordered patchify) in numpy.

Image mean/std are Qwen3-VL's (0.5, 0.5, 0.5); Qwen2/2.5-VL used the OpenAI CLIP values.

Model inputs: ``pixel_values`` is ``[N_patches, C * temporal_patch * patch * patch]`` and
``image_grid_thw`` is ``[n_images, 3]`` (t, h, w in patches). Each image becomes
``t*h*w // merge**2`` ``<|image_pad|>`` tokens in the prompt. In transformers 5.x a Qwen3-VL(-MoE)
forward with images must also get ``mm_token_type_ids`` (1 at ``<|image_pad|>`` positions, 0 elsewhere),
otherwise M-RoPE positions cannot be computed and the model raises.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import Any

import numpy as np
import torch
from PIL import Image

from harness.errors import HarnessError

QWEN3_VL_IMAGE_MEAN = (0.5, 0.5, 0.5)
QWEN3_VL_IMAGE_STD = (0.5, 0.5, 0.5)


def image_token_count(grid_thw_row: Any, merge_size: int) -> int:
    """Number of ``<|image_pad|>`` tokens one image occupies: ``t*h*w // merge_size**2``."""
    t, h, w = (int(v) for v in grid_thw_row)
    return t * h * w // (merge_size**2)


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen's resize rule: both sides multiples of ``factor``, area within [min_pixels, max_pixels]."""
    if max(height, width) / min(height, width) > 200:
        raise HarnessError(
            f"image aspect ratio {max(height, width) / min(height, width):.0f} is above 200",
            fix="use images whose longer side is at most 200x the shorter one",
        )
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class NumpyQwenImageProcessor:
    """Fallback with the same outputs as transformers' slow Qwen2-VL image processor."""

    model_input_names = ["pixel_values", "image_grid_thw"]

    def __init__(
        self,
        *,
        patch_size: int,
        temporal_patch_size: int,
        merge_size: int,
        min_pixels: int,
        max_pixels: int,
        image_mean: tuple[float, ...] = QWEN3_VL_IMAGE_MEAN,
        image_std: tuple[float, ...] = QWEN3_VL_IMAGE_STD,
    ) -> None:
        self.patch_size = patch_size
        self.temporal_patch_size = temporal_patch_size
        self.merge_size = merge_size
        self.min_pixels = min_pixels
        self.max_pixels = max_pixels
        self.image_mean = np.asarray(image_mean, dtype=np.float32)[:, None, None]
        self.image_std = np.asarray(image_std, dtype=np.float32)[:, None, None]

    def _one(self, image: Image.Image) -> tuple[np.ndarray, list[int]]:
        image = image.convert("RGB")
        factor = self.patch_size * self.merge_size
        h, w = smart_resize(image.height, image.width, factor, self.min_pixels, self.max_pixels)
        if (h, w) != (image.height, image.width):
            image = image.resize((w, h), resample=Image.Resampling.BICUBIC)
        arr = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        arr = (arr - self.image_mean) / self.image_std
        p, m, tp = self.patch_size, self.merge_size, self.temporal_patch_size
        c = arr.shape[0]
        gh, gw = h // p, w // p
        patches = arr.reshape(c, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
        patches = np.broadcast_to(patches[:, :, :, :, :, None], (*patches.shape[:5], tp, p, p))
        return patches.reshape(gh * gw, c * tp * p * p), [1, gh, gw]

    def __call__(self, images: list[Image.Image], return_tensors: str = "pt", **_: Any) -> dict[str, Any]:
        flat, grids = zip(*(self._one(im) for im in images))
        pixel_values = torch.from_numpy(np.ascontiguousarray(np.concatenate(flat, axis=0)))
        return {"pixel_values": pixel_values, "image_grid_thw": torch.tensor(grids, dtype=torch.long)}


def _transformers_class() -> type | None:
    """The slow (no torchvision) Qwen2-VL image processor class of the installed transformers."""
    try:
        import transformers
    except ImportError:  # pragma: no cover - transformers is a hard dependency
        return None
    cls = getattr(transformers, "Qwen2VLImageProcessorPil", None)
    if cls is not None:
        return cls
    major = int(transformers.__version__.split(".")[0])
    if major < 5:  # 4.x: the plain class is the slow numpy/PIL one
        return getattr(transformers, "Qwen2VLImageProcessor", None)
    return None


def build_image_processor(
    patch_size: int,
    temporal_patch_size: int,
    merge_size: int,
    min_pixels: int,
    max_pixels: int,
    *,
    prefer_transformers: bool = True,
) -> Any:
    """A Qwen-VL image processor configured with the recipe's vision settings."""
    for name, value in (
        ("patch_size", patch_size),
        ("temporal_patch_size", temporal_patch_size),
        ("merge_size", merge_size),
        ("min_pixels", min_pixels),
        ("max_pixels", max_pixels),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise HarnessError(f"{name} must be a positive integer, got {value!r}", key_path=name)
    if min_pixels > max_pixels:
        raise HarnessError(
            f"min_pixels {min_pixels} is above max_pixels {max_pixels}",
            key_path="min_pixels",
            fix="set min_pixels <= max_pixels",
        )
    kwargs: dict[str, Any] = dict(
        patch_size=patch_size,
        temporal_patch_size=temporal_patch_size,
        merge_size=merge_size,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        image_mean=list(QWEN3_VL_IMAGE_MEAN),
        image_std=list(QWEN3_VL_IMAGE_STD),
    )
    cls = _transformers_class() if prefer_transformers else None
    if cls is not None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return cls(do_convert_rgb=True, **kwargs)
        except Exception:  # noqa: BLE001 - any failure → the numpy implementation of the same recipe
            pass
    kwargs["image_mean"] = QWEN3_VL_IMAGE_MEAN
    kwargs["image_std"] = QWEN3_VL_IMAGE_STD
    return NumpyQwenImageProcessor(**kwargs)


# per processor (held weakly: a freed processor's grids go with it), per image size and mode
_GRIDS: weakref.WeakKeyDictionary[Any, dict[tuple[tuple[int, int], str], list[int]]] = weakref.WeakKeyDictionary()


def image_grids(proc: Any, images: list[Image.Image]) -> torch.Tensor:
    """``image_grid_thw`` [n_images, 3] as :func:`process_images` gives it, without the pixels: a Qwen-VL
    processor's grid follows from an image's size alone (its resize to a multiple of the patch and merge sizes
    within the pixel bounds), so each size and mode is processed once, as a blank image, per process. For
    counting prompt tokens (``harness plan``): the unit tests check it against the real images' grids."""
    grids = _GRIDS.setdefault(proc, {})
    rows = []
    for im in images:
        key = (im.size, im.mode)
        if key not in grids:
            grids[key] = process_images(proc, [Image.new(im.mode, im.size)])[1][0].tolist()
        rows.append(grids[key])
    return torch.tensor(rows, dtype=torch.long)


def process_images(proc: Any, images: list[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pixel_values [N_patches, C*tp*p*p] float32, image_grid_thw [n_images, 3] int64)``."""
    if not images:
        raise HarnessError("process_images got no images", fix="pass at least one image, or skip the processor")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = proc(images=list(images), return_tensors="pt")
    pixel_values = torch.as_tensor(out["pixel_values"]).to(torch.float32)
    grid = torch.as_tensor(out["image_grid_thw"]).to(torch.long)
    return pixel_values, grid
