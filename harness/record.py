"""The run record: one directory per run, written so that nothing is lost or half-written.

``runs/<recipe>-<profile>-<utc time>/``
- ``metrics.jsonl`` — one JSON object per step (``{"step": k, "<metric>": value, …}``), flushed
  and fsynced per line; floats are written with ``repr`` precision (bitwise round trip).
- ``manifest.json`` — what ran, where and how (schema ``manifest``), rewritten atomically.
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

from harness import __version__
from harness.jsonio import load_json_strict, write_json_atomic
from harness.paths import ROOT

MARKER = "INCOMPLETE"


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
                           "torch_npu": None, "threads": torch.get_num_threads()}
    try:
        import torch_npu  # type: ignore[import-not-found]

        out["torch_npu"] = torch_npu.__version__
    except ImportError:
        pass
    return out


class MetricsWriter:
    """Append-only ``metrics.jsonl``: each line flushed and fsynced before the step counts as done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, step: int, metrics: dict[str, float]) -> None:
        line = json.dumps({"step": step, **metrics}, allow_nan=True, sort_keys=False)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl``; a torn last line (killed mid-write) is ignored."""
    rows = []
    if not path.is_file():
        return rows
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:
                break
            raise
    return rows


class RunRecord:
    """The run directory and its manifest (status running → complete | failed | interrupted)."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any]) -> None:
        self.dir = run_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / MARKER).write_text("this run has not finished cleanly\n", encoding="utf-8")
        self.manifest = {"schema_version": 1, "status": "running", "created_utc": utc_now(), "finished_utc": None,
                         "error": None, **manifest}
        self.save()
        self.metrics = MetricsWriter(self.dir / "metrics.jsonl")

    @classmethod
    def resume(cls, run_dir: Path) -> RunRecord:
        self = cls.__new__(cls)
        self.dir = run_dir
        self.manifest = load_json_strict(run_dir / "manifest.json")
        (self.dir / MARKER).write_text("this run has not finished cleanly\n", encoding="utf-8")
        self.manifest["status"] = "running"
        self.save()
        self.metrics = MetricsWriter(self.dir / "metrics.jsonl")
        return self

    def save(self) -> None:
        write_json_atomic(self.dir / "manifest.json", self.manifest)

    def update(self, **fields: Any) -> None:
        self.manifest.update(fields)
        self.save()

    def finish(self, status: str, error: str | None = None) -> None:
        self.metrics.close()
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
