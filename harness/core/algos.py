"""Pure tensor functions of GRPO: advantages, KL penalties, loss aggregation, the clipped
policy loss, entropy and token log-probabilities. No I/O, no global state beyond the
three name registries.

Shapes: ``B`` sequences, ``T`` (padded) response tokens, ``V`` vocabulary entries.
Masks are ``(B, T)`` tensors of 0/1 (bool or any numeric dtype); a nonzero entry marks a
response token that counts.

Registries (filled by decorators at import; names are case-sensitive; registering a name
twice raises ``ValueError``; an unknown name raises ``ValueError`` listing the valid names,
sorted):

* advantage estimators: ``grpo``, ``rloo`` (:data:`ADV_ESTIMATORS`)
* policy losses: ``vanilla`` (:data:`POLICY_LOSSES`)
* KL penalties: ``kl``/``k1``, ``abs``, ``mse``/``k2``, ``low_var_kl``/``k3`` (:data:`KL_KINDS`)

Loss aggregation modes are the fixed tuple :data:`AGG_MODES`.

Departures from verl (``verl/trainer/ppo/core_algos.py``) and the papers
-------------------------------------------------------------------------
1. Empty masks never produce NaN. :func:`masked_mean` over no valid entries is 0 and
   :func:`agg_loss` of an all-masked batch is a 0 that keeps the autograd graph (verl
   divides 0 by 0 in ``token-mean`` and older ``seq-mean-*`` modes). Policy-loss metrics
   of an all-masked batch are therefore 0, not NaN.
2. Fully masked sequences are excluded from every sequence-level mean (as in recent
   verl); a ``seq-mean-token-mean`` row with no tokens contributes nothing instead of 0/0.
3. ``seq-mean-token-mean`` divides a row's sum by its token count exactly; verl adds
   ``1e-8`` to the count (a relative difference below ``1e-8 / n_i``).
4. Masked positions are selected with ``torch.where`` instead of multiplied by the mask,
   so a non-finite value at a padded position cannot leak into a loss or a metric.
5. GRPO group statistics are computed in float64 around a per-group pivot (the group's
   first score) and cast back to the scores' dtype; a group of equal scores therefore has
   advantage exactly 0 (verl can return rounding noise divided by ``eps``). Non-finite
   scores raise ``ValueError``.
6. Micro-batch / data-parallel friendly denominators: :func:`agg_loss` accepts
   ``global_tokens`` / ``global_seqs`` so that summing the per-micro-batch results equals
   the full-batch loss (verl: ``batch_num_tokens`` / ``global_batch_size`` with ``dp_size``).
7. :func:`entropy_from_logits` shifts logits by their (detached) row maximum and computes
   in at least float32; ``-inf`` logits (banned tokens) give a finite entropy and gradient.
8. Invalid hyper-parameters (``clip_ratio_c <= 1``, negative clip ranges, a non-positive
   ``norm_constant``) raise ``ValueError`` instead of failing an ``assert``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Protocol, TypedDict, TypeVar

import numpy as np
from typing_extensions import Unpack  # typing.Unpack from Python 3.11

from harness.lazyimport import lazy_import
from harness.registry import Registry

if TYPE_CHECKING:
    import torch
    from torch import Tensor
else:  # loaded when a function runs: reading the registries' names (harness validate) needs no torch
    torch = lazy_import("torch")

__all__ = [
    "ADV_ESTIMATORS", "ADV_ESTIMATOR_REGISTRY", "AGG_MODES", "KL_KINDS", "KL_REGISTRY",
    "POLICY_LOSSES", "POLICY_LOSS_REGISTRY", "AdvEstimatorFn", "KLFn", "PolicyLossFn",
    "agg_loss", "entropy_from_logits", "get_adv_estimator", "get_kl", "get_policy_loss",
    "grpo_advantages", "kl_penalty", "logprobs_from_logits", "masked_mean", "policy_loss",
    "register_adv_estimator", "register_kl", "register_policy_loss", "rloo_advantages",
]  # fmt: skip

Number = int | float


class AggCounts(TypedDict, total=False):
    """What :func:`agg_loss` needs beyond the micro-batch: the whole batch's counts (and DAPO's constant)."""

    norm_constant: Number | None
    global_tokens: Number | Tensor | None
    global_seqs: Number | Tensor | None


# --------------------------------------------------------------------------- signatures


class AdvEstimatorFn(Protocol):
    """``(scores[B], group_ids, response_mask[B, T], *, eps, norm_by_std) -> adv[B, T]``."""

    def __call__(
        self,
        scores: Tensor,
        group_ids: Sequence[Hashable],
        response_mask: Tensor,
        *,
        eps: float,
        norm_by_std: bool,
    ) -> Tensor: ...


class PolicyLossFn(Protocol):
    """``(old_logp, logp, advantages, response_mask, **hparams) -> (loss, metrics)``."""

    def __call__(
        self,
        old_logp: Tensor,
        logp: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        clip_low: float = ...,
        clip_high: float = ...,
        clip_ratio_c: float = ...,
        agg_mode: str = ...,
        **agg_kwargs: Unpack[AggCounts],
    ) -> tuple[Tensor, dict[str, Tensor]]: ...


KLFn = Callable[["Tensor", "Tensor"], "Tensor"]
"""``(logp[B, T], ref_logp[B, T]) -> penalty[B, T]``, elementwise."""

_F = TypeVar("_F")

ADV_ESTIMATOR_REGISTRY: Registry[AdvEstimatorFn] = Registry("advantage estimator",
                                                           key_path="algorithm.adv_estimator")
POLICY_LOSS_REGISTRY: Registry[PolicyLossFn] = Registry("policy loss",
                                                     key_path="actor_rollout_ref.actor.policy_loss.loss_mode")
KL_REGISTRY: Registry[KLFn] = Registry("KL penalty kind")  # actor.kl_loss_type and algorithm.kl_penalty


# --------------------------------------------------------------------------- registries
def _no_grad(fn: _F) -> _F:
    """``torch.no_grad()`` as a decorator, without loading torch when the module is imported."""
    @functools.wraps(fn)  # type: ignore[arg-type]
    def wrapper(*args: object, **kwargs: object) -> object:
        with torch.no_grad():
            return fn(*args, **kwargs)  # type: ignore[operator]

    return wrapper  # type: ignore[return-value]


def register_adv_estimator(name: str, *aliases: str) -> Callable[[_F], _F]:
    """Decorator: register an :class:`AdvEstimatorFn` under ``name`` (and ``aliases``)."""
    return ADV_ESTIMATOR_REGISTRY.register(name, *aliases)  # type: ignore[return-value]


def register_policy_loss(name: str, *aliases: str) -> Callable[[_F], _F]:
    """Decorator: register a :class:`PolicyLossFn` under ``name`` (and ``aliases``)."""
    return POLICY_LOSS_REGISTRY.register(name, *aliases)  # type: ignore[return-value]


def register_kl(name: str, *aliases: str) -> Callable[[_F], _F]:
    """Decorator: register a :data:`KLFn` under ``name`` (and ``aliases``)."""
    return KL_REGISTRY.register(name, *aliases)  # type: ignore[return-value]


def get_adv_estimator(name: str) -> AdvEstimatorFn:
    """The advantage estimator registered as ``name``; ``ValueError`` lists valid names."""
    return ADV_ESTIMATOR_REGISTRY.lookup(name)


def get_policy_loss(name: str) -> PolicyLossFn:
    """The policy loss registered as ``name``; ``ValueError`` lists valid names."""
    return POLICY_LOSS_REGISTRY.lookup(name)


def get_kl(name: str) -> KLFn:
    """The KL penalty registered as ``name``; ``ValueError`` lists valid names."""
    return KL_REGISTRY.lookup(name)


# --------------------------------------------------------------------------- masks


def _bool_mask(mask: Tensor, like: Tensor, what: str = "mask") -> Tensor:
    if mask.shape != like.shape:
        raise ValueError(f"{what} shape {tuple(mask.shape)} != values shape {tuple(like.shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over entries where ``mask`` is nonzero; 0 where there are none.

    ``dim=None`` reduces everything to a 0-dim tensor; otherwise reduces ``dim``.
    """
    m = _bool_mask(mask, x)
    total = torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device))
    count = m.sum() if dim is None else m.sum(dim)
    total = total.sum() if dim is None else total.sum(dim)
    return total / count.clamp(min=1).to(total.dtype)


# --------------------------------------------------------------------------- advantages


def _group_index(group_ids: Sequence[Hashable] | Tensor, batch: int) -> list[int]:
    ids = group_ids.tolist() if hasattr(group_ids, "tolist") else list(group_ids)
    if len(ids) != batch:
        raise ValueError(f"group_ids has {len(ids)} entries for {batch} scores")
    first_seen: dict[Hashable, int] = {}
    return [first_seen.setdefault(g, len(first_seen)) for g in ids]


def _check_adv_inputs(scores: Tensor, response_mask: Tensor) -> None:
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D (B,), got shape {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise ValueError(f"scores must be a floating tensor, got {scores.dtype} (fix: .float())")
    if response_mask.dim() != 2 or response_mask.shape[0] != scores.shape[0]:
        raise ValueError(
            f"response_mask must be (B, T) with B={scores.shape[0]}, got {tuple(response_mask.shape)}"
        )
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores contain NaN or inf")


def _group_stats(scores: Tensor, group_ids: Sequence[Hashable]) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample group ``(size, mean, unbiased std)`` in float64, each ``(B,)``.

    Deviations are taken around each group's first score, so equal scores give exactly 0.
    """
    s = scores.detach().to(torch.float64)  # (B,)
    idx_list = _group_index(group_ids, s.shape[0])
    idx = torch.tensor(idx_list, dtype=torch.long, device=s.device)  # (B,)
    n_groups = max(idx_list, default=-1) + 1
    count = torch.zeros(n_groups, dtype=torch.float64, device=s.device).index_add_(0, idx, torch.ones_like(s))
    first = torch.full((n_groups,), len(idx_list), dtype=torch.long, device=s.device)
    first = first.scatter_reduce(0, idx, torch.arange(len(idx_list), device=s.device), reduce="amin")
    pivot = s[first][idx]  # (B,)
    dev = s - pivot
    dev_mean = torch.zeros_like(count).index_add_(0, idx, dev)[idx] / count[idx]
    mean = pivot + dev_mean
    centered = dev - dev_mean
    sq = torch.zeros_like(count).index_add_(0, idx, centered * centered)[idx]
    n = count[idx]
    std = portable_sqrt(sq / (n - 1).clamp(min=1))
    return n, mean, std


def portable_sqrt(x: Tensor) -> Tensor:
    """Correctly rounded square root, the same bits on every machine (no autograd).

    On the CPU, ``torch.sqrt`` goes through oneMKL's vector math, which is not correctly rounded
    (1.3 % of float64 and 16 % of float32 results differ from IEEE sqrt on an AMD EPYC) and takes
    another path on Intel, so its bits depend on the CPU vendor; numpy's is the IEEE instruction.
    CUDA's ``sqrt`` is correctly rounded already.
    """
    if x.device.type != "cpu":
        return torch.sqrt(x)
    return torch.from_numpy(np.sqrt(x.detach().contiguous().numpy()))


@register_adv_estimator("grpo")
@_no_grad
def grpo_advantages(
    scores: Tensor,
    group_ids: Sequence[Hashable],
    response_mask: Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> Tensor:
    """GRPO outcome advantages, broadcast over response tokens.

    For sample ``i`` in prompt group ``g`` (same ``group_ids`` entry):
    ``A_i = (s_i - mean_g) / (std_g + eps)`` with the unbiased (N-1) std, or
    ``A_i = s_i - mean_g`` when ``norm_by_std=False`` (Dr. GRPO). A group of one sample
    uses ``mean = 0, std = 1`` (verl's convention).

    Args:
        scores: ``(B,)`` floating sequence-level rewards.
        group_ids: ``B`` hashables (a tensor or array is converted with ``tolist``).
        response_mask: ``(B, T)`` 0/1 mask of response tokens.
        eps: added to the std.
        norm_by_std: divide by the group std (GRPO) or not (Dr. GRPO).

    Returns:
        ``(B, T)`` advantages (detached), zero outside the mask, in ``scores.dtype``.
    """
    _check_adv_inputs(scores, response_mask)
    n, mean, std = _group_stats(scores, group_ids)  # (B,) each
    singleton = n == 1
    mean = torch.where(singleton, torch.zeros_like(mean), mean)
    std = torch.where(singleton, torch.ones_like(std), std)
    adv = scores.detach().to(torch.float64) - mean  # (B,)
    if norm_by_std:
        adv = adv / (std + eps)
    adv = adv.to(scores.dtype)
    mask = response_mask.to(device=scores.device) != 0  # (B, T)
    return torch.where(mask, adv[:, None], torch.zeros((), dtype=scores.dtype, device=scores.device))


@register_adv_estimator("rloo")
@_no_grad
def rloo_advantages(
    scores: Tensor,
    group_ids: Sequence[Hashable],
    response_mask: Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> Tensor:
    """REINFORCE leave-one-out advantages: ``A_i = s_i - mean_{j != i} s_j``.

    Equals ``n/(n-1) · (s_i - mean_g)``; a group of one sample keeps ``A_i = s_i`` (verl).
    ``eps`` and ``norm_by_std`` are accepted for the common estimator signature and ignored.

    Returns:
        ``(B, T)`` advantages (detached), zero outside the mask, in ``scores.dtype``.
    """
    del eps, norm_by_std
    _check_adv_inputs(scores, response_mask)
    n, mean, _ = _group_stats(scores, group_ids)  # (B,) each
    s = scores.detach().to(torch.float64)
    adv = torch.where(n > 1, (s - mean) * n / (n - 1).clamp(min=1), s).to(scores.dtype)
    mask = response_mask.to(device=scores.device) != 0  # (B, T)
    return torch.where(mask, adv[:, None], torch.zeros((), dtype=scores.dtype, device=scores.device))


# --------------------------------------------------------------------------- KL penalties


@register_kl("kl", "k1")
def _kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``logp - ref_logp`` (unbiased, high variance)."""
    return logp - ref_logp


@register_kl("abs")
def _kl_abs(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``|logp - ref_logp|``."""
    return (logp - ref_logp).abs()


@register_kl("mse", "k2")
def _kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``½ (logp - ref_logp)²``."""
    return 0.5 * (logp - ref_logp).square()


@register_kl("low_var_kl", "k3")
def _kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Schulman's k3: ``d = clamp(ref - logp, ±20)``, ``exp(d) - d - 1`` clamped to ``[-10, 10]``."""
    d = torch.clamp(ref_logp - logp, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(d) - d - 1.0, min=-10.0, max=10.0)


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str) -> Tensor:
    """Per-token KL penalty estimate ``(B, T)`` between the policy and the reference.

    ``kind`` is one of :data:`KL_KINDS`; an unknown kind raises ``ValueError``.
    """
    fn = get_kl(kind)
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp shape {tuple(logp.shape)} != ref_logp shape {tuple(ref_logp.shape)}")
    return fn(logp, ref_logp)


# --------------------------------------------------------------------------- aggregation

AGG_MODES: tuple[str, ...] = (
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
    "token-mean",
    "token-sum",
)


def _denominator(value: Number | Tensor | None, local: Tensor, name: str) -> Tensor:
    """The caller's global denominator if given, else ``local``; clamped to ≥ 1."""
    if value is None:
        return local.clamp(min=1)
    if isinstance(value, torch.Tensor):
        return value.to(device=local.device, dtype=local.dtype).clamp(min=1)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return torch.tensor(max(float(value), 1.0), dtype=local.dtype, device=local.device)


def agg_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    norm_constant: Number | None = None,
    *,
    global_tokens: Number | Tensor | None = None,
    global_seqs: Number | Tensor | None = None,
) -> Tensor:
    """Aggregate a ``(B, T)`` per-token loss into a scalar.

    Modes (``n_i`` = valid tokens of row ``i``, ``S_i`` = masked row sum, ``V`` = rows with
    ``n_i > 0``; rows with ``n_i = 0`` are excluded everywhere):

    * ``token-mean``:               ``Σ_i S_i / Σ_i n_i``
    * ``token-sum``:                ``Σ_i S_i``
    * ``seq-mean-token-sum``:       ``Σ_{i∈V} S_i / |V|``
    * ``seq-mean-token-mean``:      ``Σ_{i∈V} (S_i / n_i) / |V|``
    * ``seq-mean-token-sum-norm``:  ``(Σ_{i∈V} S_i / |V|) / C`` with ``C = norm_constant``
      (verl's ``loss_scale_factor``; default ``T``, the padded length; pass a fixed value
      to keep it constant across batches and micro-batches). ``norm_constant`` is ignored
      by the other modes.

    These are verl's formulas (``verl/trainer/ppo/core_algos.py agg_loss``) with
    ``dp_size = 1``. Micro-batches and data-parallel ranks: pass ``global_tokens``
    (``Σ n_i`` over the whole batch, used by ``token-mean``) and/or ``global_seqs``
    (``|V|`` over the whole batch, used by the ``seq-*`` modes). The local denominator is
    then replaced, so the *sum* of the values returned for the parts equals the value of
    the whole batch (``token-sum`` has no denominator). Either may be passed in any mode;
    the one a mode does not use is ignored.

    An all-masked input returns a zero that keeps the autograd graph (never NaN).
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; valid names: {', '.join(AGG_MODES)}")
    if loss_mat.dim() != 2:
        raise ValueError(f"loss_mat must be (B, T), got shape {tuple(loss_mat.shape)}")
    m = _bool_mask(mask, loss_mat)  # (B, T)
    zero = torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device)
    masked = torch.where(m, loss_mat, zero)  # (B, T)
    if mode == "token-mean":
        local_tokens = m.sum().to(loss_mat.dtype)
        return masked.sum() / _denominator(global_tokens, local_tokens, "global_tokens")
    if mode == "token-sum":
        return masked.sum()

    seq_sum = masked.sum(-1)  # (B,)
    n_tok = m.sum(-1)  # (B,)
    valid = n_tok > 0  # (B,)
    constant = 1.0
    if mode == "seq-mean-token-sum-norm":
        constant = float(loss_mat.shape[-1] if norm_constant is None else norm_constant)
        if not constant > 0:
            raise ValueError(f"norm_constant must be > 0, got {norm_constant}")
    seq_val = seq_sum / n_tok.clamp(min=1).to(loss_mat.dtype) if mode == "seq-mean-token-mean" else seq_sum
    local_seqs = valid.sum().to(loss_mat.dtype)
    total = torch.where(valid, seq_val, zero).sum()
    seq_mean = total / _denominator(global_seqs, local_seqs, "global_seqs")
    return seq_mean / constant if mode == "seq-mean-token-sum-norm" else seq_mean


# --------------------------------------------------------------------------- policy loss


@register_policy_loss("vanilla")
def policy_loss(
    old_logp: Tensor,
    logp: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    agg_mode: str = "token-mean",
    **agg_kwargs: Unpack[AggCounts],
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate with dual clip (Ye et al. 2019), as verl's ``vanilla`` loss.

    ``r = exp(clamp(logp - old_logp, ±20))``; ``L1 = -A·r``; ``L2 = -A·clamp(r, 1-clip_low,
    1+clip_high)``; ``Lc = max(L1, L2)``; for ``A < 0`` the loss is ``min(Lc, -A·c)``.

    Args:
        old_logp, logp, advantages, response_mask: ``(B, T)`` each.
        clip_low, clip_high: clip range below / above 1 (``0 <= clip_low < 1``, ``clip_high >= 0``).
        clip_ratio_c: dual-clip constant ``c > 1``.
        agg_mode: one of :data:`AGG_MODES`.
        **agg_kwargs: ``norm_constant``, ``global_tokens``, ``global_seqs`` for :func:`agg_loss`.

    Returns:
        ``(loss, metrics)``; metrics are detached 0-dim masked means: ``pg_clipfrac``
        (``L2 > L1``), ``ppo_kl`` (``-log_ratio``), ``pg_clipfrac_lower``
        (dual clip active: ``Lc > -A·c`` and ``A < 0``).
    """
    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip PPO, got {clip_ratio_c}")
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if not clip_high >= 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    for name, t in (("old_logp", old_logp), ("advantages", advantages)):
        if t.shape != logp.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != logp shape {tuple(logp.shape)}")
    mask = _bool_mask(response_mask, logp, "response_mask")  # (B, T)

    log_ratio = torch.clamp(logp - old_logp, min=-20.0, max=20.0)  # (B, T)
    ratio = torch.exp(log_ratio)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(loss1, loss2)
    loss3 = -advantages * clip_ratio_c
    negative = advantages < 0
    loss_tok = torch.where(negative, torch.minimum(loss3, clipped), clipped)  # (B, T)

    loss = agg_loss(loss_tok, mask, agg_mode, **agg_kwargs)
    with torch.no_grad():
        dtype = loss_tok.dtype
        metrics = {
            "pg_clipfrac": masked_mean((loss2 > loss1).to(dtype), mask),
            "ppo_kl": masked_mean(-log_ratio, mask),
            "pg_clipfrac_lower": masked_mean(((clipped > loss3) & negative).to(dtype), mask),
        }
    return loss, metrics


# --------------------------------------------------------------------------- logits


def _chunks(n: int, chunk_size: int | None) -> list[slice]:
    if chunk_size is None:
        return [slice(0, n)]
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size}")
    return [slice(i, min(i + chunk_size, n)) for i in range(0, n, chunk_size)]


def _entropy(logits: Tensor) -> Tensor:
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (..., V)
    z = x - x.amax(dim=-1, keepdim=True).detach()  # shift-invariant; ≤ 0
    p = torch.softmax(z, dim=-1)
    z_finite = torch.where(torch.isfinite(z), z, torch.zeros((), dtype=z.dtype, device=z.device))
    return torch.logsumexp(z, dim=-1) - (p * z_finite).sum(-1)


def entropy_from_logits(logits: Tensor, chunk_size: int | None = None) -> Tensor:
    """Entropy of ``softmax(logits)`` over the last dim: ``logsumexp(x) - Σ softmax(x)·x``.

    Computed on row-max-shifted logits in at least float32 (float64 stays float64).
    ``chunk_size`` (optional) bounds the positions of dim ``-2`` processed at once.

    Args:
        logits: ``(..., V)``; ``-inf`` entries are allowed (probability 0).

    Returns:
        ``(...)`` entropies in the compute dtype.
    """
    if logits.dim() < 2 or chunk_size is None:
        return _entropy(logits)
    return torch.cat([_entropy(logits[..., s, :]) for s in _chunks(logits.shape[-2], chunk_size)], dim=-1)


def logprobs_from_logits(logits: Tensor, labels: Tensor, chunk_size: int | None = None) -> Tensor:
    """``log_softmax(logits)[..., labels]`` computed in at least float32, chunked.

    Each chunk of ``chunk_size`` positions along the sequence dim (``-2``) is upcast once
    and reduced to ``logit[label] - logsumexp(logits)``; the full-vocabulary float32
    log-softmax is never materialised. Temperature scaling is the caller's job.

    Args:
        logits: ``(..., T, V)`` (e.g. ``(B, T, V)``), any floating dtype.
        labels: ``(..., T)`` integer token ids in ``[0, V)``.
        chunk_size: positions per chunk; ``None`` processes everything at once.

    Returns:
        ``(..., T)`` log-probabilities in float32 (float64 for float64 logits).
    """
    if logits.shape[:-1] != labels.shape:
        want = tuple(logits.shape[:-1])
        raise ValueError(f"labels shape {tuple(labels.shape)} != logits.shape[:-1] {want}")
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be an integer tensor, got {labels.dtype}")
    if logits.dim() < 2:
        raise ValueError(f"logits must be (..., T, V), got shape {tuple(logits.shape)}")
    dtype = torch.promote_types(logits.dtype, torch.float32)
    out = []
    for s in _chunks(logits.shape[-2], chunk_size):
        x = logits[..., s, :].to(dtype)  # (..., t, V)
        picked = x.gather(-1, labels[..., s].long().unsqueeze(-1)).squeeze(-1)  # (..., t)
        out.append(picked - torch.logsumexp(x, dim=-1))
    return out[0] if len(out) == 1 else torch.cat(out, dim=-1)


# --------------------------------------------------------------------------- name tuples

# Built-in names, sorted: the registries' keys at import (KL aliases included).
ADV_ESTIMATORS: tuple[str, ...] = tuple(sorted(ADV_ESTIMATOR_REGISTRY))
POLICY_LOSSES: tuple[str, ...] = tuple(sorted(POLICY_LOSS_REGISTRY))
KL_KINDS: tuple[str, ...] = tuple(sorted(KL_REGISTRY))
