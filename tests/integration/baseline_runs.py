"""What the baseline tests share (test_baselines.py: a baseline recorded in the session; test_regressions.py: the
committed one): ``harness`` in a subprocess, file hashes, a verdict's failing checks, and judged runs made once."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import forkserver

from harness.jsonio import load_json_strict
from harness.schema import schema_errors

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "qwen3_vl_30b"
NON_NUMERIC = ("timing_s/", "perf/")


def env(fault: str | None = None) -> dict[str, str]:
    """The environment of a `harness` child: this checkout's package, the session's warm-start cache (inherited:
    the cache is keyed by its inputs), ``fault`` injected or none."""
    out = {k: v for k, v in os.environ.items() if k not in ("HARNESS_FAULT", "GITHUB_STEP_SUMMARY")}
    out["PYTHONPATH"] = str(ROOT)
    if fault:
        out["HARNESS_FAULT"] = fault
    return out


def harness(work: Path, *args: str, fault: str | None = None, timeout: int = 7200,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return forkserver.run(args, cwd=work, env={**env(fault), **(extra_env or {})}, timeout=timeout)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha(p) for p in sorted(root.rglob("*")) if p.is_file()}


def failed(verdict: dict[str, Any], group: str) -> set[str]:
    return {c["metric"] for c in verdict["checks"] if c["group"] == group and not c["passed"]}


class JudgedRuns:
    """``harness run RECIPE --steps STEPS`` judged against ``baseline``, each distinct run (by name) made once."""

    def __init__(self, work: Path, baseline: Path, steps: int) -> None:
        self.work, self.baseline, self.steps = work, baseline, steps
        self.made: dict[str, tuple[int, str, Path]] = {}  # name -> (exit code, output, run dir)

    def __call__(self, name: str, *sets: str, fault: str | None = None) -> tuple[int, str, dict[str, Any]]:
        if name not in self.made:
            run_dir = self.work / "runs" / name
            args = ["run", RECIPE, "--profile", "cpu", "--steps", str(self.steps), "--out", str(run_dir), "--runtime",
                    "local", "--baseline", str(self.baseline), "--quiet", "--no-report"]  # reports: the gate's
            for s in sets:
                args += ["--set", s]
            proc = harness(self.work, *args, fault=fault)
            self.made[name] = (proc.returncode, proc.stdout + proc.stderr, run_dir)
        code, out, run_dir = self.made[name]
        verdict = load_json_strict(run_dir / "verdict.json")
        assert schema_errors(verdict, "verdict") == [], out[-2000:]
        return code, out, verdict

    def dir(self, name: str) -> Path:
        return self.made[name][2]
