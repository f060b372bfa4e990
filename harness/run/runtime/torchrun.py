"""`--runtime torchrun`: launch one process per device with torchrun (c10d rendezvous).

Single node: ``--nproc-per-node`` from the resolved recipe (``trainer.n_gpus_per_node``; on the
cpu profile ``--nproc-per-node`` may set the process count). Multi-node: every node runs the
same command with ``NNODES``, ``NODE_RANK`` (or Slurm's ``SLURM_NNODES`` / ``SLURM_NODEID``) and
``HARNESS_RDZV_ENDPOINT=host:port`` set; :func:`sbatch_script` writes a Slurm script doing
exactly that. A failed rank fails the whole job (``--max-restarts 0``); its error is written
into the run's manifest and reported in one line. ``--resume`` reaches the ranks as ``--resume``
(continue the run in ``--out``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.config.recipe import Resolved
from harness.errors import EXIT_FINDINGS, HarnessError
from harness.jsonio import load_json_strict, write_json_atomic, write_text_atomic
from harness.paths import RECIPES_DIR
from harness.run.checkpoint import interrupt_exit_code
from harness.run.plan import RunPlan
from harness.run.rundir import MARKER, utc_now
from harness.run.runtime.run_args import RunSpec, set_args
from harness.run.runtime.zygote import ENV as ZYGOTE_ENV


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_layout(res: Resolved, nproc_override: int | None = None) -> dict[str, object]:
    """nnodes, node rank, processes per node and the rendezvous endpoint for this node."""
    nnodes = int(os.environ.get("NNODES") or os.environ.get("SLURM_NNODES") or res.spec.trainer.nnodes)
    node_rank = int(os.environ.get("NODE_RANK") or os.environ.get("SLURM_NODEID") or 0)
    nproc = int(nproc_override or res.spec.trainer.n_gpus_per_node)
    if nproc_override and res.hardware.device_type != "cpu" and nproc_override != res.spec.trainer.n_gpus_per_node:
        raise HarnessError("--nproc-per-node may only differ from trainer.n_gpus_per_node on the cpu profile",
                           key_path="--nproc-per-node", fix="drop it; the recipe's profile settings decide")
    if nnodes != res.spec.trainer.nnodes:
        raise HarnessError(f"{nnodes} nodes in the environment but the recipe says trainer.nnodes="
                           f"{res.spec.trainer.nnodes}", key_path="NNODES",
                           fix="launch on as many nodes as the recipe's profile settings ask for")
    endpoint = os.environ.get("HARNESS_RDZV_ENDPOINT")
    if not endpoint:
        if nnodes > 1 and not res.simulation:  # simulated nodes are launchers on this machine
            raise HarnessError("multi-node runs need HARNESS_RDZV_ENDPOINT=host:port (the rendezvous host)",
                               key_path="HARNESS_RDZV_ENDPOINT", fix="export it on every node (see `harness slurm`)")
        endpoint = f"127.0.0.1:{_free_port()}"
    return {"nnodes": nnodes, "node_rank": node_rank, "nproc": nproc, "endpoint": endpoint}


def forked_ranks(res: Resolved) -> bool:
    """CPU ranks (the cpu profile, ``--simulate``) are forked by a zygote after one set of imports
    (:mod:`harness.run.runtime.zygote`); accelerator ranks start as fresh interpreters (a CUDA or NPU runtime must
    not be initialised in a process that forks, and a rank's imports are a small part of a GPU run)."""
    return res.simulation is not None or res.hardware.device_type == "cpu"


def torchrun_command(res: Resolved, args: Any, run_dir: Path, layout: dict[str, object]) -> list[str]:
    """``args``: what to run (a :class:`~harness.run.plan.RunPlan`: steps, overrides, quiet, resume)."""
    worker = "harness.run.runtime.zygote" if forked_ranks(res) else "harness.run.runtime.rank"
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={layout['nnodes']}",
           f"--nproc-per-node={layout['nproc']}", f"--node-rank={layout['node_rank']}", "--rdzv-backend=c10d",
           f"--rdzv-endpoint={layout['endpoint']}", f"--rdzv-id={run_dir.name}", "--max-restarts=0",
           "--monitor-interval=1", "-m", worker]
    spec = RunSpec(str(Path(res.path).resolve()), res.profile_name, res.scale, out=str(run_dir),
                   steps=getattr(args, "steps", None), overrides=tuple(getattr(args, "overrides", []) or []),
                   quiet=bool(getattr(args, "quiet", False)),
                   resume=str(run_dir) if getattr(args, "resume", None) is not None else None,
                   simulate=res.simulation is not None,
                   nnodes=int(res.simulation["nnodes"]) if res.simulation else None)
    replay = args.replay if isinstance(args, RunPlan) else None  # a plan may replay a baseline's rollouts
    return cmd + spec.rank_args(str(replay) if replay else None)  # --resume: continue the run in --out


_FAIL = re.compile(r"^\s*rank\s*:\s*(\d+)\b.*\n\s*exitcode\s*:\s*(-?\d+)", re.M)


def _exit(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"code {code}"


def _reports(output: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(root cause, the other failed ranks) as (rank, exit code) pairs from torchrun's report."""
    head, _, root = output.rpartition("Root Cause")
    first = _FAIL.findall(root) if head else []
    return first, [f for f in _FAIL.findall(head if head else output) if f not in first]


def stopped_by_signal(output: str, forwarded: bool) -> bool:
    """The ranks stopped on request (a signal sent here, or every first-failing rank exiting 130/143).

    Not when another rank died first: torchrun's agent then SIGTERMs the survivors, which also
    report 'interrupted'.
    """
    first, _ = _reports(output)
    return forwarded or (bool(first) and all(int(c) in (128 + signal.SIGINT, 128 + signal.SIGTERM) for _, c in first))


def failure_summary(output: str) -> str:
    """One line naming the failed rank(s) and why, from torchrun's failure report and rank errors.

    torchrun's report lists the root cause (the first rank to fail) after the others; the root
    cause comes first here, the ranks the agent then stopped after it.
    """
    first, others = _reports(output)
    parts = [f"rank {r} exited with {_exit(int(c))} (first failure)" for r, c in first]
    parts += [f"rank {r} exited with {_exit(int(c))}" for r, c in others]
    parts += [line.strip() for line in output.splitlines() if line.startswith("error: rank")][:1]
    return "; ".join(parts) or "torchrun failed (no rank report)"


def _rank_pids(pid: int) -> list[int]:
    """The torchrun agent's children (the ranks), from /proc; empty when unknown."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def launch(res: Resolved, args: Any, run_dir: Path) -> None:
    """Run torchrun; SIGINT / SIGTERM go straight to the ranks, which stop after the step with a checkpoint.

    torchrun runs in its own session, so a terminal's Ctrl-C reaches only this process: the agent
    itself would give the ranks just 30 s before killing them.
    """
    layout = node_layout(res, getattr(args, "nproc_per_node", None))
    cmd = torchrun_command(res, args, run_dir, layout)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TORCHELASTIC_ERROR_FILE": str(run_dir / "rank-error.json")}
    run_dir.mkdir(parents=True, exist_ok=True)
    with rank_zygote(res, cmd, env):
        _launch(res, args, run_dir, layout, cmd, env)


@contextmanager
def rank_zygote(res: Resolved, cmd: list[str], env: dict[str, str]) -> Iterator[None]:
    """For forked ranks: the zygote (:mod:`harness.run.runtime.zygote`) on a socket in a private directory, named to
    torchrun's workers in ``env``; stopped when the launchers are done (its ranks have ended by then)."""
    if not forked_ranks(res) or os.environ.get(ZYGOTE_ENV) == "off":  # off: every rank imports for itself
        yield
        return
    home = tempfile.mkdtemp(prefix="harness-zygote-")
    path = os.path.join(home, "socket")
    rank_args = cmd[cmd.index("harness.run.runtime.zygote") + 1:]
    zygote = subprocess.Popen([sys.executable, "-m", "harness.run.runtime.zygote", "--serve", path, *rank_args],
                              stdin=subprocess.PIPE, env=env, start_new_session=True)
    env[ZYGOTE_ENV] = path
    try:
        yield
    finally:
        assert zygote.stdin is not None
        zygote.stdin.close()  # no more ranks: the zygote ends once its last rank has
        try:
            zygote.wait(timeout=30)
        except subprocess.TimeoutExpired:
            zygote.kill()
            zygote.wait()
        shutil.rmtree(home, ignore_errors=True)


def _launch(res: Resolved, args: Any, run_dir: Path, layout: dict[str, object], cmd: list[str],
            env: dict[str, str]) -> None:
    others = simulated_nodes(res, args, run_dir, layout, env)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)

    forwarded: list[int] = []

    def forward(signum: int, frame: object) -> None:
        forwarded.append(signum)
        for pid in _rank_pids(proc.pid) or [proc.pid]:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if threading.current_thread() is threading.main_thread() else {}
    captured: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            captured.append(line)
            sys.stderr.write(line)
        code = proc.wait()
        if code == 0:
            code = _wait_nodes(others, run_dir, captured)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for other in others:
            if other.poll() is None:
                os.killpg(other.pid, signal.SIGTERM)
    if code == 0:
        return
    output = "".join(captured)
    summary = failure_summary(output)
    manifest_path = run_dir / "manifest.json"
    if manifest_path.is_file():
        manifest = load_json_strict(manifest_path)
        if manifest.get("status") == "interrupted" and stopped_by_signal(output, bool(forwarded)):
            error = manifest.get("error") or "interrupted"
            raise HarnessError(error, exit_code=interrupt_exit_code(error))
        if manifest.get("status") in ("running", "failed", "interrupted"):
            # the launcher knows which rank died; rank 0 may only have seen its collective fail, or
            # (status 'interrupted' with no signal sent here) the SIGTERM torchrun sends the survivors
            seen = manifest.get("error")
            error = summary if not seen or seen == summary else f"{summary}; rank 0 saw: {seen}"
            manifest.update(status="failed", finished_utc=manifest.get("finished_utc") or utc_now(), error=error)
            write_json_atomic(manifest_path, manifest)
    write_text_atomic(run_dir / MARKER, "this run has not finished cleanly\n")
    raise HarnessError(f"distributed run failed: {summary}", file=str(run_dir),
                       fix="see the rank output above", exit_code=EXIT_FINDINGS)


def simulated_nodes(res: Resolved, args: Any, run_dir: Path, layout: dict[str, object],
                    env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    """``--simulate`` of a multi-node profile: the launchers of nodes 1.. on this machine, as each node would
    start its own (same rendezvous endpoint, ``--node-rank`` i); their output goes to ``node-<i>.log``."""
    if res.simulation is None or int(str(layout["nnodes"])) == 1:
        return []
    procs = []
    for node in range(1, int(str(layout["nnodes"]))):
        with open(run_dir / f"node-{node}.log", "wb") as log:
            procs.append(subprocess.Popen(torchrun_command(res, args, run_dir, {**layout, "node_rank": node}),
                                          stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    return procs


def _wait_nodes(procs: list[subprocess.Popen[bytes]], run_dir: Path, captured: list[str]) -> int:
    """Wait for the other simulated nodes' launchers; the first failing one's exit code, with its log added to
    ``captured`` and shown (its rank report names the failed rank)."""
    for node, proc in enumerate(procs, 1):
        if proc.wait():
            text = (run_dir / f"node-{node}.log").read_text(errors="replace")
            sys.stderr.write(text)
            captured.append(text)
            return proc.returncode
    return 0


def sbatch_script(res: Resolved, *, steps: int | None, out: str, partition: str | None, time_limit: str) -> str:
    """A Slurm batch script: one task per node, each running the harness's torchrun launcher."""
    t = res.spec.trainer
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=grpo-{res.name}",
        f"#SBATCH --nodes={t.nnodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={t.n_gpus_per_node}" if res.hardware.device_type == "cuda" else
        "# accelerators: the Ascend node's NPUs are visible to the task (no --gpus-per-node)",
        f"#SBATCH --time={time_limit}",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    shipped = RECIPES_DIR / f"{res.name}.json"
    recipe = res.name if shipped.is_file() and shipped.resolve() == Path(res.path).resolve() else str(res.path)
    args = RunSpec(recipe, res.profile_name, res.scale, out=out, steps=steps, overrides=set_args(res.overrides),
                   runtime="torchrun", stage="train").run_args()
    inner = "NODE_RANK=$SLURM_NODEID harness run " + " ".join(shlex.quote(a) for a in args)
    lines += [
        "set -euo pipefail",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'export HARNESS_RDZV_ENDPOINT="${head_node}:29500"',
        "export NNODES=$SLURM_NNODES",
        f"srun --ntasks-per-node=1 bash -c {shlex.quote(inner)}",
        f"harness compare {shlex.quote(out)}",
    ]
    return "\n".join(lines) + "\n"
