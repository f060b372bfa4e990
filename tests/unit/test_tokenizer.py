"""The shipped tokenizer: determinism of its build, special ids, round trips, chat template."""

from __future__ import annotations

import importlib.util
import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import tokenizer as tk
from harness.errors import HarnessError

ASSETS = Path(tk.__file__).resolve().parents[1] / "assets"


def _build_module():
    spec = importlib.util.spec_from_file_location("build_tokenizer", ASSETS / "build_tokenizer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tok():
    return tk.load_tokenizer()


def test_rebuild_matches_shipped_files(tmp_path):
    mod = _build_module()
    mod.build(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        rebuilt = json.loads((tmp_path / name).read_text(encoding="utf-8"))
        shipped = json.loads((ASSETS / "tokenizer" / name).read_text(encoding="utf-8"))
        assert rebuilt == shipped, f"{name} differs: run python harness/assets/build_tokenizer.py"
    assert mod.VOCAB_SIZE == tk.VOCAB_SIZE
    rebuilt_tok = tk.load_tokenizer(tmp_path)
    assert len(rebuilt_tok) == tk.VOCAB_SIZE


def test_vocab_and_special_ids(tok):
    assert len(tok) == tk.VOCAB_SIZE == 500 == tk.shipped_tokenizer_size()  # the config check's light read
    ids = tk.special_token_ids(tok)
    assert ids == {
        "pad": tk.PAD_ID,
        "eos": tk.EOS_ID,
        "im_start": tk.IM_START_ID,
        "image_pad": tk.IMAGE_PAD_ID,
        "video_pad": tk.VIDEO_PAD_ID,
        "vision_start": tk.VISION_START_ID,
        "vision_end": tk.VISION_END_ID,
        "think": tk.THINK_ID,
        "think_end": tk.THINK_END_ID,
    }
    assert tok.eos_token_id == tk.EOS_ID and tok.pad_token_id == tk.PAD_ID
    assert tok.bos_token is None
    assert len(set(ids.values())) == len(ids)
    assert all(i < tk.VOCAB_SIZE for i in ids.values())


def test_non_samplable(tok):
    assert tk.EOS_ID not in tk.NON_SAMPLABLE
    assert set(tk.NON_SAMPLABLE) == {
        tk.IMAGE_PAD_ID,
        tk.VIDEO_PAD_ID,
        tk.VISION_START_ID,
        tk.VISION_END_ID,
        tk.IM_START_ID,
        tk.PAD_ID,
    }
    assert tk.THINK_ID not in tk.NON_SAMPLABLE and tk.THINK_END_ID not in tk.NON_SAMPLABLE


def test_think_tokens_are_added_but_not_special(tok):
    ids = tok.encode("<think>x</think>\\boxed{C}<|im_end|>", add_special_tokens=False)
    assert ids[0] == tk.THINK_ID and tk.THINK_END_ID in ids and ids[-1] == tk.EOS_ID
    assert tok.decode(ids, skip_special_tokens=True) == "<think>x</think>\\boxed{C}"


@pytest.mark.parametrize("piece", ["\\boxed{", " red", " blue", "Answer", " image"])
def test_frequent_pieces_are_single_tokens(tok, piece):
    assert len(tok.encode(piece, add_special_tokens=False)) == 1


@pytest.mark.parametrize(
    "text",
    [
        "What colour fills the image? Choices: A. red B. green C. blue D. yellow",
        "<think>the image is mostly one colour</think>\\boxed{C}",
        "Find x. 3.5 × 2 = ∠ABC — ünïcödé 漢字 🙂\n\ttabs",
        "",
    ],
)
def test_round_trip(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40).map(lambda s: unicodedata.normalize("NFC", s)))
def test_round_trip_any_nfc_text(tok, text):
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_render_prompt_with_and_without_images(tok):
    assert tk.render_prompt("Q?", 0, []) == "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    text = tk.render_prompt("Q?", 2, [2, 1])
    assert text == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|image_pad|><|vision_end|>"
        "<|vision_start|><|image_pad|><|vision_end|>Q?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tok.encode(text, add_special_tokens=False)
    assert ids.count(tk.IMAGE_PAD_ID) == 3 and ids.count(tk.VISION_START_ID) == 2
    assert ids[0] == tk.IM_START_ID and ids[-2:] == tok.encode("assistant\n", add_special_tokens=False)[-2:]


def test_render_prompt_rejects_mismatched_counts():
    with pytest.raises(HarnessError, match="image token counts"):
        tk.render_prompt("Q", 2, [4])
    with pytest.raises(HarnessError):
        tk.render_prompt("Q", 1, [0])


def test_missing_tokenizer_file_is_a_harness_error(tmp_path):
    with pytest.raises(HarnessError, match="missing"):
        tk.load_tokenizer(tmp_path / "nope.json")
