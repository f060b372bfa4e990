"""A sharded rollout gathers once: two gloo ranks (the run's FSDP2 wrapper) all-gather every unit once for the
whole rollout, and sample exactly what an unsharded model samples for the same prompts (tokens and log-probs
bitwise), whatever the number of decode steps."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def test_two_ranks_gather_each_unit_once_and_sample_what_one_model_samples() -> None:
    import rank_memory

    ranks = rank_memory.sharded_rollouts("qwen3_1_7b", 2)
    # the same prompts through one unsharded model, in a fresh process with one thread as each rank
    refs = rank_memory.unsharded_rollouts("qwen3_1_7b", [r["index"] for r in ranks])
    for r, ref in zip(ranks, refs):
        assert r["gathers"] == r["units"] > 0, r["gathers"]  # one all-gather per unit for the whole rollout
        assert r["pre_forwards"] == 0  # FSDP2's hooks detached: every decode forward is a plain module's
        assert r["static_tokens"] == r["tokens"]  # the engine a CUDA graph captures decodes the gathered model
        assert any(n.startswith(f"rollout: every FSDP2 unit gathered once per rollout ({r['units']} all-gathers")
                   for n in r["notes"]), r["notes"]
        assert ref["tokens"] == r["tokens"]
        assert ref["logps"] == r["logps"]
    assert sorted(i for r in ranks for i in r["index"]) == list(range(refs[0]["prompts"]))
