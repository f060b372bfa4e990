"""CPU ranks (and ``harness run`` children) forked from one process that has imported torch, transformers and the
model code once.

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

The same machinery forks the ``harness run`` children of record-baseline, the gate and ckpt-resume from a **run
zygote** (:mod:`harness.run.runtime.child`): there a child whose stub is gone stops as on SIGTERM, after its step,
with a checkpoint (its output going to /dev/null), where a rank dies at once (:class:`Kind`).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

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


def stub(path: str, argv: list[str], env: dict[str, str] | None = None,
         fallback: Callable[[list[str]], None] = _in_process) -> None:
    """Have the zygote at ``path`` fork this rank (or run: ``env`` is the environment it gets, default this
    process's) and end as it ends; ``fallback(argv)`` runs it here when there is no zygote."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        body = json.dumps({"argv": argv, "env": dict(os.environ) if env is None else env,
                           "cwd": os.getcwd()}).encode()
        socket.send_fds(sock, [HEADER.pack(len(body))], [0, 1, 2])
        sock.sendall(body)
        answer = _recv_line(sock)
    except (OSError, ValueError):  # ValueError: not the zygote's answer
        answer = None
    if answer is None:  # no zygote, or it failed before forking: this interpreter runs the rank
        sock.close()
        fallback(argv)
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


@dataclass(frozen=True)
class Kind:
    """What a zygote forks: ``main(argv)`` (its exit code) in each child, ``orphaned()`` when the child's stub is
    gone (called from a watcher thread), and whether the child runs the ``atexit`` handlers at its end as an
    interpreter would."""

    name: str
    main: Callable[[list[str]], int | None]
    orphaned: Callable[[], None]
    exit_funcs: bool


def _rank_main(argv: list[str]) -> int | None:
    from harness.run.runtime.rank import main

    return main(argv)


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def rank_kind() -> Kind:
    """torchrun's ranks: a rank whose stub is gone (torchrun killed it) dies at once."""
    return Kind("rank", _rank_main, _kill_self, exit_funcs=False)


def fresh_streams() -> None:
    """Text streams on descriptors 0-2 as a new interpreter makes them: stdout line-buffered only on a terminal,
    stderr line-buffered (the forking process's buffers are not carried over)."""
    streams = {"stdin": io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8"),
               "stdout": io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                          line_buffering=os.isatty(1)),
               "stderr": io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                          errors="backslashreplace", line_buffering=True)}
    for name, stream in streams.items():
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def exit_code(err: SystemExit) -> int:
    """The exit status an interpreter gives ``raise SystemExit(code)`` (a message is printed, status 1)."""
    if err.code is None:
        return 0
    if isinstance(err.code, int):
        return err.code
    sys.stderr.write(f"{err.code}\n")
    return 1


def _forked(conn: socket.socket, request: dict[str, Any], fds: list[int], inherited: list[int], kind: Kind
            ) -> NoReturn:
    """In the forked child: become the stub's rank or run, run it, exit with its code (never returns).
    ``inherited``: the zygote's descriptors this process must not keep (the listener, its wake-up pipe, the other
    children's stubs)."""
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
        if kind.exit_funcs:
            fresh_streams()
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = [sys.argv[0], *request["argv"]]

        def watch() -> None:  # the stub is gone (its caller killed it, or died): so is this child
            try:
                conn.recv(1)
            finally:
                kind.orphaned()

        threading.Thread(target=watch, name="stub-watch", daemon=True).start()
        code = kind.main(list(request["argv"])) or 0
    except SystemExit as err:
        code = exit_code(err)
    except BaseException:  # noqa: BLE001 - a child's uncaught error, printed as the interpreter would print it
        import traceback

        traceback.print_exc()
    finally:
        try:
            if kind.exit_funcs:
                atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _accept(listener: socket.socket, kind: Kind) -> tuple[socket.socket, dict[str, Any], list[int]] | None:
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
        sys.stderr.write(f"{kind.name} zygote: request refused ({err})\n")
        conn.close()  # the stub then runs its child's work itself
        return None


def listen_at(path: str) -> socket.socket:
    """A Unix socket listening at ``path`` (stubs that connect before the zygote serves wait in its backlog)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(256)
    return listener


def serve(listener: socket.socket, load: Callable[[], None], kind: Kind) -> None:
    """``load()`` (the imports), then fork a child per request on ``listener`` until the starter closes this
    process's stdin and no child is left."""
    from harness import numerics

    numerics.apply_env()  # inherited from `harness run` already; set here too when started by hand
    load()
    if threading.active_count() > 1:  # a fork copies only the calling thread: never fork a half-copied state
        raise SystemExit(f"{kind.name} zygote: {threading.active_count()} threads after the imports; its children "
                         "start on their own")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    told: set[str] = set()
    serving = True
    while serving or children:
        ready, _, _ = select.select([listener, wake_r, sys.stdin] if serving else [wake_r], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            serving = False  # the starter is done: no more children will be asked for
        if wake_r in ready:
            os.read(wake_r, 4096)
        if listener in ready:
            got = _accept(listener, kind)
            if got is not None:
                _start(got, children, [listener.fileno(), wake_r, wake_w], told, kind)
        for done, code in reap(children):
            _tell(done, {"exit": code})
            done.close()
    listener.close()


def _start(request: tuple[socket.socket, dict[str, Any], list[int]], children: dict[int, socket.socket],
           inherited: list[int], told: set[str], kind: Kind) -> None:
    """Fork the requested child and tell its stub the pid (``children`` gets it); or, when its environment differs
    from this process's at import time, close the request: the stub then does the work itself."""
    conn, body, fds = request
    differs = import_time_difference(body["env"], dict(os.environ))
    if differs:
        if differs not in told:
            told.add(differs)
            sys.stderr.write(f"{kind.name} zygote: the {kind.name}s' {differs} differs from the zygote's: they run "
                             "in interpreters of their own\n")
        conn.close()
        for fd in fds:
            os.close(fd)
        return
    pid = os.fork()
    if pid == 0:
        _forked(conn, body, fds, [*inherited, *(c.fileno() for c in children.values())], kind)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    _tell(conn, {"pid": pid})  # a stub gone meanwhile: its child sees that and ends


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
            serve(listen_at(sys.argv[2]), lambda: preload(sys.argv[3:]), rank_kind())
        except (OSError, ImportError) as err:  # e.g. a socket path too long for AF_UNIX: the stubs run their ranks
            sys.stderr.write(f"notice: rank zygote at {sys.argv[2]}: {err}; the ranks start as interpreters of their "
                             "own (fix: a shorter TMPDIR)\n")
            raise SystemExit(1) from None
    elif os.environ.get(ENV):
        stub(os.environ[ENV], sys.argv[1:])
    else:
        _in_process(sys.argv[1:])
