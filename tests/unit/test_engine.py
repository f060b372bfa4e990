"""The GPU engine's pieces, checked on the CPU against the plain paths.

The static-cache decoder (harness.core.decode) samples what the dynamic-cache loop samples.

Real transformers architectures (dense, MoE, and the multimodal MoE with 3-D rope positions and an
image in the prompt), tiny, float64, left-padded prompts of different lengths, sampling with EOS:
the static engine (eager here; on CUDA the same step is replayed from a captured graph) must give
the same tokens and masks and log-probs equal to float64 rounding, whatever ``check_every`` is.
Log-probs through the output head in checkpointed chunks equal those from full logits, with the
same gradients.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

from harness.core.decode import prefill_mask
from harness.core.model_builder import banned_bias
from harness.core.rollout import draw_uniforms, generate

V, EOS, PAD, IMG = 64, 1, 0, 60
TEXT = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=256, pad_token_id=PAD, eos_token_id=EOS)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1, mlp_only_layers=[])


def _model(family: str) -> torch.nn.Module:
    if family == "qwen3":
        cfg = transformers.Qwen3Config(**TEXT)
        cls = transformers.Qwen3ForCausalLM
    elif family == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(**TEXT, **MOE)
        cls = transformers.Qwen3MoeForCausalLM
    else:
        text = {**TEXT, **MOE, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                    "mrope_section": [2, 1, 1], "mrope_interleaved": True}}
        vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4, temporal_patch_size=2,
                      spatial_merge_size=2, out_hidden_size=32, num_position_embeddings=16,
                      deepstack_visual_indexes=[0], in_channels=3)
        cfg = transformers.Qwen3VLMoeConfig(text_config=text, vision_config=vision, image_token_id=IMG,
                                            video_token_id=61, vision_start_token_id=62, vision_end_token_id=63)
        cls = transformers.Qwen3VLMoeForConditionalGeneration
    cfg._attn_implementation = "sdpa"  # noqa: SLF001
    cfg._experts_implementation = "eager"  # noqa: SLF001 - grouped_mm has no float64 kernel
    torch.manual_seed(0)
    return cls(cfg).to(torch.float64).eval()


def _prompts(vlm: bool) -> tuple[dict[str, torch.Tensor], list, list]:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(2, 56, (3, 10), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding of different lengths
    mask[1, :1] = 0
    ids = ids.masked_fill(mask == 0, PAD)
    pixels, grids = [None] * 3, [None] * 3
    if vlm:  # one image of 2×2 merged patches in the second prompt
        ids[1, 2:6] = IMG
        grids[1] = torch.tensor([[1, 4, 4]])
        pixels[1] = torch.randn(16, 3 * 2 * 4 * 4, generator=g, dtype=torch.float64)
    return {"input_ids": ids, "attention_mask": mask}, pixels, grids


def _run(model, engine: str, *, check_every: int = 8, greedy: bool = False, top_k: int = 0, top_p: float = 1.0,
         seed: int = 7):
    prompts, pixels, grids = _prompts(isinstance(model, transformers.Qwen3VLMoeForConditionalGeneration))
    n, R = 2, 12
    uniforms = draw_uniforms(torch.Generator().manual_seed(seed), R, 3 * n, list(range(3 * n)), torch.device("cpu"))
    return generate(model, prompts, n=n, max_new_tokens=R, temperature=1.0, top_k=top_k, top_p=top_p, eos_id=EOS,
                    pad_id=PAD, image_pad_id=IMG, bias=banned_bias(V, [IMG, 61, 62, 63], torch.device("cpu")),
                    uniforms=uniforms, group_ids=[0, 1, 2], pixels=pixels, grids=grids, greedy=greedy,
                    engine=engine, check_every=check_every)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe", "qwen3_vl_moe"])
def test_static_engine_samples_what_the_dynamic_loop_samples(family: str) -> None:
    model = _model(family)
    with torch.no_grad():
        ref = _run(model, "dynamic")
        assert 0 < int(ref.response_mask.sum()) < ref.response_mask.numel(), "the case should stop some rows early"
        for check_every in (1, 3, 8):
            got = _run(model, "static", check_every=check_every)
            assert torch.equal(got.response_ids, ref.response_ids), check_every
            assert torch.equal(got.response_mask, ref.response_mask)
            torch.testing.assert_close(got.rollout_logp, ref.rollout_logp, rtol=0, atol=1e-12)


def test_a_reused_static_decoder_keeps_nothing_of_its_last_rollout() -> None:
    """The decoder (cache, buffers, on CUDA its graph) is kept per shape: rollout after rollout it samples what a
    fresh dynamic loop samples for that rollout's own uniforms."""
    from harness.core import decode

    model = _model("qwen3_vl_moe")
    with torch.no_grad():
        for seed in (7, 8, 9):
            ref, got = _run(model, "dynamic", seed=seed), _run(model, "static", seed=seed)
            assert torch.equal(got.response_ids, ref.response_ids), seed
            assert torch.equal(got.response_mask, ref.response_mask)
            torch.testing.assert_close(got.rollout_logp, ref.rollout_logp, rtol=0, atol=1e-12)
    assert len(vars(model)[decode.DECODERS_ATTR]) == 1, "one shape, one decoder"
    # the decoder refers to its model: kept on the model, both are freed with it (a run after another in one
    # process, a candidate or a gate's next recipe, must not hold the last one's weights and cache)
    import gc
    import weakref

    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None, "a decoder keeps its model alive"


def test_static_engine_greedy_and_filtered_sampling() -> None:
    model = _model("qwen3")
    with torch.no_grad():
        for kw in ({"greedy": True}, {"top_k": 5}, {"top_p": 0.7}):
            ref, got = _run(model, "dynamic", **kw), _run(model, "static", **kw)
            assert torch.equal(got.response_ids, ref.response_ids), kw
            torch.testing.assert_close(got.rollout_logp, ref.rollout_logp, rtol=0, atol=1e-12)


def test_prefill_mask_is_causal_over_valid_keys() -> None:
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    m = prefill_mask(mask, 5)
    assert m.shape == (2, 1, 3, 5)
    assert m[0, 0].tolist() == [[True, False, False, False, False],  # a padding query sees itself only
                                [False, True, False, False, False],
                                [False, True, True, False, False]]
    assert not m[:, :, :, 3:].any(), "response slots are not valid during prefill"



def _lp_batch(model, family: str):
    """A finished rollout of ``model`` (responses with EOS and padding) to recompute log-probs on."""
    with torch.no_grad():
        return _run(model, "dynamic")


@pytest.mark.parametrize("family", ["qwen3", "qwen3_vl_moe"])
def test_chunked_head_logprobs_equal_full_logits(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past LOGIT_CHUNK_BYTES the head runs chunk by chunk, checkpointed: same values, same gradients."""
    from harness.core import update

    model = _model(family).train()
    rb = _lp_batch(model, family)
    bias = banned_bias(V, [IMG, 61, 62, 63], torch.device("cpu"))
    results = []
    for limit in (1 << 40, 7 * V * 8):  # whole logits; chunks of 7 (float64 counted as 4 bytes: 14 rows)
        monkeypatch.setattr(update, "LOGIT_CHUNK_BYTES", limit)
        model.zero_grad()
        logp, ent = update.sequence_logprobs(model, rb, bias=bias, temperature=0.7, image_pad_id=IMG,
                                             with_entropy=True)
        mask = rb.response_mask.double()
        ((logp * mask).sum() + 0.1 * (ent * mask).sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((logp.detach(), ent.detach(), grads))
    (lp0, e0, g0), (lp1, e1, g1) = results
    torch.testing.assert_close(lp1, lp0, rtol=0, atol=1e-12)
    torch.testing.assert_close(e1, e0, rtol=0, atol=1e-12)
    torch.testing.assert_close(g1, g0, rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        nograd, none = update.sequence_logprobs(model, rb, bias=bias, temperature=0.7, image_pad_id=IMG)
    assert none is None
    torch.testing.assert_close(nograd, lp0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_vl_moe"])
def test_positions_attached_once_equal_those_of_every_sub_batch(family: str) -> None:
    """The multimodal RoPE index computed once for the rollout batch: every sub-batch selects exactly the rows it
    would compute itself (with the image in another row), so the log-probs are bitwise the same."""
    from harness.core import update

    model = _model(family)
    rb = _lp_batch(model, family)
    bias = banned_bias(V, [IMG, 61, 62, 63], torch.device("cpu"))
    with torch.no_grad():
        plain = [update.sequence_logprobs(model, rb.select(idx), bias=bias, temperature=0.7, image_pad_id=IMG)[0]
                 for idx in ([0, 1], [2], [1, 2])]
        update.attach_positions(model, rb, IMG)
        for idx, ref in zip(([0, 1], [2], [1, 2]), plain):
            sub = rb.select(idx)
            inputs = sub.model_inputs(IMG)
            own = update.position_ids(model, inputs["input_ids"], inputs["attention_mask"],
                                      inputs["mm_token_type_ids"], inputs["image_grid_thw"])
            assert torch.equal(update.full_positions(model, sub, inputs), own)
            got = update.sequence_logprobs(model, sub, bias=bias, temperature=0.7, image_pad_id=IMG)[0]
            assert torch.equal(got, ref)


def test_the_multimodal_index_on_host_copies_gives_the_same_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an accelerator the RoPE index runs on host copies of its inputs (index_on_host); routed that way, every
    argument reaches the index as it would directly (images in two rows, padding, mm token types given or not)."""
    from harness.core import model_builder

    model = _model("qwen3_vl_moe")
    prompts, _, grids = _prompts(True)
    ids, mask = prompts["input_ids"].clone(), prompts["attention_mask"]
    ids[2, 5:9] = IMG
    grid = torch.cat([grids[1], torch.tensor([[1, 4, 4]])])
    types = ((ids == IMG) & mask.bool()).long()
    text_ids = prompts["input_ids"].clamp(max=IMG - 1)  # no image token
    direct = model_builder.position_ids(model, ids, mask, types, grid)
    text = model_builder.position_ids(model, text_ids, mask, None, None)
    assert not model_builder.index_on_host(ids)  # CPU tensors: the index runs where they are
    monkeypatch.setattr(model_builder, "index_on_host", lambda t: True)
    assert torch.equal(model_builder.position_ids(model, ids, mask, types, grid), direct)
    assert torch.equal(model_builder.position_ids(model, text_ids, mask, None, None), text)
    assert direct.shape == (3, 3, 10) and not torch.equal(direct[0], direct[1])  # the images' rows have 3-D positions


def _claims_flash_attention(model: torch.nn.Module) -> list[Any]:
    """Every config of ``model`` set to flash_attention_2 (without flash-attn installed: the internal field, which
    the attention layers read at each call); returns the configs."""
    configs = list({id(c): c for c in (getattr(m, "config", None) for m in model.modules()) if c is not None}.values())
    for cfg in configs:
        cfg._attn_implementation_internal = "flash_attention_2"  # noqa: SLF001
    return configs


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_vl_moe"])
def test_a_flash_attention_model_decodes_over_sdpa_on_the_static_engines(family: str) -> None:
    """flash-attn takes no 4-D mask: the static engines switch such a model to sdpa for the rollout (prefill and
    steps) and back after it, so it samples what the sdpa model samples; on CUDA it gets the graph engine."""
    from harness.core.decode import decode_attention, pick_engine

    model = _model(family)
    with torch.no_grad():
        ref = _run(model, "static")
        configs = _claims_flash_attention(model)
        assert pick_engine(model, torch.device("cpu"), sharded=False) == ("dynamic", None)
        model.config._experts_implementation = "grouped_mm"  # noqa: SLF001 - the graphs' other requirement
        engine, note = pick_engine(model, torch.device("cuda"), sharded=False)
        assert engine == "graph" and note is not None and "over sdpa" in note and "rollout_probs_diff" in note
        assert pick_engine(model, torch.device("cuda"), sharded=True)[0] == "dynamic"
        model.config._experts_implementation = "eager"  # noqa: SLF001 - float64 on the CPU
        with decode_attention(model):
            assert {c._attn_implementation for c in configs} == {"sdpa"}  # noqa: SLF001
        assert {c._attn_implementation for c in configs} == {"flash_attention_2"}  # noqa: SLF001
        got = _run(model, "static")
        assert {c._attn_implementation for c in configs} == {"flash_attention_2"}  # noqa: SLF001
    assert torch.equal(got.response_ids, ref.response_ids) and torch.equal(got.response_mask, ref.response_mask)
    torch.testing.assert_close(got.rollout_logp, ref.rollout_logp, rtol=0, atol=0)


def test_an_attention_kernel_without_a_decode_replacement_keeps_the_dynamic_loop() -> None:
    from harness.core.decode import pick_engine

    model = _model("qwen3")
    model.config._attn_implementation_internal = "flex_attention"  # noqa: SLF001
    engine, note = pick_engine(model, torch.device("cuda"), sharded=False)
    assert engine == "dynamic" and note is not None and "flex_attention attention; graphs need sdpa" in note
