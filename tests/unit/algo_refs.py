"""Independent float64 references for harness.core.algos, written from verl's definitions (plain loops / numpy):
what tests/unit/test_algos.py holds the implementation to."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import torch

# --------------------------------------------------------------------------- references


def ref_group_adv(scores, ids, mask, eps=1e-6, norm=True, rloo=False):
    groups = defaultdict(list)
    for s, g in zip(scores, ids):
        groups[g].append(float(s))
    out = np.zeros(np.asarray(mask).shape)
    for i, (s, g) in enumerate(zip(scores, ids)):
        vals = groups[g]
        n = len(vals)
        if rloo:
            a = float(s) if n == 1 else float(s) - (sum(vals) - float(s)) / (n - 1)
        else:
            mean, std = (0.0, 1.0) if n == 1 else (float(np.mean(vals)), float(np.std(vals, ddof=1)))
            a = (float(s) - mean) / (std + eps) if norm else float(s) - mean
        for t in range(out.shape[1]):
            out[i, t] = a if mask[i][t] else 0.0
    return out


def ref_kl(lp, ref, kind):
    d = lp - ref
    if kind in ("kl", "k1"):
        return d
    if kind == "abs":
        return abs(d)
    if kind in ("mse", "k2"):
        return 0.5 * d * d
    x = min(max(ref - lp, -20.0), 20.0)
    return min(max(math.exp(x) - x - 1.0, -10.0), 10.0)


def ref_agg(loss, mask, mode, constant=None):
    loss, mask = np.asarray(loss, dtype=np.float64), np.asarray(mask, dtype=bool)
    rows = [(loss[i][mask[i]]) for i in range(loss.shape[0])]
    if mode == "token-mean":
        n = sum(len(r) for r in rows)
        return sum(float(r.sum()) for r in rows) / n if n else 0.0
    if mode == "token-sum":
        return sum(float(r.sum()) for r in rows)
    c = loss.shape[1] if constant is None else constant
    vals = []
    for r in rows:
        if len(r) == 0:
            continue
        s = float(r.sum())
        vals.append({"seq-mean-token-sum": s, "seq-mean-token-mean": s / len(r),
                     "seq-mean-token-sum-norm": s / c}[mode])
    return sum(vals) / len(vals) if vals else 0.0


def verl_agg(loss_mat, loss_mask, mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
             loss_scale_factor=None):
    """verl's ``agg_loss`` (verl/trainer/ppo/core_algos.py at the pinned revision), written out in float64."""
    loss_mat, loss_mask = loss_mat.double(), loss_mask.double()
    masked_sum = lambda x, m: (x * m).sum()  # noqa: E731  (verl_F.masked_sum)
    if mode == "token-mean":
        n = loss_mask.sum() if batch_num_tokens is None else batch_num_tokens
        return masked_sum(loss_mat, loss_mask) / n * dp_size
    if mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = (loss_mat * loss_mask).sum(-1)
        seq_mask = (loss_mask.sum(-1) > 0).double()
        gbs = seq_mask.sum() if global_batch_size is None else global_batch_size
        out = masked_sum(seq_losses, seq_mask) / gbs * dp_size
        if mode == "seq-mean-token-sum-norm":
            out = out / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        return out
    assert mode == "seq-mean-token-mean"
    n_tok = loss_mask.sum(-1)
    seq_losses = (loss_mat * loss_mask).sum(-1) / (n_tok + 1e-8)
    seq_mask = (n_tok > 0).double()
    gbs = seq_mask.sum() if global_batch_size is None else global_batch_size
    return masked_sum(seq_losses, seq_mask) / gbs * dp_size


def ref_policy(old, new, adv, mask, lo=0.2, hi=0.2, c=3.0):
    """Per-token loss matrix and the three metrics, one element at a time."""
    B, T = len(old), len(old[0])
    tok = np.zeros((B, T))
    clip, kl, lower, n = 0.0, 0.0, 0.0, 0
    for i in range(B):
        for t in range(T):
            lr = min(max(new[i][t] - old[i][t], -20.0), 20.0)
            r, a = math.exp(lr), adv[i][t]
            l1, l2 = -a * r, -a * min(max(r, 1 - lo), 1 + hi)
            lc = max(l1, l2)
            tok[i, t] = min(-a * c, lc) if a < 0 else lc
            if mask[i][t]:
                n += 1
                clip += l2 > l1
                kl += -lr
                lower += (lc > -a * c) and a < 0
    n = max(n, 1)
    return tok, {"pg_clipfrac": clip / n, "ppo_kl": kl / n, "pg_clipfrac_lower": lower / n}


def ref_entropy(x):
    x = np.asarray(x, dtype=np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    logp = np.log(np.where(p > 0, p, 1.0))
    return -(p * logp).sum(-1)


def ref_logprobs(x, labels):
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros(x.shape[:-1])
    for idx in np.ndindex(*x.shape[:-1]):
        row = x[idx]
        m = row.max()
        out[idx] = row[labels[idx]] - (m + math.log(np.exp(row - m).sum()))
    return out


def rand_mask(g, B, T, p_empty=0.25):
    m = (torch.rand(B, T, generator=g) < 0.7).float()
    m[torch.rand(B, generator=g) < p_empty] = 0.0
    return m
