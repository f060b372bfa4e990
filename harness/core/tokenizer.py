"""The shipped offline tokenizer and the Qwen chat template (plain Python, no Jinja).

``harness/assets/tokenizer/tokenizer.json`` is a byte-level BPE tokenizer (256 bytes + 235 merges)
with Qwen's chat/vision special tokens and ``<think>``/``</think>`` appended; it is rebuilt
byte-for-byte by ``harness/assets/build_tokenizer.py``. Nothing here touches the network.
"""

from __future__ import annotations

import functools
import importlib.resources
from pathlib import Path

from harness.errors import HarnessError

VOCAB_SIZE = 500  # len(tokenizer): 491 BPE tokens + 7 special + 2 think tokens

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # EOS of the assistant turn
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
THINK = "<think>"
THINK_END = "</think>"

PAD_ID = 491
IM_START_ID = 492
EOS_ID = IM_END_ID = 493
VISION_START_ID = 494
VISION_END_ID = 495
IMAGE_PAD_ID = 496
VIDEO_PAD_ID = 497
THINK_ID = 498
THINK_END_ID = 499

TOKEN_IDS = {
    PAD_TOKEN: PAD_ID,
    IM_START: IM_START_ID,
    IM_END: IM_END_ID,
    VISION_START: VISION_START_ID,
    VISION_END: VISION_END_ID,
    IMAGE_PAD: IMAGE_PAD_ID,
    VIDEO_PAD: VIDEO_PAD_ID,
    THINK: THINK_ID,
    THINK_END: THINK_END_ID,
}

# ids a sampler must never emit (the EOS <|im_end|> is samplable)
NON_SAMPLABLE: list[int] = [IMAGE_PAD_ID, VIDEO_PAD_ID, VISION_START_ID, VISION_END_ID, IM_START_ID, PAD_ID]


def tokenizer_dir() -> Path:
    """Folder of the shipped ``tokenizer.json`` / ``tokenizer_config.json``."""
    root = importlib.resources.files("harness") / "assets" / "tokenizer"
    return Path(str(root))


@functools.lru_cache(maxsize=1)
def _load_cached():  # noqa: ANN202 - transformers type imported lazily
    return _load(tokenizer_dir() / "tokenizer.json")


def _require(path: Path) -> Path:
    """``path``, or a one-line error if the tokenizer file is not there."""
    if not path.is_file():
        raise HarnessError(
            "the shipped tokenizer file is missing",
            file=str(path),
            fix="reinstall the package or run python harness/assets/build_tokenizer.py",
        )
    return path


def _load(path: Path):  # noqa: ANN202
    from transformers import PreTrainedTokenizerFast

    _require(path)
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    tok.padding_side = "left"
    return tok


@functools.lru_cache(maxsize=1)
def shipped_tokenizer_size() -> int:
    """``len(load_tokenizer())`` (the vocabulary with the special tokens), read with the ``tokenizers`` library alone:
    a config check needs no ``transformers`` import (0.9 s on an AVX2 EPYC core)."""
    from tokenizers import Tokenizer

    path = _require(tokenizer_dir() / "tokenizer.json")
    return int(Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True))


def load_tokenizer(path: str | Path | None = None):  # noqa: ANN201 - transformers.PreTrainedTokenizerFast
    """The shipped tokenizer as a ``transformers.PreTrainedTokenizerFast`` (cached; offline only).

    ``path`` (a ``tokenizer.json`` or a folder holding one) loads another copy, e.g. a rebuilt one.
    """
    if path is None:
        tok = _load_cached()
    else:
        p = Path(path)
        tok = _load(p / "tokenizer.json" if p.is_dir() else p)
    check_tokenizer(tok)
    return tok


def check_tokenizer(tok) -> None:  # noqa: ANN001
    """Fail with a one-line error if the tokenizer's special ids are not the ones this module assumes."""
    for text, expected in TOKEN_IDS.items():
        got = tok.convert_tokens_to_ids(text)
        if got != expected:
            raise HarnessError(
                f"tokenizer maps {text} to {got}, expected {expected}",
                fix="use the shipped tokenizer (rebuild it with harness/assets/build_tokenizer.py)",
            )


def special_token_ids(tok) -> dict[str, int]:  # noqa: ANN001
    """The special ids a rollout / model config needs, read from ``tok``."""
    ids = tok.convert_tokens_to_ids
    return {
        "pad": ids(PAD_TOKEN),
        "eos": ids(IM_END),
        "im_start": ids(IM_START),
        "image_pad": ids(IMAGE_PAD),
        "video_pad": ids(VIDEO_PAD),
        "vision_start": ids(VISION_START),
        "vision_end": ids(VISION_END),
        "think": ids(THINK),
        "think_end": ids(THINK_END),
    }


def render_prompt(question: str, n_images: int, image_token_counts: list[int]) -> str:
    """Qwen chat prompt for one user turn, ending with the open assistant turn.

    ``<|im_start|>user\\n`` + one ``<|vision_start|><|image_pad|>*k<|vision_end|>`` per image +
    question + ``<|im_end|>\\n<|im_start|>assistant\\n``.
    """
    counts = list(image_token_counts)
    if n_images != len(counts):
        raise HarnessError(
            f"render_prompt got n_images={n_images} but {len(counts)} image token counts",
            fix="pass one token count per image",
        )
    if any(int(k) <= 0 for k in counts):
        raise HarnessError(f"image token counts must be positive, got {counts}")
    vision = "".join(f"{VISION_START}{IMAGE_PAD * int(k)}{VISION_END}" for k in counts)
    return f"{IM_START}user\n{vision}{question}{IM_END}\n{IM_START}assistant\n"
