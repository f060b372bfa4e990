"""The replay probe: a statistical verdict also replays the baseline's first steps with the run's settings."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import typed_records as typed
from test_candidates import _plan, manifest, trained  # noqa: F401 (fixtures)
from test_compare import _recorded

from harness.errors import HarnessError
from harness.jsonio import file_sha256, load_json_strict, write_json_atomic
from harness.judge import compare as C
from harness.judge import probe as P
from harness.records.base import dump
from harness.schema import check

REPLAYED = ("actor/pg_loss", "actor/grad_norm")


def _with_rollouts(baseline: Path) -> Path:
    """The test baseline, given a replay block (the archive itself is never opened by the judge)."""
    doc = load_json_strict(baseline)
    doc["replay"] = {"file": "cpu-smoke.rollouts.npz", "sha256": "0" * 64, "metrics": list(REPLAYED),
                     "noise": {n: [1e-9] * doc["steps"] for n in REPLAYED}, "perturbation": "test"}
    write_json_atomic(baseline, doc)
    return baseline


def _free_run(tmp_path: Path, primary_manifest: dict, primary: Path, seed: int = 5, sets=()) -> tuple[Path, dict]:
    run = tmp_path / "run"
    run.mkdir()
    m = copy.deepcopy(primary_manifest)
    m["seed"], m["overrides"] = seed, [*({"key": k, "value": v} for k, v in sets), {"key": "seed", "value": seed}]
    write_json_atomic(run / "manifest.json", m)
    (run / "metrics.jsonl").write_text((primary / "metrics.jsonl").read_text())
    return run, m


def _probe(run: Path, run_manifest: dict, primary: Path, baseline: Path, *, scale_pg_loss: float = 1.0,
           **changes) -> Path:
    d = P.probe_dir(run)
    d.mkdir()
    m = copy.deepcopy(run_manifest)
    m["seed"], m["overrides"] = 42, [o for o in m["overrides"] if o["key"] != "seed"]
    m["replay"] = {"baseline": str(baseline), "baseline_sha256": file_sha256(baseline), "rollouts_sha256": "0" * 64,
                   "baseline_profile": m["profile"]}
    m.update(changes)
    write_json_atomic(d / "manifest.json", m)
    rows = [json.loads(line) for line in (primary / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if r["step"] >= 2:
            r["actor/pg_loss"] *= scale_pg_loss
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


@pytest.fixture
def setup(tmp_path, manifest):  # noqa: F811
    baseline, primary = _recorded(tmp_path, manifest)
    return _with_rollouts(baseline), primary, load_json_strict(primary / "manifest.json")


def test_a_statistical_verdict_judges_its_probe_by_the_replay_tolerances(tmp_path, setup):
    baseline, primary, pm = setup
    run, m = _free_run(tmp_path, pm, primary)
    v = C.judge(run, None, baseline_path=baseline)
    assert v.tier == "statistical" and v.replay_probe is None
    assert any("no replay probe" in n and "replay-probe/" in n for n in v.notices)
    d = _probe(run, m, primary, baseline)
    v = C.judge(run, None, baseline_path=baseline)
    assert v.status == "pass" and dump(v.replay_probe) == {"dir": str(d), "steps_compared": 4}
    assert v.tiers_applied == ["statistical", "replay"] and {c.metric for c in v.checks if c.group == "replay"} \
        == set(REPLAYED)
    assert "replay probe 2/2 within tolerance (4 steps)" in v.summary_line
    check(json.loads((run / "verdict.json").read_text()), "verdict", "verdict.json")


def test_a_fault_the_outcome_cannot_see_fails_the_verdict_through_its_probe(tmp_path, setup):
    baseline, primary, pm = setup
    run, m = _free_run(tmp_path, pm, primary)
    _probe(run, m, primary, baseline, scale_pg_loss=1.001)  # the update changed from step 2 on
    v = C.judge(run, None, baseline_path=baseline)
    assert v.status == "fail" and C.exit_code(v) == 1
    assert not any(not c.passed for c in v.checks if c.group == "statistical")
    line = v.summary_line
    assert "replay probe 1/2 within tolerance" in line and "first failure: replay actor/pg_loss at step 2" in line


@pytest.mark.parametrize("change, why", [
    ({"replay": None}, "not a replay of the baseline's rollouts"),
    ({"fault_injection": {"flip-advantage": True}}, "another fault injection"),
    ({"overrides": [{"key": "actor_rollout_ref.actor.kl_loss_coef", "value": 0}]}, "other overrides"),
    ({"status": "running"}, "status running"),
])
def test_a_probe_that_is_not_this_runs_is_left_out_with_the_reason(tmp_path, setup, change, why):
    baseline, primary, pm = setup
    run, m = _free_run(tmp_path, pm, primary)
    _probe(run, m, primary, baseline, **change)
    v = C.judge(run, None, baseline_path=baseline)
    assert v.replay_probe is None and not any(c.group == "replay" for c in v.checks)
    assert any(f"replay probe {P.probe_dir(run)} left out: {why}" in n for n in v.notices), v.notices


def test_a_probe_of_another_baseline_is_left_out(tmp_path, setup):
    baseline, primary, pm = setup
    run, m = _free_run(tmp_path, pm, primary)
    d = _probe(run, m, primary, baseline)
    pm = load_json_strict(d / "manifest.json")
    pm["replay"]["baseline_sha256"] = "1" * 64  # it replayed a baseline file that is not this one
    write_json_atomic(d / "manifest.json", pm)
    v = C.judge(run, None, baseline_path=baseline)
    assert any("left out: replayed another baseline" in n for n in v.notices)


def test_no_probe_without_rollouts_or_for_a_container_run(tmp_path, manifest):  # noqa: F811
    baseline, primary = _recorded(tmp_path, manifest)  # no replay block
    run, _ = _free_run(tmp_path, load_json_strict(primary / "manifest.json"), primary)
    v = C.judge(run, None, baseline_path=baseline)
    assert any("no replay probe" in n and "no recorded rollouts" in n for n in v.notices)
    rollouts = typed.baseline({"metrics": {}, "replay": {"file": "x", "sha256": "0" * 64, "metrics": list(REPLAYED),
                                                         "noise": {}, "perturbation": "test"}})
    assert "runs locally" in P.unavailable(rollouts, "docker")
    assert P.unavailable(rollouts, "local") == ""


# ----------------------------------------------------------------------------- training it
def test_train_missing_probe_trains_the_horizon_once_and_refuses_a_leftover(tmp_path, setup, trained):  # noqa: F811
    from harness.commands.run import train_needs

    baseline, primary, pm = setup
    run, m = _free_run(tmp_path, pm, primary)
    plan = _plan(run, m)
    _, needs = C.judge_needs(run, baseline, None)
    assert needs.probe == P.Wanted(baseline, 42, 4)  # 4 steps: the baseline's, under the horizon
    train_needs(plan, C.Needs(probe=needs.probe))
    assert trained == [(42, P.probe_dir(run), 4, baseline)]  # the baseline's seed, replaying it
    _probe(run, m, primary, baseline)  # what the call trains
    again, again_needs = C.judge_needs(run, baseline, None)
    assert again.replay_probe is not None and again_needs.probe is None
    train_needs(plan, C.Needs(probe=again_needs.probe))
    assert len(trained) == 1
    (P.probe_dir(run) / "manifest.json").unlink()  # a leftover: not a finished probe of this run
    with pytest.raises(HarnessError, match="not a finished replay probe") as err:
        train_needs(plan, C.Needs(probe=needs.probe))
    assert "harness compare" in err.value.one_line() and len(trained) == 1
    assert (P.probe_dir(run) / "metrics.jsonl").is_file()


def test_no_probe_is_wanted_without_rollouts_or_after_a_container_run(tmp_path, manifest, trained):  # noqa: F811
    from harness.commands.run import train_needs

    baseline, primary = _recorded(tmp_path, manifest)  # no replay block
    run, m = _free_run(tmp_path, load_json_strict(primary / "manifest.json"), primary)
    _, needs = C.judge_needs(run, baseline, None)
    assert needs.probe is None
    train_needs(_plan(run, m), C.Needs(probe=needs.probe))
    assert trained == []
    _with_rollouts(baseline)
    m["runtime"] = {**m["runtime"], "kind": "docker"}
    write_json_atomic(run / "manifest.json", m)
    docker, docker_needs = C.judge_needs(run, baseline, None)
    assert docker_needs.probe is None and any("runs locally" in n for n in docker.notices)
