"""The vision tower's metadata cached per image layout changes no bit: a tiny Qwen3-VL-MoE's logits and every
parameter's gradient are identical with and without the cache, and a second batch of the same layout reuses it."""

from __future__ import annotations

import pytest
import torch

from harness.core import data as dt
from harness.core import model_builder as mb
from harness.core import tokenizer as tk
from harness.core import vision_cache as vc
from harness.core.vision import build_image_processor

transformers = pytest.importorskip("transformers")


def _model(tok):
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
