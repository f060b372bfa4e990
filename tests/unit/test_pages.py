"""The HTML pages from their Jinja2 templates: every value escaped, one stylesheet, a missing value an error."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import jinja2
import pytest

from harness.commands.certify import render_html
from harness.judge import pages, report
from harness.judge.tiers import make_check
from harness.records.base import dump
from harness.records.gate import Gate, GateEntry
from harness.records.verdict import Check, Verdict

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = '<script>alert("x")</script>'


def _verdict(status: str = "fail", checks: list[Check] | None = None) -> Verdict:
    if checks is None:
        checks = [make_check("exact", HOSTILE, 3, 0.5, 0.25, 0.0, False, detail="first difference at step 3")]
    return Verdict.model_validate({
        "schema_version": 1, "status": status, "summary_line": f"FAIL {HOSTILE}",
        "run": {"dir": "r", "recipe": "r", "profile": "cpu", "scale": "smoke", "seed": 42, "status": "completed",
                "steps_completed": 3}, "tier": "exact", "tier_reason": "same environment", "tiers_applied": ["exact"],
        "forced_tier": None, "baseline": None, "policy": None, "overrides": [], "fault_injection": None,
        "created_utc": "2026-12-02T00:00:00Z",
        "counts": {"exact": {"checks": len(checks), "failed": sum(not c.passed for c in checks)}},
        "reasons": [HOSTILE], "notices": [], "changes": [], "checks": [dump(c) for c in checks]})


def test_run_report_escapes_what_the_run_wrote(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "actor/pg_loss": 0.1}) + "\n")
    (tmp_path / "manifest.json").write_text(json.dumps({"note": HOSTILE}))
    page = report.render_run_report(tmp_path, _verdict())
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert page.count("<style>") == 1 and ".status.pass" in page  # the one stylesheet, inline
    assert '<tr class="bad">' in page and "FAIL</span>" in page


def test_gate_report_links_runs_and_escapes(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "report.html").write_text("x")
    exact = [make_check("exact", f"m{i}", None, 0.0, 0.0, 0.0, True) for i in range(33)]
    gate = Gate(schema_version=1, profile="cpu", scale="smoke", entries=[
        # a recipe id is held to its pattern by the model, so what the run wrote is its summary line
        GateEntry(recipe="qwen3_1_7b", status="pass", summary_line=f"PASS {HOSTILE}", run_dir=str(run),
                  verdict=_verdict("pass", exact), checks=[], reasons=[]),
        GateEntry(recipe="other", status="fail", summary_line="FAIL", run_dir=None, verdict=None, checks=[],
                  reasons=["no verdict"])])
    page = report.write_gate_report(tmp_path, gate).read_text()
    assert HOSTILE not in page and "&lt;script&gt;" in page and '<a href="r/report.html">report</a>' in page
    assert "1/2 recipes pass" in page and '<span class="ok">33/33</span>' in page


def test_published_certificate_renders() -> None:
    env = json.loads((ROOT / "certificates" / "gpu-1x-h200" / "certificate.json").read_text())
    doc = json.loads(base64.b64decode(env["payload"]))["predicate"]
    page = render_html(doc)
    assert doc["profile"]["name"] in page and "determinism" in page and page.count("<style>") == 1
    doc["profile"]["description"] = HOSTILE
    assert HOSTILE not in render_html(doc)


def test_a_value_the_page_lacks_is_an_error() -> None:
    with pytest.raises(jinja2.UndefinedError):
        pages.render("gate.html.j2", title="gate", groups=[], passed=0)


@pytest.mark.parametrize("x,shown", [(None, "—"), (12345.6, "12,346"), (0.123456789, "0.123457"),
                                     (float("nan"), "nan"), (3, "3")])
def test_numbers_in_cells(x, shown) -> None:
    assert pages.num(x) == shown
