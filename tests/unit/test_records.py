"""One representation per record, tier names defined once, and a gate whose JUnit tells the truth.

- every tier name is a string literal in ``harness/`` only where it is registered (``@tier``-style:
  ``tier("name", ...)``) or where a document key of the same spelling is named once (``X_KEY = "..."``);
- no class name is defined twice under ``harness/``;
- the gate's JUnit has one testcase per check of every verdict (every tier, the replay probe, the
  candidates), a failure with its numbers for each failed check, and counts a JUnit reader agrees with
  (parsed with junitparser, the reader GitLab-style tooling uses).
"""

from __future__ import annotations

import ast
import collections
import xml.etree.ElementTree as ET
from pathlib import Path

import junitparser
import pytest

from harness.commands.gate import junit, markdown
from harness.judge import tiers as T
from harness.judge.compare import new_verdict, seal
from harness.records.base import dump
from harness.records.gate import Gate, GateEntry
from harness.records.verdict import Candidate, ProbeJudged, RunJudged, Unjudged
from harness.schema import schema_errors

PKG = Path(__file__).resolve().parents[2] / "harness"


def _literals(value: str) -> list[str]:
    """Where ``value`` is a string literal in harness/ (file:line), but for a ``NAME_KEY = value`` constant."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        named = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
                 and isinstance(n.targets[0], ast.Name) and n.targets[0].id.endswith("_KEY")}
        out += [f"{path.relative_to(PKG.parent)}:{n.lineno}" for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and n.value == value and id(n) not in named]
    return out


@pytest.mark.parametrize("name", T.TIER_ORDER)
def test_each_tier_name_is_a_literal_only_in_its_registration(name):
    where = _literals(name)
    assert len(where) == 1 and where[0].startswith("harness/judge/tiers.py"), where


def test_the_literal_finder_sees_a_literal_and_skips_a_named_key():
    where = _literals("replay")  # a tier name and the baseline's rollouts key (ROLLOUTS_KEY)
    assert len(where) == 1


def test_no_class_name_is_defined_twice():
    seen: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                seen[node.name].append(str(path.relative_to(PKG.parent)))
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}


def test_registry_order_is_strictest_first_and_groups_follow():
    assert T.TIER_ORDER == tuple(T.tier_names())
    assert list(T.GROUPS)[:len(T.TIER_ORDER)] == list(T.TIER_ORDER)
    assert T.THROUGHPUT in T.GROUPS and T.MEMORY in T.GROUPS and T.CKPT_RESUME in T.GROUPS
    assert T.certifiable_tier_names() == list(T.TIER_ORDER)  # replay too: the run replays the reference
    assert T.applied_with(T.EXACT) == [T.EXACT.name, T.BAND.name, T.STATISTICAL.name]
    assert T.applied_with(T.REPLAY) == [T.REPLAY.name]


# ----------------------------------------------------------------------------- JUnit from the verdicts
def _verdict(tier: T.Tier, checks, **extra):
    v = new_verdict("refused", RunJudged(dir="runs/x", recipe="r", profile="cpu", scale="smoke", seed=1,
                                         status="complete", steps_completed=4), **extra)
    v.tier, v.tiers_applied, v.checks = tier.name, T.applied_with(tier), list(checks)
    v.reasons = [f"{c.group}: failed" for c in checks if not c.passed]
    v.status = "fail" if v.reasons else "pass"
    return seal(v)


def _check(group: str, metric: str, ok: bool):
    return T.make_check(group, metric, 3, 0.5, 0.25, 0.01, ok, 4, [] if ok else [3, 4], "numbers")


def _gate(*verdicts) -> Gate:
    entries = [GateEntry(recipe=f"r{i}", status=v.status, summary_line=v.summary_line, run_dir=None, verdict=v,
                         checks=[], reasons=list(v.reasons)) for i, v in enumerate(verdicts)]
    return Gate(schema_version=1, profile="cpu", scale="smoke", entries=entries)


def _read(gate: Gate) -> junitparser.JUnitXml:
    root = junit(gate).getroot()
    assert root is not None
    return junitparser.JUnitXml.fromstring(ET.tostring(root, encoding="unicode"))


def _cases(xml: junitparser.JUnitXml) -> list[junitparser.TestCase]:
    return [case for suite in xml for case in suite]


@pytest.mark.parametrize("kind", ["replay", "probe", "candidate"])
def test_a_failing_verdict_of_any_tier_fails_in_junit_with_one_testcase_per_check(kind):
    """The defect this guards against: a replay verdict, a statistical verdict's failing replay probe, a failing
    candidate median — each wrote a JUnit suite without a failure, so JUnit readers showed the gate green."""
    if kind == "replay":
        v = _verdict(T.REPLAY, [_check(T.REPLAY.name, "actor/pg_loss", False), _check(T.REPLAY.name, "a", True)])
    elif kind == "probe":
        v = _verdict(T.STATISTICAL, [_check(T.STATISTICAL.name, "critic/score/mean", True),
                                     _check(T.REPLAY.name, "actor/kl_loss", False)],
                     replay_probe=ProbeJudged(dir="runs/x/replay-probe", steps_compared=4))
    else:
        v = _verdict(T.STATISTICAL, [_check(T.STATISTICAL.name, "critic/score/mean", False)],
                     candidates=[Candidate(seed=2, dir="runs/x/candidates/seed-2")])
    xml = _read(_gate(v))
    cases = _cases(xml)
    suite = next(iter(xml))
    assert suite.tests == len(v.checks) == len(cases)
    failed = [c for c in cases if not c.is_passed]
    assert suite.failures == len(failed) == sum(not c.passed for c in v.checks) >= 1
    text = failed[0].result[0].text
    assert "run 0.5, reference 0.25, tolerance 0.01" in text and "failing steps [3, 4]" in text


def test_a_passing_gate_has_no_failure_and_a_refusal_is_one_failing_testcase():
    ok = _verdict(T.EXACT, [_check(T.EXACT.name, "m", True), _check(T.THROUGHPUT, "perf/throughput", True)])
    refused = seal(new_verdict("refused", RunJudged(dir="d", recipe="r", profile="cpu", scale="smoke", seed=None,
                                                    status=None, steps_completed=None), reasons=["baseline gone"]))
    xml = _read(_gate(ok, refused))
    cases = _cases(xml)
    assert len(cases) == 3 and [c.name for c in cases if not c.is_passed] == ["verdict"]
    assert "refused" in markdown(_gate(ok, refused)) and "❌ FAIL" in markdown(_gate(ok, refused))
    assert "✅ pass" in markdown(_gate(ok))


def test_a_check_the_judge_could_not_make_is_a_skipped_testcase_with_why():
    """A throughput check left unjudged (a busy machine) is neither a pass nor a silent absence in JUnit."""
    why = "throughput not judged: other work took the CPUs in 12 of 12 steady steps (45%) — re-run on an idle machine"
    v = _verdict(T.EXACT, [_check(T.EXACT.name, "m", True), _check(T.MEMORY, "perf/max_memory_allocated_gb", True)])
    v = v.model_copy(update={"unjudged": [Unjudged(group=T.THROUGHPUT, metric="perf/throughput", reason=why)]})
    assert schema_errors(dump(v), "verdict") == []
    xml = _read(_gate(v))
    suite = next(iter(xml))
    assert (suite.tests, suite.failures, suite.skipped) == (3, 0, 1)
    (skipped,) = [c for c in _cases(xml) if c.is_skipped]
    assert skipped.name == "throughput:perf/throughput" and skipped.result[0].message == why
    md = markdown(_gate(v))
    assert "| throughput |" in md and "⏭️ not judged" in md and "✅ pass" in md


def test_a_new_tier_appears_in_junit_and_markdown_without_touching_the_gate():
    extra = T.tier("sharper", gates=lambda name: False, passes="sharp")(lambda ctx: [])
    try:
        v = _verdict(extra, [_check("sharper", "m", False)])
        xml = _read(_gate(v))
        assert [c.name for c in _cases(xml) if not c.is_passed] == ["sharper:m"]
        assert "| sharper |" in markdown(_gate(v)) and "tier=sharper" in v.summary_line
    finally:
        del T.TIERS["sharper"], T.GROUPS["sharper"]


def test_a_record_read_twice_is_checked_once_and_each_reader_gets_its_own_copy(tmp_path, monkeypatch):
    from harness import schema
    from harness.jsonio import load_json_strict, write_json_atomic
    from harness.records import base
    from harness.records.base import read
    from harness.records.baseline import Baseline
    from harness.schema import SchemaErrors

    src = load_json_strict(Path(__file__).resolve().parents[2] / "baselines/qwen3_1_7b/cpu-smoke.json")
    path = tmp_path / "b.json"
    write_json_atomic(path, src)
    monkeypatch.setattr(base, "_READ", collections.OrderedDict())  # what other tests read is not kept
    checks = []
    real = schema.check
    monkeypatch.setattr(schema, "check", lambda *a: (checks.append(a[1]), real(*a))[1])
    a, b = read(path, Baseline, "baseline"), read(path, Baseline, "baseline")
    assert a == b and a is not b and a.metrics is not b.metrics and checks == ["baseline"]
    # other bytes at the same path are read afresh: a document that now fails its schema is refused
    write_json_atomic(path, {**src, "steps": -1})
    with pytest.raises(SchemaErrors):
        read(path, Baseline, "baseline")
    assert checks == ["baseline", "baseline"]
