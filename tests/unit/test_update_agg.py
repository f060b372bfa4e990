"""The actor update's micro-batches: for every aggregation mode, one optimiser step over micro-batches
equals the step on the loss of the whole mini-batch (global denominators, harness.core.update)."""

from __future__ import annotations

import pytest
import torch

from harness.core import algos, update
from harness.core.rollout import RolloutBatch

B, P, R, V = 6, 2, 5, 7


class Toy(torch.nn.Module):
    """Logits of response token t depend on the token only: a (V, V) table, float64."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(V, V, generator=torch.Generator().manual_seed(1),
                                                    dtype=torch.float64))


def _logprobs(model, batch, *, bias, temperature, image_pad_id, with_entropy=False):
    logits = model.table[batch.response_ids] / temperature  # (B, R, V)
    ent = algos.entropy_from_logits(logits) if with_entropy else None
    return algos.logprobs_from_logits(logits, batch.response_ids), ent


def _batch() -> RolloutBatch:
    g = torch.Generator().manual_seed(2)
    mask = (torch.rand(B, R, generator=g) > 0.3).long()
    mask[2] = 0  # a fully masked sequence counts in no denominator
    tensors = {"old_logp": -torch.rand(B, R, generator=g, dtype=torch.float64),
               "ref_logp": -torch.rand(B, R, generator=g, dtype=torch.float64),
               "advantages": torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, R).clone()}
    return RolloutBatch(prompt_ids=torch.zeros(B, P, dtype=torch.long), prompt_mask=torch.ones(B, P, dtype=torch.long),
                        response_ids=torch.randint(0, V, (B, R), generator=g), response_mask=mask,
                        rollout_logp=tensors["old_logp"].clone(), group_ids=[k // 3 for k in range(B)],
                        pixels=[None] * B, grids=[None] * B, tensors=tensors)


def _cfg(mode: str) -> update.LossConfig:
    return update.LossConfig(clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0, agg_mode=mode, entropy_coeff=0.01,
                             use_kl_loss=True, kl_coef=0.1, kl_type="low_var_kl", temperature=1.0)


def _step(mode: str, micro: int, monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, dict[str, float]]:
    monkeypatch.setattr(update, "sequence_logprobs", _logprobs)
    model = Toy()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    metrics = update.update_actor(model, opt, None, _batch(), cfg=_cfg(mode), mini_size=B, micro_size=micro, epochs=1,
                                  clip_grad=1e9, bias=torch.zeros(()), image_pad_id=0)
    return model.table.detach(), metrics


def _whole_batch_step(mode: str) -> torch.Tensor:
    """The same SGD step, from the loss of the whole mini-batch written in one piece."""
    model, batch, cfg = Toy(), _batch(), _cfg(mode)
    logp, ent = _logprobs(model, batch, bias=None, temperature=1.0, image_pad_id=0, with_entropy=True)
    mask = batch.response_mask
    pg, _ = algos.policy_loss(batch.tensors["old_logp"], logp, batch.tensors["advantages"], mask, clip_low=0.2,
                              clip_high=0.28, clip_ratio_c=3.0, agg_mode=mode)
    kl = algos.agg_loss(algos.kl_penalty(logp, batch.tensors["ref_logp"], "low_var_kl"), mask, mode)
    loss = pg - cfg.entropy_coeff * algos.agg_loss(ent, mask, mode) + cfg.kl_coef * kl
    loss.backward()
    return (model.table - model.table.grad).detach()


@pytest.mark.parametrize("mode", algos.AGG_MODES)
def test_micro_batches_step_like_the_whole_mini_batch(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want = _whole_batch_step(mode)
    for micro in (1, 4, B):
        got, metrics = _step(mode, micro, monkeypatch)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=f"{mode}, micro-batch {micro}")
        assert metrics["actor/kl_loss"] > 0


@pytest.mark.parametrize("mode", algos.AGG_MODES)
def test_on_policy_update_takes_old_logprobs_from_its_own_forward(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One epoch, one mini-batch: no old_logp given, the update's detached log-probs stand in — the same step."""
    monkeypatch.setattr(update, "sequence_logprobs", _logprobs)
    assert update.is_on_policy(B, B, 1) and not update.is_on_policy(B, B // 2, 1) and not update.is_on_policy(B, B, 2)
    given = _batch()
    with torch.no_grad():
        given.tensors["old_logp"] = _logprobs(Toy(), given, bias=None, temperature=1.0, image_pad_id=0)[0]
    own = _batch()
    del own.tensors["old_logp"]
    tables = []
    for batch in (given, own):
        model = Toy()
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        metrics = update.update_actor(model, opt, None, batch, cfg=_cfg(mode), mini_size=B, micro_size=4, epochs=1,
                                      clip_grad=1e9, bias=torch.zeros(()), image_pad_id=0,
                                      on_policy="old_logp" not in batch.tensors)
        tables.append(model.table.detach())
        assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/ppo_kl"] == 0.0
    assert torch.equal(tables[0], tables[1])
    assert torch.equal(own.tensors["old_logp"], given.tensors["old_logp"]), "the update hands back the old log-probs"
    with pytest.raises(ValueError, match="one PPO epoch over one mini-batch"):
        update.update_actor(Toy(), torch.optim.SGD(Toy().parameters(), lr=1.0), None, _batch(), cfg=_cfg(mode),
                            mini_size=B // 2, micro_size=4, epochs=1, clip_grad=1e9, bias=torch.zeros(()),
                            image_pad_id=0, on_policy=True)
