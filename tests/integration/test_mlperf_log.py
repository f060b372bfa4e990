"""A smoke run's mlperf.log passes mlperf-logging's compliance checker; without a required key it fails naming it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import forkserver
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def harness(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_FAULT"}
    env.update(PYTHONPATH=str(ROOT))  # HARNESS_CACHE: the session's (tests/conftest.py)
    return forkserver.run(args, cwd=cwd, env=env, timeout=900)


def test_smoke_run_log_is_compliant(tmp_path: Path, smoke_run: Any) -> None:
    proc, run = smoke_run("qwen3_1_7b", 12)  # the committed-baseline test's run (tests/integration/conftest.py)
    assert (run / "mlperf.log").is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = harness(tmp_path, "mlperf-check", str(run))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "INFO - SUCCESS" in proc.stdout and "closed_grpo_qwen3_1_7b_smoke.yaml" in proc.stdout
    cut = tmp_path / "cut" / "mlperf.log"
    cut.parent.mkdir()
    cut.write_text("".join(ln for ln in (run / "mlperf.log").read_text().splitlines(keepends=True)
                           if '"key": "global_batch_size"' not in ln))
    proc = harness(tmp_path, "mlperf-check", str(cut.parent))
    assert proc.returncode == 1 and "Required EXACTLY_ONE occurrence of 'global_batch_size'" in proc.stdout
    assert "FAILED" in proc.stdout
