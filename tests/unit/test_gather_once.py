"""A sharded rollout gathers once: two gloo ranks (the run's FSDP2 wrapper) all-gather every unit once for the
whole rollout, and sample exactly what an unsharded model samples for the same prompts (tokens and log-probs
bitwise), whatever the number of decode steps."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def test_two_ranks_gather_each_unit_once_and_sample_what_one_model_samples() -> None:
    import rank_memory

    from harness.core.trainer import GRPOTrainer

    ranks = rank_memory.sharded_rollouts("qwen3_1_7b", 2)
    res = rank_memory._resolved("qwen3_1_7b", 1)
    one = GRPOTrainer(res.spec, device=torch.device("cpu"), peak_tflops=1.0)
    batch = one.loader.next_batch()
    for r in ranks:
        assert r["gathers"] == r["units"] > 0, r["gathers"]  # one all-gather per unit for the whole rollout
        assert any(n.startswith(f"rollout: every FSDP2 unit gathered once per rollout ({r['units']} all-gathers")
                   for n in r["notes"]), r["notes"]
        ref = one.rollout([batch[i] for i in r["index"]], step=1, n=one.rollout_cfg.n, sampling=one.rollout_cfg,
                          prompt_index=r["index"], global_prompts=len(batch))
        assert ref.response_ids.tolist() == r["tokens"]
        assert ref.rollout_logp.tolist() == r["logps"]
    assert sorted(i for r in ranks for i in r["index"]) == list(range(len(batch)))
