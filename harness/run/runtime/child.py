"""`harness run …` in a child process (record-baseline's seeds, the gate, ckpt-resume).

The child imports this checkout's package (its root goes first on PYTHONPATH), so a run made this
way is the same code as the command that made it, installed or not. It does not outlive its parent: a
``record-baseline`` or ``gate`` killed with SIGKILL (which it cannot forward) would otherwise leave its run training
on, unseen, for the rest of its steps. The child asks Linux for a SIGHUP when its parent dies (``PR_SET_PDEATHSIG``):
its output then goes to /dev/null (the pipes its parent read are gone: a write would fail the run with a broken
pipe) and it stops as on SIGTERM, after the step, with a checkpoint and the status ``interrupted``. (Linux sends it
when the *thread* that started the child ends: :func:`harness_run` waits for the child in that thread, whether the
main thread or one of record-baseline's ``--jobs``.)

**Forked runs.** A fresh interpreter spends ~4.5 s (2-core AMD EPYC) importing torch, transformers and the training
code before a run's first step, and record-baseline starts one per seed, the gate three or four per recipe. So the
first :func:`harness_run` of a process starts a **run zygote** (:mod:`harness.run.runtime.zygote`, ``python -m
harness.run.runtime.child --serve FD``, in a session of its own): it imports what every ``harness run`` imports before
its first step (:data:`PRELOAD`; no model family, each run imports its own, so a forked run's resident memory is what
a fresh process's is) and forks one run per request. The child process :func:`harness_run` waits for is then a
**stub** (``python -m harness.run.runtime.child ARGS``, no heavy imports) that hands its arguments, environment,
working directory and standard streams to the zygote, forwards SIGINT / SIGTERM to the forked run and ends as it
ended (exit code or signal). The stub dies with its parent (``PR_SET_PDEATHSIG``, SIGKILL); the forked run, whose
stub is gone, goes to /dev/null and stops as on SIGTERM, as above. Without the zygote (it failed to start, or the
run's environment differs from the zygote's in a variable read at import time) the stub runs ``harness run`` itself;
``HARNESS_RUN_ZYGOTE=off`` in the caller's environment starts plain ``python -m harness run`` processes. The zygote
ends once its starter has exited and its last run has ended.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from harness.paths import ROOT
from harness.run.runtime.prctl import parent_death_signal, set_name

if TYPE_CHECKING:
    from harness.run.runtime.run_args import RunSpec

PARENT_PID = "HARNESS_PARENT_PID"  # set by harness_run for its child, read (and removed) by follow_parent
RUN_ZYGOTE = "HARNESS_RUN_ZYGOTE"  # the run zygote's socket for the stubs; "off" in the caller's environment: none
CLOSE_WAIT_S = 10.0  # at this process's exit: how long to wait for the zygote (its last run may still be stopping)
# What every `harness run` imports before its first step, whatever its model (the zygote's imports; names, not
# imports of this module: the command line sits above this layer).
PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "harness.cli", "harness.commands.run",
           "harness.run.runner", "harness.core.trainer")


def harness_run(spec: RunSpec, *, env: dict[str, str] | None = None, **kwargs: Any
                ) -> subprocess.CompletedProcess[str]:
    """Run ``harness run`` with ``spec``'s arguments to completion; ``env`` adds variables, ``kwargs`` go to
    subprocess.run. A CPU run (the cpu profile, ``--simulate``) is forked by this process's run zygote; an
    accelerator's starts as an interpreter of its own (a CUDA or NPU runtime must not be initialised in a process
    that forks)."""
    from harness import numerics

    args = spec.run_args()
    base = numerics.pinned({**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                                     os.environ.get("PYTHONPATH")]))})
    full_env = {**base, PARENT_PID: str(os.getpid()), **(env or {})}
    path = _zygote(base) if _on_cpu(spec) else None
    if path is None:
        cmd = [sys.executable, "-m", "harness", "run", *args]
    else:
        cmd = [sys.executable, "-m", "harness.run.runtime.child", *args]
        full_env[RUN_ZYGOTE] = path
    return subprocess.run(cmd, env=full_env, text=True, check=False, **kwargs)


def _on_cpu(spec: RunSpec) -> bool:
    from harness.config.profiles import load_profile
    from harness.errors import HarnessError

    try:
        return spec.simulate or load_profile(spec.profile).get("device_type") == "cpu"
    except HarnessError:  # the run reports it
        return False


HOME_PREFIX = "harness-runs-"  # the run zygote's private directory (its socket)


class _Zygote:
    """This process's run zygote: listening on a socket in a private directory before it starts (a stub that
    connects while it imports waits in the backlog); stopped when this process exits (it ends after its last run)."""

    def __init__(self, env: dict[str, str]) -> None:
        from harness.run.runtime.zygote import listen_at

        self.home = tempfile.mkdtemp(prefix=HOME_PREFIX)
        self.path = os.path.join(self.home, "socket")
        try:
            listener = listen_at(self.path)
        except OSError:
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        try:  # (an OSError here: no zygote, the caller's notice says why)
            self.proc = subprocess.Popen([sys.executable, "-m", "harness.run.runtime.child", "--serve",
                                          str(listener.fileno())], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         env={k: v for k, v in env.items() if k != RUN_ZYGOTE},
                                         pass_fds=[listener.fileno()], start_new_session=True)
        finally:
            listener.close()  # the zygote holds it now: when the zygote is gone, a stub's connect fails at once
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # no more runs will be asked for: it ends after its last one
        try:  # reaped here (its and its runs' CPU time count as this process's children's), unless a run goes on
            self.proc.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.home, ignore_errors=True)


_ZYGOTE: list[_Zygote | None] = []  # [] not started yet; [None]: none for this process
_LOCK = threading.Lock()


def _zygote(env: dict[str, str]) -> str | None:
    """The socket of this process's run zygote (started on first use), or None: ``HARNESS_RUN_ZYGOTE=off``, not
    Linux, or it could not start (e.g. a socket path too long for TMPDIR)."""
    with _LOCK:
        if not _ZYGOTE:
            zygote = None
            if os.environ.get(RUN_ZYGOTE) != "off" and sys.platform.startswith("linux"):
                try:
                    zygote = _Zygote(env)
                except OSError as err:
                    sys.stderr.write(f"notice: no run zygote ({err}): each run imports for itself\n")
            _ZYGOTE.append(zygote)
        return _ZYGOTE[0].path if _ZYGOTE[0] is not None else None


def _parent_gone(parent: str) -> None:
    sys.stderr.write(f"error: {PARENT_PID}: the process that started this run (pid {parent}) has ended (fix: "
                     f"start the run again; a run started by hand must not have {PARENT_PID} set)\n")
    raise SystemExit(128 + signal.SIGTERM)


def follow_parent() -> None:
    """In a child that :func:`harness_run` started: stop this process when its parent dies (:func:`_orphaned`);
    exit at once if the parent is already gone. The variable is removed, so this process's own children (torchrun's
    ranks) do not mistake their parent for it. Elsewhere than Linux nothing is armed (the child then outlives a
    killed parent)."""
    parent = os.environ.pop(PARENT_PID, None)
    if not parent or not sys.platform.startswith("linux"):
        return
    old = signal.signal(signal.SIGHUP, _orphaned)
    if not parent_death_signal(signal.SIGHUP):
        signal.signal(signal.SIGHUP, old)
    elif str(os.getppid()) != parent:  # the parent died before the signal was armed
        _parent_gone(parent)


def _orphaned(signum: int, frame: Any) -> None:
    """The parent died: the pipes it read are gone, so stdout and stderr go to /dev/null from now on, and the run
    stops as it does on SIGTERM."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.kill(os.getpid(), signal.SIGTERM)


# ----------------------------------------------------------------------------------------------- stub and zygote
def _run_here(argv: list[str]) -> None:
    """This interpreter runs ``harness run ARGV`` as ``python -m harness run ARGV`` would (raises SystemExit)."""
    import runpy

    sys.argv = [str(ROOT / "harness" / "__main__.py"), "run", *argv]
    runpy.run_module("harness", run_name="__main__", alter_sys=True)


def _run_forked(argv: list[str]) -> None:
    """In a forked child of the zygote: ``harness run ARGV``, named ``harness-run`` (``ps``, ``pgrep``); raises
    SystemExit with the command's code, as the entry point does."""
    set_name("harness-run")
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
    _run_here(argv)


def _stub(argv: list[str]) -> None:
    """Have the zygote named by ``HARNESS_RUN_ZYGOTE`` fork ``harness run ARGV`` and end as it ends; run it here
    without one. The stub dies with its parent (SIGKILL): the forked run then stops by itself."""
    from harness.run.runtime import zygote

    path = os.environ.pop(RUN_ZYGOTE, "")
    parent = os.environ.get(PARENT_PID)
    if not path or not parent or not parent_death_signal(signal.SIGKILL):
        _run_here(argv)
        return
    if str(os.getppid()) != parent:
        _parent_gone(parent)
    env = {k: v for k, v in os.environ.items() if k != PARENT_PID}  # the forked run's parent is the zygote
    zygote.stub(path, argv, env=env, fallback=_run_here)


def _preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)


def _serve(fd: int) -> None:
    """The run zygote on the listening socket ``fd`` (made by :class:`_Zygote`)."""
    import socket

    from harness.run.runtime import zygote

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a session of its own, ended by its starter closing stdin
    kind = zygote.Kind("run", _run_forked, lambda: _orphaned(signal.SIGHUP, None), exit_funcs=True)
    listener = socket.socket(fileno=fd)
    path = listener.getsockname()
    try:
        zygote.serve(listener, _preload, kind)
    finally:
        _remove_home(path)


def _remove_home(path: object) -> None:
    """The socket and its private directory (:class:`_Zygote`'s ``home``), when the starter could not remove them
    (killed: its ``atexit`` never ran). Only a ``harness-runs-*`` directory, and only once it is empty."""
    if not isinstance(path, str) or not os.path.basename(os.path.dirname(path)).startswith(HOME_PREFIX):
        return
    for remove, target in ((os.unlink, path), (os.rmdir, os.path.dirname(path))):
        try:
            remove(target)
        except OSError:  # gone already (the starter's close), or not empty: left as it is
            return


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(int(sys.argv[2]))
    else:
        _stub(sys.argv[1:])
