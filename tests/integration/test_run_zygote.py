"""The run zygote (harness/run/runtime/child.py): ``harness run`` children forked from one process, same results.

A caller (a small script, as record-baseline or the gate would be) runs ``harness run`` children through
:func:`harness_run`: each ends with the exit code and output a process of its own gives; the zygote is a child of the
caller and ends after it; a child whose environment differs at import time runs in an interpreter of its own;
``HARNESS_RUN_ZYGOTE=off`` starts no zygote, and neither does an accelerator's run; a killed caller's zygote removes
its private directory itself. A run forked from it and stopped by its caller's death is
test_baselines.py's kill -9 of record-baseline; the same metrics bit for bit are test_baselines.py's gate (its runs
and ckpt-resume runs are forked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import procs
import pytest

from harness.run.runtime.child import RUN_ZYGOTE

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux's")]
ROOT = Path(__file__).resolve().parents[2]
ERROR = "harness: error: unrecognized arguments: --no-such-option (fix: see `harness --help`)\n"

# The caller: two runs of profile ``sys.argv[2]`` with a bad option (exit 2, one line), the second with
# ``sys.argv[1]`` as extra environment; prints what it saw and its zygote (a child of this process running the
# zygote's command line).
CALLER = """
import json, sys
from pathlib import Path
from harness.run.runtime.child import harness_run
from harness.run.runtime.run_args import RunSpec
bad = RunSpec("qwen3_vl_30b", sys.argv[2], "smoke", extra=("--no-such-option",))
results = [harness_run(bad, capture_output=True, env=env) for env in (None, json.loads(sys.argv[1]))]
kids = [int(c) for c in Path(f"/proc/self/task/{__import__('os').getpid()}/children").read_text().split()]
zygotes = [k for k in kids if "harness.run.runtime.child\\0--serve" in Path(f"/proc/{k}/cmdline").read_text()]
print(json.dumps({"codes": [r.returncode for r in results], "stdout": [r.stdout for r in results],
                  "stderr": [r.stderr for r in results], "zygotes": zygotes}))
"""


def _caller(extra_env: dict[str, str], profile: str = "cpu", **env: str) -> tuple[dict[str, Any], str]:
    full = {k: v for k, v in os.environ.items() if k != RUN_ZYGOTE} | {"PYTHONPATH": str(ROOT)} | env
    proc = subprocess.run([sys.executable, "-c", CALLER, json.dumps(extra_env), profile], capture_output=True,
                          text=True, env=full, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or procs.name(pid) == "":
            return True
        time.sleep(0.05)
    return False


def test_a_forked_runs_exit_code_and_output_are_a_processes() -> None:
    seen, caller_err = _caller({})
    assert seen["codes"] == [2, 2] and seen["stderr"] == [ERROR, ERROR] and seen["stdout"] == ["", ""]
    (zygote,) = seen["zygotes"]
    assert "zygote" not in caller_err  # nothing refused, nothing to say
    assert _gone(zygote, 30), "the zygote outlived its caller"


def test_a_killed_callers_zygote_leaves_no_directory(tmp_path: Path) -> None:
    """The caller killed (SIGKILL: its ``atexit`` never runs) after one run: its zygote ends and removes its private
    ``harness-runs-*`` directory and socket itself."""
    killed = CALLER + "import os, signal; sys.stdout.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
    full = {k: v for k, v in os.environ.items() if k != RUN_ZYGOTE} | {"PYTHONPATH": str(ROOT),
                                                                       "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", killed, "{}", "cpu"], capture_output=True, text=True, env=full,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == -9, proc.stderr
    (zygote,) = json.loads(proc.stdout)["zygotes"]
    assert _gone(zygote, 30), "the zygote outlived its caller"
    assert not list(tmp_path.glob("harness-runs-*"))


def test_an_import_time_variable_gets_an_interpreter_of_its_own() -> None:
    seen, caller_err = _caller({"OMP_NUM_THREADS": "3"})
    assert seen["codes"] == [2, 2] and seen["stderr"] == [ERROR, ERROR]
    assert "run zygote: the runs' OMP_NUM_THREADS differs from the zygote's" in caller_err


def test_off_starts_no_zygote() -> None:
    seen, caller_err = _caller({}, **{RUN_ZYGOTE: "off"})
    assert seen["codes"] == [2, 2] and seen["stderr"] == [ERROR, ERROR] and seen["zygotes"] == []
    assert "zygote" not in caller_err


def test_an_accelerator_run_is_not_forked() -> None:
    """A CUDA or NPU runtime must not be initialised in a process that forks: a GPU profile's run starts as an
    interpreter of its own (here it stops at its bad option before looking for a GPU)."""
    seen, _ = _caller({}, profile="gpu-1x-h200")
    assert seen["codes"] == [2, 2] and seen["stderr"] == [ERROR, ERROR] and seen["zygotes"] == []
