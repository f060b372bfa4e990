"""The torchrun launcher's pure parts: node layout, command line, Slurm script, failure summary."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from harness.config.recipe import resolve
from harness.errors import HarnessError
from harness.run.runtime import torchrun


def _args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(steps=kw.get("steps"), overrides=kw.get("overrides", []), quiet=True)


def test_sbatch_script_text() -> None:
    res = resolve("qwen3_vl_30b", "gpu-8x-h200-141g", "full")
    text = torchrun.sbatch_script(res, steps=5, out="runs/vl-full", partition="gpu", time_limit="02:00:00")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --gpus-per-node=8" in lines
    assert "#SBATCH --ntasks-per-node=1" in lines and "#SBATCH --partition=gpu" in lines
    assert "set -euo pipefail" in lines
    assert 'export HARNESS_RDZV_ENDPOINT="${head_node}:29500"' in lines
    assert any(line.startswith("srun ") and "--runtime torchrun" in line and "NODE_RANK=$SLURM_NODEID" in line
               and "--steps 5" in line and "--stage train" in line for line in lines)
    assert lines[-1] == "harness compare runs/vl-full"
    assert "$@" not in text


def test_sbatch_script_for_ascend_has_no_gpu_request() -> None:
    res = resolve("qwen3_vl_30b", "npu-16x-ascend-a3", "full")
    text = torchrun.sbatch_script(res, steps=None, out="runs/x", partition=None, time_limit="01:00:00")
    assert "#SBATCH --nodes=1" in text and "--gpus-per-node" not in text.replace("no --gpus-per-node", "")


def test_layout_and_command(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for var in ("NNODES", "SLURM_NNODES", "NODE_RANK", "SLURM_NODEID", "HARNESS_RDZV_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    res = resolve("qwen3_vl_30b", "cpu", "smoke")
    layout = torchrun.node_layout(res, 2)
    assert layout["nnodes"] == 1 and layout["nproc"] == 2 and str(layout["endpoint"]).startswith("127.0.0.1:")
    cmd = torchrun.torchrun_command(res, _args(steps=3, overrides=["seed=1"]), tmp_path / "run", layout)
    assert "--nproc-per-node=2" in cmd and "--max-restarts=0" in cmd
    # CPU ranks: torchrun's workers are the zygote's stubs (harness.run.runtime.zygote), with the rank's arguments
    assert torchrun.forked_ranks(res) and cmd[cmd.index("-m", 3) + 1] == "harness.run.runtime.zygote"
    assert cmd[cmd.index("--steps") + 1] == "3" and cmd[cmd.index("--set") + 1] == "seed=1"
    gpu = resolve("qwen3_vl_30b", "gpu-2x-h200", "smoke")  # accelerator ranks start as interpreters of their own
    gpu_cmd = torchrun.torchrun_command(gpu, _args(), tmp_path / "run", torchrun.node_layout(gpu))
    assert not torchrun.forked_ranks(gpu) and gpu_cmd[gpu_cmd.index("-m", 3) + 1] == "harness.run.runtime.rank"


def test_layout_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_RDZV_ENDPOINT", raising=False)
    full = resolve("qwen3_vl_30b", "gpu-8x-h200-141g", "full")  # 2 nodes
    monkeypatch.setenv("NNODES", "2")
    with pytest.raises(HarnessError, match="HARNESS_RDZV_ENDPOINT"):
        torchrun.node_layout(full)
    monkeypatch.setenv("NNODES", "3")
    with pytest.raises(HarnessError, match="trainer.nnodes=2"):
        torchrun.node_layout(full)
    monkeypatch.setenv("NNODES", "2")
    with pytest.raises(HarnessError, match="cpu profile"):
        torchrun.node_layout(replace(full), 4)


def test_failure_summary_names_the_rank() -> None:
    # torchrun 2.x's report, as printed when rank 1 was killed with SIGKILL and the agent stopped rank 0
    report = """\
E1130 08:48:29.313000 24877 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) \
local_rank: 1 (pid: 24883) of binary: /usr/bin/python
=======================================================
harness.run.runtime.rank FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-30_08:48:29
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 24882)  (SIGTERM)
  error_file: <N/A>
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_08:48:29
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 24883)  (SIGKILL)
  error_file: <N/A>
=======================================================
error: rank 0: step failed
"""
    assert torchrun.failure_summary(report) == (
        "rank 1 exited with signal 9 (first failure); rank 0 exited with signal 15; error: rank 0: step failed")
    only_root = report[report.index("Root Cause"):]
    assert torchrun.failure_summary("Failures:\n  <NO_OTHER_FAILURES>\n" + only_root).startswith(
        "rank 1 exited with signal 9 (first failure)")
    assert torchrun.failure_summary("  rank      : 3 (local_rank: 3)\n  exitcode  : 1 (pid: 9)\n") == \
        "rank 3 exited with code 1"
    assert torchrun.failure_summary("nothing useful") == "torchrun failed (no rank report)"
    # rank 1 died: the SIGTERM the agent then sends rank 0 is not a stop on request
    assert not torchrun.stopped_by_signal(report, forwarded=False)
    assert torchrun.stopped_by_signal(report, forwarded=True)
    asked = report.replace("exitcode  : -9 (pid: 24883)  (SIGKILL)", "exitcode  : 143 (pid: 24883)")
    assert torchrun.stopped_by_signal(asked, forwarded=False), "every first-failing rank exited 143: a requested stop"
    assert not torchrun.stopped_by_signal("nothing useful", forwarded=False)


def test_slurm_command_passes_overrides_quoted_and_never_overwrites(tmp_path, capsys) -> None:
    """`harness slurm`: the --set overrides reach every node, an odd run directory stays one word, the script
    parses (bash -n), and --write refuses an existing file unless --force."""
    import subprocess

    from harness.cli import main

    out_dir = "runs/vl full's"
    argv = ["slurm", "qwen3_vl_30b", "--profile", "gpu-8x-h200-141g", "--scale", "full", "--out", out_dir,
            "--set", "actor_rollout_ref.actor.optim.lr=2e-6", "--partition", "gpu"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    (srun,) = [ln for ln in text.splitlines() if ln.startswith("srun ")]
    assert "--set actor_rollout_ref.actor.optim.lr=2e-06" in srun and "NODE_RANK=$SLURM_NODEID" in srun
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    inner = subprocess.run(["bash", "-c", srun.replace("srun --ntasks-per-node=1 bash -c ", "printf '%s' ")],
                           capture_output=True, text=True).stdout
    assert inner.startswith("NODE_RANK=$SLURM_NODEID harness run qwen3_vl_30b ") and "'runs/vl full'\"'\"'s'" in inner
    script = tmp_path / "job.sbatch"
    assert main([*argv, "--write", str(script)]) == 0 and script.read_text() == text
    assert main([*argv, "--write", str(script)]) == 2 and "file exists" in capsys.readouterr().err
    assert main([*argv, "--write", str(script), "--force"]) == 0
    assert main(["slurm", "qwen3_vl_30b", "--profile", "gpu-8x-h200-141g", "--scale", "full", "--out", "x",
                 "--set", "trainer.nnodes=3"]) in (1, 2)  # refused before a line is written


@pytest.mark.parametrize("option, value, why", [
    ("--partition", "gpu\ntouch X/PWNED", "not a Slurm partition name"),
    ("--partition", "gpu;id", "not a Slurm partition name"),
    ("--time", "04:00:00\nid", "not a Slurm time limit"),
    ("--time", "4h", "not a Slurm time limit"),
    ("--time", "1-2:3:4:5", "not a Slurm time limit"),
    ("--out", "/shared/r\nid", "control character (U+000A)"),
    ("--set", "seed=1\nid", "control character (U+000A)"),
])
def test_slurm_refuses_a_value_that_would_break_a_line(option: str, value: str, why: str, capsys) -> None:
    from harness.cli import main

    argv = ["slurm", "qwen3_1_7b", "--profile", "gpu-8x-h200-141g", "--out", "/shared/r", option, value]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert captured.out == "" and len(err) == 1 and err[0].startswith(f"error: {option}: ") and why in err[0]


@pytest.mark.parametrize("value", ["30", "30:00", "04:00:00", "2-12", "2-12:30", "2-12:30:00"])
def test_slurm_time_formats(value: str, capsys) -> None:
    from harness.cli import main

    assert main(["slurm", "qwen3_1_7b", "--profile", "gpu-8x-h200-141g", "--out", "/shared/r", "--time", value,
                 "--partition", "gpu_a,debug-2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"#SBATCH --time={value}" in lines and "#SBATCH --partition=gpu_a,debug-2" in lines
