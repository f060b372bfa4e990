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

Files are appended to only when they are regular files (opened without blocking: a FIFO planted in a
run directory is refused, never waited on). A read-only or full disk ends the run with one line naming
the file and the errno text; the manifest then says ``failed`` when there is still room to rewrite it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, os_error
from harness.jsonio import MiB, load_json_strict, open_new, read_text_limited, write_json_atomic, write_text_atomic
from harness.mlperf import MlperfLog
from harness.paths import ROOT
from harness.records.base import dump
from harness.records.run import Manifest

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
        try:
            self._fh.write(line + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as err:
            raise os_error(err, self.path) from None

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError as err:  # the last buffered bytes could not be written
            raise os_error(err, self.path) from None


def truncate_metrics(path: Path, last_step: int) -> None:
    """Keep the rows up to ``last_step`` (byte for byte); rewritten atomically. ``-1`` keeps none.

    Anything but a regular file (a FIFO, a link, a directory) is refused without blocking."""
    if not os.path.lexists(path):
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
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise os_error(err, self.dir, doing="create the run directory") from None
        for name in ("manifest.json", "metrics.jsonl"):
            if os.path.lexists(self.dir / name):
                raise HarnessError(f"the run directory already holds {name}; not overwritten", file=str(self.dir),
                                   fix="choose a new or empty --out, or --resume the run")
        fd = open_new(self.dir / MARKER)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("this run has not finished cleanly\n")
        except OSError as err:
            raise os_error(err, self.dir / MARKER) from None
        self.manifest = {"schema_version": 1, "status": "running", "created_utc": utc_now(), "finished_utc": None,
                         "error": None, **manifest}
        self.save()
        try:
            self.metrics = MetricsWriter(self.dir / "metrics.jsonl")
            self.mlperf = MlperfLog(self.dir, self.manifest)
        except BaseException as err:  # the manifest says so: never a run left `running` that is not
            stopped = isinstance(err, KeyboardInterrupt) or getattr(err, "exit_code", 0) > 128
            text = err.one_line() if isinstance(err, HarnessError) else f"{type(err).__name__}: {err}"
            self.manifest.update(status="interrupted" if stopped else "failed", finished_utc=utc_now(), error=text)
            self._save_quietly()
            raise

    def _save_quietly(self) -> None:
        """Save the manifest of a run that is failing anyway: a disk too full to rewrite it must not hide the
        error that ended the run (the manifest then stays `running`, INCOMPLETE present: never taken for done)."""
        try:
            self.save()
        except HarnessError:
            pass

    @classmethod
    def resume(cls, run_dir: Path, *, from_step: int, entry: dict[str, Any], updates: dict[str, Any]) -> RunRecord:
        """Reopen a run to continue after ``from_step`` (0: start over): metrics cut back, the resume recorded.

        Every file is checked and opened before the manifest changes: a run whose files cannot be continued
        (a FIFO in place of ``metrics.jsonl`` or ``mlperf.log``, a damaged log) stays as it was."""
        self = cls.__new__(cls)
        self.dir = run_dir
        self.manifest = load_json_strict(run_dir / "manifest.json", follow_symlinks=False)
        self.manifest.update(updates, status="running", finished_utc=None, error=None)
        self.manifest["steps"]["completed"] = from_step
        self.manifest.setdefault("resumes", []).append(entry)
        truncate_metrics(self.dir / "metrics.jsonl", from_step if from_step > 0 else -1)
        self.metrics = MetricsWriter(self.dir / "metrics.jsonl", append=True)
        try:
            self.mlperf = MlperfLog(self.dir, self.manifest, resume_from=from_step)
            write_text_atomic(self.dir / MARKER, "this run has not finished cleanly\n")
            self.save()
        except BaseException:
            with contextlib.suppress(HarnessError):
                self.metrics.close()
            raise
        return self

    def save(self) -> None:
        """The manifest, written through its model (:class:`harness.records.run.Manifest`), atomically."""
        write_json_atomic(self.dir / "manifest.json", dump(Manifest.model_validate(self.manifest)))

    def update(self, **fields: Any) -> None:
        self.manifest.update(fields)
        self.save()

    def finish(self, status: str, error: str | None = None) -> None:
        """End the record. The manifest is written even when a log cannot be closed (a full disk): it is
        what says how the run ended. A run that would have completed is then failed, with that error."""
        problems: list[HarnessError] = []
        for close in (self.metrics.close, lambda: self.mlperf.finish(status)):
            try:
                close()
            except HarnessError as err:
                problems.append(err)
        completed = status == "complete"
        if problems and completed:
            status, error = "failed", problems[0].one_line()
        self.manifest.update(status=status, finished_utc=utc_now(), error=error)
        if completed and not problems:
            self.save()
        else:
            self._save_quietly()  # the caller raises the error that ended the run
        if status == "complete":
            (self.dir / MARKER).unlink(missing_ok=True)
        if problems and completed:
            raise problems[0]


def is_complete(run_dir: Path) -> bool:
    try:
        manifest = load_json_strict(run_dir / "manifest.json")
    except Exception:  # noqa: BLE001 - any unreadable manifest means not complete
        return False
    return manifest.get("status") == "complete" and not (run_dir / MARKER).exists()
