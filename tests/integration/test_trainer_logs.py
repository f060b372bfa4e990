"""Another trainer's log judged end to end: two short smoke runs of the main recipe (clean, and lr x 100) rewritten
as verl's FileLogger writes them, judged with ``harness compare --log verl:…`` against the committed CPU baseline
(statistical tier over the first STEPS steps). Budget: 2 runs of STEPS steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.recipe import resolve

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
RECIPE = "qwen3_vl_30b"
STEPS = 12
TARGET = ["--recipe", RECIPE, "--profile", "cpu", "--scale", "smoke"]


def harness(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=3600,
                          cwd=cwd)


def as_verl_log(run_dir: Path, path: Path) -> Path:
    """The run's metrics.jsonl as verl's FileLogger writes it: {"step": N, "data": {…}} (validation with @1)."""
    with open(path, "w", encoding="utf-8") as out:
        for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            step = row.pop("step")
            data = {(k + "@1" if k.startswith("val-core/") else k): v for k, v in row.items()}
            out.write(json.dumps({"step": step, "data": data}) + "\n")
    return path


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("trainer-logs")
    lr = resolve(RECIPE, "cpu", "smoke").config["actor_rollout_ref"]["actor"]["optim"]["lr"]
    out = {}
    for name, sets in (("clean", []), ("lr100", ["--set", f"actor_rollout_ref.actor.optim.lr={lr * 100!r}"])):
        run = work / name
        proc = harness(work, "run", RECIPE, "--profile", "cpu", "--steps", str(STEPS), "--out", str(run), "--runtime",
                       "local", "--no-report", "--candidates", "1", "--no-replay-probe", *sets)
        status = json.loads((run / "manifest.json").read_text(encoding="utf-8"))["status"]
        assert status == "complete", proc.stdout + proc.stderr  # the lr x 100 run finishes (its own verdict FAILs)
        out[name] = as_verl_log(run, work / f"{name}.jsonl")
    return out


def test_a_clean_runs_verl_log_passes(logs: dict[str, Path], tmp_path: Path) -> None:
    proc = harness(tmp_path, "compare", "--log", f"verl:{logs['clean']}", *TARGET, "--out", str(tmp_path / "v"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS") and "tier=statistical" in proc.stdout
    assert "throughput not comparable" in proc.stderr  # the cpu profile names no CPU model
    verdict = json.loads((tmp_path / "v" / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["baseline"]["steps_compared"] == STEPS and verdict["logs"][0]["steps"] == STEPS


def test_lr_x100_runs_verl_log_fails(logs: dict[str, Path], tmp_path: Path) -> None:
    proc = harness(tmp_path, "compare", "--log", f"verl:{logs['lr100']}", *TARGET, "--no-report")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("FAIL") and "critic/score/mean" in proc.stdout
    assert "BEYOND the seeds' spread" in proc.stdout  # the cross-check names where it differs
