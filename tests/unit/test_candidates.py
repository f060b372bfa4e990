"""Candidate runs: the statistical tier judges a run with runs of other seeds, by their median."""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path

import pytest
from test_compare import STEPS, _baseline, _by, _recorded, _series, ev

from harness.config.schema import check
from harness.errors import HarnessError
from harness.jsonio import write_json_atomic
from harness.judge import candidates as K
from harness.judge import compare as C
from harness.judge import stats

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
    ctx = T.Context(ctx_run, base, STEPS, env)
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
    found = K.find(run, manifest)
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
    assert [c["seed"] for c in v.candidates] == K.candidate_seeds(5, 3)
    assert "(median of 3 runs)" in v.summary_line() and not any("judged on" in n for n in v.notices)
    check(json.loads((run / "verdict.json").read_text()), "verdict", "verdict.json")


# ----------------------------------------------------------------------------- training the missing ones
class _Verdict:
    def __init__(self, have=(), policy_runs=3):
        self.candidates = [{"seed": s, "dir": "x"} for s in have]
        self.policy = {"statistical": {"candidate_runs": policy_runs}}
        self.baseline = {"primary_seed": 42, "noise_seeds": [43]}
        self.run = {"seed": 7}


def test_train_missing_candidates_trains_only_what_is_missing(tmp_path):
    from harness.commands.run import train_missing_candidates

    trained: list[tuple[int, Path]] = []
    assert train_missing_candidates(tmp_path, _Verdict(), None, lambda s, d: trained.append((s, d)), True)
    assert trained == [(s, K.candidate_dir(tmp_path, s)) for s in K.candidate_seeds(7, 3)]
    trained.clear()
    assert not train_missing_candidates(tmp_path, _Verdict(have=K.candidate_seeds(7, 3)), None,
                                        lambda s, d: trained.append((s, d)), True)
    assert not train_missing_candidates(tmp_path, _Verdict(), 1, lambda s, d: trained.append((s, d)), True)
    assert train_missing_candidates(tmp_path, _Verdict(policy_runs=1), 2, lambda s, d: trained.append((s, d)), True)
    assert [s for s, _ in trained] == K.candidate_seeds(7, 2)


def test_a_leftover_candidate_directory_is_refused_not_overwritten(tmp_path):
    from harness.commands.run import train_missing_candidates

    leftover = K.candidate_dir(tmp_path, K.candidate_seeds(7, 2)[0])
    leftover.mkdir(parents=True)
    (leftover / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(HarnessError, match="not a finished candidate"):
        train_missing_candidates(tmp_path, _Verdict(), None, lambda s, d: None, True)
    assert (leftover / "metrics.jsonl").read_text() == "{}\n"


def test_candidates_option_is_bounded(tmp_path):
    from harness.commands.run import execute

    args = argparse.Namespace(recipe="qwen3_vl_30b", profile="cpu", scale="smoke", steps=None, overrides=[],
                              runtime="local", image=None, quiet=True, out=tmp_path / "r", baseline=None, tier=None,
                              resume=None, no_report=True, nproc_per_node=None, stage="all", candidates=0)
    with pytest.raises(HarnessError, match="--candidates must be 1..9"):
        execute(args)
    assert not (tmp_path / "r").exists()
