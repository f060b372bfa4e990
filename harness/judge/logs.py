"""Other trainers' logs as the judge's input: a registry of log readers, verl's first.

``--log FORMAT:FILE`` names a reader (:data:`READERS`) and a file. Each reader maps its trainer's metric names
to the harness's in ONE table (``names``: an exact name, or a pattern whose ``*`` stands for one or more path
segments and is carried over), and yields a :class:`TrainerLog`: metric -> {step: value} in the harness's
names, the file's SHA-256, the trainer's version when the log says it, and the names it did not know (a
notice, never fatal).

Logs come from elsewhere, so they are read as untrusted input: a regular file (FIFOs and devices refused
without blocking) of at most :data:`LOG_LIMIT` bytes, read line by line (at most :data:`LINE_LIMIT` bytes a
line), each line parsed by the strict JSON reader (:func:`harness.jsonio.loads_strict`: no NaN or Infinity, no
duplicate keys). Bad input is one line naming the file, the line and the fix (exit 2): a step missing, repeated
or out of order, a non-finite or non-numeric value of a known metric, a truncated last line, a file over the
limit, no steps at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.errors import EXIT_USAGE, HarnessError
from harness.jsonio import MiB, load_json_strict, loads_strict
from harness.registry import Registry

LOG_LIMIT = 1024 * MiB  # a log over 1 GiB is refused before anything is read
LINE_LIMIT = 16 * MiB  # one step's line
STATE_LIMIT = 64 * MiB  # a whole-file JSON log (TRL's trainer_state.json)


@dataclass
class TrainerLog:
    """One trainer's run as its log tells it, in the harness's metric names."""

    format: str
    path: str
    sha256: str
    trainer: str
    trainer_version: str | None
    series: dict[str, dict[int, float]]
    steps: int  # the last training step
    unknown: list[str] = field(default_factory=list)  # names the reader's table does not hold (not judged)
    notices: list[str] = field(default_factory=list)

    def provenance(self) -> dict[str, Any]:
        """The record of this log in a verdict or a baseline (schema: LoggedRun)."""
        return {"format": self.format, "file": self.path, "sha256": self.sha256, "trainer": self.trainer,
                "trainer_version": self.trainer_version, "steps": self.steps}


@dataclass(frozen=True)
class Reader:
    """A log format: its trainer, its name table and the function that reads a file into rows."""

    trainer: str
    names: dict[str, str]  # the trainer's metric name (or pattern) -> the harness's
    rows: Callable[[str, Any], Iterator[tuple[int, int, dict[str, Any]]]]  # (line, step, metrics)
    version: Callable[[dict[str, Any]], str | None] = lambda row: None  # where a format carries it
    doc: str = ""
    contiguous: bool = True  # every step from the first to the last must be there


READERS: Registry[Reader] = Registry("log format", key_path="--log")


def bad(path: str, message: str, fix: str, key_path: str | None = None) -> HarnessError:
    return HarnessError(message, file=path, key_path=key_path, fix=fix, exit_code=EXIT_USAGE)


# ----------------------------------------------------------------------------- names
def _pattern(trainer_name: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(trainer_name).replace(r"\*", "(.+)") + "$")


def harness_name(reader: Reader, name: str) -> str | None:
    """The harness's name for a trainer's metric ``name`` (None: not in the reader's table)."""
    if name in reader.names:
        return reader.names[name]
    for theirs, ours in reader.names.items():
        if "*" in theirs and (m := _pattern(theirs).match(name)):
            return ours.replace("*", m.group(1))
    return None


# ----------------------------------------------------------------------------- bounded reading
def open_log(path: str, limit: int = LOG_LIMIT) -> Any:
    """A binary file object of a regular file of at most ``limit`` bytes (checked on the open descriptor)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise bad(path, "log not found", "check the path") from None
    except OSError as err:
        raise bad(path, f"cannot read the log ({err.strerror})", "check the path and its permissions") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise bad(path, "is a directory, not a log", "name the log file (verl: $VERL_FILE_LOGGER_PATH)")
        if not stat.S_ISREG(st.st_mode):
            raise bad(path, "not a regular file (a FIFO, device or socket); refused", "name a regular log file")
        if st.st_size > limit:
            raise bad(path, f"log is {st.st_size} bytes, over the limit of {limit}",
                      f"judge a log of at most {limit // MiB} MiB (split the run, or keep one line per step)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def jsonl_rows(path: str, digest: Any, limit: int = LOG_LIMIT) -> Iterator[tuple[int, Any, bool]]:
    """(line number, parsed JSON value, whether it is the last line) of a JSON-lines file, bounded and strict.

    A last line cut off (no end of line, not complete JSON) is refused: the run was killed while writing it.
    """
    total = 0
    with open_log(path, limit) as fh:
        pending: tuple[int, bytes] | None = None
        n = 0
        while True:
            raw = fh.readline(LINE_LIMIT + 1)
            if raw:
                n += 1
                total += len(raw)
                digest.update(raw)
                if total > limit:
                    raise bad(path, f"log grew over the limit of {limit} bytes while being read",
                              "judge a finished log")
                if len(raw) > LINE_LIMIT and not raw.endswith(b"\n"):
                    raise bad(path, f"line {n} is longer than {LINE_LIMIT} bytes", "keep one step per line")
            if pending is not None:
                yield pending[0], _parse_line(path, *pending, last=not raw), not raw
            if not raw:
                return
            pending = (n, raw) if raw.strip() else None


def _parse_line(path: str, n: int, raw: bytes, *, last: bool) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise bad(path, f"line {n}: not UTF-8 text (byte {err.start})", "the log is damaged; use the trainer's "
                  "own file") from None
    try:
        return loads_strict(text, path)
    except HarnessError as err:
        message = re.sub(r"^line \d+: ", "", err.message)
        if last and not raw.endswith(b"\n"):
            raise bad(path, f"line {n} (the last) is truncated: {message}",
                      "the run was cut off while writing its log; judge a finished run's log") from None
        if "NaN" in message or "Infinity" in message or "infinity" in message:
            raise bad(path, f"line {n}: a non-finite value ({message})",
                      "a log's values must be finite JSON numbers; a run that diverged is not judged",
                      err.key_path) from None
        raise bad(path, f"line {n}: {message}", err.fix or "the log is damaged; use the trainer's own file",
                  err.key_path) from None


# ----------------------------------------------------------------------------- reading a log
def parse_spec(spec: str) -> tuple[str, str]:
    """``FORMAT:FILE`` -> (format, file)."""
    fmt, sep, path = spec.partition(":")
    if not sep or not path or fmt not in READERS:
        known = ", ".join(f"{n}:FILE" for n in READERS.names())
        raise HarnessError(f"'{spec}' does not name a log format", key_path="--log",
                           fix=f"write {known} (e.g. --log verl:metrics.jsonl)")
    return fmt, path


def read_log(spec: str) -> TrainerLog:
    """Read ``FORMAT:FILE`` with its reader into the harness's names (see the module docstring)."""
    fmt, path = parse_spec(spec)
    reader = READERS.lookup(fmt)
    digest = hashlib.sha256()
    series: dict[str, dict[int, float]] = {}
    unknown: set[str] = set()
    version: str | None = None
    seen: dict[int, int] = {}  # step -> line
    prev: int | None = None
    for line, step, metrics in reader.rows(path, digest):
        if step in seen:
            raise bad(path, f"line {line}: step {step} is repeated (first on line {seen[step]})",
                      "each step may appear once: a log of one run, not two appended", "step")
        if prev is not None and step < prev:
            raise bad(path, f"line {line}: step {step} comes after step {prev}", "steps must increase", "step")
        if reader.contiguous and prev is None and step > 1:
            missing = "step 1" if step == 2 else f"steps 1-{step - 1}"
            raise bad(path, f"line {line}: the log starts at step {step} ({missing} missing)",
                      "judge the whole log of one run, from its first step (a resumed run's logs joined)", "step")
        if reader.contiguous and prev is not None and step > prev + 1:
            missing = f"step {prev + 1}" if step == prev + 2 else f"steps {prev + 1}-{step - 1}"
            raise bad(path, f"line {line}: step {step} follows step {prev} ({missing} missing)",
                      "judge the whole log of one run: every step logged once", "step")
        seen[step], prev = line, step
        for name, value in metrics.items():
            ours = harness_name(reader, name)
            if ours is None:
                unknown.add(name)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad(path, f"line {line}: {name} is {type(value).__name__}, not a number",
                          "a known metric's value must be a JSON number", f"/data/{name}")
            series.setdefault(ours, {})[step] = float(value)
        version = version or reader.version(metrics)
    if not seen:
        raise bad(path, "the log holds no steps", "give the log of a run that trained (verl: trainer.logger "
                  "includes 'file')")
    last = max(seen)
    if last < 1:
        raise bad(path, "the log holds no training step (only step 0)", "give the log of a run that trained")
    log = TrainerLog(fmt, path, digest.hexdigest(), reader.trainer, version, series, last, sorted(unknown))
    if unknown:
        log.notices.append(f"{fmt} log: {len(unknown)} metric name(s) not in the {fmt} reader's table, not judged: "
                           + ", ".join(log.unknown[:12]) + (" …" if len(unknown) > 12 else ""))
    return log


# ----------------------------------------------------------------------------- verl
# verl's metric name -> the harness's. The harness logs verl's names, so most map to themselves; validation
# carries verl's "@N" suffix (the number of samples) and the harness logs one sample per prompt.
VERL_NAMES: dict[str, str] = {
    **{n: n for n in (
        "actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm", "actor/lr", "actor/ppo_kl",
        "actor/pg_clipfrac", "actor/pg_clipfrac_lower",
        "critic/score/mean", "critic/score/max", "critic/score/min",
        "critic/rewards/mean", "critic/rewards/max", "critic/rewards/min",
        "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min",
        "response_length/mean", "response_length/max", "response_length/min", "response_length/clip_ratio",
        "prompt_length/mean", "prompt_length/max", "prompt_length/min",
        "training/rollout_probs_diff_max", "training/rollout_probs_diff_mean",
        "perf/throughput", "perf/total_num_tokens", "perf/max_memory_allocated_gb", "perf/mfu",
        "timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/ref", "timing_s/adv",
        "timing_s/update_actor", "timing_s/step", "timing_s/testing")},
    "perf/mfu/actor": "perf/mfu",
    "reward/*": "reward/*",  # the reward function's own extra fields (geo3k: acc, format)
    "val-core/*/mean@1": "val-core/*/mean",
}
VERL_TOP_KEYS = ("step", "data", "elapsed_seconds")


def _verl_rows(path: str, digest: Any) -> Iterator[tuple[int, int, dict[str, Any]]]:
    for n, row, _ in jsonl_rows(path, digest):
        if not isinstance(row, dict):
            raise bad(path, f"line {n}: a {type(row).__name__}, not an object", 'each line is {"step": N, "data": '
                      "{metric: value}} (verl's FileLogger)")
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise bad(path, f"line {n}: no step (a non-negative integer)", 'each line is {"step": N, "data": {…}}',
                      "/step")
        data = row.get("data")
        if not isinstance(data, dict):
            raise bad(path, f"line {n}: no data object", 'each line is {"step": N, "data": {metric: value}}', "/data")
        # a key beside step and data that this reader does not know is listed with the unknown names
        yield n, step, {**data, **{f"{k} (beside data)": v for k, v in row.items() if k not in VERL_TOP_KEYS}}


READERS.register("verl")(Reader(
    "verl", VERL_NAMES, _verl_rows,
    doc="verl's FileLogger (trainer.logger=['console','file']): one {\"step\", \"data\"} line per step, at "
        "$VERL_FILE_LOGGER_PATH; it does not write verl's version"))


# ----------------------------------------------------------------------------- TRL
# TRL's GRPOTrainer log_history keys -> the harness's (logging_steps must be 1 to have every step).
TRL_NAMES: dict[str, str] = {
    "reward": "critic/score/mean",
    "kl": "actor/kl_loss",
    "entropy": "actor/entropy",
    "grad_norm": "actor/grad_norm",
    "learning_rate": "actor/lr",
    "completions/mean_length": "response_length/mean",
    "completions/max_length": "response_length/max",
    "completions/min_length": "response_length/min",
    "completions/clipped_ratio": "response_length/clip_ratio",
    "rewards/*/mean": "reward/*/mean",
}
TRL_BOOKKEEPING = ("step", "epoch", "loss", "num_tokens", "train_runtime", "train_samples_per_second",
                   "train_steps_per_second", "total_flos", "train_loss")


def _trl_rows(path: str, digest: Any) -> Iterator[tuple[int, int, dict[str, Any]]]:
    with open_log(path, STATE_LIMIT) as fh:
        data = fh.read(STATE_LIMIT + 1)
    digest.update(data)
    del data
    state = load_json_strict(path, STATE_LIMIT)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise bad(path, "no log_history list", "give TRL's trainer_state.json (in the output or a checkpoint "
                  "directory)", "/log_history")
    merged: dict[int, dict[str, Any]] = {}
    for i, entry in enumerate(history):
        step = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise bad(path, f"log_history entry {i} has no step", "give TRL's own trainer_state.json",
                      f"/log_history/{i}/step")
        merged.setdefault(step, {}).update({k: v for k, v in entry.items() if k not in TRL_BOOKKEEPING})
    for step in sorted(merged):
        yield step, step, merged[step]


READERS.register("trl")(Reader("trl", TRL_NAMES, _trl_rows,
                               doc="TRL's trainer_state.json (log_history, logging_steps=1)"))
