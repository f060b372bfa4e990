"""Launchers written for these tests (tests/fixtures/verl/corpus/), one per construct class real verl
launchers use: arrays built in branches, case patterns, || / && chains continued at a line start,
$(( )) and (( )), here-documents, functions that build override arrays. Each must be read (no parser
refusal, no traceback), give exactly the error findings listed in expected.json (and every warning
listed there), and import as its expected.json entry says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.verl.lint import lint_file

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "verl" / "corpus"
EXPECTED = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))
LAUNCHERS = sorted(p.name for p in CORPUS.glob("*.sh"))


def test_every_launcher_has_an_entry() -> None:
    assert LAUNCHERS == sorted(k for k in EXPECTED if not k.startswith("_"))


@pytest.mark.parametrize("name", LAUNCHERS)
def test_lint_finds_what_is_expected(name: str) -> None:
    result = lint_file(str(CORPUS / name))  # a refusal or a traceback fails here
    assert len(result.calls) == 1
    got = [{"rule": f.rule, "severity": f.severity, "line": f.line, "key": f.key} for f in result.findings]
    want = EXPECTED[name]["findings"]
    missing = [w for w in want if w not in got]
    assert not missing, f"{name}: expected findings not found: {missing}; got {got}"
    extra_errors = [g for g in got if g["severity"] == "error" and g not in want]
    assert not extra_errors, f"{name}: unexpected errors {extra_errors}"


@pytest.mark.parametrize("name", LAUNCHERS)
def test_import_then_validate(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "imported.json"
    code = main(["import-verl", str(CORPUS / name), "--out", str(out)])
    err = capsys.readouterr().err
    expect = EXPECTED[name]["import"]
    if "refused" in expect:
        assert code == 2 and not out.exists()
        lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and expect["refused"] in lines[0], err
        return
    assert code == 0, err
    recipe = json.loads(out.read_text(encoding="utf-8"))
    assert "full" in recipe["profiles"][expect["validates"]]
    assert main(["validate", str(out)]) == 0, capsys.readouterr().out
