"""Regressions caught against the committed CPU baseline (``baselines/qwen3_vl_30b/cpu-smoke.json``, 20 seeds of 40
steps): mutations of the main recipe FAIL, at the tier that applies, whether the harness trained the run or another
trainer's log is judged.

Budget: three mutation runs of STEPS steps (lr x 100, KL coefficient 0, flipped advantage sign; the 30 % slowdown
is test_throughput_verdict.py's, which needs the machine to itself), two statistical verdicts of 3 steps (another
seed with a candidate run; the same seed with KL coefficient 0), each with its 10-step replay probe. The verl logs
are those of the lr x 100 mutation run and of the README main command's run (the session's, shared with
test_committed_baselines.py), cut at STEPS steps. The runs compare with the baseline's first STEPS steps. The other
seed is 1000042: the seed of the first candidate the gate trains for a run of seed 42 (test_gate_junit.py), its own
candidate the gate's second, so the session trains their warm starts once.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from baseline_runs import RECIPE, ROOT, JudgedRuns, failed, harness, sha, tree_hashes

from harness.config.recipe import resolve
from harness.jsonio import load_json_strict
from harness.judge.baseline import load_baseline

pytestmark = pytest.mark.integration
BASELINE = ROOT / "baselines" / RECIPE / "cpu-smoke.json"
STEPS = 12
OTHER_SEED = 1_000_042


@functools.cache
def lr_x100() -> tuple[float, str]:
    """The recipe's smoke learning rate x 100 and its --set (resolved when a test first needs it, not at
    collection in every worker)."""
    lr = resolve(RECIPE, "cpu", "smoke").config["actor_rollout_ref"]["actor"]["optim"]["lr"] * 100
    return lr, f"actor_rollout_ref.actor.optim.lr={lr!r}"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("regressions")


@pytest.fixture(scope="module")
def judged(work: Path) -> JudgedRuns:
    return JudgedRuns(work, BASELINE, STEPS)


# ----------------------------------------------------------------------------- mutations must fail
def test_learning_rate_x100_fails(judged: JudgedRuns) -> None:
    lr, setting = lr_x100()
    code, out, v = judged("lr-x100", setting)
    assert code == 1 and v["status"] == "fail", out[-3000:]
    assert v["tier"] == "exact" and setting in v["tier_reason"]
    assert v["overrides"] == [{"key": "actor_rollout_ref.actor.optim.lr", "value": lr}]
    assert "actor/lr" in failed(v, "exact") and "actor/lr" in failed(v, "band")
    assert failed(v, "band") - {"actor/lr"}, "the training curves themselves must leave the band"


def test_kl_coefficient_zero_fails(judged: JudgedRuns) -> None:
    assert load_baseline(BASELINE).metrics["actor/kl_loss"].values[0] >= 0
    code, out, v = judged("kl0", "actor_rollout_ref.actor.kl_loss_coef=0")
    assert code == 1 and v["status"] == "fail", out[-3000:]
    # same seed and environment: judged bitwise; the first mismatch is within the first steps. The
    # looser tiers do not see this change in a smoke run (KL 0.01 barely moves the policy): only bits do.
    assert v["tier"] == "exact" and "kl_loss_coef=0" in v["tier_reason"]
    bad = [c for c in v["checks"] if c["group"] == "exact" and not c["passed"]]
    assert bad and min(c["step"] for c in bad) <= 2
    assert any("kl_loss_coef=0" in r for r in v["reasons"])


def test_flipped_advantage_sign_fails(judged: JudgedRuns) -> None:
    code, out, v = judged("flip", fault="flip-advantage")
    assert code == 1 and v["status"] == "fail", out[-3000:]
    assert v["fault_injection"] == {"flip-advantage": True}
    assert any("fault injected" in n for n in v["notices"])
    assert v["tier"] == "exact" and failed(v, "exact")
    # the reward must collapse, not merely differ: far below the seeds on the tier's scale
    (stat,) = [c for c in v["checks"] if c["group"] == "statistical" and c["metric"] == "critic/score/mean"]
    assert stat["run_value"] < 0.5 * stat["ref_value"], stat["detail"]


# ----------------------------------------------------------------------------- another seed: the statistical tier
def test_another_seed_trains_candidates_and_judges_their_median(work: Path) -> None:
    """A seed outside the baseline: the statistical tier decides, so `harness run` trains further seeds of the same
    run (here --candidates 2: one more) into RUN_DIR/candidates/ and judges the median; `compare` reuses them."""
    run_dir = work / "runs" / "other-seed"
    proc = harness(work, "run", RECIPE, "--profile", "cpu", "--steps", "3", "--out", str(run_dir), "--runtime", "local",
                   "--baseline", str(BASELINE), "--no-report", "--set", f"seed={OTHER_SEED}", "--candidates", "2")
    v = load_json_strict(run_dir / "verdict.json")
    assert v["tier"] == "statistical" and "(median of 2 runs)" in v["summary_line"], proc.stderr[-2000:]
    candidate = 2 * 1_000_000 + 42
    assert f"training candidate seed {candidate} (1 of 1)" in proc.stderr
    (cand,) = v["candidates"]
    cand_dir = Path(cand["dir"])
    assert cand["seed"] == candidate and cand_dir == run_dir / "candidates" / f"seed-{candidate}"
    m = load_json_strict(cand_dir / "manifest.json")
    assert (m["seed"], m["status"], m["steps"]["completed"]) == (candidate, "complete", 3)
    assert {"key": "seed", "value": candidate} in m["overrides"]
    # and the replay probe: the baseline's first steps replayed with this run's settings (seed aside), on this
    # machine: within the replay tolerances
    probe_dir = run_dir / "replay-probe"
    assert v["replay_probe"] == {"dir": str(probe_dir), "steps_compared": 10}, v["notices"]
    assert "replay probe" in proc.stderr and not failed(v, "replay"), v["summary_line"]
    pm = load_json_strict(probe_dir / "manifest.json")
    assert pm["seed"] == 42 and pm["replay"]["baseline_sha256"] == sha(BASELINE)
    before = tree_hashes(cand_dir), tree_hashes(probe_dir)
    proc = harness(work, "compare", str(run_dir), "--baseline", str(BASELINE), "--no-report")
    again = load_json_strict(run_dir / "verdict.json")
    assert again["candidates"] == v["candidates"] and again["replay_probe"] == v["replay_probe"], proc.stdout
    assert (tree_hashes(cand_dir), tree_hashes(probe_dir)) == before


def test_a_fault_below_the_seeds_spread_fails_a_statistical_verdict_through_its_probe(work: Path) -> None:
    """KL coefficient 0 does not move the reward beyond the seeds' spread at smoke scale, but it changes the update:
    another seed with it FAILs, by the replay probe (the warm start does not depend on the KL coefficient: the
    other seed's is trained once)."""
    run_dir = work / "runs" / "other-seed-kl0"
    proc = harness(work, "run", RECIPE, "--profile", "cpu", "--steps", "3", "--out", str(run_dir), "--runtime", "local",
                   "--baseline", str(BASELINE), "--no-report", "--quiet", "--candidates", "1",
                   "--set", f"seed={OTHER_SEED}", "--set", "actor_rollout_ref.actor.kl_loss_coef=0")
    v = load_json_strict(run_dir / "verdict.json")
    assert proc.returncode == 1 and v["status"] == "fail" and v["tier"] == "statistical", v["summary_line"]
    bad = [c for c in v["checks"] if c["group"] == "replay" and not c["passed"]]
    assert bad and min(c["failing_steps"][0] for c in bad) <= 3, v["summary_line"]
    pm = load_json_strict(run_dir / "replay-probe" / "manifest.json")
    assert {"key": "actor_rollout_ref.actor.kl_loss_coef", "value": 0} in pm["overrides"] and pm["seed"] == 42


# ----------------------------------------------------------------------------- another trainer's log
TARGET = ["--recipe", RECIPE, "--profile", "cpu", "--scale", "smoke"]


def as_verl_log(run_dir: Path, path: Path) -> Path:
    """The run's metrics.jsonl as verl's FileLogger writes it: {"step": N, "data": {…}} (validation with @1)."""
    with open(path, "w", encoding="utf-8") as out:
        for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            step = row.pop("step")
            data = {(k + "@1" if k.startswith("val-core/") else k): v for k, v in row.items()}
            out.write(json.dumps({"step": step, "data": data}) + "\n")
    return path


def test_lr_x100_runs_verl_log_fails(work: Path, judged: JudgedRuns, tmp_path: Path) -> None:
    judged("lr-x100", lr_x100()[1])  # the mutation test's run (made here if this test runs alone)
    assert load_json_strict(judged.dir("lr-x100") / "manifest.json")["status"] == "complete"  # its verdict FAILs
    log = as_verl_log(judged.dir("lr-x100"), work / "lr100.jsonl")
    proc = harness(tmp_path, "compare", "--log", f"verl:{log}", *TARGET, "--no-report")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("FAIL") and "critic/score/mean" in proc.stdout
    assert "BEYOND the seeds' spread" in proc.stdout  # the cross-check names where it differs


def test_a_clean_runs_verl_log_passes(work: Path, smoke_run: Any, tmp_path: Path) -> None:
    """The README main command's run (tests/integration/conftest.py: made once per session, test_committed_baselines.py
    judges it) logged by verl up to step STEPS, as a run still in progress would be. Whichever of the two asks first
    makes that run; the other reads it."""
    _, run = smoke_run(RECIPE, None)
    full = as_verl_log(run, work / "clean-all.jsonl")
    log = work / "clean.jsonl"
    log.write_text("".join(line + "\n" for line in full.read_text(encoding="utf-8").splitlines()
                           if json.loads(line)["step"] <= STEPS), encoding="utf-8")
    proc = harness(tmp_path, "compare", "--log", f"verl:{log}", *TARGET, "--out", str(tmp_path / "v"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS") and "tier=statistical" in proc.stdout
    assert "throughput not comparable" in proc.stderr  # the cpu profile names no CPU model
    verdict: dict[str, Any] = load_json_strict(tmp_path / "v" / "verdict.json")
    assert verdict["baseline"]["steps_compared"] == STEPS and verdict["logs"][0]["steps"] == STEPS
