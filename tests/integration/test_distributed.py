"""Data parallelism on CPU (gloo + FSDP2): 2 and 8 processes == 1 process, and a dead rank fails fast."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import procs
import pytest

from harness.paths import RECIPES_DIR

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NON_NUMERIC = ("timing_s/", "perf/")


def _recipe(tmp: Path, name: str, agg_mode: str, dtype: str = "float64", warm_start_steps: int | None = 20,
            mini: int | None = None) -> Path:
    """The qwen3_vl_30b recipe in float64 (numerics reference mode) with the given loss aggregation.

    A short warm start (20 steps; none at all for the killed rank): these tests compare processes, not what
    the policy learned.
    """
    data = json.loads((RECIPES_DIR / "qwen3_vl_30b.json").read_text())
    data["name"] = name
    data["actor_rollout_ref"]["actor"]["loss_agg_mode"] = agg_mode
    data["profiles"]["cpu"]["smoke"]["model"]["dtype"] = dtype
    if warm_start_steps is None:
        data["scales"]["smoke"]["warm_start"] = None
    else:
        data["scales"]["smoke"]["warm_start"]["steps"] = warm_start_steps
    if mini is not None:
        data["scales"]["smoke"]["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = mini
    data["$schema"] = str(ROOT / "schemas/v1/recipe.schema.json")
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def _run(recipe: Path, out: Path, *extra: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``harness run`` (forked by tests/forkserver.py; torchrun's ranks by the product's zygote)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["run", str(recipe), "--profile", "cpu", "--steps", "2", "--out", str(out), "--stage", "train", "--quiet",
            *extra]
    return forkserver.run(args, cwd=ROOT, env=env, timeout=timeout)


def _metrics(run_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


_ONE: dict[tuple[str, int | None], Path] = {}  # (loss aggregation, mini-batch) -> its 1-process run


def _one_process(recipe: Path, out: Path, agg_mode: str, mini: int | None) -> Path:
    """The 1-process run of this loss aggregation and mini-batch, made once for every world size compared with it."""
    if (agg_mode, mini) not in _ONE:
        one = _run(recipe, out, "--runtime", "local")
        assert one.returncode == 0, one.stderr[-2000:]
        _ONE[agg_mode, mini] = out
    return _ONE[agg_mode, mini]


@pytest.mark.parametrize(("agg_mode", "nproc", "mini"), [
    # 4 prompts x 8 responses per mini-batch: on 2 ranks each holds whole groups; on 8 each group's responses span
    # two ranks (verl's rule, mini x n a multiple of the world), so the advantages gather every rank's scores
    ("token-mean", 2, 4),
    ("token-mean", 8, 4),
    ("seq-mean-token-mean", 2, None),  # the recipe's own mini-batch
])
def test_processes_match_one(tmp_path: Path, agg_mode: str, nproc: int, mini: int | None) -> None:
    recipe = _recipe(tmp_path, f"dp_{agg_mode.replace('-', '_')}_{nproc}", agg_mode, mini=mini)
    one = _one_process(recipe, tmp_path / "one", agg_mode, mini)
    two = _run(recipe, tmp_path / "two", "--runtime", "torchrun", "--nproc-per-node", str(nproc))
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = _metrics(one), _metrics(tmp_path / "two")
    assert [r["step"] for r in a] == [r["step"] for r in b]
    worst = 0.0
    for ra, rb in zip(a, b):
        assert set(ra) == set(rb)
        for key, va in ra.items():
            if key == "step" or key.startswith(NON_NUMERIC) or key.startswith("training/rollout_probs_diff"):
                continue
            rel = abs(va - rb[key]) / max(abs(va), 1e-9)
            worst = max(worst, rel)
            assert rel <= 1e-5, f"step {ra['step']} {key}: 1 proc {va!r} vs {nproc} procs {rb[key]!r}"
    print(f"max relative difference 1 vs {nproc} processes ({agg_mode}): {worst:.3e}")
    manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert manifest["runtime"]["kind"] == "torchrun" and manifest["runtime"]["world_size"] == nproc
    assert {"key": "trainer.n_gpus_per_node", "value": nproc, "source": "--nproc-per-node (cpu processes)"} \
        in manifest["overrides"]


def test_killed_rank_fails_the_run_fast(tmp_path: Path) -> None:
    """A rank of a simulated 8-GPU node killed mid-run: the run fails within a minute, naming that rank."""
    recipe = _recipe(tmp_path, "dp_kill", "token-mean", dtype="float32", warm_start_steps=None)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_COLLECTIVE_TIMEOUT_S": "60"}
    cmd = [sys.executable, "-m", "harness", "run", str(recipe), "--profile", "gpu-8x-h200-141g", "--simulate",
           "--steps", "40", "--out", str(out), "--stage", "train", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    deadline = time.time() + 300
    metrics = out / "metrics.jsonl"
    while time.time() < deadline and not (metrics.is_file() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.5)
    assert metrics.is_file(), "the run never wrote a step"
    ranks = {pid: procs.name(pid) for pid in procs.descendants(proc.pid)}  # the ranks name themselves harness-rank-N
    victim = next((pid for pid, name in ranks.items() if name == "harness-rank-5"), None)
    assert victim is not None, f"rank 5 not found among this run's processes {ranks}"
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)
    output, _ = proc.communicate(timeout=120)
    elapsed = time.time() - killed_at
    assert proc.returncode == 1, output[-3000:]
    assert elapsed < 60, f"took {elapsed:.0f} s to fail"
    last = [line for line in output.splitlines() if line.startswith("error:")][-1]
    assert "rank 5" in last and "signal 9" in last, last
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "rank 5" in manifest["error"]
    assert manifest["simulated"]["world_size"] == 8
    assert (out / "INCOMPLETE").exists()
    print(f"world 8: the run failed {elapsed:.1f} s after rank 5 was killed")
