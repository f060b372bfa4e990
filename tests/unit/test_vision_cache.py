"""The vision tower's metadata cached per image layout, and its attention batched per run of equal-length images,
change no bit: a tiny Qwen3-VL-MoE's logits and every parameter's gradient are identical with and without them, and a
second batch of the same layout reuses the cache."""

from __future__ import annotations

import copy

import pytest
import torch

from harness.core import data as dt
from harness.core import model_builder as mb
from harness.core import tokenizer as tk
from harness.core import vision_attention as va
from harness.core import vision_cache as vc
from harness.core.vision import build_image_processor

transformers = pytest.importorskip("transformers")


def _model(tok, attn="sdpa"):
    ids = tk.special_token_ids(tok)
    text = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, intermediate_size=128,
                vocab_size=len(tok), rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                                      "mrope_section": [4, 2, 2], "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8, temporal_patch_size=2,
                  spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=64, deepstack_visual_indexes=[1])
    cfg = transformers.Qwen3VLMoeConfig(text_config=text, vision_config=vision, image_token_id=ids["image_pad"],
                                        video_token_id=ids["video_pad"], vision_start_token_id=ids["vision_start"],
                                        vision_end_token_id=ids["vision_end"])
    cfg._attn_implementation = attn  # noqa: SLF001 - transformers' documented way before init
    torch.manual_seed(0)
    return transformers.Qwen3VLMoeForConditionalGeneration(cfg).train()


def _run(model, inputs):
    model.zero_grad(set_to_none=True)
    pos = mb.position_ids(model, inputs["input_ids"], inputs["attention_mask"], inputs["mm_token_type_ids"],
                          inputs["image_grid_thw"])
    logits, _ = mb.forward_logits(model, input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                  pos=pos, pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"],
                                  mm_token_type_ids=inputs["mm_token_type_ids"])
    logits.float().logsumexp(-1).sum().backward()
    return logits.detach().clone(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_cached_metadata_gives_the_same_bits_and_is_reused(monkeypatch):
    tok = tk.load_tokenizer()
    proc = build_image_processor(8, 2, 2, 16 * 16, 64 * 64)
    model = _model(tok)
    exs = dt.build_synthetic(["color", "text_choice", "color"], 3, 0, "train", 32)
    inputs = dt.collate_prompts([dt.encode_example(e, tok, proc, 2) for e in exs], tk.PAD_ID)
    assert inputs["pixel_values"] is not None and vc._tower(model) is not None
    vc._CACHE.clear()
    computed = []
    real = vc.metadata

    def counting(visual, grid):
        computed.append(len(vc._CACHE))
        return real(visual, grid)

    monkeypatch.setattr(vc, "metadata", counting)
    cached_logits, cached_grads = _run(model, inputs)
    again_logits, _ = _run(model, inputs)
    assert len(vc._CACHE) == 1 and computed == [0, 1]  # the second forward of the same layout found it
    monkeypatch.setattr(vc, "_tower", lambda m: None)  # the model's own computation, as before
    plain_logits, plain_grads = _run(model, inputs)
    assert torch.equal(cached_logits, plain_logits) and torch.equal(again_logits, plain_logits)
    assert cached_grads.keys() == plain_grads.keys() and any(n.startswith("model.visual") for n in plain_grads)
    for name, grad in plain_grads.items():
        assert torch.equal(cached_grads[name], grad), name


def test_a_model_without_encoder_outputs_gets_its_pixels_as_before():
    class Plain(torch.nn.Module):
        def forward(self, input_ids=None, pixel_values=None, image_grid_thw=None):  # no mm_encoder_outputs
            return None

    px, grid = torch.zeros(4, 3), torch.tensor([[1, 2, 2]])
    assert vc.image_inputs(Plain(), px, grid) == {"pixel_values": px, "image_grid_thw": grid}


def _inputs(tok):
    proc = build_image_processor(8, 2, 2, 16 * 16, 64 * 64)
    exs = dt.build_synthetic(["color", "text_choice", "color"], 3, 0, "train", 32)
    return dt.collate_prompts([dt.encode_example(e, tok, proc, 2) for e in exs], tk.PAD_ID)


def test_batched_vision_attention_gives_the_same_bits():
    tok = tk.load_tokenizer()
    model = _model(tok)
    plain = copy.deepcopy(model)
    assert va.use_batched_vision_attention(model) == 2  # the tower's two blocks
    assert va.use_batched_vision_attention(model) == 0  # switched once
    inputs = _inputs(tok)
    batched_logits, batched_grads = _run(model, inputs)
    plain_logits, plain_grads = _run(plain, inputs)
    assert torch.equal(batched_logits, plain_logits)
    assert batched_grads.keys() == plain_grads.keys() and any(".attn.qkv." in n for n in plain_grads)
    for name, grad in plain_grads.items():
        assert torch.equal(batched_grads[name], grad), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_images_of_several_lengths_attend_as_the_class_does(dtype):
    """Runs of equal lengths (3 x 16, 2 x 4, 1 x 9, 2 x 16 patches): the output and the input's and weights'
    gradients are the class's own bits."""
    attn = _model(tk.load_tokenizer()).model.visual.blocks[0].attn.to(dtype)
    lengths = [16, 16, 16, 4, 4, 9, 16, 16]
    assert va._runs(lengths) == [(3, 16), (2, 4), (1, 9), (2, 16)]
    rows, dim = sum(lengths), attn.qkv.weight.shape[-1]
    torch.manual_seed(1)
    x = torch.randn(rows, dim, dtype=dtype)
    head = dim // attn.num_heads
    angles = torch.randn(rows, head, dtype=torch.float64)
    pos = (angles.cos().to(dtype), angles.sin().to(dtype))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    grad = torch.randn(rows, dim, dtype=dtype)
    results = []
    for fwd in (type(attn).forward, va._batched_forward):
        xi = x.clone().requires_grad_(True)
        out = fwd(attn, xi, cu, pos)
        results.append((out, torch.autograd.grad(out, [xi, *attn.parameters()], grad)))
    (a, ga), (b, gb) = results
    assert torch.equal(a, b) and all(torch.equal(u, v) for u, v in zip(ga, gb))


def test_a_class_whose_forward_differs_or_another_kernel_keeps_its_own_forward():
    tok = tk.load_tokenizer()
    eager = _model(tok, attn="eager")  # eager attention: not a batched kernel
    assert va.use_batched_vision_attention(eager) == 0
    model = _model(tok)
    base = type(model.model.visual.blocks[0].attn)

    def doubled(self, *args, **kwargs):
        return 2 * base.forward(self, *args, **kwargs)

    impostor = type(base.__name__, (base,), {"forward": doubled, "__module__": base.__module__})
    for block in model.model.visual.blocks:
        block.attn.__class__ = impostor  # the same name and module, another computation: the check refuses it
    assert va.use_batched_vision_attention(model) == 0
    assert all("forward" not in vars(block.attn) for block in model.model.visual.blocks)
