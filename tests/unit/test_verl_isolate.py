"""Hostile launchers: characters the bash parser is not given, size and output limits, and the child process
that parses a launcher for the command line (a crash, a hang or a memory blow-up there is one line, exit 2)."""

from __future__ import annotations

import ctypes
import json
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import HarnessError
from harness.verl import bashtree
from harness.verl.bashchars import first_refused
from harness.verl.bashparse import ScriptError
from harness.verl.isolate import run_isolated
from harness.verl.lint import MAX_FINDINGS, MAX_SCRIPT_BYTES, lint_text, read_script

REDUCER = "{\U000CB100 x\n"  # crashes tree-sitter-bash 0.25.1 in about two fresh processes of three
TRAINER = "python3 -m verl.trainer.main_ppo"


# ----------------------------------------------------------------------------- characters
@pytest.mark.parametrize("text, pos, code, why", [
    (REDUCER, 1, "U+CB100", "unassigned"),
    ("echo ok\n# {\U000CB100\n", 11, "U+CB100", "unassigned"),  # in a comment too: refused anywhere
    ("A='\U000F0000'\n", 3, "U+F0000", "private-use"),
    ("echo \x1b[0m\n", 5, "U+001B", "control character"),
    ("echo a\x7f\n", 6, "U+007F", "control character"),
    ("echo \x85\n", 5, "U+0085", "control character"),
    ("echo {\U0002C7E5}\n", 6, "U+2C7E5", "right after '{'"),  # an assigned CJK ideograph that crashes
    ("echo {1..\u0100}\n", 9, "U+0100", "right after '{'"),
    ("echo {12\u4e2d\n", 8, "U+4E2D", "right after '{'"),
])
def test_refused_characters(text: str, pos: int, code: str, why: str) -> None:
    found = first_refused(text)
    assert found is not None and found.pos == pos and found.code == code and why in found.why


@pytest.mark.parametrize("text", [
    "echo 'tab\there'\r\n", "# 中文注释 é ü 🚀\n", 'echo "{é}" {ÿ}\n', "echo { \U0002C7E5 }\n", "X={a,b}\n",
    "echo \U0001F600{\n",
])
def test_accepted_characters(text: str) -> None:
    assert first_refused(text) is None


def test_read_script_names_line_column_and_code_point(tmp_path: Path) -> None:
    script = tmp_path / "r.sh"
    script.write_text("set -e\n" + REDUCER, encoding="utf-8")
    with pytest.raises(HarnessError) as err:
        read_script(str(script))
    line = err.value.one_line()
    assert line.startswith(f"{script}: line 2:2: U+CB100 is an unassigned code point") and "(fix: " in line


def test_the_parser_never_sees_a_refused_character() -> None:
    """lint_text (the unit tests' way in, without the child process) refuses before tree-sitter runs."""
    for text in (REDUCER, "x=$(cat <<E\n{\U0010FFFD\nE\n)\n"):
        with pytest.raises(ScriptError, match="U\\+"):
            lint_text(text)


def test_size_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.sh"
    big.write_text("#" * MAX_SCRIPT_BYTES + "\n", encoding="utf-8")
    with pytest.raises(HarnessError, match="over the 262,144-byte limit"):
        read_script(str(big))
    bad = tmp_path / "bad.sh"
    bad.write_bytes(b"echo \xff\n")
    with pytest.raises(HarnessError, match="not UTF-8"):
        read_script(str(bad))


# ----------------------------------------------------------------------------- output limits
def test_duplicate_key_is_reported_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "dup.sh"
    script.write_text(f"{TRAINER} \\\n" + "".join(f"  trainer.project_name=p{i} \\\n" for i in range(3000))
                      + "  trainer.nnodes=1\n", encoding="utf-8")
    assert main(["lint-verl", str(script)]) == 1
    out = capsys.readouterr().out
    dup = [line for line in out.splitlines() if "duplicate-key" in line]
    assert len(out) < 5000 and len(dup) == 1
    assert f"{script}:2: duplicate-key error: trainer.project_name is given 3,000 times (lines 2, 3, 4, 5, 6, … and " \
           "2,995 more): the last one (line 3001) wins" in dup[0]


def test_findings_are_capped() -> None:
    text = f"{TRAINER} " + " ".join(f"trainer.no_such_{i}=1" for i in range(MAX_FINDINGS + 200)) + "\n"
    findings = lint_text(text).findings
    assert len(findings) == MAX_FINDINGS + 1
    last = findings[-1]
    assert last.rule == "too-many-findings" and last.severity == "error" and "not listed" in last.message
    long = lint_text(f"{TRAINER} {'x' * 5000}\n").findings
    assert all(len(f.message) < 500 for f in long)


# ----------------------------------------------------------------------------- the child process
def _segfault() -> None:
    ctypes.string_at(0)


def _spin() -> None:
    while True:
        pass


def _hog() -> None:
    blocks = []
    while True:
        blocks.append(bytearray(64 << 20))


def _refuse() -> None:
    raise HarnessError("no good", file="f.sh", fix="do better", exit_code=1)


def _broken() -> None:
    raise KeyError("oops")


def test_isolated_result_and_errors() -> None:
    assert run_isolated(lambda: {"a": [1, 2.5, None, "é"]}, "f.sh") == {"a": [1, 2.5, None, "é"]}
    with pytest.raises(HarnessError) as err:
        run_isolated(_refuse, "f.sh")
    assert err.value.exit_code == 1 and err.value.one_line() == "f.sh: no good (fix: do better)"
    with pytest.raises(HarnessError, match=r"^f.sh: cannot read this script \(internal error: KeyError: 'oops'\)"):
        run_isolated(_broken, "f.sh")


def test_isolated_crash_is_one_line() -> None:
    with pytest.raises(HarnessError) as err:
        run_isolated(_segfault, "f.sh")
    line = err.value.one_line()
    assert line.startswith("f.sh: the bash parser crashed (signal 11) with SIGSEGV") and err.value.exit_code == 2


def test_isolated_limits() -> None:
    t0 = time.monotonic()
    with pytest.raises(HarnessError, match="did not finish within 1 s"):
        run_isolated(_spin, "f.sh", wall_s=1, cpu_s=30)
    assert time.monotonic() - t0 < 10
    with pytest.raises(HarnessError, match="used more than 1 s of CPU time"):
        run_isolated(_spin, "f.sh", wall_s=30, cpu_s=1)
    with pytest.raises(HarnessError, match="needed more than 256 MiB of memory"):
        run_isolated(_hog, "f.sh", memory_bytes=256 << 20)


def test_isolation_overhead() -> None:
    """Forking the child costs milliseconds, not the seconds a fresh interpreter would."""
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        run_isolated(lambda: 1, "f.sh")
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"isolation overhead: median {times[5] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms")
    assert times[5] < 0.5


class _CrashingParser:
    def parse(self, data: bytes) -> None:
        _segfault()


@pytest.mark.parametrize("command", ["lint-verl", "import-verl"])
def test_a_parser_crash_the_precheck_misses_is_one_line(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line survives a crash inside tree-sitter (here a parser that dereferences NULL)."""
    monkeypatch.setattr(bashtree, "_parser", lambda: _CrashingParser())
    script = tmp_path / "any.sh"
    script.write_text(f"{TRAINER} trainer.nnodes=1\n", encoding="utf-8")
    out = tmp_path / "r.json"
    argv = [command, str(script)] + (["--out", str(out)] if command == "import-verl" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {script}: the bash parser crashed (signal 11)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["any.sh"]  # nothing written


def test_lint_json_output_goes_through_the_child(capsys: pytest.CaptureFixture[str]) -> None:
    fix = Path(__file__).resolve().parents[1] / "fixtures" / "verl"
    assert main(["lint-verl", str(fix / "clean_fsdp.sh"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["files"][0]["errors"] == 0 and doc["files"][0]["trainer_commands"][0]["line"] > 0
