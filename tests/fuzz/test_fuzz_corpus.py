"""Every input the fuzzer ever saved (``tests/fixtures/hostile/fuzz/``), run again through ``python -m harness``.

A saved input is named after its entry point: ``lint-verl-*.sh``, ``import-verl-*.sh``, ``validate-*.json``,
``verify-certificate-*.json`` (or ``.bundle.json``), ``compare-*.bundle.json`` (the files of a run directory) and
``replay-baseline-*.bundle.json`` (a baseline and its rollouts archive, read by the replay loader in a child
process: ``harness run --tier replay`` would train). Each must end with exit 0, 1 or 2, no traceback, within
the time limit, and not by a signal.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzlib import ENV, ROOT, SAVED, TIMEOUT_S, Reply

ENTRIES = ("lint-verl", "import-verl", "validate", "compare", "verify-certificate", "replay-baseline")
CERT = ROOT / "certificates" / "gpu-1x-h200"


def saved() -> list[Path]:
    return sorted(p for p in SAVED.glob("*") if p.is_file()) if SAVED.is_dir() else []


def entry_of(path: Path) -> str:
    for entry in sorted(ENTRIES, key=len, reverse=True):
        if path.name.startswith(entry + "-"):
            return entry
    raise AssertionError(f"{path.name}: not named after an entry point ({', '.join(ENTRIES)})")


def _files(path: Path) -> dict[str, bytes]:
    if path.name.endswith(".bundle.json"):
        bundle = json.loads(path.read_text(encoding="utf-8"))
        return {name: base64.b64decode(data) for name, data in bundle["files"].items()}
    return {path.name: path.read_bytes()}


def _argv(entry: str, files: dict[str, bytes], tmp: Path) -> list[str]:
    """Lay the files out in ``tmp`` and return the command that reads them."""
    folder = tmp / ("cert" if entry == "verify-certificate" else "in")
    if entry == "verify-certificate":
        shutil.copytree(CERT, folder)  # the certificate's results are read beside it
    else:
        folder.mkdir()
    for name, data in files.items():
        (folder / ("certificate.json" if entry == "verify-certificate" else name)).write_bytes(data)
    first = folder / next(iter(files))
    if entry == "lint-verl":
        return ["-m", "harness", "lint-verl", str(first)]
    if entry == "import-verl":
        return ["-m", "harness", "import-verl", str(first), "--out", str(tmp / "imported.json")]
    if entry == "validate":
        return ["-m", "harness", "validate", str(first)]
    if entry == "compare":
        return ["-m", "harness", "compare", str(folder)]
    if entry == "verify-certificate":
        return ["-m", "harness", "verify-certificate", str(folder / "certificate.json"), "--pubkey",
                str(folder / "signing-key.pub.pem")]
    baseline = next(n for n in files if n.endswith(".json"))
    return [str(Path(__file__).with_name("driver.py")), "--once", str(folder / baseline)]


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in saved()])
def test_saved_input(path: Path, tmp_path: Path) -> None:
    entry = entry_of(path)
    argv = _argv(entry, _files(path), tmp_path)
    try:
        proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                              timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        reply = Reply(None, timed_out=True)
    else:
        output = proc.stdout + proc.stderr
        reply = Reply(proc.returncode if proc.returncode >= 0 else None,
                      signal=-proc.returncode if proc.returncode < 0 else None,
                      traceback="Traceback (most recent call last)" in output, stderr=proc.stderr)
    assert reply.problem() is None, f"{path.name} ({entry}): {reply.problem()}\n{reply.stderr[-1500:]}"


def test_saved_inputs_are_named_after_an_entry_point() -> None:
    for path in saved():
        entry_of(path)
