"""MLPerf Training-format logs and system descriptions.

Every run writes ``mlperf.log`` beside ``metrics.jsonl``: ``:::MLLOG {…}`` lines written by
mlperf-logging's own ``mllog`` (so MLPerf's compliance checker and its tools read them). Events:

- at the start (the run record is opened): ``cache_clear``, ``init_start``, the submission keys
  (benchmark ``grpo_<recipe>_<scale>``, division closed, org ``grpo-harness``, platform = the
  hardware profile), the run's constants (:func:`run_constants`: global batch size, prompts and
  generations per step, sequence length, optimizer hyper-parameters, precision, parallelism,
  samples), ``seed`` and ``max_steps``;
- before the first step: ``init_stop``, ``run_start``;
- per step: ``epoch_start`` / ``epoch_stop`` (``epoch_num`` = step, ``samples_count`` = prompts ×
  generations so far; the start is back-dated by the step's measured ``timing_s/step``) and, after a
  validation, ``eval_start`` / ``eval_accuracy`` (the mean of ``val-core/*/reward/mean``) /
  ``eval_stop``;
- at the end: ``run_stop`` with ``status`` ``success`` (the benchmark's convergence target was
  reached; :mod:`harness.mlperf.rules`), ``aborted`` (finished below it) or the run's failure.

Writing the log only reads clocks and the metrics already computed: no RNG, no tensor work, so the
training numerics are unchanged. A resumed run's log is cut back to the checkpoint's step and
continued. ``system-description.json`` (MLPerf's system description fields) is written by
``harness certify`` from the certificate's ``system`` block (:func:`system_description`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, os_error
from harness.jsonio import MiB, open_new, read_text_limited, write_text_atomic
from harness.mlperf.benchmarks import (  # noqa: F401 (re-exported)
    EVAL_PREFIX,
    EVAL_SUFFIX,
    LOG_FILE,
    ORG,
    RULESET,
    SYSTEM_DESC_FILE,
    benchmark_name,
    convergence_target,
    run_constants,
)
from harness.paths import ROOT
from harness.records.certificate import Certificate
from harness.records.run import Manifest


def eval_accuracy(metrics: dict[str, Any]) -> float | None:
    vals = [v for k, v in metrics.items() if k.startswith(EVAL_PREFIX) and k.endswith(EVAL_SUFFIX)]
    return sum(vals) / len(vals) if vals else None


class _LineHandler(logging.Handler):
    """Appends each record as one line, flushed and fsynced (the run directory's durability rule).

    The file is created (or, for a resumed run, appended to) only if it is a regular file: a FIFO in its
    place is refused without blocking (:func:`harness.jsonio.open_new`)."""

    def __init__(self, path: Path, *, append: bool = False) -> None:
        super().__init__(logging.INFO)
        self.path = path
        self.fh = os.fdopen(open_new(path, append_existing=append), "a", encoding="utf-8")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.fh.write(self.format(record) + "\n")
            self.fh.flush()
            os.fsync(self.fh.fileno())
        except OSError as err:
            raise os_error(err, self.path) from None

    def close(self) -> None:
        try:
            self.fh.close()
        except OSError as err:
            raise os_error(err, self.path) from None
        finally:
            super().close()


class MlperfLog:
    """The ``mlperf.log`` of one run (rank 0), from its manifest (a document, such as the one the run record
    writes, is read into :class:`~harness.records.run.Manifest` first)."""

    def __init__(self, run_dir: Path, manifest: Manifest | Mapping[str, Any], *,
                 resume_from: int | None = None) -> None:
        from mlperf_logging.mllog import constants, mllog

        m = manifest if isinstance(manifest, Manifest) else Manifest.model_validate(manifest)
        self.path = Path(run_dir) / LOG_FILE
        self.constants = run_constants(m.resolved_config)
        self.target = convergence_target(m.recipe.name, m.scale)
        kept: set[str] = set()
        self.reached = False
        if resume_from is not None:
            kept, self.reached = cut_back(self.path, resume_from, self.target)
        self.started = "run_start" in kept
        logger = logging.Logger(f"harness.mlperf.{id(self)}")  # not registered: one per run, no global state
        self.handler = _LineHandler(self.path, append=resume_from is not None)
        logger.addHandler(self.handler)
        self.log = mllog.MLLogger(logger=logger, default_stack_offset=1, root_dir=str(ROOT))
        self.c = constants
        if resume_from is not None:
            return
        self.log.event(key=self.c.CACHE_CLEAR, value=True)
        self.log.start(key=self.c.INIT_START)
        for key, value in (("submission_benchmark", benchmark_name(m.recipe.name, m.scale)),
                           ("submission_division", "closed"), ("submission_org", ORG),
                           ("submission_platform", m.profile), ("submission_status", "research"),
                           ("config_filename", m.recipe.path)):
            self.log.event(key=key, value=value)
        for key, value in self.constants.items():
            self.log.event(key=key, value=value)
        self.log.event(key=self.c.SEED, value=m.seed)
        self.log.event(key="max_steps", value=m.steps.requested)
        self.log.event(key="init_checkpoint_step", value=0)

    def run_start(self) -> None:
        """Initialisation is over, training begins (once per log: a resumed run's is kept)."""
        if not self.started:
            self.log.end(key=self.c.INIT_STOP)
            self.log.start(key=self.c.RUN_START)
            self.started = True

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        now = int(time.time() * 1e3)
        samples = step * self.constants["global_batch_size"]
        meta = {"epoch_num": step, "samples_count": samples}
        took = metrics.get("timing_s/step")
        start = now - int(took * 1e3) if isinstance(took, (int, float)) and took == took else now
        self.log.start(key=self.c.EPOCH_START, metadata=meta, time_ms=start)
        self.log.end(key=self.c.EPOCH_STOP, metadata=meta, time_ms=now)
        acc = eval_accuracy(metrics)
        if acc is not None:
            self.log.start(key=self.c.EVAL_START, metadata=meta)
            self.log.event(key=self.c.EVAL_ACCURACY, value=acc, metadata=meta)
            self.log.end(key=self.c.EVAL_STOP, metadata=meta)
            self.reached = self.reached or (self.target is not None and acc >= self.target)

    def finish(self, status: str) -> None:
        """``status``: the run record's (complete | failed | interrupted)."""
        mlperf_status = ("success" if self.reached else "aborted") if status == "complete" else status
        self.log.end(key=self.c.RUN_STOP, metadata={"status": mlperf_status})
        self.handler.close()


LOG_LIMIT = 64 * MiB


def _bad_line(path: Path, n: int, message: str, key: str | None = None) -> HarnessError:
    return HarnessError(f"line {n}: {message}", file=str(path), key_path=key,
                        fix="the log is damaged; restore it from the run's copy, or start a new run")


def _event(path: Path, n: int, line: str) -> dict[str, Any] | None:
    """The event a ``:::MLLOG {…}`` line holds, checked where a resume reads it (None: not an event line)."""
    try:
        ev = json.loads(line.split(":::MLLOG ", 1)[1])
    except (IndexError, ValueError, RecursionError):
        return None
    if not isinstance(ev, dict) or not isinstance(ev.get("key"), str):
        raise _bad_line(path, n, "an event without a string 'key'", "key")
    meta = ev.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise _bad_line(path, n, "'metadata' is not an object", "metadata")
    epoch = (meta or {}).get("epoch_num", 0)
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise _bad_line(path, n, f"'epoch_num' is not an integer ({epoch!r})", "metadata.epoch_num")
    value = ev.get("value")
    if ev["key"] == "eval_accuracy" and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise _bad_line(path, n, f"'value' of eval_accuracy is not a number ({value!r})", "value")
    return ev


def read_events(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each line of a run's ``mlperf.log`` with its event, checked where a resume relies on it (:func:`_event`).

    The log must be a regular file (else refused without blocking) whose lines are well formed ``:::MLLOG``
    events; only a torn last line (the run killed mid-write) is dropped. A one-line error otherwise."""
    lines = read_text_limited(path, LOG_LIMIT, what="MLPerf log", follow_symlinks=False).splitlines(keepends=True)
    out = []
    for n, line in enumerate(lines, 1):
        ev = _event(path, n, line)
        if ev is None:
            if n == len(lines):
                continue  # a torn last line
            raise _bad_line(path, n, "not a ':::MLLOG {…}' event line")
        out.append((line if line.endswith("\n") else line + "\n", ev))
    return out


def cut_back(path: Path, step: int, target: float | None) -> tuple[set[str], bool]:
    """Keep the log up to ``step`` (the resumed checkpoint): (the keys kept, whether a kept evaluation
    reached ``target``); the log is read by :func:`read_events`."""
    if not os.path.lexists(path):
        return set(), False
    kept, keys, reached = [], set(), False
    for line, ev in read_events(path):
        meta = ev.get("metadata") or {}
        if ev["key"] == "run_stop" or meta.get("epoch_num", 0) > step:
            continue
        if ev["key"] == "eval_accuracy" and target is not None and ev["value"] >= target:
            reached = True
        kept.append(line)
        keys.add(ev["key"])
    write_text_atomic(path, "".join(kept))
    return keys, reached


def system_description(cert: Certificate) -> dict[str, Any]:
    """MLPerf's system description JSON from a certificate (its ``system`` and profile)."""
    s = cert.system
    acc, host, sw = s.accelerator, s.host, s.software  # software: the stack's name -> version
    stack = ", ".join(f"{k} {v}" for k, v in sw.items() if v is not None and k not in ("threads", "cpu_capability"))
    return {
        "submitter": ORG,
        "division": "closed",
        "status": "research",
        "system_name": cert.profile.name,
        "system_type": "datacenter",
        "number_of_nodes": s.nodes,
        "host_processors_per_node": 1,
        "host_processor_model_name": sw.get("cpu_capability") or "unknown",
        "host_processor_core_count": host.cpu_cores,
        "host_processor_vcpu_count": host.cpu_cores,
        "host_memory_capacity": f"{host.memory_gb:g} GB",
        "host_networking": s.interconnect.inter_node,
        "accelerators_per_node": acc.count,
        "accelerator_model_name": f"{acc.vendor} {acc.model}".strip(),
        "accelerator_memory_capacity": f"{acc.memory_gb:g} GB",
        "accelerator_interconnect": s.interconnect.intra_node,
        "framework": f"grpo-harness {cert.harness.version}, torch {sw.get('torch')}",
        "other_software_stack": stack,
        "operating_system": "Linux",
        "sw_notes": ((f"{cert.simulated.statement} " if cert.simulated else "")
                     + f"runtime {s.runtime.kind}, collective backend {s.collective_backend}; "
                     f"peak {acc.peak_bf16_tflops:g} bf16 TFLOP/s per device (profile)"),
    }
