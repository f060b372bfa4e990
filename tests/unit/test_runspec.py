"""RunSpec: the one place a child run's arguments are built; they parse back to the same run."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.commands import run as run_cmd
from harness.run.runtime import rank
from harness.run.runtime.run_args import RunSpec, set_args

FULL = RunSpec("recipes/r.json", "cpu", "smoke", out="runs/x", steps=4, overrides=("seed=7", "model.dtype=\"float64\""),
               runtime="local", stage="train", quiet=True, tier="replay", baseline="baselines/r/cpu-smoke.json")


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    run_cmd.add_arguments(p)
    return p


def test_run_args_parse_back_to_the_spec() -> None:
    ns = _run_parser().parse_args(FULL.run_args())
    assert (ns.recipe, ns.profile, ns.scale, ns.out, ns.steps) == ("recipes/r.json", "cpu", "smoke", Path("runs/x"), 4)
    assert ns.overrides == list(FULL.overrides) and (ns.runtime, ns.stage, ns.quiet) == ("local", "train", True)
    assert (ns.tier, ns.baseline, ns.resume) == ("replay", Path("baselines/r/cpu-smoke.json"), None)


def test_defaults_add_nothing_and_resume_and_launcher_options_pass() -> None:
    bare = RunSpec("r", "cpu", "smoke")
    assert bare.run_args() == ["r", "--profile", "cpu", "--scale", "smoke"]
    spec = bare.with_(resume="runs/x", runtime="torchrun", extra=("--nproc-per-node", "2"))
    ns = _run_parser().parse_args(spec.run_args())
    assert ns.resume == Path("runs/x") and ns.nproc_per_node == 2 and ns.runtime == "torchrun"


def test_rank_args_parse_with_the_rank_parser() -> None:
    ns = rank.parser().parse_args(FULL.with_(resume="runs/x").rank_args())
    assert (ns.recipe, ns.out, ns.steps, ns.overrides, ns.quiet, ns.resume) == (
        "recipes/r.json", Path("runs/x"), 4, list(FULL.overrides), True, True)
    with pytest.raises(ValueError):
        RunSpec("r", "cpu", "smoke").rank_args()


def test_set_args_keep_only_the_command_line_overrides() -> None:
    overrides = [{"key": "seed", "value": 7}, {"key": "trainer.nnodes", "value": 2, "source": "profile patch"},
                 {"key": "model.dtype", "value": "float64"}]
    assert set_args(overrides) == ("seed=7", 'model.dtype="float64"')


def test_a_container_gets_the_fault_hook_and_the_wait_policy_and_nothing_else(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.config.recipe import resolve
    from harness.run.plan import RunPlan
    from harness.run.runtime import docker, launch

    seen: dict[str, object] = {}

    def fake_run_in_docker(inner: list[str], **kw: object) -> int:
        seen.update(kw, inner=inner)
        return 0

    monkeypatch.setattr(docker, "run_in_docker", fake_run_in_docker)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("HARNESS_FAULT", "flip-advantage")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    monkeypatch.setenv("MKL_NUM_THREADS", "7")
    plan = RunPlan(recipe="qwen3_vl_30b", res=resolve("qwen3_vl_30b", "cpu", "smoke", ()), run_dir=tmp_path / "run",
                   runtime="docker", image="harness-cpu:test", steps=2)
    launch.train_stage(plan)
    assert seen["env"] == {"OMP_WAIT_POLICY": "PASSIVE", "HARNESS_FAULT": "flip-advantage"}
    assert seen["image"] == "harness-cpu:test" and "--stage" in seen["inner"]  # type: ignore[operator]
