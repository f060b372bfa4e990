"""Read a launcher in a child process, so that the bash parser cannot take the command down.

tree-sitter-bash is C code reading foreign bytes; one known input crashes it (:mod:`harness.verl.bashchars`
refuses it before the parser sees it) and others may. :func:`run_isolated` forks, runs the task (the part of
``lint-verl`` / ``import-verl`` that parses the script) in the child under resource limits — address space
(``RLIMIT_AS``: what the process had at the fork plus :data:`MEMORY_BYTES`), CPU time (``RLIMIT_CPU``:
:data:`CPU_S`) — and waits at most :data:`WALL_S` seconds. The child sends its result back as one JSON
document over a pipe (never pickle) and writes nothing else: no file, no output. A child killed by a signal,
out of time or out of memory becomes one :class:`HarnessError` line naming the file (exit 2); a
:class:`HarnessError` the task raises is passed on as it is. Forking costs a few milliseconds (measured in
``tests/unit/test_verl_isolate.py``); the child already holds every module the parent imported.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from harness.errors import EXIT_USAGE, HarnessError

WALL_S = 20.0  # seconds a launcher may take to read (a 256 KiB one built to be slow takes about 4 s)
CPU_S = 20  # CPU seconds of the child (SIGXCPU, then SIGKILL one second later)
MEMORY_BYTES = 2 << 30  # address space the child may add to what it had at the fork
MAX_REPLY_BYTES = 64 << 20  # the JSON the child may send back
REPORT = "report it with the script attached"


def run_isolated(task: Callable[[], Any], file: str, *, wall_s: float = WALL_S, cpu_s: int = CPU_S,
                 memory_bytes: int = MEMORY_BYTES) -> Any:
    """``task()`` run in a forked child; its JSON-able result, or a :class:`HarnessError` naming ``file``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its effects are tested through the parent)
        os.close(r)
        _child(task, w, cpu_s, memory_bytes)
    os.close(w)
    timed_out = True  # until the child's reply says otherwise (an interrupt kills it too)
    try:
        reply, timed_out = _read(r, time.monotonic() + wall_s)
    finally:
        os.close(r)
        status, cpu = _reap(pid, grace_s=0.0 if timed_out else 5.0)
    if timed_out:
        raise HarnessError(f"the bash parser did not finish within {wall_s:g} s", file=file,
                           fix=f"lint a smaller launcher, or {REPORT}")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_s):
            raise HarnessError(f"the bash parser used more than {cpu_s} s of CPU time", file=file,
                               fix=f"lint a smaller launcher, or {REPORT}")
        raise HarnessError(f"the bash parser crashed (signal {sig}) with {_signame(sig)} on this script; nothing "
                           "was written", file=file, fix=f"{REPORT} (characters known to crash it are refused "
                           "up front: harness/verl/bashchars.py)")
    return _decode(reply, file, memory_bytes)


def _child(task: Callable[[], Any], w: int, cpu_s: int, memory_bytes: int) -> None:  # pragma: no cover
    """Run ``task`` with limits, write ``{"ok": result}`` (or the error) to ``w``, and exit without cleanup."""
    try:
        import faulthandler

        faulthandler.disable()  # a crash is reported by the parent, never as a dump on stderr
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _lower(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)
        _lower(resource.RLIMIT_AS, _address_space() + memory_bytes, _address_space() + memory_bytes)
        try:
            out: dict[str, Any] = {"ok": task()}
        except HarnessError as err:
            out = {"error": err.one_line(), "exit_code": err.exit_code}
        except MemoryError:
            out = {"memory": True}
        except RecursionError:
            out = {"internal": "RecursionError: the script nests too deeply"}
        except Exception as err:  # noqa: BLE001 - reported by the parent as one line
            out = {"internal": f"{type(err).__name__}: {err}"}
        try:
            data = json.dumps(out, allow_nan=True).encode("utf-8")
        except MemoryError:
            data = b'{"memory": true}'
        except (TypeError, ValueError) as err:
            data = json.dumps({"internal": f"result not JSON: {err}"}).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
    finally:
        os._exit(0)


def _read(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything the child writes before it closes the pipe, or (what came, True) at the deadline."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), True
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), False
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            return b"", False  # decoded as "no result"
        chunks.append(chunk)


def _reap(pid: int, grace_s: float = 5.0) -> tuple[int, float]:
    """(wait status, CPU seconds) of the child. One that has closed the pipe is exiting and gets ``grace_s``
    to finish; one still running then (or past the deadline) is killed."""
    end = time.monotonic() + grace_s
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage.ru_utime + usage.ru_stime
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return status, usage.ru_utime + usage.ru_stime
        time.sleep(0.002)


def _decode(reply: bytes, file: str, memory_bytes: int) -> Any:
    try:
        out = json.loads(reply.decode("utf-8")) if reply else None
    except (UnicodeDecodeError, ValueError):
        out = None
    if not isinstance(out, dict):
        raise HarnessError("the bash parser ended without a result", file=file, fix=REPORT)
    if "ok" in out:
        return out["ok"]
    if "error" in out:
        code = out.get("exit_code")
        raise HarnessError(str(out["error"]), exit_code=code if isinstance(code, int) else EXIT_USAGE)
    if out.get("memory"):
        raise HarnessError(f"reading this launcher needed more than {memory_bytes >> 20:,} MiB of memory", file=file,
                           fix=f"lint a smaller launcher, or {REPORT}")
    raise HarnessError(f"cannot read this script (internal error: {out.get('internal', '?')})", file=file,
                       fix=REPORT)


def _lower(which: int, soft: int, hard: int) -> None:  # pragma: no cover - in the child
    """Set a limit, never above the one this process already has (raising a hard limit is refused)."""
    _, old_hard = resource.getrlimit(which)
    if old_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, old_hard), min(hard, old_hard)
    resource.setrlimit(which, (soft, hard))


def _address_space() -> int:
    """Bytes of address space this process holds now (VmSize)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 30


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
