"""The tests' ``harness`` commands, forked from a process that has imported torch, transformers and the harness once.

A ``python -m harness`` process of a test pass spends its first seconds importing (~5 CPU-s for one that loads torch
and transformers on a 2-core AVX2 EPYC), and a pass starts ~190 of them. :func:`run` is ``subprocess.run([python, -m,
harness, *args], capture_output=True, text=True)`` with the same result, from a server per pytest worker that has done
those imports once: the server applies the numerics pin first (as the entry point does), imports, then forks one child
per command. The child takes the request's arguments, environment, working directory and standard streams, makes its
own process group, runs :func:`harness.cli.main` as ``python -m harness`` does (exit code, ``SystemExit``, ``atexit``
handlers) and exits; the server reports the exit status.

A command runs as a real ``python -m harness`` process instead (same arguments and result) when its environment
differs from the server's in a variable a library reads while it loads (the numerics pin, OpenMP/MKL settings,
``PYTHON*``, ``HARNESS_ROOT`` …: :data:`IMPORT_TIME_PREFIXES`), when the server cannot be started, or when
``HARNESS_TEST_FORK=0``. Tests that signal a run, or check the entry point itself, start their own processes.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from harness.run.runtime import zygote

ROOT = Path(__file__).resolve().parents[1]
# The rank zygote's list (harness.run.runtime.zygote), and TORCH* / CUDA*: torchrun sets some per worker, but a test's
# `harness` command is no rank, and a test that sets one means it to be read when torch loads.
IMPORT_TIME_PREFIXES = (*zygote.IMPORT_TIME_PREFIXES, "TORCH", "CUDA")
START_TIMEOUT_S = 300.0
# Modules every training command (run, record-baseline's seeds, certify) imports anyway, loaded once by the server.
# Nothing more: a forked child's resident memory, which a CPU run's memory check reads, must be a real process's.
PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe",
           "harness.cli", "harness.commands.run", "harness.run.runner", "harness.core.trainer")


def _mismatch(env: dict[str, str], server_env: dict[str, str]) -> str | None:
    """The first variable read at import time on which ``env`` and the server's environment differ, else None."""
    return zygote.import_time_difference(env, server_env, IMPORT_TIME_PREFIXES)


# ----------------------------------------------------------------------------------------------- the server
def serve(path: str, parent: int) -> None:
    from harness import numerics

    numerics.apply_env()  # before torch loads, as the entry point does
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import transformers

    getattr(transformers, "Qwen2VLImageProcessorPil", None)  # the image processor's lazy modules (harness.core.vision)
    import threading

    if threading.active_count() > 1:  # a fork copies only the calling thread: refuse rather than fork a broken state
        raise SystemExit(f"fork server: {threading.active_count()} threads after the imports")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while os.getppid() == parent:  # the worker that started it is gone: so is the server
        ready, _, _ = select.select([listener, wake_r], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
        if listener in ready:
            conn, _ = listener.accept()
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 22, 3)
            pid = os.fork()
            if pid == 0:
                listener.close()
                for fd in (wake_r, wake_w):
                    os.close(fd)
                _child(conn, json.loads(msg), fds)  # never returns
            for fd in fds:
                os.close(fd)
            conn.send(f"{pid}".encode())
            waiting[pid] = conn
        for conn, code in zygote.reap(waiting):  # the product's rank zygote reaps its children the same way
            with contextlib.suppress(OSError):
                conn.send(f"{code}".encode())
            conn.close()


def _child(conn: socket.socket, req: dict[str, Any], fds: list[int]) -> None:
    code = 1
    try:
        conn.close()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)  # as CPython starts
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setpgid(0, 0)  # the caller's time limit stops this command and whatever it started
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        zygote.fresh_streams()  # on the request's descriptors, as a new interpreter makes them
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = [str(ROOT / "harness" / "__main__.py"), *req["args"]]
        sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
        from harness.cli import main

        code = main(req["args"])
    except SystemExit as exc:
        code = zygote.exit_code(exc)
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then exit 1
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


# ----------------------------------------------------------------------------------------------- the client
class _Server:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="harness-fork-")
        self.path = os.path.join(self.dir, "sock")
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, __file__, self.path, str(os.getpid())], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, cwd=self.dir)
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready and self.proc.stdout else ""
        if line.strip() != "ready":
            self.close()
            raise RuntimeError(f"fork server did not start (exit {self.proc.poll()})")
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


_SERVER: list[_Server | None] = []  # [] untried; [None] failed to start


def start() -> _Server | None:
    """This worker's server, started on first use (None where it cannot start, or ``HARNESS_TEST_FORK=0``)."""
    if os.environ.get("HARNESS_TEST_FORK", "1") == "0":
        return None
    if not _SERVER:
        try:
            _SERVER.append(_Server())
        except (OSError, RuntimeError) as err:
            sys.stderr.write(f"forkserver: {err}; commands run as their own processes\n")
            _SERVER.append(None)
    return _SERVER[0]


def _text(f: Any) -> str:
    f.seek(0)
    return io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline=None).read()


def run(args: list[str] | tuple[str, ...], *, cwd: str | Path, env: dict[str, str], timeout: float
        ) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=cwd, env=env,
    timeout=timeout, stdin=subprocess.DEVNULL)``, through the worker's fork server where the environment allows
    (module docstring)."""
    argv = [sys.executable, "-m", "harness", *args]
    server = start()
    if server is None or _mismatch(env, server.env) is not None:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                              stdin=subprocess.DEVNULL)
        proc.forked = False  # type: ignore[attr-defined]  # (tests/integration/test_forkserver.py)
        return proc
    with open(os.devnull, "rb") as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(server.path)
        req = {"args": list(args), "cwd": str(cwd), "env": dict(env)}
        socket.send_fds(conn, [json.dumps(req).encode()], [stdin.fileno(), out.fileno(), err.fileno()])
        pid = int(conn.recv(64))
        conn.settimeout(timeout)
        try:
            reply = conn.recv(64)
        except (TimeoutError, socket.timeout):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            conn.settimeout(60)
            with contextlib.suppress(OSError, ValueError):
                conn.recv(64)
            raise subprocess.TimeoutExpired(argv, timeout, output=_text(out), stderr=_text(err)) from None
        if not reply:
            raise RuntimeError(f"the fork server ended while running {argv[3:]}")
        proc = subprocess.CompletedProcess(argv, int(reply), _text(out), _text(err))
        proc.forked = True  # type: ignore[attr-defined]
        return proc


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    serve(sys.argv[1], int(sys.argv[2]))
