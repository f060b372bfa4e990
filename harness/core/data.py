"""Datasets → encoded prompts → seeded, resumable batches.

* :func:`build_synthetic` makes examples from the task registry in :mod:`harness.core.tasks`.
* :func:`load_local` reads a local geo3k-style ``.parquet`` / ``.jsonl`` (raw or verl-preprocessed).
* :func:`encode_example` renders the Qwen chat prompt and runs the image processor.
* :class:`PromptLoader` yields fixed-size batches with a per-epoch seeded shuffle and a
  ``state_dict`` holding (epoch, position) so a resumed run continues on the same data.
* :func:`collate_prompts` left-pads a batch for the rollout.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from PIL import Image

from harness.core import tokenizer as tk
from harness.core.tasks import (
    INSTRUCTION,
    Example,
    answer_choices,
    demo_response,
    get_task,
    register_task,
    task_names,
)
from harness.core.typed_recipe import MAX_EXAMPLES
from harness.core.vision import image_grids, image_token_count, process_images
from harness.errors import HarnessError
from harness.jsonio import read_bytes_limited

__all__ = [
    "Example",
    "EncodedPrompt",
    "PromptLoader",
    "SPLITS",
    "answer_choices",
    "build_synthetic",
    "collate_prompts",
    "demo_response",
    "encode_example",
    "load_local",
    "register_task",
    "task_names",
]

SPLITS = {"train": 0, "val": 1, "test": 2}
TRUNCATIONS = ("error", "left", "right")
IMAGE_PLACEHOLDER = re.compile(r"\s*<image>\s*")


# --------------------------------------------------------------------------- synthetic data
def build_synthetic(tasks: list[str], size: int, seed: int, split: str, image_size: int = 32) -> list[Example]:
    """``size`` examples, round-robin over ``tasks``; example i depends only on (tasks, seed, split, i)."""
    if not tasks:
        raise HarnessError(
            "no synthetic tasks given", key_path="data.synthetic.tasks", fix=f"list some of: {task_names()}"
        )
    specs = [get_task(t) for t in tasks]
    if split not in SPLITS:
        raise HarnessError(f"unknown split {split!r}", key_path="data.synthetic", fix=f"use one of {sorted(SPLITS)}")
    if not isinstance(size, int) or size <= 0:
        raise HarnessError(
            f"dataset size must be a positive integer, got {size!r}", key_path="data.synthetic.train_size"
        )
    if not isinstance(image_size, int) or image_size < 16 or image_size % 16:
        raise HarnessError(
            f"image_size must be a positive multiple of 16, got {image_size!r}",
            key_path="data.synthetic.image_size",
            fix="use 16, 32, 48, ...",
        )
    out = []
    for i in range(size):
        spec = specs[i % len(specs)]
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), SPLITS[split], i]))
        ex = spec.fn(rng, image_size)
        out.append(dataclasses.replace(ex, uid=f"{split}-{i:06d}-{spec.name}"))
    return out


# --------------------------------------------------------------------------- local files
DATA_LIMIT = 1 << 30  # bytes of one data file
IMAGE_FILE_LIMIT = 64 << 20  # bytes of one image file
IMAGE_PIXEL_LIMIT = 4096 * 4096  # pixels of one image (checked from the header, before decoding)
# A compressed, dictionary-encoded parquet file of a few KB can hold 10^7 rows, so its footer is checked before
# any data is read, and the decoded batches are counted as they come. (geo3k: 2,101 rows, 6 columns.)
MAX_ROWS = MAX_EXAMPLES  # rows of one data file (jsonl: lines), as many as a synthetic set may have
MAX_COLUMNS = 1024  # leaf columns of a parquet file
MAX_ROW_GROUPS = 65_536
MAX_DECODED = 4 << 30  # bytes of the decoded column data (the footer's uncompressed sizes, then the batches')
ROWS_FIX = "use a smaller data file (split it, or keep the rows the run needs)"


def _parquet_rows(data: bytes, path: Path) -> list[dict[str, Any]]:
    """The rows of a parquet file, its footer checked against the limits before any column is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(pa.BufferReader(data))
    md = pf.metadata
    for count, limit, what in ((md.num_rows, MAX_ROWS, "rows"), (md.num_columns, MAX_COLUMNS, "columns"),
                               (md.num_row_groups, MAX_ROW_GROUPS, "row groups")):
        if count > limit:
            raise HarnessError(f"parquet file has {count:,} {what}, over the limit of {limit:,}", file=str(path),
                               fix=ROWS_FIX)
    declared = sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    if declared > MAX_DECODED:
        raise HarnessError(f"parquet file decodes to {declared:,} bytes, over the limit of {MAX_DECODED:,}",
                           file=str(path), fix=ROWS_FIX)
    rows: list[dict[str, Any]] = []
    decoded = 0
    for batch in pf.iter_batches(batch_size=1024):  # the footer may understate: count what really comes
        decoded += batch.nbytes
        if decoded > MAX_DECODED or len(rows) + batch.num_rows > MAX_ROWS:
            raise HarnessError(f"parquet file holds more than its footer says (over {MAX_ROWS:,} rows or "
                               f"{MAX_DECODED:,} decoded bytes)", file=str(path), fix=ROWS_FIX)
        rows.extend(batch.to_pylist())
    return rows


def _read_rows(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".jsonl"):
        raise HarnessError(f"unsupported data file type {suffix!r}", file=str(path), fix="use a .parquet or .jsonl file")
    data = read_bytes_limited(path, DATA_LIMIT, what="data file")
    try:
        if suffix == ".parquet":
            return _parquet_rows(data, path)
        lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        if lines > MAX_ROWS:
            raise HarnessError(f"jsonl file has {lines:,} lines, over the limit of {MAX_ROWS:,}", file=str(path),
                               fix=ROWS_FIX)
        rows = []
        for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise HarnessError(
                        f"line {n} is not valid JSON ({err.msg})", file=str(path), fix="fix or drop that line"
                    ) from None
        return rows
    except HarnessError:
        raise
    except Exception as err:  # noqa: BLE001 - unreadable file → one-line error
        raise HarnessError(f"cannot read data file ({type(err).__name__}: {err})", file=str(path)) from None


def _field(row: dict[str, Any], dotted: str, path: Path, i: int) -> Any:
    cur: Any = row
    for part in dotted.split("."):
        if not isinstance(cur, dict) or cur.get(part) is None:
            raise HarnessError(
                f"row {i} has no field {dotted!r}",
                file=str(path),
                key_path=f"[{i}].{dotted}",
                fix="use geo3k's fields (problem, answer, images) or verl's (prompt, reward_model.ground_truth)",
            )
        cur = cur[part]
    return cur


def _image_bytes(path: Path) -> io.BytesIO:
    try:
        return io.BytesIO(read_bytes_limited(path, IMAGE_FILE_LIMIT, what="image file"))
    except HarnessError as err:
        raise ValueError(err.one_line()) from None


def _decode_image(item: Any, base: Path, path: Path, key: str) -> Image.Image:
    try:
        if isinstance(item, dict):
            if item.get("bytes"):
                src: Any = io.BytesIO(item["bytes"])
            elif item.get("path"):
                src = _image_bytes(base / item["path"])
            else:
                raise ValueError("image entry has neither bytes nor path")
        elif isinstance(item, (bytes, bytearray)):
            src = io.BytesIO(item)
        elif isinstance(item, str):
            src = _image_bytes(base / item)
        else:
            raise ValueError(f"unsupported image entry of type {type(item).__name__}")
        with warnings.catch_warnings():  # the size is checked here, against a lower limit than Pillow's warning
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(src)
        with im:
            w, h = im.size
            if w * h > IMAGE_PIXEL_LIMIT:
                raise HarnessError(f"image of {w}x{h} pixels is over the limit of {IMAGE_PIXEL_LIMIT} pixels",
                                   file=str(path), key_path=key, fix="downscale the image (geo3k images are small)")
            return im.convert("RGB")
    except HarnessError:
        raise
    except Exception as err:  # noqa: BLE001
        raise HarnessError(
            f"cannot decode image ({err})", file=str(path), key_path=key, fix="store images as {bytes} or a path"
        ) from None


def _question_of(row: dict[str, Any], path: Path, i: int) -> str:
    if "prompt" in row and row["prompt"] is not None:
        prompt = row["prompt"]
        if isinstance(prompt, str):
            return prompt
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not users:
            raise HarnessError(
                f"row {i} prompt has no user message", file=str(path), key_path=f"[{i}].prompt", fix="add one"
            )
        return str(users[-1])
    return str(_field(row, "problem", path, i)) + "\n" + INSTRUCTION


def load_local(path: str | Path) -> list[Example]:
    """Examples from a local geo3k-style file (raw HF geo3k or verl's preprocessed form)."""
    path = Path(path)
    rows = _read_rows(path)
    if not rows:
        raise HarnessError("data file has no rows", file=str(path), fix="use a non-empty file")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise HarnessError(f"row {i} is not an object", file=str(path), key_path=f"[{i}]")
        question = _question_of(row, path, i)
        if row.get("reward_model") is not None:
            answer = _field(row, "reward_model.ground_truth", path, i)
        else:
            answer = _field(row, "answer", path, i)
        raw_images = row.get("images") or []
        if not isinstance(raw_images, list):
            raw_images = [raw_images]
        placeholders = question.count("<image>")
        if placeholders > len(raw_images):
            raise HarnessError(
                f"row {i} text has {placeholders} <image> placeholders but {len(raw_images)} images",
                file=str(path),
                key_path=f"[{i}].images",
                fix="add the images or drop the placeholders",
            )
        images = tuple(_decode_image(im, path.parent, path, f"[{i}].images[{j}]") for j, im in enumerate(raw_images))
        question = IMAGE_PLACEHOLDER.sub(" ", question).strip()
        extra: dict[str, Any] = row["extra_info"] if isinstance(row.get("extra_info"), dict) else {}
        uid = str(row.get("uid") or row.get("id") or extra.get("index", f"{path.stem}-{i}"))
        source = str(row.get("data_source") or "hiyouga/geometry3k")
        out.append(Example(uid=uid, data_source=source, question=question, answer=str(answer), images=images))
    return out


# --------------------------------------------------------------------------- encoding
@dataclasses.dataclass(frozen=True)
class EncodedPrompt:
    input_ids: list[int]
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    example: Example

    @property
    def num_image_tokens(self) -> int:
        return sum(1 for t in self.input_ids if t == tk.IMAGE_PAD_ID)


def encode_example(example: Example, tokenizer: Any, image_processor: Any | None, merge_size: int, *,
                   pixels: bool = True) -> EncodedPrompt:
    """Render the chat prompt (with one vision block per image) and tokenise it; ``pixels`` False: the same token
    ids and grids without the pixel values (:func:`harness.core.vision.image_grids`)."""
    pixel_values = grid = None
    counts: list[int] = []
    if example.images:
        if image_processor is None:
            raise HarnessError(
                f"example {example.uid} has {len(example.images)} image(s) but the model has no vision tower",
                key_path="data",
                fix="use a text-only task (text_choice, add) or a vision-language model",
            )
        if pixels:
            pixel_values, grid = process_images(image_processor, list(example.images))
        else:
            grid = image_grids(image_processor, list(example.images))
        counts = [image_token_count(row, merge_size) for row in grid.tolist()]
    text = tk.render_prompt(example.question, len(counts), counts)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return EncodedPrompt(input_ids=list(ids), pixel_values=pixel_values, image_grid_thw=grid, example=example)


def _truncate(p: EncodedPrompt, limit: int, mode: str) -> EncodedPrompt:
    if p.image_grid_thw is not None:
        raise HarnessError(
            f"prompt {p.example.uid} has {len(p.input_ids)} tokens (limit {limit}) and contains image tokens, "
            f"which cannot be truncated",
            key_path="data.max_prompt_length",
            fix="raise data.max_prompt_length or set data.filter_overlong_prompts: true",
        )
    ids = p.input_ids[-limit:] if mode == "left" else p.input_ids[:limit]
    return dataclasses.replace(p, input_ids=ids)


# --------------------------------------------------------------------------- loader
class PromptLoader:
    """Endless fixed-size batches of :class:`EncodedPrompt`, resumable through ``state_dict``.

    Each epoch visits a permutation of the prompts (seeded from ``(seed, epoch)`` when ``shuffle``)
    in ``len(self)`` full batches; like a ``drop_last`` data loader, the last partial batch of an
    epoch is skipped and the next epoch starts.

    Every prompt is tokenised up front (its length decides filtering and truncation); its images' pixel values
    are computed when a batch first holds it (:meth:`prompt`), then kept: a run of a few steps, or one whose
    warm start comes from the cache, processes the images of the prompts it uses, not of all of them. The same
    processor on the same images, so the same values as computing them all at the start.
    """

    def __init__(
        self,
        examples: list[Example],
        tokenizer: Any,
        image_processor: Any | None,
        merge_size: int,
        batch_size: int,
        max_prompt_length: int,
        truncation: str = "error",
        filter_overlong_prompts: bool = False,
        shuffle: bool = True,
        seed: int = 0,
        pixels: bool = True,
    ) -> None:
        if truncation not in TRUNCATIONS:
            raise HarnessError(
                f"unknown truncation {truncation!r}", key_path="data.truncation", fix=f"use one of {TRUNCATIONS}"
            )
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise HarnessError(
                f"batch_size must be a positive integer, got {batch_size!r}", key_path="data.train_batch_size"
            )
        if not isinstance(max_prompt_length, int) or max_prompt_length <= 0:
            raise HarnessError(
                f"max_prompt_length must be a positive integer, got {max_prompt_length!r}",
                key_path="data.max_prompt_length",
            )
        self.batch_size = batch_size
        self.max_prompt_length = max_prompt_length
        self.shuffle = shuffle
        self.seed = int(seed)
        self.num_filtered = 0
        prompts: list[EncodedPrompt] = []
        self.image_processor = image_processor
        self.pixels = pixels
        for ex in examples:
            p = encode_example(ex, tokenizer, image_processor, merge_size, pixels=False)
            if len(p.input_ids) > max_prompt_length:
                if filter_overlong_prompts:
                    self.num_filtered += 1
                    continue
                if truncation == "error":
                    raise HarnessError(
                        f"prompt {ex.uid} has {len(p.input_ids)} tokens, above max_prompt_length {max_prompt_length}",
                        key_path="data.max_prompt_length",
                        fix="raise data.max_prompt_length or set data.filter_overlong_prompts: true",
                    )
                p = _truncate(p, max_prompt_length, truncation)
            prompts.append(p)
        if len(prompts) < batch_size:
            raise HarnessError(
                f"only {len(prompts)} prompts left ({self.num_filtered} filtered as overlong) "
                f"for a batch size of {batch_size}",
                key_path="data.train_batch_size",
                fix="add more examples, lower the batch size or raise data.max_prompt_length",
            )
        self.prompts = prompts
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self.prompts) // self.batch_size

    def _permutation(self, epoch: int) -> np.ndarray:
        n = len(self.prompts)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng(np.random.SeedSequence([self.seed, int(epoch)])).permutation(n)

    def next_batch(self) -> list[EncodedPrompt]:
        if self.position + self.batch_size > len(self.prompts):
            self.epoch += 1
            self.position = 0
            self._order = self._permutation(self.epoch)
        idx = self._order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return [self.prompt(int(i)) for i in idx]

    def prompt(self, index: int) -> EncodedPrompt:
        """Prompt ``index`` with its images' pixel values (computed on first use, then kept; none when the loader
        was made with ``pixels`` False)."""
        p = self.prompts[index]
        if self.pixels and p.example.images and p.pixel_values is None:
            pixel_values, grid = process_images(self.image_processor, list(p.example.images))
            counted = cast(torch.Tensor, p.image_grid_thw)  # the grid its tokens were counted from
            if not torch.equal(grid, counted):
                raise HarnessError(f"prompt {p.example.uid}: its images' grid {grid.tolist()} differs from the one its "
                                   f"tokens were counted with {counted.tolist()}",
                                   key_path="data", fix="report this: the image processor's grid is not its size's")
            p = self.prompts[index] = dataclasses.replace(p, pixel_values=pixel_values)
        return p

    def __iter__(self) -> Iterator[list[EncodedPrompt]]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "num_prompts": len(self.prompts),
            "batch_size": self.batch_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("num_prompts", "seed", "batch_size"):
            mine = len(self.prompts) if key == "num_prompts" else getattr(self, key)
            if key in state and int(state[key]) != mine:
                raise HarnessError(
                    f"loader state was saved with {key}={state[key]} but this run has {key}={mine}",
                    key_path=f"data_state.{key}",
                    fix="resume with the same data settings as the saved run",
                )
        try:
            epoch, position = int(state["epoch"]), int(state["position"])
        except (KeyError, TypeError, ValueError):
            raise HarnessError(
                "loader state needs integer 'epoch' and 'position'", key_path="data_state", fix="use a saved state"
            ) from None
        if epoch < 0 or not 0 <= position <= len(self.prompts):
            raise HarnessError(f"loader state out of range (epoch {epoch}, position {position})", key_path="data_state")
        self.epoch, self.position = epoch, position
        self._order = self._permutation(epoch)


# --------------------------------------------------------------------------- collation
def collate_prompts(
    batch: list[EncodedPrompt], pad_id: int, image_pad_id: int = tk.IMAGE_PAD_ID
) -> dict[str, torch.Tensor]:
    """Left-padded ``input_ids`` / ``attention_mask`` [B, P]; with images also the concatenated
    ``pixel_values``, ``image_grid_thw`` and ``mm_token_type_ids`` (1 at image-pad positions), which
    transformers 5.x Qwen3-VL models need for M-RoPE. Text-only batches carry only the first two."""
    if not batch:
        raise HarnessError("cannot collate an empty batch")
    width = max(len(p.input_ids) for p in batch)
    input_ids = torch.full((len(batch), width), int(pad_id), dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, p in enumerate(batch):
        n = len(p.input_ids)
        input_ids[row, width - n :] = torch.tensor(p.input_ids, dtype=torch.long)
        attention_mask[row, width - n :] = 1
    out = {"input_ids": input_ids, "attention_mask": attention_mask}
    with_images = [p for p in batch if p.pixel_values is not None]
    if with_images:
        out["pixel_values"] = torch.cat([cast(torch.Tensor, p.pixel_values) for p in with_images], dim=0)
        out["image_grid_thw"] = torch.cat([cast(torch.Tensor, p.image_grid_thw) for p in with_images], dim=0)
        out["mm_token_type_ids"] = ((input_ids == image_pad_id) & attention_mask.bool()).to(torch.long)
    return out
