"""Read-only and full file systems, for real: tmpfs mounts (root only; skipped otherwise — the same paths are
simulated portably in tests/unit/test_hostile_files.py). Each command stops with one line naming the file and the
errno text, exit 2, and never leaves half a key behind."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import forkserver
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mount(where: Path, options: str) -> None:
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made: list[Path] = []
    try:
        for name, options in (("ro", "ro,size=64k"), ("full", "size=64k"), ("tiny", "size=12k")):
            _mount(tmp_path / name, options)
            made.append(tmp_path / name)
        yield tmp_path
    finally:
        for where in made:
            subprocess.run(["umount", str(where)], check=False)


def harness(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_RUNTIME_DEFAULT": "local"}
    return forkserver.run(argv, cwd=cwd, env=env, timeout=300)


def one_line(proc: subprocess.CompletedProcess[str], *texts: str) -> None:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    for text in texts:
        assert text in lines[0], lines[0]


def _fill(where: Path) -> Path:
    """Fill the file system at ``where`` to the last byte."""
    filler = where / "filler"
    with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as fh:
        while True:
            fh.write(b"\0" * 1024)
    return filler


def test_read_only_and_full_file_systems(mounts: Path) -> None:
    ro, full, tiny = mounts / "ro", mounts / "full", mounts / "tiny"
    one_line(harness("run", "qwen3_1_7b", "--out", str(ro / "run"), "--runtime", "local", "--no-report", "--quiet",
                     cwd=mounts), str(ro / "run"), "Read-only file system")
    one_line(harness("keygen", "--out", str(ro / "k"), cwd=mounts), str(ro / "k"), "Read-only file system")

    for name in ("r", "r2"):
        (full / name).mkdir()
        (full / name / "manifest.json").write_text(json.dumps({"schema_version": 1}))
    filler = _fill(full)
    one_line(harness("compare", str(full / "r"), cwd=mounts), "verdict.json", "No space left on device")
    one_line(harness("report", str(full / "r2"), cwd=mounts), "verdict.json", "No space left on device")
    one_line(harness("keygen", "--out", str(full / "k"), cwd=mounts), "No space left on device")
    assert not list((full / "k").iterdir())  # no 0-byte signing-key.pem: the retry must not find "a key"
    filler.unlink()
    assert harness("keygen", "--out", str(full / "k"), cwd=mounts).returncode == 0
    assert (full / "k" / "signing-key.pem").stat().st_size > 0

    one_line(harness("run", "qwen3_1_7b", "--out", str(tiny / "run"), "--runtime", "local", "--no-report", "--quiet",
                     cwd=mounts), str(tiny / "run"), "No space left on device")
