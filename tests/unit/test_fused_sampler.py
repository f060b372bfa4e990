"""The fused sampler (two Triton kernels, run here by Triton's interpreter on the CPU) against the reference
inverse-CDF sampler in float64: the same token wherever ``u`` is not within rounding of a boundary between two
tokens, the same log-prob, never a banned token."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from harness.core.fused_sampler import BLOCK, fused_sample, plain, usable  # noqa: E402
from harness.core.model_builder import BANNED_LOGIT  # noqa: E402
from harness.core.rollout import sample_from_logits  # noqa: E402


def _reference(logits: torch.Tensor, bias: torch.Tensor, u: torch.Tensor, temperature: float):
    x = logits.double() + bias.double()
    tok, lp = sample_from_logits(x, temperature=temperature, top_k=-1, top_p=1.0, uniforms=u.double())
    cdf = torch.softmax(x / temperature, -1).cumsum(-1)
    return tok, lp, cdf


def _check(logits, bias, u, temperature, *, tol=2e-6):
    tok, lp = fused_sample(logits, bias, u, temperature)
    ref_tok, ref_lp, cdf = _reference(logits, bias, u, temperature)
    assert tok.dtype == torch.int64 and lp.dtype == torch.float32
    assert not bool((bias[tok] == BANNED_LOGIT).any()), "a banned token was drawn"
    differ = tok != ref_tok
    for r in differ.nonzero().flatten().tolist():  # only at a boundary: u within rounding of the CDF there
        edge = cdf[r, min(int(tok[r]), int(ref_tok[r]))]
        assert abs(float(edge) - float(u[r])) < tol, (r, int(tok[r]), int(ref_tok[r]), float(edge), float(u[r]))
    assert int(differ.sum()) <= max(1, len(u) // 50)
    lp_ref_at_tok = torch.log_softmax((logits.double() + bias.double()) / temperature, -1).gather(-1, tok[:, None])
    assert torch.allclose(lp.double(), lp_ref_at_tok.squeeze(-1), atol=2e-5, rtol=0)
    same = ~differ
    assert torch.allclose(lp.double()[same], ref_lp[same], atol=2e-5, rtol=0)
    return tok


@pytest.mark.parametrize("vocab", [7, BLOCK, 3 * BLOCK + 5, 5000])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_same_draws_as_the_reference(vocab, dtype, temperature):
    g = torch.Generator().manual_seed(vocab)
    rows = 24
    logits = (torch.randn(rows, vocab, generator=g) * 4).to(dtype)
    bias = torch.zeros(vocab)
    bias[torch.randperm(vocab, generator=g)[: vocab // 10]] = BANNED_LOGIT
    _check(logits, bias, torch.rand(rows, generator=g), temperature)


def test_a_near_uniform_full_vocabulary_draws_the_float64_token():
    """W's vocabulary with a random model's near-uniform logits (each token ~7e-6 of the mass): the running sums
    in float64 draw exactly the tokens of the float64 inverse CDF (a float32 running sum misses some)."""
    vocab, rows = 151936, 32
    g = torch.Generator().manual_seed(21)
    logits = torch.randn(rows, vocab, generator=g).to(torch.bfloat16)
    bias = torch.zeros(vocab)
    u = torch.rand(rows, generator=g)
    # the first 8 rows (each costs ~0.3 s in Triton's interpreter): with float32 running sums row 5 draws a neighbour
    logits, u = logits[:8], u[:8]
    tok, _ = fused_sample(logits, bias, u, 1.0)
    ref, _, _ = _reference(logits, bias, u, 1.0)
    assert torch.equal(tok, ref)


def test_peaked_rows_and_extreme_uniforms_never_draw_a_banned_token():
    """u = 0 and u just below 1, banned tokens at both ends of the vocabulary and of a chunk, rows with almost
    all their mass on one token."""
    vocab = 2 * BLOCK + 3
    bias = torch.zeros(vocab)
    banned = [0, 1, BLOCK - 1, BLOCK, vocab - 2, vocab - 1]
    bias[banned] = BANNED_LOGIT
    logits = torch.randn(6, vocab, generator=torch.Generator().manual_seed(3))
    logits[2, 5] = 60.0  # one token holds ~all the mass
    logits[3, vocab - 3] = 60.0  # the last drawable token holds it
    u = torch.tensor([0.0, 1 - 2**-24, 0.5, 1 - 2**-24, 0.0, 0.999999])
    tok = _check(logits, bias, u, 1.0)
    assert int(tok[0]) == 2 and int(tok[2]) == 5 and int(tok[3]) == vocab - 3
    # u = 1 (outside [0, 1): the worst that rounding of the running sums can do) stops at the last drawable token
    last, _ = fused_sample(logits, bias, torch.ones(6), 1.0)
    assert last.tolist() == [vocab - 3] * 6


def test_strided_rows_as_the_decoder_passes_them():
    """The decoder passes ``logits[:, -1, :]`` of (B, L, V): rows strided by L × V."""
    g = torch.Generator().manual_seed(5)
    full = torch.randn(8, 3, 1500, generator=g).to(torch.bfloat16)
    bias = torch.zeros(1500)
    u = torch.rand(8, generator=g)
    a = fused_sample(full[:, -1, :], bias, u, 1.0)
    b = fused_sample(full[:, -1, :].contiguous(), bias, u, 1.0)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    _check(full[:, -1, :], bias, u, 1.0)


def test_used_only_for_plain_sampling_on_cuda_where_bits_may_change(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    bf16 = torch.bfloat16
    assert not usable(cpu, fast=True, dtype=bf16)
    assert not usable(cuda, fast=False, dtype=bf16)  # deterministic runs keep their baselines' bits
    assert not usable(cuda, fast=True, dtype=torch.float64)  # the kernels compute in float32
    monkeypatch.setattr("torch.utils._triton.has_triton", lambda: True)
    assert usable(cuda, fast=True, dtype=bf16) and not usable(cpu, fast=True, dtype=bf16)
    assert plain(greedy=False, top_k=-1, top_p=1.0) and plain(greedy=False, top_k=0, top_p=1.0)
    assert not plain(greedy=True, top_k=-1, top_p=1.0)
    assert not plain(greedy=False, top_k=50, top_p=1.0)
    assert not plain(greedy=False, top_k=-1, top_p=0.9)


@pytest.mark.parametrize("engine", ["dynamic", "static"])
def test_rollouts_drawn_by_the_fused_sampler(engine):
    """Both decode loops hand the fused sampler the raw logits and the banned-token bias: with the same uniforms
    a tiny model's rollout is the reference sampler's, tokens and masks equal, log-probs to float32 rounding."""
    from test_engine import _model, _prompts  # the sibling module (tests/unit is on sys.path)

    from harness.core.model_builder import banned_bias
    from harness.core.rollout import draw_uniforms, generate

    model = _model("qwen3_moe").to(torch.float32)
    prompts, pixels, grids = _prompts(False)
    V = model.config.vocab_size

    def run(fused: bool):
        u = draw_uniforms(torch.Generator().manual_seed(11), 12, 6, list(range(6)), torch.device("cpu"))
        return generate(model, prompts, n=2, max_new_tokens=12, temperature=0.8, top_k=0, top_p=1.0, eos_id=1,
                        pad_id=0, image_pad_id=60, bias=banned_bias(V, [60, 61, 62, 63], torch.device("cpu")),
                        uniforms=u, group_ids=[0, 1, 2], pixels=pixels, grids=grids, engine=engine,
                        fused_sampler=fused)

    with torch.no_grad():
        ref, got = run(False), run(True)
    assert 0 < int(ref.response_mask.sum()) < ref.response_mask.numel(), "the case should stop some rows early"
    assert torch.equal(got.response_ids, ref.response_ids) and torch.equal(got.response_mask, ref.response_mask)
    assert not bool((got.response_ids >= 60).any())
    torch.testing.assert_close(got.rollout_logp, ref.rollout_logp, rtol=0, atol=1e-5)


def test_a_traced_call_allocates_the_buffers_and_launches_nothing():
    """``harness plan`` traces the step on fake tensors: the sampler's buffers are allocated (their memory is
    the step's), no kernel runs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        tok, lp = fused_sample(torch.empty(4, 3000, dtype=torch.bfloat16), torch.zeros(3000), torch.rand(4), 1.0)
    assert tok.shape == (4,) and tok.dtype == torch.int64 and lp.dtype == torch.float32
    tok, lp = fused_sample(torch.empty(4, 3000, device="meta"), torch.zeros(3000, device="meta"),
                           torch.rand(4, device="meta"), 1.0)
    assert tok.is_meta and lp.shape == (4,)
