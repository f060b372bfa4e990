"""Synthetic tasks, local geo3k files, prompt encoding, the stateful loader, collation, vision."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.core import data as dt
from harness.core import tasks
from harness.core import tokenizer as tk
from harness.core.reward import compute_reward
from harness.core.vision import build_image_processor, image_token_count, process_images
from harness.errors import HarnessError

ALL_TASKS = ["color", "count", "longer", "digit", "text_choice", "add"]
VISION_TASKS = ["color", "count", "longer", "digit"]


@pytest.fixture(scope="module")
def tok():
    return tk.load_tokenizer()


@pytest.fixture(scope="module")
def proc():
    return build_image_processor(8, 2, 2, 16 * 16, 64 * 64)


def _loader(examples, tok, proc=None, **kw):
    args = dict(batch_size=2, max_prompt_length=256, truncation="error", filter_overlong_prompts=False, seed=0)
    args.update(kw)
    return dt.PromptLoader(examples, tok, proc, 2, **args)


# --------------------------------------------------------------------------- tasks
def test_task_registry():
    assert set(ALL_TASKS) <= set(dt.task_names())
    with pytest.raises(ValueError, match="already registered"):
        dt.register_task("color", choices=("A",), thought="t", vision=True)(tasks.color_task)
    with pytest.raises(HarnessError, match="add, color, count"):
        dt.build_synthetic(["nope"], 2, 0, "train", 32)


def test_build_synthetic_is_deterministic_and_round_robin():
    a = dt.build_synthetic(ALL_TASKS, 12, 3, "train", 32)
    b = dt.build_synthetic(ALL_TASKS, 12, 3, "train", 32)
    assert a == b
    assert [e.data_source for e in a[:6]] == [f"synthetic/{t}" for t in ALL_TASKS]
    assert dt.build_synthetic(ALL_TASKS, 5, 3, "train", 32) == a[:5]  # prefix-stable
    assert dt.build_synthetic(ALL_TASKS, 12, 4, "train", 32) != a


def test_train_and_val_are_disjoint():
    train = dt.build_synthetic(VISION_TASKS, 16, 0, "train", 32)
    val = dt.build_synthetic(VISION_TASKS, 16, 0, "val", 32)
    assert not {e.uid for e in train} & {e.uid for e in val}
    pixels = {np.asarray(e.images[0]).tobytes() for e in train}
    assert not pixels & {np.asarray(e.images[0]).tobytes() for e in val}


@pytest.mark.parametrize("task", ALL_TASKS)
def test_every_task_is_checkable(task):
    exs = dt.build_synthetic([task], 20, 1, "train", 32)
    for e in exs:
        assert e.answer in dt.answer_choices(task) == dt.answer_choices(e)
        assert e.question.endswith(tasks.INSTRUCTION) and "<image>" not in e.question
        if task in VISION_TASKS:
            assert len(e.images) == 1 and e.images[0].size == (32, 32) and e.images[0].mode == "RGB"
        else:
            assert e.images == ()
    assert len({e.answer for e in exs}) > 1  # answers vary


def test_color_images_are_nearly_uniform():
    for e in dt.build_synthetic(["color"], 8, 0, "train", 48):
        arr = np.asarray(e.images[0]).astype(int)
        want = tasks.COLOR_RGB[tasks.COLOR_NAMES["ABCD".index(e.answer)]]
        assert np.abs(arr.mean(axis=(0, 1)) - want).max() < 3 and arr.std(axis=(0, 1)).max() < 10


def test_text_choice_answer_is_the_colour_code():
    codes = {"red": "A", "green": "B", "blue": "C", "yellow": "D"}
    seen = set()
    for e in dt.build_synthetic(["text_choice"], 20, 0, "train", 32):
        word = e.question.split("The colour is ")[1].split(".")[0]
        assert e.answer == codes[word] and not e.images
        seen.add(word)
    assert seen == set(codes)


@pytest.mark.parametrize("bad", [0, 24, 31])
def test_image_size_must_be_multiple_of_16(bad):
    with pytest.raises(HarnessError, match="multiple of 16"):
        dt.build_synthetic(["color"], 2, 0, "train", bad)


def test_bad_split_and_size():
    with pytest.raises(HarnessError, match="split"):
        dt.build_synthetic(["color"], 2, 0, "dev", 32)
    with pytest.raises(HarnessError, match="size"):
        dt.build_synthetic(["color"], 0, 0, "train", 32)


def test_demo_response_is_format_only():
    rng = np.random.default_rng(0)
    exs = dt.build_synthetic(ALL_TASKS, 60, 0, "train", 32)
    demos = [dt.demo_response(e, rng) for e in exs]
    for e, d in zip(exs, demos):
        r = compute_reward("geo3k", d, e.answer)
        assert r.format == 1.0
        assert d.split("\\boxed{")[1].rstrip("}") in dt.answer_choices(e)
    accs = [compute_reward("geo3k", d, e.answer).acc for e, d in zip(exs, demos)]
    assert 0 < sum(accs) < len(accs)  # random choice, not the truth


# --------------------------------------------------------------------------- vision
def test_vision_grid_and_token_count(proc):
    img = Image.new("RGB", (32, 32), (10, 20, 30))
    pv, grid = process_images(proc, [img])
    assert grid.tolist() == [[1, 4, 4]] and grid.dtype == torch.long
    assert pv.shape == (16, 3 * 2 * 8 * 8) and pv.dtype == torch.float32
    assert image_token_count(grid[0], 2) == 4


def test_numpy_fallback_matches_transformers(proc):
    rng = np.random.default_rng(0)
    imgs = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in [(32, 32), (40, 56)]]
    fallback = build_image_processor(8, 2, 2, 16 * 16, 64 * 64, prefer_transformers=False)
    pv_a, g_a = process_images(proc, imgs)
    pv_b, g_b = process_images(fallback, imgs)
    assert torch.equal(g_a, g_b) and torch.allclose(pv_a, pv_b, atol=1e-5)


@pytest.mark.parametrize("transformers_class", [True, False])
def test_grids_without_pixels_are_the_processed_images_grids(transformers_class):
    """``harness plan`` counts prompt tokens from grids computed on blank images of each size: the same grids as
    the real images give, for sizes inside, below and above the pixel bounds and not multiples of the patch."""
    from harness.core.vision import image_grids

    p = build_image_processor(8, 2, 2, 16 * 16, 64 * 64, prefer_transformers=transformers_class)
    rng = np.random.default_rng(1)
    sizes = [(32, 32), (40, 56), (8, 8), (200, 90), (33, 17), (64, 64)]
    imgs = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
    imgs.append(Image.fromarray(rng.integers(0, 256, (24, 40), dtype=np.uint8)))  # a greyscale one
    assert torch.equal(image_grids(p, imgs), process_images(p, imgs)[1])


def test_grids_are_kept_per_processor_not_per_address():
    """The grid memo belongs to its processor: processors made and freed one after the other (which can reuse
    one address) each get their own settings' grids, and a freed processor leaves no entry behind."""
    import gc

    from harness.core import vision

    img = [Image.new("RGB", (64, 64))]
    for patch in (8, 16, 8, 16):
        p = build_image_processor(patch, 2, 2, 16 * 16, 64 * 64, prefer_transformers=False)
        assert torch.equal(vision.image_grids(p, img), process_images(p, img)[1])
        del p
        gc.collect()
        assert len(vision._GRIDS) == 0


def test_a_prompt_encoded_without_pixels_has_the_same_tokens(tok, proc):
    examples = dt.build_synthetic(["color", "count", "longer", "digit", "text_choice"], 10, 3, "train", 48)
    for ex in examples:
        full, counted = dt.encode_example(ex, tok, proc, 2), dt.encode_example(ex, tok, proc, 2, pixels=False)
        assert counted.input_ids == full.input_ids and counted.pixel_values is None
        assert (counted.image_grid_thw is None) == (full.image_grid_thw is None)
        if full.image_grid_thw is not None:
            assert torch.equal(counted.image_grid_thw, full.image_grid_thw)
    # and an image prompt over the limit is refused alike (images cannot be truncated)
    vis = examples[0]
    for pixels in (True, False):
        with pytest.raises(HarnessError, match="cannot be truncated"):
            _loader([vis, vis], tok, proc, max_prompt_length=5, truncation="left", pixels=pixels)


def test_a_batchs_pixels_are_computed_when_it_is_drawn_and_equal_the_eager_ones(tok, proc):
    examples = dt.build_synthetic(["color", "count", "text_choice"], 12, 3, "train", 48)
    loader = _loader(examples, tok, proc, batch_size=3)
    assert all(p.pixel_values is None for p in loader.prompts)  # tokens and grids only, up front
    drawn = loader.next_batch() + loader.next_batch()
    for p in drawn:
        eager = dt.encode_example(p.example, tok, proc, 2)
        assert p.input_ids == eager.input_ids
        assert (p.pixel_values is None) == (eager.pixel_values is None)
        if eager.pixel_values is not None:
            assert torch.equal(p.pixel_values, eager.pixel_values)
            assert torch.equal(p.image_grid_thw, eager.image_grid_thw)
    drawn_ids = {p.example.uid for p in drawn}
    kept = {p.example.uid for p in loader.prompts if p.pixel_values is not None}
    assert kept and kept <= drawn_ids  # kept for the prompts drawn, none processed for the others
    assert loader.prompt(loader.prompts.index(drawn[0])) is drawn[0]  # processed once
    assert all(p.pixel_values is None for p in _loader(examples, tok, proc, pixels=False).next_batch())


def test_bad_processor_settings():
    with pytest.raises(HarnessError, match="patch_size"):
        build_image_processor(0, 2, 2, 256, 4096)
    with pytest.raises(HarnessError, match="min_pixels"):
        build_image_processor(8, 2, 2, 8192, 4096)


# --------------------------------------------------------------------------- encoding
def test_encode_vision_and_text(tok, proc):
    vis, txt = dt.build_synthetic(["color", "text_choice"], 2, 0, "train", 32)
    ev = dt.encode_example(vis, tok, proc, 2)
    assert ev.input_ids.count(tk.IMAGE_PAD_ID) == 4 == ev.num_image_tokens
    assert ev.image_grid_thw.tolist() == [[1, 4, 4]] and ev.pixel_values.shape == (16, 384)
    assert ev.input_ids[-3:] == tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    et = dt.encode_example(txt, tok, None, 2)
    assert et.pixel_values is None and et.image_grid_thw is None and tk.VISION_START_ID not in et.input_ids
    with pytest.raises(HarnessError, match="no vision tower"):
        dt.encode_example(vis, tok, None, 2)


# --------------------------------------------------------------------------- loader
def test_loader_batches_epochs_and_resume(tok):
    exs = dt.build_synthetic(["text_choice"], 7, 0, "train", 32)
    loader = _loader(exs, tok, batch_size=3, shuffle=True, seed=5)
    assert len(loader) == 2
    seen = [[p.example.uid for p in loader.next_batch()] for _ in range(5)]
    assert all(len(b) == 3 for b in seen)
    assert len(set(seen[0] + seen[1])) == 6  # one epoch: no repeats
    assert loader.state_dict()["epoch"] == 2
    again = _loader(exs, tok, batch_size=3, shuffle=True, seed=5)
    assert [[p.example.uid for p in again.next_batch()] for _ in range(5)] == seen
    # resume from the state after 3 batches
    first = _loader(exs, tok, batch_size=3, shuffle=True, seed=5)
    for _ in range(3):
        first.next_batch()
    state = json.loads(json.dumps(first.state_dict()))
    resumed = _loader(exs, tok, batch_size=3, shuffle=True, seed=5)
    resumed.load_state_dict(state)
    assert [[p.example.uid for p in resumed.next_batch()] for _ in range(2)] == seen[3:]
    other_seed = _loader(exs, tok, batch_size=3, shuffle=True, seed=6)
    with pytest.raises(HarnessError, match="seed"):
        other_seed.load_state_dict(state)


def test_loader_without_shuffle_keeps_order(tok):
    exs = dt.build_synthetic(["add"], 4, 0, "train", 32)
    loader = _loader(exs, tok, batch_size=2, shuffle=False)
    batches = [[p.example.uid for p in b] for b, _ in zip(loader, range(3))]
    assert batches == [[exs[0].uid, exs[1].uid], [exs[2].uid, exs[3].uid], [exs[0].uid, exs[1].uid]]


def test_overlong_prompts(tok, proc):
    exs = dt.build_synthetic(["text_choice", "add"], 6, 0, "train", 32)
    lengths = [len(dt.encode_example(e, tok, None, 2).input_ids) for e in exs]
    limit = min(lengths)
    assert max(lengths) > limit
    with pytest.raises(HarnessError, match=r"prompt train-\d+-\w+ has \d+ tokens, above max_prompt_length"):
        _loader(exs, tok, max_prompt_length=limit)
    filtered = _loader(exs, tok, max_prompt_length=limit, filter_overlong_prompts=True)
    assert filtered.num_filtered == sum(n > limit for n in lengths)
    assert all(len(p.input_ids) <= limit for p in filtered.prompts)
    for mode in ("left", "right"):
        cut = _loader(exs, tok, max_prompt_length=limit, truncation=mode)
        assert len(cut.prompts) == 6 and max(len(p.input_ids) for p in cut.prompts) == limit
    longest = max(range(6), key=lambda i: lengths[i])
    full = dt.encode_example(exs[longest], tok, None, 2).input_ids
    right = _loader(exs, tok, max_prompt_length=limit, truncation="right", shuffle=False).prompts[longest]
    left = _loader(exs, tok, max_prompt_length=limit, truncation="left", shuffle=False).prompts[longest]
    assert right.input_ids == full[:limit] and left.input_ids == full[-limit:]
    vis = dt.build_synthetic(["color"], 2, 0, "train", 32)
    with pytest.raises(HarnessError, match="image tokens"):
        _loader(vis, tok, proc, max_prompt_length=10, truncation="left")
    with pytest.raises(HarnessError, match="only 0 prompts left"):
        _loader(vis, tok, proc, max_prompt_length=10, filter_overlong_prompts=True)
    with pytest.raises(HarnessError, match="truncation"):
        _loader(exs, tok, truncation="middle")


# --------------------------------------------------------------------------- collation + model
def test_collate_left_pads(tok, proc):
    exs = dt.build_synthetic(["color", "text_choice", "count"], 3, 0, "train", 32)
    batch = [dt.encode_example(e, tok, proc, 2) for e in exs]
    out = dt.collate_prompts(batch, tk.PAD_ID)
    width = max(len(p.input_ids) for p in batch)
    assert out["input_ids"].shape == out["attention_mask"].shape == (3, width)
    for row, p in enumerate(batch):
        n = len(p.input_ids)
        assert out["input_ids"][row, width - n :].tolist() == p.input_ids
        assert out["attention_mask"][row].tolist() == [0] * (width - n) + [1] * n
        assert (out["input_ids"][row, : width - n] == tk.PAD_ID).all()
    assert out["pixel_values"].shape == (32, 384) and out["image_grid_thw"].tolist() == [[1, 4, 4]] * 2
    assert out["mm_token_type_ids"].sum().item() == 8
    assert torch.equal(out["mm_token_type_ids"].bool(), out["input_ids"] == tk.IMAGE_PAD_ID)
    text_only = dt.collate_prompts([batch[1]], tk.PAD_ID)
    assert set(text_only) == {"input_ids", "attention_mask"}


def test_tiny_qwen3_vl_moe_forward(tok, proc):
    transformers = pytest.importorskip("transformers")
    ids = tk.special_token_ids(tok)
    text = dict(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        intermediate_size=256,
        vocab_size=len(tok),
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [8, 4, 4],
            "mrope_interleaved": True,
        },
    )
    vision = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=8,
        temporal_patch_size=2,
        spatial_merge_size=2,
        out_hidden_size=128,
        num_position_embeddings=64,
        deepstack_visual_indexes=[1],
    )
    cfg = transformers.Qwen3VLMoeConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["image_pad"],
        video_token_id=ids["video_pad"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
    )
    torch.manual_seed(0)
    model = transformers.Qwen3VLMoeForConditionalGeneration(cfg).eval()
    exs = dt.build_synthetic(["color", "text_choice"], 2, 0, "train", 32)
    inputs = dt.collate_prompts([dt.encode_example(e, tok, proc, 2) for e in exs], tk.PAD_ID)
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (*inputs["input_ids"].shape, len(tok)) and torch.isfinite(logits).all()
    without = {k: v for k, v in inputs.items() if k != "mm_token_type_ids"}
    with pytest.raises(ValueError, match="mm_token_type_ids"), torch.no_grad():
        model(**without)


# --------------------------------------------------------------------------- local files
def _png_bytes(color):
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(buf, format="PNG")
    return buf.getvalue()


def test_load_raw_geo3k_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [
        {"images": [{"bytes": _png_bytes((255, 0, 0)), "path": None}], "problem": "<image>Find x.", "answer": "3"},
        {"images": [{"bytes": _png_bytes((0, 0, 255)), "path": None}], "problem": "Find y. <image>", "answer": "4.5"},
    ]
    path = tmp_path / "geo3k.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    exs = dt.load_local(path)
    assert [e.answer for e in exs] == ["3", "4.5"]
    assert exs[0].question == f"Find x.\n{tasks.INSTRUCTION}" and exs[1].question.startswith("Find y.")
    assert exs[0].images[0].getpixel((0, 0)) == (255, 0, 0) and exs[0].uid == "geo3k-0"


def test_load_verl_jsonl_with_image_paths(tmp_path):
    Image.new("RGB", (48, 32), (0, 255, 0)).save(tmp_path / "a.png")
    row = {
        "data_source": "hiyouga/geometry3k",
        "prompt": [{"role": "user", "content": "<image>Find the angle. Think first."}],
        "images": ["a.png"],
        "reward_model": {"style": "rule", "ground_truth": "60"},
        "extra_info": {"index": 7, "split": "train"},
    }
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(row) + "\n\n", encoding="utf-8")
    (ex,) = dt.load_local(path)
    assert ex.question == "Find the angle. Think first." and ex.answer == "60" and ex.uid == "7"
    assert ex.images[0].size == (48, 32) and ex.data_source == "hiyouga/geometry3k"


def test_load_local_errors(tmp_path):
    with pytest.raises(HarnessError, match="not found") as err:
        dt.load_local(tmp_path / "missing.parquet")
    assert "missing.parquet" in str(err.value) and "fix:" in str(err.value)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "Find x."}) + "\n", encoding="utf-8")
    with pytest.raises(HarnessError, match=r"bad.jsonl::\[0\].answer: row 0 has no field 'answer'"):
        dt.load_local(bad)
    missing_img = tmp_path / "img.jsonl"
    missing_img.write_text(json.dumps({"problem": "<image>Find x.", "answer": "1"}) + "\n", encoding="utf-8")
    with pytest.raises(HarnessError, match="placeholders"):
        dt.load_local(missing_img)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"problem": "x", "answer": "1", "images": ["nope.png"]}) + "\n", encoding="utf-8")
    with pytest.raises(HarnessError, match="cannot decode image"):
        dt.load_local(broken)
    other = tmp_path / "data.csv"
    other.write_text("a,b\n", encoding="utf-8")
    with pytest.raises(HarnessError, match="unsupported"):
        dt.load_local(other)


def test_image_files_are_bounded(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("1", (10_000, 10_000)).save(tmp_path / "huge.png")  # a few KB on disk, 10^8 pixels
    os.mkfifo(tmp_path / "fifo.png")
    for name, why in (("huge.png", "over the limit of"), ("fifo.png", "not a regular file")):
        data = tmp_path / f"{name}.jsonl"
        data.write_text(json.dumps({"problem": "<image>x", "answer": "1", "images": [name]}) + "\n")
        with pytest.raises(HarnessError, match=why) as err:
            dt.load_local(data)
        assert "\n" not in str(err.value) and f"{name}.jsonl" in str(err.value)
