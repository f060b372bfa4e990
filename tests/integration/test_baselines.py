"""A baseline recorded end to end on the CPU smoke recipe, and what it is for: the gate passes the unchanged recipe
bit for bit, replays judge other numerics, mismatched baselines and broken runs are refused, kill -9 loses nothing.

Budget: one baseline of 3 seeds x STEPS steps is recorded per session (in a temporary directory, with the real
``record-baseline`` command, which also replays the primary run once for the replay noise), then one gate run (seed
42, must pass at the exact tier and be bitwise identical to the baseline's primary run, with its 2-step checkpoint
resume check), two replays (unpinned: pass; lr x 100: fail) and two runs killed early. A different seed under
``exact``, refusals and schema failures re-judge existing runs (no training). STEPS is smaller than the recipe's
40; the baseline is recorded for that many steps, so every comparison covers the same steps. The mutations judged
against the committed baseline are test_regressions.py's.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import procs
import pytest
from baseline_runs import NON_NUMERIC, RECIPE, ROOT, env, failed, harness, sha, tree_hashes

from harness.jsonio import load_json_strict, write_json_atomic
from harness.judge.baseline import load_baseline
from harness.schema import schema_errors

pytestmark = pytest.mark.integration
FIXTURES = ROOT / "tests" / "fixtures" / "baselines"
STEPS = 12
SEEDS = 3


@pytest.fixture(scope="session")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("baselines")


@pytest.fixture(scope="session")
def recorded(work: Path) -> dict[str, Path]:
    out = work / "baselines" / RECIPE / "cpu-smoke.json"
    t0 = time.monotonic()
    proc = harness(work, "record-baseline", RECIPE, "--profile", "cpu", "--seeds", str(SEEDS), "--steps", str(STEPS),
                   "--out", str(out), "--runs-dir", str(work / "rb"), "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"record-baseline {SEEDS} seeds x {STEPS} steps: {time.monotonic() - t0:.0f} s")
    return {"baseline": out, "baselines": work / "baselines", "runs": work / "rb"}


# ----------------------------------------------------------------------------- the baseline itself
def test_recorded_baseline(work: Path, recorded: dict[str, Path]) -> None:
    doc = load_baseline(recorded["baseline"])
    assert doc.primary_seed == 42 and doc.noise_seeds == [43, 44] and doc.steps == STEPS
    rows = [json.loads(line) for line in (recorded["runs"] / "seed-42" / "metrics.jsonl").read_text().splitlines()]
    series = doc.metrics["critic/score/mean"]
    assert series.values == [r["critic/score/mean"] for r in rows if "critic/score/mean" in r]
    assert series.seed_window_means is not None
    assert len(series.noise_values) == 2 and len(series.seed_window_means) == 3
    assert not any(k.startswith(NON_NUMERIC) for k in doc.metrics)
    # the machine's speed: sampled at the start, every 10 steps and at the end, the median kept
    calibration = load_json_strict(recorded["runs"] / "seed-42" / "manifest.json")["calibration"]
    assert len(calibration["samples"]) == 2 + (STEPS - 1) // 10
    assert calibration["speed_index"] == sorted(calibration["samples"])[len(calibration["samples"]) // 2]
    (tp,) = doc.throughput.references
    assert doc.environment is not None
    assert tp.value > 0 and doc.memory.value > 0 and tp.threads == doc.environment.software.threads
    # the primary run's rollouts for the replay tier, and the reorder noise measured on them
    assert doc.replay is not None
    rollouts = recorded["baseline"].with_name(doc.replay.file)
    assert rollouts.is_file() and sha(rollouts) == doc.replay.sha256
    assert "actor/pg_loss" in doc.replay.metrics and "val-core/synthetic/color/reward/mean" not in doc.replay.metrics
    assert len(doc.replay.noise["actor/pg_loss"]) == STEPS and "float64" in doc.replay.perturbation
    # an existing baseline is never replaced without --force (refused before anything runs)
    before = sha(recorded["baseline"])
    proc = harness(work, "record-baseline", RECIPE, "--profile", "cpu", "--seeds", "1", "--out",
                   str(recorded["baseline"]))
    assert proc.returncode == 2 and "--force" in proc.stderr
    assert sha(recorded["baseline"]) == before


# ----------------------------------------------------------------------------- the gate and determinism
@pytest.fixture(scope="session")
def gate(work: Path, recorded: dict[str, Path]) -> dict[str, Any]:
    out = work / "gate"
    step_summary = work / "step-summary.md"
    step_summary.write_text("previous step\n")
    proc = harness(work, "gate", "--profile", "cpu", "--recipes", RECIPE, "--steps", str(STEPS), "--out", str(out),
                   "--ckpt-resume-steps", "2",
                   "--baselines", str(recorded["baselines"]), "--junit", str(work / "junit.xml"), "--summary",
                   str(work / "summary.md"), extra_env={"GITHUB_STEP_SUMMARY": str(step_summary)})
    return {"proc": proc, "out": out, "step_summary": step_summary}


def test_gate_passes_unchanged_recipe_at_exact_tier(work: Path, gate: dict[str, Any]) -> None:
    assert gate["proc"].returncode == 0, gate["proc"].stdout[-3000:] + gate["proc"].stderr[-3000:]
    verdict = load_json_strict(gate["out"] / RECIPE / "verdict.json")
    assert verdict["status"] == "pass" and verdict["tier"] == "exact"
    assert verdict["tiers_applied"] == ["exact", "band", "statistical"]
    assert verdict["summary_line"].startswith(f"PASS {RECIPE} cpu:smoke tier=exact ")
    suite = ET.parse(work / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    # one testcase per check, named <group>:<metric>: the verdict's checks and the gate's own (N vs N/2 + resume),
    # then a skipped one per check the judge could not make, with why
    names = [str(tc.get("name")) for tc in suite.iter("testcase")]
    skipped = {str(tc.get("name")): tc.find("skipped") for tc in suite.iter("testcase") if tc.find("skipped") is not None}
    unjudged = verdict.get("unjudged", [])
    assert suite.get("tests") == str(len(names)) and suite.get("skipped") == str(len(unjudged)) == str(len(skipped))
    assert {"exact", "band", "statistical", "memory", "ckpt-resume"} <= {n.split(":", 1)[0] for n in names} - set(skipped)
    assert names == ([f"{c['group']}:{c['metric']}" for c in verdict["checks"]] + ["ckpt-resume:metrics.jsonl"]
                     + [f"{u['group']}:{u['metric']}" for u in unjudged])
    # throughput is judged, or (the test workers share two CPUs) left unjudged for a reason the verdict gives
    assert any(c["group"] == "throughput" for c in verdict["checks"]) != bool(unjudged)
    for u in unjudged:
        assert u["group"] == "throughput" and u["reason"] in verdict["notices"] and skipped[
            f"throughput:{u['metric']}"].get("message") == u["reason"][:500]
        assert u["reason"].startswith(("throughput not judged: other work took the CPUs",
                                       "throughput not comparable: this machine ran the speed calibration")), u
    # gate.json: the gate's record (schema gate), one entry per recipe with its verdict and the gate's own checks
    record = load_json_strict(gate["out"] / "gate.json")
    assert schema_errors(record, "gate") == []
    assert (record["schema_version"], record["profile"], record["scale"]) == (1, "cpu", "smoke")
    (entry,) = record["entries"]
    assert entry["recipe"] == RECIPE and entry["status"] == "pass" and entry["verdict"] == verdict
    assert [c["group"] for c in entry["checks"]] == ["ckpt-resume"] and entry["checks"][0]["passed"]
    summary = (work / "summary.md").read_text()
    assert "| recipe | status | tier |" in summary and f"| {RECIPE} | ✅ pass | exact |" in summary
    assert gate["step_summary"].read_text() == "previous step\n" + summary
    report = (gate["out"] / RECIPE / "report.html").read_text()
    for img in ("curves-reward.png", "curves-kl.png", "curves-loss.png", "curves-entropy.png", "curves-grad-norm.png"):
        assert f'src="{img}"' in report and (gate["out"] / RECIPE / img).is_file()
    assert (gate["out"] / "report.html").is_file()


def test_same_recipe_twice_is_bitwise_identical(recorded: dict[str, Path], gate: dict[str, Any]) -> None:
    """The gate's run (a fresh process) and the baseline's primary run (recorded in-process) agree bit for bit."""
    def rows(d: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith(NON_NUMERIC)}
                for line in (d / "metrics.jsonl").read_text().splitlines()]

    a, b = rows(recorded["runs"] / "seed-42"), rows(gate["out"] / RECIPE)
    assert len(a) == STEPS + 1 and json.dumps(a) == json.dumps(b)


def test_gate_without_baseline_fails_with_junit_failure(work: Path) -> None:
    out = work / "gate-missing"
    proc = harness(work, "gate", "--profile", "cpu", "--recipes", RECIPE, "--out", str(out), "--baselines",
                   str(work / "no-baselines"), "--junit", str(out / "junit.xml"), "--summary", str(out / "s.md"))
    assert proc.returncode == 1
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1" and suite.get("tests") == "1"
    (case,) = suite.iter("testcase")
    assert case.get("name") == "verdict" and case.get("classname") == f"gate.cpu.{RECIPE}"
    failure = case.find("failure")
    assert failure is not None and "record-baseline" in failure.get("message", "")
    assert failure.get("type") == "no-baseline"
    assert "no-baseline" in (out / "s.md").read_text()
    record = load_json_strict(out / "gate.json")
    assert schema_errors(record, "gate") == []
    (entry,) = record["entries"]
    assert (entry["recipe"], entry["status"], entry["verdict"], entry["run_dir"]) == (RECIPE, "no-baseline", None, None)
    assert entry["checks"] == [] and "record-baseline" in entry["reasons"][0]


# ----------------------------------------------------------------------------- other seeds
def test_different_seed_fails_under_exact(work: Path, recorded: dict[str, Path]) -> None:
    seed_run = recorded["runs"] / "seed-43"  # a --set seed=43 run (one of the baseline's noise seeds)
    proc = harness(work, "compare", str(seed_run), "--baseline", str(recorded["baseline"]), "--tier", "exact")
    v = load_json_strict(seed_run / "verdict.json")
    assert proc.returncode == 1 and v["status"] == "fail" and v["tier"] == "exact" and v["forced_tier"] == "exact"
    assert failed(v, "exact") and any("seed 43" in r for r in v["reasons"])
    # the same run under the default choice: another seed cannot coincide, judged statistically
    proc = harness(work, "compare", str(seed_run), "--baseline", str(recorded["baseline"]))
    v = load_json_strict(seed_run / "verdict.json")
    assert v["tier"] == "statistical" and v["tiers_applied"] == ["statistical"] and "seed 43" in v["tier_reason"]


# ----------------------------------------------------------------------------- replay
def test_unpinned_machine_replays_and_passes(work: Path, recorded: dict[str, Path]) -> None:
    """Numerics other than the baseline's (the CPU pin lifted): `run` replays the recorded rollouts by itself, and
    a replay on the machine that recorded the baseline passes."""
    run_dir = work / "runs" / "native-replay"
    proc = harness(work, "run", RECIPE, "--profile", "cpu", "--out", str(run_dir), "--runtime", "local", "--baseline",
                   str(recorded["baseline"]), "--quiet", "--no-report", extra_env={"HARNESS_CPU_ISA": "native"})
    v = load_json_strict(run_dir / "verdict.json")
    assert proc.returncode == 0 and v["status"] == "pass" and v["tier"] == "replay", proc.stdout + proc.stderr[-2000:]
    assert "replaying its recorded rollouts" in proc.stderr
    assert any(c["key"] == "numerics pin" and c["blocks_exact"] for c in v["changes"])
    assert any("throughput not checked" in n for n in v["notices"])


def test_replay_catches_lr_x100_within_three_steps(work: Path, recorded: dict[str, Path]) -> None:
    run_dir = work / "runs" / "replay-lr"
    proc = harness(work, "run", RECIPE, "--profile", "cpu", "--out", str(run_dir), "--runtime", "local", "--baseline",
                   str(recorded["baseline"]), "--quiet", "--no-report", "--tier", "replay", "--set",
                   "actor_rollout_ref.actor.optim.lr=0.1")
    v = load_json_strict(run_dir / "verdict.json")
    assert proc.returncode == 1 and v["status"] == "fail" and v["tier"] == "replay", proc.stdout
    bad = [c for c in v["checks"] if c["group"] == "replay" and not c["passed"]]
    assert bad and min(c["failing_steps"][0] for c in bad) <= 3


# ----------------------------------------------------------------------------- refusals
def merge(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            merge(doc[key], value)
        else:
            doc[key] = value


@pytest.mark.parametrize("fixture,reason", [("other_architecture.json", "architecture"),
                                            ("other_scale.json", "scale"), ("other_profile.json", "profile"),
                                            ("other_recipe.json", "recipe hash")])
def test_mismatched_baseline_is_refused(work: Path, recorded: dict[str, Path], gate: dict[str, Any], fixture: str,
                                        reason: str) -> None:
    doc = load_json_strict(recorded["baseline"])  # the document, edited and written back
    patch = load_json_strict(FIXTURES / fixture)
    merge(doc, {k: v for k, v in patch.items() if k != "description"})
    assert schema_errors(doc, "baseline") == []
    path = work / "crafted" / fixture
    write_json_atomic(path, doc)
    run_dir = work / "crafted-run" / fixture
    shutil.copytree(gate["out"] / RECIPE, run_dir)
    proc = harness(work, "compare", str(run_dir), "--baseline", str(path))
    v = load_json_strict(run_dir / "verdict.json")
    assert proc.returncode == 2 and v["status"] == "refused" and v["checks"] == []
    assert any(reason in r for r in v["reasons"]), v["reasons"]
    assert proc.stdout.startswith(f"REFUSED {RECIPE}")


def test_manifest_failing_its_schema_is_refused(work: Path, recorded: dict[str, Path], gate: dict[str, Any]) -> None:
    run_dir = work / "bad-manifest"
    shutil.copytree(gate["out"] / RECIPE, run_dir)
    m = load_json_strict(run_dir / "manifest.json")
    m["status"] = "finished"
    write_json_atomic(run_dir / "manifest.json", m)
    proc = harness(work, "compare", str(run_dir), "--baseline", str(recorded["baseline"]))
    assert proc.returncode == 2 and "manifest.json::/status" in proc.stdout


def test_report_rerenders(work: Path, gate: dict[str, Any]) -> None:
    run_dir = gate["out"] / RECIPE
    (run_dir / "report.html").unlink()
    proc = harness(work, "report", str(run_dir))
    assert proc.returncode == 0 and (run_dir / "report.html").is_file()
    assert harness(work, "report", str(gate["out"])).returncode == 0


# ----------------------------------------------------------------------------- kill -9
def _start_and_kill(work: Path, args: list[str], watch: Path) -> list[str]:
    """Start ``harness ARGS``, SIGKILL it once ``watch`` has a line; the names of its descendants at that moment."""
    proc = subprocess.Popen([sys.executable, "-m", "harness", *args], env=env(), cwd=work,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 3600
        while not (watch.is_file() and watch.read_text().count("\n") >= 1):
            assert proc.poll() is None, "finished before it could be killed"
            assert time.monotonic() < deadline, "no metrics line appeared"
            time.sleep(0.2)
        names = [procs.name(pid) for pid in procs.descendants(proc.pid)]
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    return names


def test_kill_9_during_a_run(work: Path, recorded: dict[str, Path]) -> None:
    def hashes() -> dict[str, str]:
        committed = {f"committed/{k}": v for k, v in tree_hashes(ROOT / "baselines").items()}
        return tree_hashes(recorded["baselines"]) | committed

    before = hashes()
    run_dir = work / "killed"
    _start_and_kill(work, ["run", RECIPE, "--profile", "cpu", "--steps", str(STEPS), "--out", str(run_dir),
                           "--runtime", "local", "--baseline", str(recorded["baseline"]), "--quiet"],
                    run_dir / "metrics.jsonl")
    assert hashes() == before
    assert (run_dir / "INCOMPLETE").is_file()
    assert load_json_strict(run_dir / "manifest.json")["status"] == "running"
    proc = harness(work, "compare", str(run_dir), "--baseline", str(recorded["baseline"]))
    v = load_json_strict(run_dir / "verdict.json")
    assert proc.returncode == 2 and v["status"] == "refused" and "not complete" in v["reasons"][0]


def test_kill_9_during_record_baseline_leaves_no_baseline(work: Path) -> None:
    out = work / "killed-baseline" / "b.json"
    names = _start_and_kill(work, ["record-baseline", RECIPE, "--profile", "cpu", "--seeds", "2", "--steps",
                                   str(STEPS), "--out", str(out), "--runs-dir", str(work / "killed-rb"), "--quiet"],
                            work / "killed-rb" / "seed-42" / "metrics.jsonl")
    assert "harness-run" in names, names  # the seed's run was forked by the run zygote (harness/run/runtime/child.py)
    assert not out.parent.exists() or not any(out.parent.iterdir())
    # and its seed's run, forked, does not train on unseen once its stub is gone: it stops after the step, interrupted
    manifest, deadline = work / "killed-rb" / "seed-42" / "manifest.json", time.monotonic() + 120
    while (status := load_json_strict(manifest)["status"]) == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == "interrupted"
