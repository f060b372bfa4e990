"""Candidate runs: the statistical tier judges a run with runs of other seeds, by their median."""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path

import pytest
import typed_records as typed
from test_compare import STEPS, _baseline, _by, _recorded, _series, ev

from harness.errors import HarnessError
from harness.jsonio import write_json_atomic
from harness.judge import candidates as K
from harness.judge import compare as C
from harness.judge import stats
from harness.records.run import Manifest
from harness.schema import check

REWARD = "critic/score/mean"


# ----------------------------------------------------------------------------- the tier
def _seeds_baseline():
    finals = (0.90, 0.85, 0.95, 0.88, 0.92, 0.87, 0.93)
    seeds = [_series(lambda k, f=f: f) for f in finals]
    return _baseline({REWARD: {"ref": seeds[0], "noise": seeds[1:]}})


def _check(run_final, cand_finals, base):
    ctx_run = {REWARD: _series(lambda k: run_final)}
    from harness.judge import tiers as T

    env = {"machine": {"device_model": "Test CPU"}, "software": {"threads": 2}}
    ctx = T.Context(ctx_run, typed.baseline(base), STEPS, typed.env(env))
    ctx.candidates = [{REWARD: _series(lambda k, f=f: f)} for f in cand_finals]
    return _by(T.evaluate(ctx, ["statistical"])[0], "statistical")[0]


def test_one_collapsed_run_of_three_does_not_fail_two_do():
    base = _seeds_baseline()
    assert not _by(ev({REWARD: _series(lambda k: 0.05)}, base, ["statistical"], STEPS)[0], "statistical")[0].passed
    c = _check(0.05, [0.9, 0.89], base)  # this run collapsed, its two candidates did not
    assert c.passed and c.run_value == pytest.approx(math.asin(math.sqrt(0.89)))
    assert "median of 3 runs" in c.detail and "candidates 0.9, 0.89" in c.detail
    assert not _check(0.05, [0.9, 0.04], base).passed  # two of three collapsed: the median is a collapse


def test_a_diverged_candidate_counts_as_the_worst_run():
    base = _seeds_baseline()
    assert _check(0.9, [math.nan, 0.9], base).passed  # one diverged run of three: the median is still a run
    c = _check(0.9, [math.nan, math.inf], base)
    assert not c.passed and "no value" in c.detail


def test_the_median_is_held_to_the_bound_of_one_run():
    base = _seeds_baseline()
    refs = [math.asin(math.sqrt(f)) for f in (0.90, 0.85, 0.95, 0.88, 0.92, 0.87, 0.93)]
    one_run = stats.prediction_bound(refs, base["policy"]["statistical"]["alpha"],
                                     base["policy"]["statistical"]["practical_floor"])
    assert _check(0.9, [0.9, 0.9], base).tolerance == _check(0.9, [], base).tolerance == one_run.allowed


# ----------------------------------------------------------------------------- seeds and directories
def test_candidate_seeds_step_far_and_skip_taken_and_wrap():
    assert K.candidate_seeds(42, 3) == [1_000_042, 2_000_042]
    assert K.candidate_seeds(42, 1) == []
    assert K.candidate_seeds(42, 3, taken={1_000_042}) == [2_000_042, 3_000_042]
    top = 2**32 - 1
    assert all(0 <= s < 2**32 for s in K.candidate_seeds(top, 5))
    # a campaign stepping through seeds one by one never meets another run's candidates
    firsts = set(range(1000, 1100))
    assert not firsts & {s for f in firsts for s in K.candidate_seeds(f, 5)}


@pytest.fixture
def manifest():
    from harness.config.recipe import resolve
    from harness.run.runner import base_manifest

    m = base_manifest(resolve("qwen3_vl_30b", "cpu", "smoke"), steps=4, runtime="local", world=1, fault={})
    m.update(schema_version=1, status="complete", created_utc="2026-01-01T00:00:00Z",
             finished_utc="2026-01-01T00:01:00Z", error=None)
    m["steps"]["completed"] = 4
    check(m, "manifest", "synthetic manifest")
    return m


def _candidate(run_dir: Path, manifest: dict, seed: int, reward: float, **changes) -> Path:
    d = K.candidate_dir(run_dir, seed)
    d.mkdir(parents=True)
    m = copy.deepcopy(manifest)
    m["seed"], m["overrides"] = seed, [*m["overrides"], {"key": "seed", "value": seed}]
    m.update(changes)
    write_json_atomic(d / "manifest.json", m)
    rows = [{"step": k, REWARD: reward, "perf/throughput": 1000.0} for k in range(1, 5)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_find_keeps_this_runs_seeds_and_says_why_it_leaves_others_out(tmp_path, manifest):
    run = tmp_path / "run"
    good = _candidate(run, manifest, 1_000_042, 0.6)
    _candidate(run, manifest, 2_000_042, 0.6, profile="gpu-1x-h200")
    _candidate(run, manifest, 3_000_042, 0.6, status="running")
    odd = _candidate(run, manifest, 4_000_042, 0.6)
    (odd / "manifest.json").write_text((odd / "manifest.json").read_text().replace('"seed": 4000042', '"seed": 7', 1))
    (run / "candidates" / "notes.txt").write_text("hello")
    found = K.find(run, Manifest.model_validate(manifest))
    assert found.runs == [(1_000_042, good)]
    text = "\n".join(found.notices)
    assert "another profile" in text and "status running" in text and "holds seed 7" in text
    assert "notes.txt left out: not a candidate run directory" in text and len(found.notices) == 4


def test_judge_uses_candidates_and_names_a_shortfall_of_them(tmp_path, manifest):
    baseline, primary = _recorded(tmp_path, manifest)
    run = tmp_path / "run"
    run.mkdir()
    m = copy.deepcopy(manifest)
    m["seed"], m["overrides"] = 5, [{"key": "seed", "value": 5}]
    write_json_atomic(run / "manifest.json", m)
    (run / "metrics.jsonl").write_text((primary / "metrics.jsonl").read_text())
    v = C.judge(run, None, baseline_path=baseline)
    assert v.tier == "statistical" and v.candidates == []
    assert any("judged on 1 run(s), the baseline's policy asks for 3" in n for n in v.notices)
    for seed in K.candidate_seeds(5, 3):
        _candidate(run, m, seed, 0.53)
    v = C.judge(run, None, baseline_path=baseline)
    assert [c.seed for c in v.candidates] == K.candidate_seeds(5, 3)
    assert "(median of 3 runs)" in v.summary_line and not any("judged on" in n for n in v.notices)
    check(json.loads((run / "verdict.json").read_text()), "verdict", "verdict.json")


# ----------------------------------------------------------------------------- training the missing ones
def _plan(run_dir: Path, run_manifest: dict):
    """The plan `harness run` made for the run of ``run_manifest`` in ``run_dir`` (its --set overrides)."""
    from harness.config.recipe import resolve
    from harness.run.plan import RunPlan

    sets = tuple(f"{o['key']}={o['value']}" for o in run_manifest["overrides"])
    return RunPlan(recipe="qwen3_vl_30b", res=resolve("qwen3_vl_30b", "cpu", "smoke", sets), run_dir=run_dir,
                   runtime="local", overrides=sets, quiet=True)


@pytest.fixture
def trained(monkeypatch) -> list:
    """What `harness run` trains for the judge (each plan's seed, directory, steps and replayed baseline), instead
    of training it."""
    from harness.commands import run as R

    calls: list = []
    monkeypatch.setattr(R, "train_stage", lambda plan: calls.append(
        (plan.res.config["seed"], plan.run_dir, plan.steps, plan.replay)))
    return calls


def _statistical_run(tmp_path: Path, manifest: dict, seed: int = 7) -> tuple[Path, Path, dict]:
    baseline, primary = _recorded(tmp_path, manifest)
    run = tmp_path / "run"
    run.mkdir()
    m = copy.deepcopy(manifest)
    m["seed"], m["overrides"] = seed, [{"key": "seed", "value": seed}]
    write_json_atomic(run / "manifest.json", m)
    (run / "metrics.jsonl").write_text((primary / "metrics.jsonl").read_text())
    return baseline, run, m


def test_train_missing_candidates_trains_only_what_is_missing(tmp_path, manifest, trained):
    from harness.commands.run import train_needs

    baseline, run, m = _statistical_run(tmp_path, manifest)
    verdict, needs = C.judge_needs(run, baseline, None)
    assert verdict.tier == "statistical" and needs.candidate_seeds == K.candidate_seeds(7, 3)  # the policy's 3 runs
    train_needs(_plan(run, m), C.Needs(needs.candidate_seeds))
    assert [(s, d) for s, d, _, _ in trained] == [(s, K.candidate_dir(run, s)) for s in K.candidate_seeds(7, 3)]
    assert not C.judge_needs(run, baseline, None, 1)[1].candidate_seeds  # --candidates 1: this run alone
    _candidate(run, m, K.candidate_seeds(7, 3)[0], 0.53)
    assert C.judge_needs(run, baseline, None)[1].candidate_seeds == K.candidate_seeds(7, 3)[1:]
    _candidate(run, m, K.candidate_seeds(7, 3)[1], 0.53)
    assert not C.judge_needs(run, baseline, None)[1]  # every candidate there: nothing more to train
    doc = json.loads(baseline.read_text())
    doc["policy"]["statistical"]["candidate_runs"] = 1
    write_json_atomic(baseline, doc)
    other, o = tmp_path / "other", copy.deepcopy(m)
    other.mkdir()
    write_json_atomic(other / "manifest.json", o)
    (other / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text())
    assert not C.judge_needs(other, baseline, None)[1].candidate_seeds  # the policy's 1 run
    assert C.judge_needs(other, baseline, None, 2)[1].candidate_seeds == K.candidate_seeds(7, 2)  # --candidates 2


def test_a_leftover_candidate_directory_is_refused_not_overwritten(tmp_path, manifest, trained):
    from harness.commands.run import train_needs

    m = copy.deepcopy(manifest)
    m["seed"], m["overrides"] = 7, [{"key": "seed", "value": 7}]
    leftover = K.candidate_dir(tmp_path, K.candidate_seeds(7, 2)[0])
    leftover.mkdir(parents=True)
    (leftover / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(HarnessError, match="not a finished candidate"):
        train_needs(_plan(tmp_path, m), C.Needs(K.candidate_seeds(7, 3)))
    assert (leftover / "metrics.jsonl").read_text() == "{}\n" and trained == []


def test_candidates_option_is_bounded(tmp_path):
    from harness.commands.run import execute

    args = argparse.Namespace(recipe="qwen3_vl_30b", profile="cpu", scale="smoke", steps=None, overrides=[],
                              runtime="local", image=None, quiet=True, out=tmp_path / "r", baseline=None, tier=None,
                              resume=None, no_report=True, nproc_per_node=None, stage="all", candidates=0)
    with pytest.raises(HarnessError, match="--candidates must be 1..9"):
        execute(args)
    assert not (tmp_path / "r").exists()
