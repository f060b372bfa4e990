"""Checkpoint layout, save/load round trip, pruning, partial checkpoints, resume rules (no training)."""

from __future__ import annotations

import copy
import json
import os
import random
import signal
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness.config.recipe import resolve
from harness.core.trainer import Dist, GRPOTrainer
from harness.errors import HarnessError
from harness.run import checkpoint as ck
from harness.run import resume as rs
from harness.run import resume_check as rc
from harness.run.rundir import read_metrics, truncate_metrics


class _Loader:
    def __init__(self) -> None:
        self.position = 0

    def state_dict(self) -> dict[str, int]:  # the fields of the real loader's state (schema: trainer-state)
        return {"epoch": 0, "position": self.position, "seed": 0, "num_prompts": 8, "batch_size": 1}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


class _Trainer:
    """A tiny model and optimizer with the trainer's own checkpoint state methods."""

    state_dict = GRPOTrainer.state_dict
    load_state_dict = GRPOTrainer.load_state_dict

    def __init__(self, seed: int) -> None:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        self.models = SimpleNamespace(actor=model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: 1.0 / (s + 1))
        self.loader, self.tokens_seen, self.dist = _Loader(), 0, Dist()


def _trainer(seed: int) -> _Trainer:
    return _Trainer(seed)


def _train_steps(tr: _Trainer, n: int) -> None:
    for _ in range(n):
        tr.optimizer.zero_grad(set_to_none=True)
        tr.models.actor(torch.randn(3, 4)).pow(2).sum().backward()
        tr.optimizer.step()
        tr.scheduler.step()
        tr.loader.position += 16
        tr.tokens_seen += 100


def _save(tr: _Trainer, run: Path, step: int, keep: int | None = None) -> Path:
    manifest = json.loads((run / "manifest.json").read_text()) if (run / "manifest.json").exists() else {}
    return ck.save_checkpoint(tr, run, step, config={"seed": 1}, manifest=manifest, keep=keep)


def test_round_trip_continues_identically(tmp_path: Path) -> None:
    a = _trainer(0)
    _train_steps(a, 3)
    random.seed(5)
    np.random.seed(5)
    path = _save(a, tmp_path, 3)
    assert sorted(p.name for p in path.iterdir()) == sorted(
        ["state-rank0.safetensors", "state-rank0.json", "trainer-state.json", "resolved-recipe.json",
         "manifest.json", "COMPLETE"])
    assert not [p for p in path.parent.iterdir() if ".tmp-" in p.name]
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    torch.manual_seed(7)
    _train_steps(a, 2)

    b = _trainer(1)  # another init and RNG history: everything must come from the checkpoint
    random.seed(9)
    state = ck.load_checkpoint(b, path)
    assert state["step"] == 3 and b.tokens_seen == 300 and b.loader.position == 48
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws
    torch.manual_seed(7)
    _train_steps(b, 2)
    for pa, pb in zip(a.models.actor.parameters(), b.models.actor.parameters()):
        assert torch.equal(pa, pb)
    assert a.scheduler.get_last_lr() == b.scheduler.get_last_lr()
    sa, sb = a.optimizer.state_dict()["state"][0], b.optimizer.state_dict()["state"][0]
    assert torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    assert float(b.optimizer.state_dict()["state"][0]["step"]) == 5.0


def test_prune_partial_and_newest(tmp_path: Path) -> None:
    tr = _trainer(0)
    for step in (2, 4, 6):
        _save(tr, tmp_path, step, keep=2)
    assert [s for s, _ in ck.complete_checkpoints(tmp_path)] == [4, 6]
    root = tmp_path / ck.CKPT_DIR
    (root / "step-000008.tmp-abc").mkdir()  # a write killed before the rename
    (root / "step-000010").mkdir()  # no COMPLETE: never used
    (root / "step-000010" / "state-rank0.json").write_bytes(b"x")
    assert ck.newest_checkpoint(tmp_path)[0] == 6
    assert not rs.auto_resumable(tmp_path, resolve("qwen3_vl_30b", "cpu", "smoke"))  # no manifest: not a run
    assert sorted(ck.clean_partial(tmp_path)) == ["step-000008.tmp-abc", "step-000010"]
    assert sorted(p.name for p in root.iterdir()) == ["step-000004", "step-000006"]


def test_truncate_metrics_keeps_rows_bytewise(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"step": s, "x": 0.1 * s}) for s in range(5)]
    path.write_text("\n".join(rows) + "\n" + '{"step": 5, "x": 0.')  # torn last line
    truncate_metrics(path, 3)
    assert path.read_text() == "\n".join(rows[:4]) + "\n"
    truncate_metrics(path, -1)
    assert read_metrics(path) == []


@pytest.fixture(scope="module")
def res():
    return resolve("qwen3_vl_30b", "cpu", "smoke", ("trainer.test_freq=3",))


def _run_dir(tmp: Path, res, status: str = "interrupted") -> Path:
    """A run directory holding the manifest a run of ``res`` (6 steps asked for, 3 done) writes."""
    from harness.run.runner import base_manifest

    manifest = {"schema_version": 1, "status": status, "created_utc": "2026-01-01T00:00:00Z", "finished_utc": None,
                "error": None, **base_manifest(res, steps=6, runtime="local", world=1, fault={})}
    manifest["steps"]["completed"] = 3
    (tmp / "manifest.json").write_text(json.dumps(manifest))
    return tmp


def test_resume_rules(tmp_path: Path, res) -> None:
    run = _run_dir(tmp_path, res)
    assert rs.resume_overrides(run, ["trainer.save_freq=3"]) == ["trainer.test_freq=3", "trainer.save_freq=3"]
    plan = rs.plan_resume(run, res, [], 1)
    assert (plan.step, plan.path, plan.requested) == (0, None, 6)  # no checkpoint: start over

    lr = resolve("qwen3_vl_30b", "cpu", "smoke", ("trainer.test_freq=3", "actor_rollout_ref.actor.optim.lr=0.002"))
    plan = rs.plan_resume(run, lr, ["actor_rollout_ref.actor.optim.lr=0.002"], 1)
    assert plan.overrides == [{"key": "actor_rollout_ref.actor.optim.lr", "value": 0.002}]
    with pytest.raises(HarnessError, match=r"differs from the checkpoint's \(actor_rollout_ref.actor.optim.lr: "):
        rs.plan_resume(run, lr, [], 1)  # changed but not given again with --set

    cfg = copy.deepcopy(res.config)
    cfg["model"]["architecture"]["text"]["hidden_size"] = 256
    with pytest.raises(HarnessError, match="hidden_size: 128 -> 256") as err:
        rs.plan_resume(run, replace(res, config=cfg), [], 1)
    assert "\n" not in str(err.value)
    with pytest.raises(HarnessError, match="profile"):
        rs.plan_resume(run, replace(res, profile_name="a100"), [], 1)

    tr = _trainer(0)
    _save(tr, run, 3)
    (run / "checkpoints" / "step-000003" / "resolved-recipe.json").write_text(json.dumps(res.config))
    assert rs.auto_resumable(run, res)
    assert not rs.auto_resumable(run, replace(res, name="qwen3_1_7b"))  # another recipe: never continued
    assert rs.plan_resume(run, res, [], 1).step == 3
    with pytest.raises(HarnessError, match="world size 1, this run has 2"):
        rs.plan_resume(run, res, [], 2)
    _run_dir(tmp_path, res, status="complete")
    with pytest.raises(HarnessError, match="complete"):
        rs.plan_resume(run, res, [], 1)


def test_metric_mismatch_and_exit_codes() -> None:
    a = [{"step": 1, "x": 0.5, "timing_s/step": 1.0}, {"step": 2, "x": 0.25}]
    b = [{"step": 1, "x": 0.5, "timing_s/step": 2.0}, {"step": 2, "x": 0.25000000000000006}]
    assert rc.metric_mismatch(a, a) is None
    assert rc.metric_mismatch(a, b) == {"step": 2, "key": "x", "straight": 0.25, "resumed": 0.25000000000000006}
    assert rc.metric_mismatch(a, b[:1])["key"] == "<row>"
    assert ck.interrupt_exit_code("x: interrupted by SIGINT after step 2; …") == 130
    assert ck.interrupt_exit_code("x: interrupted by SIGTERM after step 2") == 143
    assert ck.Interrupted(signal.SIGTERM, 3, Path("r")).exit_code == 143


def test_stop_signals_finish_the_step() -> None:
    from harness.run.runner import _StopSignals

    before = signal.getsignal(signal.SIGTERM)
    with _StopSignals() as stop:
        stop.arm()  # training has started
        os.kill(os.getpid(), signal.SIGTERM)  # handled: no exit, just a request
        assert stop.agreed(Dist()) == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_signals_before_training_interrupt_a_blocking_read(tmp_path: Path) -> None:
    import threading

    from harness.run.runner import StoppedEarly, _StopSignals

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    with _StopSignals(), pytest.raises(StoppedEarly) as err:
        timer.start()
        with open(fifo, "rb") as fh:  # blocks: no writer
            fh.read()
    assert err.value.exit_code == 130 and "before training started" in str(err.value)


class _Payload:
    """Unpickling this creates a marker file: what a planted pickle would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_planted_pickle_is_refused_never_loaded(tmp_path: Path, res) -> None:
    import pickle

    run = _run_dir(tmp_path / "run", res) if (tmp_path / "run").mkdir() is None else None
    tr = _trainer(0)
    path = _save(tr, run, 3)
    (path / "resolved-recipe.json").write_text(json.dumps(res.config))
    marker = tmp_path / "PWNED"
    (path / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(HarnessError, match=r"unexpected file '\.metadata'") as err:
        rs.plan_resume(run, res, [], 1)
    with pytest.raises(HarnessError, match=r"unexpected file '\.metadata'"):
        ck.load_checkpoint(_trainer(1), path)
    assert "\n" not in str(err.value) and not marker.exists()
    (path / ".metadata").unlink()
    # the state files themselves hold no pickle: a pickle in their place is refused as corrupt
    (path / "state-rank0.safetensors").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(HarnessError, match="corrupt training state"):
        ck.load_checkpoint(_trainer(1), path)
    assert not marker.exists()
    (path / "state-rank0.safetensors").unlink()
    os.symlink("/dev/zero", path / "state-rank0.safetensors")
    with pytest.raises(HarnessError, match="not a regular file"):
        ck.load_checkpoint(_trainer(1), path)


def test_state_file_round_trips_exactly(tmp_path: Path) -> None:
    from harness.statefile import load_state, save_state

    w = torch.randn(3, 2)
    state = {"a": [1, 2 ** 40, None, True, "x"], "b": (0.1, float("inf"), -0.0), "w": w, "tied": w,
             "rng": torch.get_rng_state()}
    save_state(state, tmp_path / "s")
    back = load_state(tmp_path / "s")
    assert back["a"] == state["a"] and back["b"][:2] == (0.1, float("inf")) and str(back["b"][2]) == "-0.0"
    assert torch.equal(back["w"], w) and torch.equal(back["tied"], w) and torch.equal(back["rng"], state["rng"])
    with pytest.raises(FileExistsError):  # never overwrites
        save_state(state, tmp_path / "s")


# ----------------------------------------------------------------------------- the resume check's disk plan
@pytest.mark.parametrize("free_gb,expect", [(500.0, 2), (60.0, -1)])
def test_resume_check_keeps_one_checkpoint_when_two_do_not_fit(tmp_path, monkeypatch, capsys, free_gb, expect):
    """The reduced 30B-A3B (~44 GB per checkpoint) on a 64 GiB disk: only the SIGTERM checkpoint; the
    straight run never writes one; an explicit trainer.save_freq wins."""
    calls: list[list[str]] = []

    def fake(spec, env, timeout):
        args = spec.run_args()
        calls.append(args)
        out = Path(args[args.index("--out") + 1] if "--out" in args else args[args.index("--resume") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text('{"step": 1, "actor/pg_loss": 0.5}\n')
        return SimpleNamespace(returncode=128 + int(signal.SIGTERM) if "HARNESS_STOP_AFTER_STEP" in env else 0,
                               stderr="")

    monkeypatch.setattr(rc, "_harness", fake)
    monkeypatch.setattr(rc.shutil, "disk_usage", lambda p: SimpleNamespace(free=int(free_gb * 1e9)))
    res = resolve("qwen3_30b_a3b", "gpu-1x-h200", "reduced")
    assert 30e9 < rc.checkpoint_bytes(res.config) < 60e9
    out = rc.ckpt_resume_check(res, tmp_path / "w", 4)
    assert out["pass"] and out["save_freq"] == expect
    sets = [[a[i + 1] for i, x in enumerate(a) if x == "--set" and a[i + 1].startswith("trainer.save_freq=")]
            for a in calls]
    assert sets == [["trainer.save_freq=-1"], [f"trainer.save_freq={expect}"], [f"trainer.save_freq={expect}"]]
    assert ("notice: two checkpoints" in capsys.readouterr().err) == (expect == -1)
    res = resolve("qwen3_30b_a3b", "gpu-1x-h200", "reduced", ("trainer.save_freq=1",))
    assert rc.ckpt_resume_check(res, tmp_path / "w2", 4)["save_freq"] == 1
