"""Tests of harness.core.algos against independent float64 references (plain loops / numpy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from algo_refs import (  # noqa: F401 (the references)
    rand_mask,
    ref_agg,
    ref_entropy,
    ref_group_adv,
    ref_kl,
    ref_logprobs,
    ref_policy,
    verl_agg,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import algos as A

FAST = settings(max_examples=40, deadline=None)


# --------------------------------------------------------------------------- advantages


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_group_advantages_match_reference(dtype, norm, name):
    g = torch.Generator().manual_seed(0)
    ids = ["p0"] * 4 + ["p1"] * 3 + ["p2"] + [7] * 5 + ["p0"] * 2
    scores = torch.randn(len(ids), generator=g).to(dtype)
    mask = rand_mask(g, len(ids), 6)
    got = A.get_adv_estimator(name)(scores, ids, mask, eps=1e-6, norm_by_std=norm)
    want = ref_group_adv(scores.double().tolist(), ids, mask.tolist(), norm=norm, rloo=name == "rloo")
    assert got.dtype == dtype and got.shape == mask.shape and not got.requires_grad
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(got.double().numpy(), want, rtol=tol, atol=tol)


def test_grpo_hand_case_and_edge_cases():
    mask = torch.tensor([[1, 1, 0]] * 4 + [[1, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 1]], dtype=torch.bool)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 5.0, 2.0, 0.1, 0.1], requires_grad=True)
    adv = A.grpo_advantages(scores, ["a"] * 4 + ["s", "t", "eq", "eq"], mask)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # unbiased std of {1,0,1,0}
    assert adv[:4, 0].tolist() == pytest.approx([a, -a, a, -a], rel=1e-6)
    assert adv[0, 2] == 0 and adv[4, 0].item() == pytest.approx(5.0 / (1 + 1e-6))  # singleton
    assert torch.all(adv[5] == 0)  # fully masked row
    assert torch.all(adv[6:] == 0)  # equal scores: std 0, deviation exactly 0
    assert not adv.requires_grad
    drgrpo = A.grpo_advantages(scores, ["a"] * 4 + ["s", "t", "eq", "eq"], mask, norm_by_std=False)
    assert drgrpo[:2, 0].tolist() == pytest.approx([0.5, -0.5]) and drgrpo[4, 0].item() == 5.0


def test_group_ids_accept_tensor_and_numpy():
    scores, mask = torch.tensor([1.0, 2.0, 3.0, 5.0]), torch.ones(4, 2)
    base = A.grpo_advantages(scores, [0, 0, 1, 1], mask)
    assert torch.equal(A.grpo_advantages(scores, torch.tensor([0, 0, 1, 1]), mask), base)
    assert torch.equal(A.grpo_advantages(scores, np.array(["x", "x", "y", "y"]), mask), base)


def test_grpo_input_errors():
    s, m = torch.tensor([1.0, 2.0]), torch.ones(2, 3)
    with pytest.raises(ValueError, match="group_ids"):
        A.grpo_advantages(s, [0], m)
    with pytest.raises(ValueError, match="floating"):
        A.grpo_advantages(torch.tensor([1, 2]), [0, 0], m)
    with pytest.raises(ValueError, match="NaN"):
        A.grpo_advantages(torch.tensor([1.0, float("nan")]), [0, 0], m)
    with pytest.raises(ValueError, match="response_mask"):
        A.grpo_advantages(s, [0, 0], torch.ones(3, 3))


@FAST
@given(
    st.lists(st.tuples(st.integers(0, 3), st.floats(-100, 100, width=32)), min_size=1, max_size=16),
    st.randoms(use_true_random=False),
)
def test_grpo_properties(items, rnd):
    ids, vals = [i for i, _ in items], [v for _, v in items]
    scores, mask = torch.tensor(vals, dtype=torch.float64), torch.ones(len(vals), 1)
    adv = A.grpo_advantages(scores, ids, mask)[:, 0]
    # atol: a group one float32 ulp wide near |s| = 100 amplifies float64 rounding by ~1/std
    np.testing.assert_allclose(adv.numpy(), ref_group_adv(vals, ids, [[1]] * len(vals))[:, 0], atol=1e-7)
    for gid in set(ids):
        sel = [i for i, x in enumerate(ids) if x == gid]
        if len(sel) > 1:  # zero mean; unit std unless the group is (near) constant
            assert abs(float(adv[sel].sum())) < 1e-6 * len(sel)
            if float(scores[sel].std()) > 1e-2:
                assert float(adv[sel].std()) == pytest.approx(1.0, rel=1e-3)
    perm = list(range(len(ids)))
    rnd.shuffle(perm)
    permuted = A.grpo_advantages(scores[perm], [ids[p] for p in perm], mask)[:, 0]
    torch.testing.assert_close(permuted, adv[perm], rtol=1e-9, atol=1e-7)


# --------------------------------------------------------------------------- KL


@pytest.mark.parametrize("kind", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_kl_kinds_match_reference(kind):
    g = torch.Generator().manual_seed(1)
    lp = torch.randn(4, 7, generator=g, dtype=torch.float64) * 3
    ref = torch.randn(4, 7, generator=g, dtype=torch.float64) * 3
    lp[0, :4] = torch.tensor([50.0, -50.0, 0.0, 30.0])  # extreme gaps hit both clamps
    ref[0, :4] = torch.tensor([-50.0, 50.0, 0.0, -3.0])
    got = A.kl_penalty(lp, ref, kind)
    want = [[ref_kl(a, b, kind) for a, b in zip(ra, rb)] for ra, rb in zip(lp.tolist(), ref.tolist())]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(got).all()


def test_low_var_kl_bounds_and_zero():
    lp = torch.linspace(-60, 60, 241, dtype=torch.float64)
    k3 = A.kl_penalty(lp, torch.zeros_like(lp), "k3")
    assert (k3 >= 0).all() and (k3 <= 10).all() and k3[120] == 0
    inf = torch.tensor([float("-inf"), 0.0])  # an impossible token under the policy stays finite
    assert A.kl_penalty(inf, torch.tensor([0.0, float("-inf")]), "k3").tolist() == [10.0, 10.0]


@pytest.mark.parametrize("kind", ["k1", "abs", "k2", "k3"])
def test_kl_gradcheck(kind):
    g = torch.Generator().manual_seed(2)
    lp = (torch.rand(3, 5, generator=g, dtype=torch.float64) * 3 - 1.5).requires_grad_()
    ref = torch.rand(3, 5, generator=g, dtype=torch.float64) * 3 - 1.3  # no |d| ~ 0 ties, no clamps
    assert torch.autograd.gradcheck(lambda x: A.kl_penalty(x, ref, kind), (lp,))


def test_kl_errors():
    x = torch.zeros(2, 2)
    with pytest.raises(ValueError, match=r"abs, k1, k2, k3, kl, low_var_kl, mse"):
        A.kl_penalty(x, x, "K3")
    with pytest.raises(ValueError, match="shape"):
        A.kl_penalty(x, torch.zeros(2, 3), "k1")


# --------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize("mode", A.AGG_MODES)
@pytest.mark.parametrize("constant", [None, 11.0])
def test_agg_loss_matches_reference(mode, constant):
    g = torch.Generator().manual_seed(3)
    loss = torch.randn(6, 9, generator=g, dtype=torch.float64)
    mask = rand_mask(g, 6, 9)
    mask[0] = 0
    loss[~mask.bool()] = float("nan")  # garbage at padded positions must not leak
    got = A.agg_loss(loss, mask, mode, norm_constant=constant)
    assert got.dim() == 0
    assert got.item() == pytest.approx(ref_agg(loss.numpy(), mask.numpy(), mode, constant), rel=1e-12)


def test_agg_loss_hand_values():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    assert A.agg_loss(loss, mask, "token-mean").item() == pytest.approx(3.0)
    assert A.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(7.5)
    assert A.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.25)
    assert A.agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(2.5)  # 7.5 / T=3
    assert A.agg_loss(loss, mask, "seq-mean-token-sum-norm", 5).item() == pytest.approx(1.5)
    assert A.agg_loss(loss, mask, "token-sum").item() == pytest.approx(15.0)


@pytest.mark.parametrize("mode", A.AGG_MODES)
def test_agg_loss_all_masked_is_zero_with_graph(mode):
    loss = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    out = A.agg_loss(loss, torch.zeros(3, 4, dtype=torch.bool), mode)
    assert out.item() == 0.0 and out.requires_grad
    out.backward()
    assert torch.equal(loss.grad, torch.zeros_like(loss))
    assert A.agg_loss(torch.zeros(0, 4), torch.zeros(0, 4), mode).item() == 0.0


def _split_sum(loss, mask, mode, bounds, **kw):
    m = mask.bool()
    gt, gs = m.sum(), (m.sum(-1) > 0).sum()
    parts = [A.agg_loss(loss[a:b], mask[a:b], mode, global_tokens=gt, global_seqs=int(gs), **kw)
             for a, b in zip(bounds[:-1], bounds[1:])]
    return torch.stack(parts).sum()


@pytest.mark.parametrize("mode", A.AGG_MODES)
def test_agg_loss_micro_batches_sum_to_full_batch(mode):
    g = torch.Generator().manual_seed(4)
    loss = torch.randn(10, 7, generator=g, dtype=torch.float64, requires_grad=True)
    mask = rand_mask(g, 10, 7, p_empty=0.3)
    full = A.agg_loss(loss, mask, mode, norm_constant=7)
    (gfull,) = torch.autograd.grad(full, loss)
    split = _split_sum(loss, mask, mode, [0, 3, 4, 10], norm_constant=7)
    (gsplit,) = torch.autograd.grad(split, loss)
    torch.testing.assert_close(split, full, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gsplit, gfull, rtol=1e-12, atol=1e-12)


@FAST
@given(st.integers(1, 12), st.integers(1, 6), st.sampled_from(A.AGG_MODES), st.integers(0, 2**31 - 1))
def test_agg_loss_split_property(B, T, mode, seed):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = rand_mask(g, B, T, p_empty=0.3)
    cuts = sorted(set(torch.randint(0, B + 1, (3,), generator=g).tolist()) | {0, B})
    full = A.agg_loss(loss, mask, mode, norm_constant=T)
    assert _split_sum(loss, mask, mode, cuts).item() == pytest.approx(full.item(), rel=1e-9, abs=1e-12)
    assert full.item() == pytest.approx(ref_agg(loss.numpy(), mask.numpy(), mode, T), rel=1e-9, abs=1e-12)


# seq-mean-token-mean: verl adds 1e-8 to a row's token count (algos departure 3)
VERL_REL = {"seq-mean-token-mean": 1e-8}


def _verl_case(seed, B=10, T=7):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = rand_mask(g, B, T, p_empty=0.3)
    mask[1] = 0
    return loss, mask


@pytest.mark.parametrize("mode", A.AGG_MODES)
@pytest.mark.parametrize("constant", [None, 11.0])
def test_agg_loss_matches_verl_formulas(mode, constant):
    loss, mask = _verl_case(5)
    rel = VERL_REL.get(mode, 1e-12)
    want = verl_agg(loss, mask, mode, loss_scale_factor=constant)
    assert A.agg_loss(loss, mask, mode, constant).item() == pytest.approx(want.item(), rel=rel)
    # micro-batches with the mini-batch's global denominators: the parts sum to the whole
    gt, gs = mask.sum(), (mask.sum(-1) > 0).sum()
    bounds = [0, 3, 4, 10]
    ours = [A.agg_loss(loss[a:b], mask[a:b], mode, constant, global_tokens=gt, global_seqs=gs)
            for a, b in zip(bounds[:-1], bounds[1:])]
    theirs = [verl_agg(loss[a:b], mask[a:b], mode, batch_num_tokens=gt, global_batch_size=gs,
                       loss_scale_factor=constant) for a, b in zip(bounds[:-1], bounds[1:])]
    assert sum(p.item() for p in ours) == pytest.approx(want.item(), rel=rel)
    for o, t in zip(ours, theirs):
        assert o.item() == pytest.approx(t.item(), rel=rel, abs=1e-15)
    # data-parallel ranks: verl scales by dp_size and the gradient is averaged over ranks
    dp = [verl_agg(loss[a:b], mask[a:b], mode, dp_size=2, batch_num_tokens=gt, global_batch_size=gs,
                   loss_scale_factor=constant) for a, b in ((0, 5), (5, 10))]
    assert (dp[0] + dp[1]).item() / 2 == pytest.approx(want.item(), rel=rel)


@pytest.mark.parametrize("mode", A.AGG_MODES)
def test_agg_loss_matches_verl_itself(mode):
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    loss, mask = _verl_case(6)
    rel = VERL_REL.get(mode, 1e-12)
    gt, gs = mask.sum(), (mask.sum(-1) > 0).sum()
    for a, b in ((0, 4), (4, 10)):
        want = core_algos.agg_loss(loss[a:b], mask[a:b].double(), mode, batch_num_tokens=gt, global_batch_size=gs)
        got = A.agg_loss(loss[a:b], mask[a:b], mode, global_tokens=gt, global_seqs=gs)
        assert got.item() == pytest.approx(float(want), rel=rel, abs=1e-15)


def test_agg_loss_errors():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm"):
        A.agg_loss(x, x, "Token-Mean")
    with pytest.raises(ValueError, match="norm_constant"):
        A.agg_loss(x, x, "seq-mean-token-sum-norm", norm_constant=0)
    with pytest.raises(ValueError, match="global_tokens"):
        A.agg_loss(x, x, "token-mean", global_tokens=-1)
    with pytest.raises(ValueError, match="shape"):
        A.agg_loss(x, torch.zeros(3, 2), "token-mean")


def test_masked_mean():
    x = torch.tensor([[1.0, 2.0, float("inf")], [3.0, 4.0, 5.0]])
    m = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert A.masked_mean(x, m).item() == 1.5
    assert A.masked_mean(x, m, dim=-1).tolist() == [1.5, 0.0]
    assert A.masked_mean(x, torch.zeros_like(m)).item() == 0.0


# --------------------------------------------------------------------------- policy loss


def test_policy_loss_hand_case():
    # tokens: clipped high (A>0), dual clip (A<0, r=4), clipped low (A<0, r=.5), A=0, masked
    ratios = [1.5, 4.0, 0.5, 2.0, 9.0]
    old = torch.zeros(1, 5, dtype=torch.float64)
    new = torch.log(torch.tensor([ratios], dtype=torch.float64))
    adv = torch.tensor([[1.0, -1.0, -1.0, 0.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    loss, met = A.policy_loss(old, new, adv, mask)
    assert loss.item() == pytest.approx((-1.2 + 3.0 + 0.8 + 0.0) / 4)
    assert met["pg_clipfrac"].item() == pytest.approx(2 / 4)
    assert met["pg_clipfrac_lower"].item() == pytest.approx(1 / 4)
    assert met["ppo_kl"].item() == pytest.approx(-sum(math.log(r) for r in ratios[:4]) / 4)
    for v in met.values():
        assert v.dim() == 0 and not v.requires_grad


@pytest.mark.parametrize("mode", A.AGG_MODES)
@pytest.mark.parametrize("clips", [(0.2, 0.2, 3.0), (0.2, 0.28, 10.0), (0.1, 0.3, 1.5)])
def test_policy_loss_matches_reference(mode, clips):
    lo, hi, c = clips
    g = torch.Generator().manual_seed(5)
    old = torch.randn(5, 8, generator=g, dtype=torch.float64) - 2
    new = old + torch.randn(5, 8, generator=g, dtype=torch.float64) * 0.8
    new[0, :2] = old[0, :2] + torch.tensor([50.0, -50.0], dtype=torch.float64)  # clamped log-ratios
    adv = torch.randn(5, 8, generator=g, dtype=torch.float64)
    adv[1, :3] = 0.0
    mask = rand_mask(g, 5, 8)
    loss, met = A.policy_loss(old, new, adv, mask, clip_low=lo, clip_high=hi, clip_ratio_c=c, agg_mode=mode)
    tok, want = ref_policy(old.tolist(), new.tolist(), adv.tolist(), mask.tolist(), lo, hi, c)
    assert loss.item() == pytest.approx(ref_agg(tok, mask.numpy(), mode), rel=1e-10)
    for k, v in want.items():
        assert met[k].item() == pytest.approx(v, rel=1e-10, abs=1e-12), k


def test_policy_loss_extreme_log_ratio_is_clamped():
    old = torch.zeros(1, 2, dtype=torch.float64)
    new = torch.tensor([[50.0, -50.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[-1.0, 1.0]], dtype=torch.float64)
    loss, met = A.policy_loss(old, new, adv, torch.ones(1, 2), clip_ratio_c=1e12)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx((math.exp(20.0) - (1 - 0.2)) / 2)
    assert met["ppo_kl"].item() == pytest.approx(0.0)  # -(20) and -(-20) average to 0
    loss.backward()
    assert torch.equal(new.grad, torch.zeros_like(new))  # clamped: no gradient


def test_policy_loss_dual_clip_gradient_and_all_masked():
    old = torch.zeros(1, 1, dtype=torch.float64)
    new = torch.tensor([[math.log(5.0)]], dtype=torch.float64, requires_grad=True)
    loss, met = A.policy_loss(old, new, -torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1))
    assert loss.item() == pytest.approx(3.0) and met["pg_clipfrac_lower"].item() == 1.0
    loss.backward()
    assert new.grad.item() == 0.0  # the constant -A·c branch
    new.grad = None
    loss, met = A.policy_loss(old, new, torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, 1))
    assert loss.item() == 0.0 and all(v.item() == 0.0 for v in met.values())
    loss.backward()
    assert new.grad.item() == 0.0


@pytest.mark.parametrize("mode", A.AGG_MODES)
def test_policy_loss_gradcheck(mode):
    g = torch.Generator().manual_seed(6)
    old = torch.randn(3, 6, generator=g, dtype=torch.float64)
    # log-ratios on a grid that avoids the kinks at log(0.8), log(1.2), log(3)
    offsets = torch.tensor([-0.9, -0.5, -0.1, 0.05, 0.4, 1.5], dtype=torch.float64)
    new = (old + offsets).requires_grad_()
    adv = torch.randn(3, 6, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 0, 1, 1, 0, 1], [0, 0, 0, 0, 0, 0]])

    def f(x):
        return A.policy_loss(old, x, adv, mask, agg_mode=mode)[0]

    assert torch.autograd.gradcheck(f, (new,))


def test_policy_loss_passes_agg_kwargs_and_validates():
    old, new, adv, m = torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2, 3)
    loss, _ = A.policy_loss(old, new, adv, m, global_tokens=12)
    assert loss.item() == pytest.approx(-0.5)
    loss, _ = A.policy_loss(old, new, adv, m, agg_mode="seq-mean-token-sum-norm", norm_constant=6)
    assert loss.item() == pytest.approx(-0.5)  # mean of 2 sequence sums of −3, / 6
    for bad in ({"clip_ratio_c": 1.0}, {"clip_low": 1.0}, {"clip_low": -0.1}, {"clip_high": -0.1}):
        with pytest.raises(ValueError):
            A.policy_loss(old, new, adv, m, **bad)
    with pytest.raises(ValueError, match="shape"):
        A.policy_loss(old, new, torch.ones(2, 2), m)
    with pytest.raises(ValueError, match="aggregation mode"):
        A.policy_loss(old, new, adv, m, agg_mode="seq-mean")


# --------------------------------------------------------------------------- logits


def test_entropy_matches_reference_and_edge_cases():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 4, 11, generator=g, dtype=torch.float64) * 4
    np.testing.assert_allclose(A.entropy_from_logits(x).numpy(), ref_entropy(x.numpy()), atol=1e-12)
    assert A.entropy_from_logits(torch.zeros(5, 7)).tolist() == pytest.approx([math.log(7)] * 5)
    peaked = torch.tensor([[1e4, 0.0, 0.0]])
    assert A.entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)
    shifted = torch.randn(2, 9, generator=g) + 1e5  # float32 cancellation without the max shift
    want = ref_entropy(shifted.double().numpy())
    np.testing.assert_allclose(A.entropy_from_logits(shifted).numpy(), want, atol=1e-5)
    banned = torch.tensor([[0.0, 0.0, float("-inf")]], requires_grad=True)
    h = A.entropy_from_logits(banned)
    assert h.item() == pytest.approx(math.log(2))
    h.backward()
    assert torch.isfinite(banned.grad).all()
    assert A.entropy_from_logits(torch.zeros(2, 3, dtype=torch.bfloat16)).dtype == torch.float32
    torch.testing.assert_close(A.entropy_from_logits(x, chunk_size=3), A.entropy_from_logits(x))


def test_entropy_gradcheck():
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(8)).requires_grad_()
    assert torch.autograd.gradcheck(A.entropy_from_logits, (x,))


@pytest.mark.parametrize("chunk", [None, 1, 3, 5, 64])
def test_logprobs_match_naive_reference(chunk):
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 5, 13, generator=g) * 5
    labels = torch.randint(0, 13, (2, 5), generator=g)
    got = A.logprobs_from_logits(x, labels, chunk_size=chunk)
    assert got.dtype == torch.float32 and got.shape == (2, 5)
    np.testing.assert_allclose(got.double().numpy(), ref_logprobs(x.numpy(), labels.numpy()), atol=1e-5)
    naive = torch.log_softmax(x, -1).gather(-1, labels[..., None]).squeeze(-1)
    torch.testing.assert_close(got, naive)


def test_logprobs_upcast_and_gradient():
    g = torch.Generator().manual_seed(10)
    x = (torch.randn(3, 4, 17, generator=g) * 8).to(torch.bfloat16)
    labels = torch.randint(0, 17, (3, 4), generator=g)
    got = A.logprobs_from_logits(x, labels, chunk_size=2)
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), ref_logprobs(x.float().numpy(), labels.numpy()), atol=1e-5)
    xd = torch.randn(2, 6, 7, dtype=torch.float64, generator=g).requires_grad_()
    lab = torch.randint(0, 7, (2, 6), generator=g)
    assert torch.autograd.gradcheck(lambda t: A.logprobs_from_logits(t, lab, chunk_size=4), (xd,))


def test_logprobs_errors():
    x = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match="labels shape"):
        A.logprobs_from_logits(x, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        A.logprobs_from_logits(x, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="chunk_size"):
        A.logprobs_from_logits(x, torch.zeros(2, 3, dtype=torch.long), chunk_size=0)


# --------------------------------------------------------------------------- registries


def test_name_tuples_match_registries():
    assert A.ADV_ESTIMATORS == ("grpo", "rloo") == tuple(sorted(A.ADV_ESTIMATOR_REGISTRY))
    assert A.POLICY_LOSSES == ("vanilla",) == tuple(sorted(A.POLICY_LOSS_REGISTRY))
    assert set(A.KL_KINDS) == {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"} == set(A.KL_REGISTRY)
    assert A.KL_KINDS == tuple(sorted(A.KL_KINDS))
    assert set(A.AGG_MODES) == {
        "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    }
    assert A.get_adv_estimator("grpo") is A.grpo_advantages
    assert A.get_policy_loss("vanilla") is A.policy_loss
    assert A.get_kl("k3") is A.get_kl("low_var_kl")


@pytest.mark.parametrize(
    ("lookup", "name", "listing"),
    [
        (A.get_adv_estimator, "GRPO", "grpo, rloo"),
        (A.get_adv_estimator, "gae", "grpo, rloo"),
        (A.get_policy_loss, "Vanilla", "vanilla"),
        (A.get_kl, "Low_Var_KL", "abs, k1, k2, k3, kl, low_var_kl, mse"),
        (A.get_kl, "full", "abs, k1, k2, k3, kl, low_var_kl, mse"),
    ],
)
def test_unknown_or_wrong_case_names_list_valid_ones(lookup, name, listing):
    with pytest.raises(ValueError, match=f"unknown .*'{name}'.*valid names: {listing}$"):
        lookup(name)


@pytest.mark.parametrize(
    ("register", "registry", "taken"),
    [
        (A.register_adv_estimator, A.ADV_ESTIMATOR_REGISTRY, "grpo"),
        (A.register_policy_loss, A.POLICY_LOSS_REGISTRY, "vanilla"),
        (A.register_kl, A.KL_REGISTRY, "k2"),
    ],
)
def test_registration_and_duplicates(register, registry, taken):
    before = dict(registry)
    with pytest.raises(ValueError, match="already registered"):
        register("fresh_name_for_test", taken)(lambda *a, **k: None)
    assert registry == before  # a failed registration inserts nothing
    with pytest.raises(ValueError, match="already registered"):
        register(taken)(lambda *a, **k: None)
    with pytest.raises(ValueError, match="non-empty"):
        register("")
    try:
        fn = register("fresh_name_for_test")(lambda *a, **k: None)
        assert registry["fresh_name_for_test"] is fn
        with pytest.raises(ValueError, match="already registered"):
            register("fresh_name_for_test")(fn)
    finally:
        registry.pop("fresh_name_for_test", None)
    assert registry == before


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_portable_sqrt_is_ieee_on_the_cpu(dtype):
    """The group std's square root is the correctly rounded one (torch.sqrt on the CPU is oneMKL's, which is
    not, and differs between CPU vendors): checked against Python's math.sqrt, which is IEEE."""
    x = (torch.rand(4000, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 50).to(dtype)
    got = A.portable_sqrt(x)
    assert got.dtype == dtype
    want = torch.tensor([math.sqrt(v) for v in x.tolist()], dtype=torch.float64).to(dtype)  # exact, then rounded
    if dtype == torch.float64:
        assert torch.equal(got, want)
    else:  # rounding the float64 root to float32 is the float32 root except in double-rounding cases
        assert (got != want).sum().item() <= 2


def test_cpu_optimizer_is_the_fused_adamw():
    """Its square root is the instruction's: the per-tensor step calls oneMKL's, which differs by CPU vendor."""
    from harness.core.device import adamw_kernel

    for deterministic in (True, False):
        assert adamw_kernel(torch.device("cpu"), deterministic)["fused"] is True
    assert adamw_kernel(torch.device("cuda"), True) == {"fused": None, "foreach": False}  # GPU baselines' kernel
    assert adamw_kernel(torch.device("cuda"), False)["fused"] is True


def test_bit_changing_kernels_only_on_cuda_outside_deterministic_mode():
    """One predicate decides the fused AdamW on CUDA, the compiled output head and the lean RMSNorm backward."""
    from harness.core.device import fast_kernels
    from harness.core.update import head_kind

    assert [fast_kernels(torch.device(d), det) for d in ("cpu", "cuda") for det in (True, False)] == \
        [False, False, False, True]
    assert head_kind(torch.device("cpu")) == "eager"
