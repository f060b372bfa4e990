"""``harness plan`` at full scale on a 2-core CPU, and ``run`` refusing what cannot run here.

- The seed's full scale on the 8-GPU node (its two-node layout: 16 ranks) and on the 16-NPU node: every
  promised field, within five minutes each.
- The 30B-A3B MoE at reduced scale on one H200: the plan's peak within ±10 % of the committed baseline's
  measured peak.
- An override that cannot fit (the update micro-batch × 16 on the 80 GB node) exits 1 naming the consumer and a
  fix; a profile this machine lacks is refused by ``run`` in under ten seconds, before any launcher starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import forkserver
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("world_size", "fits", "per_rank_peak_bytes", "device_memory_bytes", "collectives", "step_time_s")


def harness(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return forkserver.run(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=timeout)


@pytest.mark.parametrize("profile,world", [("gpu-8x-h200-141g", 16), ("npu-16x-ascend-a3", 16)])
def test_the_seed_is_planned_at_full_scale(profile: str, world: int) -> None:
    t0 = time.monotonic()
    proc = harness("plan", "qwen3_vl_30b", "--profile", profile, "--scale", "full", "--json")
    assert time.monotonic() - t0 < 300
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    for key in FIELDS:
        assert key in doc, key
    assert doc["world_size"] == world and doc["fits"]
    for phase in ("rollout", "logprob", "update", "optimizer"):
        assert doc["phases"][phase]["peak_bytes"] > 0
    assert doc["per_rank_peak_bytes"] == max(p["peak_bytes"] for p in doc["phases"].values())
    kinds = {c["kind"] for c in doc["collectives"]}
    assert {"all_gather", "reduce_scatter"} <= kinds  # FSDP2 over the fake ranks: the run's own sharding
    assert doc["model"]["n_params"] > 30e9 and doc["model"]["local_params"] < doc["model"]["n_params"] / world * 1.1


def test_the_reduced_moe_plan_is_within_ten_percent_of_the_measured_peak() -> None:
    proc = harness("plan", "qwen3_30b_a3b", "--profile", "gpu-1x-h200", "--scale", "reduced", "--json")
    assert proc.returncode == 0, proc.stderr
    planned = json.loads(proc.stdout)["per_rank_peak_bytes"] / 1e9
    measured = json.loads((ROOT / "baselines/qwen3_30b_a3b/gpu-1x-h200-reduced.json").read_text())["memory"]["value"]
    assert abs(planned / measured - 1) <= 0.10, (planned, measured)


def test_an_override_that_cannot_fit_names_the_consumer_and_a_fix() -> None:
    proc = harness("plan", "qwen3_vl_30b", "--profile", "gpu-8x-h100-80g", "--scale", "full",
                   "--set", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "update phase" in last and "largest consumer activations" in last
    assert "fix: lower actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in last


def test_run_refuses_a_profile_this_machine_lacks_before_any_launcher(tmp_path: Path) -> None:
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = harness("run", "qwen3_vl_30b", "--profile", "gpu-8x-h200-141g", "--scale", "full", "--out", str(out),
                   timeout=60)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 2 and not out.exists()
    line = proc.stderr.strip()
    assert "\n" not in line and "needs 8 cuda device(s) per node" in line and "harness plan qwen3_vl_30b" in line
