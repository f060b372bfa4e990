"""The data-parallel split of a step's batch: rows per rank, whole groups or groups spanning ranks, and the
advantages of a spanning group equal to one process's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.core import algos
from harness.core.trainer import GRPOTrainer
from harness.errors import HarnessError


def _trainer(world: int, rank: int, mini: int, n: int, parts: list | None = None) -> SimpleNamespace:
    dist = SimpleNamespace(world=world, rank=rank, all_gather_objects=lambda obj: parts)
    return SimpleNamespace(dist=dist, rollout_cfg=SimpleNamespace(n=n),
                           actor_cfg=SimpleNamespace(ppo_mini_batch_size=mini),
                           cfg=SimpleNamespace(algorithm=SimpleNamespace(adv_estimator="grpo",
                                                                         norm_adv_by_std_in_grpo=True)))


@pytest.mark.parametrize(("prompts", "mini", "n", "world"), [(16, 8, 8, 1), (16, 8, 8, 2), (16, 8, 8, 8),
                                                              (16, 8, 8, 16), (16, 4, 8, 8), (64, 32, 5, 16)])
def test_every_mini_batch_is_split_evenly_over_the_ranks(prompts, mini, n, world):
    shares = [GRPOTrainer.shard(_trainer(world, r, mini, n), prompts) for r in range(world)]  # type: ignore[arg-type]
    assert sorted(row for s in shares for row in s) == list(range(prompts * n))  # every row once
    per_mini = mini * n
    for s in shares:
        assert len(s) == prompts * n // world
        counts = [sum(1 for row in s if row // per_mini == j) for j in range(prompts // mini)]
        assert len(set(counts)) == 1  # the same share of every mini-batch
    if mini % world == 0:  # whole groups: each rank's prompts, as before groups could span ranks
        k = mini // world
        for r, s in enumerate(shares):
            index = [j + r * k + i for j in range(0, prompts, mini) for i in range(k)]
            assert s == [i * n + j for i in index for j in range(n)]


def test_a_mini_batch_that_cannot_split_is_one_line():
    with pytest.raises(HarnessError, match="must split evenly over 16 ranks"):
        GRPOTrainer.shard(_trainer(16, 0, 6, 4), 12)  # type: ignore[arg-type]


def test_advantages_of_groups_spanning_ranks_equal_one_process():
    g = torch.Generator().manual_seed(3)
    prompts, n, world, mini = 4, 8, 16, 2
    scores = torch.rand(prompts * n, generator=g, dtype=torch.float64).round(decimals=1)
    groups = [f"p{i // n}" for i in range(prompts * n)]
    mask = torch.ones(prompts * n, 3, dtype=torch.long)
    one = algos.grpo_advantages(scores, groups, mask)
    shares = [GRPOTrainer.shard(_trainer(world, r, mini, n), prompts) for r in range(world)]  # type: ignore[arg-type]
    parts = [([groups[i] for i in s], scores[s].tolist()) for s in shares]
    for r, s in enumerate(shares):
        tr = _trainer(world, r, mini, n, parts)
        mine = GRPOTrainer._advantages(tr, scores[s], [groups[i] for i in s], mask[s], True)  # type: ignore[arg-type]
        assert torch.equal(mine, one[s]), r
