"""``--simulate``: an 8-GPU node and two nodes of it executed as CPU ranks, judged against the one-device reference."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import forkserver
import numpy as np
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _harness(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return forkserver.run(args, cwd=ROOT, env=env, timeout=timeout)


def test_simulated_8_gpu_node_passes_against_the_one_gpu_reference(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _harness("run", "qwen3_1_7b", "--profile", "gpu-8x-h200-141g", "--simulate", "--steps", "5",
                    "--out", str(out), "--no-report", "--quiet")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    line = proc.stdout.splitlines()[0]
    assert line.startswith("PASS qwen3_1_7b gpu-8x-h200-141g:smoke tier=replay"), line
    assert "world_size 1 -> 8" in line, line
    manifest = json.loads((out / "manifest.json").read_text())
    sim = manifest["simulated"]
    assert (sim["world_size"], sim["nnodes"], sim["devices_per_node"]) == (8, 1, 8)
    assert (sim["profile_device"], sim["backend"], sim["profile_backend"]) == ("cuda", "gloo", "nccl")
    assert "trainer.device=cpu" in sim["substitutions"]
    assert manifest["runtime"]["kind"] == "torchrun" and manifest["runtime"]["world_size"] == 8
    assert manifest["replay"]["baseline"].endswith("baselines/qwen3_1_7b/gpu-1x-h200-smoke.json")
    assert manifest["resolved_config"]["model"]["dtype"] == "bfloat16"  # the profile's, not the cpu profile's
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["status"] == "pass" and verdict["tier"] == "replay"
    assert any("gathered once per rollout" in n for n in manifest["model"]["notes"])


def test_two_simulated_nodes_are_two_launchers(tmp_path: Path) -> None:
    """Two nodes of 8 (the 30B recipes' full-scale layout) at smoke scale: 16 ranks from two torchrun launchers on
    one rendezvous; the groups' responses span ranks (8 prompts x 8 responses per mini-batch on 16 ranks); the
    rollout rows recorded by rank 0 are the whole batch, in order."""
    data = json.loads((ROOT / "recipes" / "qwen3_1_7b.json").read_text())
    data["scales"]["smoke"]["warm_start"] = None  # this test checks the layout, not what the policy learns
    data["$schema"] = str(ROOT / "schemas/v1/recipe.schema.json")
    recipe = tmp_path / "qwen3_1_7b.json"
    recipe.write_text(json.dumps(data))
    out = tmp_path / "run"
    proc = _harness("run", str(recipe), "--profile", "gpu-8x-h200-141g", "--simulate", "--nnodes", "2",
                    "--steps", "2", "--out", str(out), "--stage", "train", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert (manifest["simulated"]["nnodes"], manifest["simulated"]["world_size"]) == (2, 16)
    assert (manifest["runtime"]["nnodes"], manifest["runtime"]["world_size"]) == (2, 16)  # two launchers
    assert manifest["runtime"]["world_size"] == 16
    assert "trainer.nnodes=2" in manifest["simulated"]["substitutions"]
    assert (out / "node-1.log").is_file()
    with np.load(out / "rollouts" / "step-000001.npz", allow_pickle=False) as step:
        groups = [str(g) for g in step["group_ids"]]
        assert len(groups) == 16 * 8  # train_batch_size x n, every row once
        assert all(len(set(groups[i:i + 8])) == 1 for i in range(0, len(groups), 8))  # groups contiguous again


@pytest.mark.parametrize(("args", "key"), [
    (["--profile", "cpu", "--simulate"], "--simulate"),
    (["--profile", "gpu-8x-h200-141g", "--nnodes", "2"], "--nnodes"),
    (["--profile", "gpu-8x-h200-141g", "--simulate", "--runtime", "docker"], "--runtime"),
    (["--profile", "gpu-8x-h200-141g", "--simulate", "--nnodes", "0"], "--nnodes"),
])
def test_simulate_refusals_are_one_line(tmp_path: Path, args: list[str], key: str) -> None:
    proc = _harness("run", "qwen3_1_7b", *args, "--out", str(tmp_path / "run"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and key in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_simulated_certificate_is_never_signed(tmp_path: Path) -> None:
    key = tmp_path / "signing-key.pem"
    key.write_text("not read: refused before\n")
    proc = _harness("certify", "gpu-8x-h200-141g", "--simulate", "--key", str(key), "--out", str(tmp_path / "c"),
                    timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "never signed" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "c").exists()
