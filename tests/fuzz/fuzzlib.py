"""What the fuzz tests share: the child that runs inputs, the verdict on a reply, and saving what broke.

An input fails when the child running it dies by a signal, is still running after :data:`TIMEOUT_S`, exits with a
code other than 0, 1 or 2, or prints a traceback. A failing input is saved under
``tests/fixtures/hostile/fuzz/`` as ``<entry>-<sha8>.<ext>`` (one file) or ``<entry>-<sha8>.bundle.json`` (the
files of a run directory, a certificate, a baseline and its archive); ``tests/fuzz/test_fuzz_corpus.py`` runs
every saved input through ``python -m harness`` from then on. While hypothesis shrinks a failure, each smaller
failing input replaces the one saved before it, so the minimal one stays.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import select
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

ROOT = Path(__file__).resolve().parents[2]
SAVED = ROOT / "tests" / "fixtures" / "hostile" / "fuzz"
TIMEOUT_S = 30.0  # per input (the command line's own limits are 20 s for a launcher)
EXAMPLES = int(os.environ.get("HARNESS_FUZZ_EXAMPLES", "20"))  # per entry point: a CI slice unless set
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
       "DOCKER_HOST": "unix:///nonexistent/docker.sock", "HARNESS_RUNTIME_DEFAULT": "local"}


def fuzz_settings() -> settings:
    """``HARNESS_FUZZ_EXAMPLES`` examples (default a CI slice), no deadline, failures kept in the example database
    (``.hypothesis/``, ignored by git) so the next run tries them first."""
    return settings(max_examples=EXAMPLES, deadline=None,
                    database=DirectoryBasedExampleDatabase(str(ROOT / ".hypothesis" / "fuzz")),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@dataclass
class Reply:
    rc: int | None
    signal: int | None = None
    timed_out: bool = False
    traceback: bool = False
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0

    def problem(self) -> str | None:
        if self.timed_out:
            return f"still running after {TIMEOUT_S:.0f} s"
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        if self.traceback:
            return "printed a traceback"
        if self.rc not in (0, 1, 2):
            return f"exit code {self.rc}"
        return None


class Driver:
    """A ``tests/fuzz/driver.py`` child, restarted after a crash or a hang."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("driver.py"))], cwd=self.cwd, env=ENV,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self._line(proc, 120.0)
        assert line and json.loads(line).get("ready"), "the fuzz driver did not start"
        return proc

    @staticmethod
    def _line(proc: subprocess.Popen[str], timeout: float) -> str | None:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        return proc.stdout.readline() if ready else None

    def run(self, request: dict[str, Any]) -> Reply:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self._line(self.proc, TIMEOUT_S)
        if not line:
            timed_out = self.proc.poll() is None
            if timed_out:
                self.proc.kill()
            rc = self.proc.wait()
            self.proc = None
            return Reply(rc, signal=-rc if rc < 0 and not timed_out else None, timed_out=timed_out)
        reply = json.loads(line)
        return Reply(reply["rc"], traceback=reply["traceback"], stdout=reply["stdout"], stderr=reply["stderr"],
                     seconds=reply["seconds"])

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_LAST: dict[str, Path] = {}  # entry -> the input saved last by this session (replaced while shrinking)


def save_failure(entry: str, files: dict[str, bytes], main: str | None = None) -> Path:
    """Save a failing input: ``files[main]`` as is when it is the only file, else every file in a bundle."""
    SAVED.mkdir(parents=True, exist_ok=True)
    if main is not None and len(files) == 1:
        data = files[main]
        path = SAVED / f"{entry}-{hashlib.sha256(data).hexdigest()[:8]}{Path(main).suffix}"
    else:
        bundle = {"entry": entry, "files": {name: base64.b64encode(data).decode("ascii")
                                            for name, data in sorted(files.items())}}
        data = (json.dumps(bundle, indent=1) + "\n").encode("utf-8")
        path = SAVED / f"{entry}-{hashlib.sha256(data).hexdigest()[:8]}.bundle.json"
    previous = _LAST.get(entry)
    if previous is not None and previous != path and previous.exists():
        previous.unlink()
    path.write_bytes(data)
    _LAST[entry] = path
    return path


def check(reply: Reply, entry: str, files: dict[str, bytes], main: str | None = None) -> None:
    """Fail (after saving the input) when the reply shows a crash, a hang, a traceback or a stray exit code."""
    problem = reply.problem()
    if os.environ.get("HARNESS_FUZZ_LOG"):
        with open(os.environ["HARNESS_FUZZ_LOG"], "a") as fh:
            fh.write(json.dumps([entry, reply.rc, reply.seconds, reply.stderr[-300:], reply.stdout[-200:]]) + "\n")
    if problem is None:
        return
    path = save_failure(entry, files, main)
    pytest.fail(f"{entry}: {problem}; input saved as {path.relative_to(ROOT)}\n{reply.stderr[-1500:]}")
