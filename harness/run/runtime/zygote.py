"""CPU ranks forked from one process that has imported torch, transformers and the model code once.

A fresh interpreter spends its first ~4.5 s (2-core AMD EPYC) importing what a rank needs before it does anything:
most of a short CPU rank's work, paid by every rank (16 of them for a simulated 16-NPU node). For the cpu profile and
``--simulate``, :func:`harness.run.runtime.torchrun.launch` therefore starts a **zygote** beside torchrun
(``python -m harness.run.runtime.zygote --serve SOCKET RANK-ARGS``): it listens on a Unix socket in a private
directory, makes those imports (the recipe's model family included), and forks one child per request.

torchrun itself is unchanged: its workers are ``python -m harness.run.runtime.zygote RANK-ARGS``, a **stub** that
imports nothing heavy, sends its arguments, environment (torchrun's ``RANK``, ``WORLD_SIZE``,
``TORCHELASTIC_ERROR_FILE`` …), working directory and standard streams to the zygote, forwards SIGINT / SIGTERM to
the forked rank, and ends as the rank ended: the same exit code, or killed by the same signal. torchrun's monitoring,
failure report and error files see what they saw with the rank as its own process. The forked rank names itself
``harness-rank-N`` and dies with its stub (a killed stub leaves no rank behind). Without ``HARNESS_RANK_ZYGOTE``, or
when the zygote is gone or fails before answering, the stub runs the rank in its own interpreter instead;
``HARNESS_RANK_ZYGOTE=off`` in the launcher's environment starts no zygote (every rank imports for itself).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from typing import Any

ENV = "HARNESS_RANK_ZYGOTE"  # the zygote's socket, set by the launcher for torchrun's workers
HEADER = struct.Struct("!I")  # the request's length, sent with the three standard streams
MAX_REQUEST = 4 * 1024 * 1024


# ----------------------------------------------------------------------------------------------- the stub
def _recv_line(sock: socket.socket) -> dict[str, Any] | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
    return dict(json.loads(data))


def _in_process(argv: list[str]) -> None:
    from harness.run.runtime.rank import exit_now, main

    exit_now(main(argv) or 0)


def stub(path: str, argv: list[str]) -> None:
    """Have the zygote at ``path`` fork this rank and end as it ends; run it here when there is no zygote."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(sock, [HEADER.pack(len(body))], [0, 1, 2])
        sock.sendall(body)
        answer = _recv_line(sock)
    except (OSError, ValueError):  # ValueError: not the zygote's answer
        answer = None
    if answer is None:  # no zygote, or it failed before forking: this interpreter runs the rank
        sock.close()
        _in_process(argv)
        return
    pid = int(answer["pid"])

    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    status = _recv_line(sock)
    code = int(status["exit"]) if status else 1  # the zygote vanished: the rank went with it
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:  # killed by a signal: end the same way, so that torchrun reports that signal
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be handled, so need no reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


# ----------------------------------------------------------------------------------------------- the zygote
PRELOAD = ("torch", "torch.distributed.fsdp", "transformers", "transformers.modeling_utils",
           "harness.run.runtime.rank", "harness.run.runner", "harness.core.trainer", "harness.core.parallel")
FAMILY_MODULES = {"qwen3": "transformers.models.qwen3.modeling_qwen3",
                  "qwen3_moe": "transformers.models.qwen3_moe.modeling_qwen3_moe",
                  "qwen3_vl_moe": "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"}


def preload(rank_argv: list[str]) -> None:
    """Import what every rank imports before its first step, and the model code of the recipe's family (what a rank
    would not import is left out: a forked rank's resident memory stays a real process's)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from harness.config.recipe import resolve
    from harness.errors import HarnessError
    from harness.run.runtime.rank import parser

    try:
        args = parser().parse_args(rank_argv)
        family = resolve(args.recipe, args.profile, args.scale, tuple(args.overrides)).spec.model.family
    except (HarnessError, SystemExit):  # the ranks report it themselves
        return
    if family in FAMILY_MODULES:
        importlib.import_module(FAMILY_MODULES[family])


# Variables a CPU library reads while it loads (OpenMP's thread count, oneMKL's branch, the numerics pin, the
# allocator, Python's own): a rank whose environment differs from the zygote's in one of them would not be what a
# fresh interpreter makes, so it runs in its stub's interpreter instead. torchrun's per-worker variables (RANK,
# TORCHELASTIC_*, ...) and those torch sets for itself on first use (TORCHINDUCTOR_CACHE_DIR) are read later.
IMPORT_TIME_PREFIXES = ("PYTHON", "OMP_", "KMP_", "GOMP_", "MKL_", "ATEN_", "ONEDNN_", "DNNL_", "OPENBLAS", "NUMEXPR",
                        "MALLOC", "LD_", "HF_", "TRANSFORMERS", "TOKENIZERS", "HARNESS_CPU_ISA", "HARNESS_ROOT")


def import_time_difference(env: dict[str, str], own: dict[str, str],
                           prefixes: tuple[str, ...] = IMPORT_TIME_PREFIXES) -> str | None:
    """The first variable read at import time (a name starting with one of ``prefixes``) on which ``env`` and
    ``own`` differ, else None."""
    for key in sorted({k for k in (*env, *own) if k.startswith(prefixes)}):
        if env.get(key) != own.get(key):
            return key
    return None


def _rank_child(conn: socket.socket, request: dict[str, Any], fds: list[int], inherited: list[int]) -> None:
    """In the forked child: become the stub's rank, run it, exit with its code (never returns). ``inherited``: the
    zygote's descriptors this process must not keep (the listener, its wake-up pipe, the other ranks' stubs)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for fd in inherited:
            os.close(fd)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = [sys.argv[0], *request["argv"]]

        def orphaned() -> None:  # the stub is gone (torchrun killed it): so is its rank
            try:
                conn.recv(1)
            finally:
                os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=orphaned, name="stub-watch", daemon=True).start()
        from harness.run.runtime.rank import main

        code = main(list(request["argv"])) or 0
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
        if isinstance(err.code, str):
            sys.stderr.write(err.code + "\n")
    except BaseException:  # noqa: BLE001 - a rank's uncaught error, printed as the interpreter would print it
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _accept(listener: socket.socket) -> tuple[socket.socket, dict[str, Any], list[int]] | None:
    conn, _ = listener.accept()
    try:
        head, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
        if len(head) != HEADER.size or len(fds) != 3:
            raise ValueError("a request without its header and three streams")
        (size,) = HEADER.unpack(head)
        if size > MAX_REQUEST:
            raise ValueError(f"a request of {size} bytes")
        body = b""
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise ValueError("a truncated request")
            body += chunk
        request = json.loads(body)
        if not (isinstance(request, dict) and isinstance(request.get("argv"), list) and isinstance(request.get("cwd"), str)
                and isinstance(request.get("env"), dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())):
            raise ValueError("a request without argv, env and cwd")
        return conn, request, fds
    except (OSError, ValueError) as err:  # json's errors are ValueErrors
        sys.stderr.write(f"rank zygote: request refused ({err})\n")
        conn.close()  # the stub then runs its rank itself
        return None


def serve(path: str, rank_argv: list[str]) -> None:
    """Listen at ``path`` at once (stubs that connect meanwhile wait), preload, then fork a rank per request until
    the launcher closes this process's stdin and no rank is left."""
    from harness import numerics

    numerics.apply_env()  # inherited from `harness run` already; set here too when started by hand
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(256)
    preload(rank_argv)
    if threading.active_count() > 1:  # a fork copies only the calling thread: never fork a half-copied state
        raise SystemExit(f"rank zygote: {threading.active_count()} threads after the imports; ranks start on their own")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    ranks: dict[int, socket.socket] = {}
    told: set[str] = set()
    serving = True
    while serving or ranks:
        ready, _, _ = select.select([listener, wake_r, sys.stdin] if serving else [wake_r], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            serving = False  # the launcher is done: no more ranks will ask
        if wake_r in ready:
            os.read(wake_r, 4096)
        if listener in ready:
            got = _accept(listener)
            if got is not None:
                _start(got, ranks, [listener.fileno(), wake_r, wake_w], told)
        for done, code in reap(ranks):
            _tell(done, {"exit": code})
            done.close()
    listener.close()


def _start(request: tuple[socket.socket, dict[str, Any], list[int]], ranks: dict[int, socket.socket],
           inherited: list[int], told: set[str]) -> None:
    """Fork the requested rank and tell its stub the pid (``ranks`` gets it); or, when its environment differs from
    this process's at import time, close the request: the stub then runs the rank itself."""
    conn, body, fds = request
    differs = import_time_difference(body["env"], dict(os.environ))
    if differs:
        if differs not in told:
            told.add(differs)
            sys.stderr.write(f"rank zygote: the ranks' {differs} differs from the zygote's: they run in interpreters "
                             "of their own\n")
        conn.close()
        for fd in fds:
            os.close(fd)
        return
    pid = os.fork()
    if pid == 0:
        _rank_child(conn, body, fds, [*inherited, *(c.fileno() for c in ranks.values())])
    for fd in fds:
        os.close(fd)
    ranks[pid] = conn
    _tell(conn, {"pid": pid})  # a stub gone meanwhile: its rank sees that and ends


def reap(children: dict[int, socket.socket]) -> Iterator[tuple[socket.socket, int]]:
    """Each child in ``children`` (pid -> its client's connection) that has ended, removed from it: (connection, exit
    code as :func:`os.waitstatus_to_exitcode` gives it: minus the signal for a killed one). Never blocks."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            yield children.pop(pid), os.waitstatus_to_exitcode(status)


def _tell(conn: socket.socket, message: dict[str, int]) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:  # the stub has gone
        pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        try:
            serve(sys.argv[2], sys.argv[3:])
        except (OSError, ImportError) as err:  # e.g. a socket path too long for AF_UNIX: the stubs run their ranks
            sys.stderr.write(f"notice: rank zygote at {sys.argv[2]}: {err}; the ranks start as interpreters of their "
                             "own (fix: a shorter TMPDIR)\n")
            raise SystemExit(1) from None
    elif os.environ.get(ENV):
        stub(os.environ[ENV], sys.argv[1:])
    else:
        _in_process(sys.argv[1:])
