"""The run record: one directory per run, written so that nothing is lost or half-written.

``runs/<recipe>-<profile>-<utc time>/``
- ``metrics.jsonl`` — one JSON object per step (``{"step": k, "<metric>": value, …}``), flushed
  and fsynced per line; floats are written with ``repr`` precision (bitwise round trip).
- ``manifest.json`` — what ran, where and how (schema ``manifest``), rewritten atomically.
- ``mlperf.log`` — the same run as MLPerf Training log lines (:mod:`harness.mlperf`).
- ``checkpoints/`` — resumable training state (see :mod:`harness.run.checkpoint`); a resumed run's
  ``metrics.jsonl`` is cut back to the checkpoint's step and continued, and its manifest lists
  each resume under ``resumes``.
- ``INCOMPLETE`` — present from the start until the run finishes cleanly; a run killed with
  ``kill -9`` keeps it (and its manifest still says ``running``), so it is never mistaken for a
  finished run.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.jsonio import MiB, load_json_strict, open_new, read_text_limited, write_json_atomic, write_text_atomic
from harness.mlperf import MlperfLog
from harness.paths import ROOT

MARKER = "INCOMPLETE"
METRICS_LIMIT = 512 * MiB


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def default_run_dir(recipe: str, profile: str, base: Path | None = None) -> Path:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return (base or Path("runs")) / f"{recipe}-{profile}-{stamp}"


def git_revision() -> dict[str, Any]:
    """Revision of the harness source (env HARNESS_GIT_REVISION wins, e.g. inside an image)."""
    if os.environ.get("HARNESS_GIT_REVISION"):
        return {"revision": os.environ["HARNESS_GIT_REVISION"], "dirty": None}
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip() != ""
        return {"revision": rev, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"revision": None, "dirty": None}


def software_versions() -> dict[str, Any]:
    import numpy
    import tokenizers
    import torch
    import transformers

    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                           "numpy": numpy.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                           "torch_npu": None, "threads": torch.get_num_threads(),
                           "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        import torch_npu

        out["torch_npu"] = torch_npu.__version__
    except ImportError:
        pass
    return out


class MetricsWriter:
    """Append-only ``metrics.jsonl``: each line flushed and fsynced before the step counts as done."""

    def __init__(self, path: Path, *, append: bool = False) -> None:
        self.path = path
        fd = open_new(path, append_existing=append)
        self._fh = os.fdopen(fd, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, step: int, metrics: dict[str, float]) -> None:
        line = json.dumps({"step": step, **metrics}, allow_nan=True, sort_keys=False)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def truncate_metrics(path: Path, last_step: int) -> None:
    """Keep the rows up to ``last_step`` (byte for byte); rewritten atomically. ``-1`` keeps none."""
    if not path.is_file():
        return
    lines = read_text_limited(path, METRICS_LIMIT, what="metrics file", follow_symlinks=False).splitlines(
        keepends=True)
    kept = []
    for line in lines:
        try:
            step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line (killed mid-write)
        if step <= last_step:
            kept.append(line if line.endswith("\n") else line + "\n")
    write_text_atomic(path, "".join(kept))


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl``; a torn last line (killed mid-write) is ignored.

    Steps must increase row by row: a repeated or out-of-order step (e.g. two runs appended to one
    file) is refused, so a verdict never judges duplicated steps.
    """
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    lines = read_text_limited(path, METRICS_LIMIT, what="metrics file").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            if i == len(lines) - 1:
                break
            raise HarnessError(f"line {i + 1} is not valid JSON", file=str(path),
                               fix="the file is damaged; re-run the recipe") from None
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise HarnessError(f"line {i + 1} has no integer 'step'", file=str(path), key_path="step",
                               fix="the file is damaged; re-run the recipe")
        if rows and step <= rows[-1]["step"]:
            what = "repeated" if step == rows[-1]["step"] or any(r["step"] == step for r in rows) else "out of order"
            raise HarnessError(f"line {i + 1}: step {step} is {what} (after step {rows[-1]['step']})",
                               file=str(path), key_path="step",
                               fix="each step may appear once, in order; re-run the recipe into a new --out")
        rows.append(row)
    return rows


class RunRecord:
    """The run directory and its manifest (status running → complete | failed | interrupted)."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any]) -> None:
        self.dir = run_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in ("manifest.json", "metrics.jsonl"):
            if os.path.lexists(self.dir / name):
                raise HarnessError(f"the run directory already holds {name}; not overwritten", file=str(self.dir),
                                   fix="choose a new or empty --out, or --resume the run")
        with os.fdopen(open_new(self.dir / MARKER), "w", encoding="utf-8") as fh:
            fh.write("this run has not finished cleanly\n")
        self.manifest = {"schema_version": 1, "status": "running", "created_utc": utc_now(), "finished_utc": None,
                         "error": None, **manifest}
        self.save()
        self.metrics = MetricsWriter(self.dir / "metrics.jsonl")
        self.mlperf = MlperfLog(self.dir, self.manifest)

    @classmethod
    def resume(cls, run_dir: Path, *, from_step: int, entry: dict[str, Any], updates: dict[str, Any]) -> RunRecord:
        """Reopen a run to continue after ``from_step`` (0: start over): metrics cut back, the resume recorded."""
        self = cls.__new__(cls)
        self.dir = run_dir
        self.manifest = load_json_strict(run_dir / "manifest.json", follow_symlinks=False)
        write_text_atomic(self.dir / MARKER, "this run has not finished cleanly\n")
        truncate_metrics(self.dir / "metrics.jsonl", from_step if from_step > 0 else -1)
        self.manifest.update(updates, status="running", finished_utc=None, error=None)
        self.manifest["steps"]["completed"] = from_step
        self.manifest.setdefault("resumes", []).append(entry)
        self.save()
        self.metrics = MetricsWriter(self.dir / "metrics.jsonl", append=True)
        self.mlperf = MlperfLog(self.dir, self.manifest, resume_from=from_step)
        return self

    def save(self) -> None:
        write_json_atomic(self.dir / "manifest.json", self.manifest)

    def update(self, **fields: Any) -> None:
        self.manifest.update(fields)
        self.save()

    def finish(self, status: str, error: str | None = None) -> None:
        self.metrics.close()
        self.mlperf.finish(status)
        self.manifest.update(status=status, finished_utc=utc_now(), error=error)
        self.save()
        if status == "complete":
            (self.dir / MARKER).unlink(missing_ok=True)


def is_complete(run_dir: Path) -> bool:
    try:
        manifest = load_json_strict(run_dir / "manifest.json")
    except Exception:  # noqa: BLE001 - any unreadable manifest means not complete
        return False
    return manifest.get("status") == "complete" and not (run_dir / MARKER).exists()
