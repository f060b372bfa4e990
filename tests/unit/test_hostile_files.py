"""Hostile run directories and file systems, without training: FIFOs where a run appends, records that fail their
schemas, damaged checkpoints and logs, read-only and full disks (simulated here; tests/integration/test_full_disk.py
mounts real ones when run as root). Each is one line (exit 2) and leaves the run as it was."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.config.recipe import resolve
from harness.errors import HarnessError
from harness.jsonio import open_new, write_bytes_atomic
from harness.mlperf import MlperfLog, read_events
from harness.run import checkpoint as ck
from harness.run.rundir import RunRecord, truncate_metrics

ROOT = Path(__file__).resolve().parents[2]
UTC = "2026-01-01T00:00:00Z"


def _within(seconds: float, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, failing the test instead of hanging when it blocks (a FIFO opened without O_NONBLOCK)."""
    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"blocked for {seconds} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def res():
    return resolve("qwen3_1_7b", "cpu", "smoke")


@pytest.fixture(scope="module")
def manifest(res) -> dict[str, Any]:
    """What a run of ``res`` interrupted after step 2 of 4 has in its manifest."""
    from harness.run.runner import base_manifest

    m = {"schema_version": 1, "status": "interrupted", "created_utc": UTC, "finished_utc": UTC,
         "error": "interrupted by SIGTERM after step 2; checkpoint saved",
         **base_manifest(res, steps=4, runtime="local", world=1, fault={})}
    m["steps"]["completed"] = 2
    return m


def _mllog(key: str, value: Any = None, **meta: Any) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": {"file": "x.py", "lineno": 1, **meta}}) + "\n"


def _run(tmp: Path, manifest: dict[str, Any]) -> Path:
    run = tmp / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "metrics.jsonl").write_text('{"step": 1, "x": 1.0}\n{"step": 2, "x": 2.0}\n')
    (run / "mlperf.log").write_text(_mllog("init_start") + _mllog("epoch_stop", epoch_num=1)
                                    + _mllog("epoch_stop", epoch_num=2))
    return run


# ----------------------------------------------------------------------------- FIFOs where a run appends
def test_open_new_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(HarnessError, match="not a regular file"):
        _within(5, lambda: open_new(fifo, append_existing=True))  # no reader: would block forever
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(HarnessError, match="not a regular file"):  # a reader: opens, then fstat refuses it
            _within(5, lambda: open_new(fifo, append_existing=True))
    finally:
        os.close(reader)


@pytest.mark.parametrize("name", ["metrics.jsonl", "mlperf.log"])
def test_resume_record_refuses_a_fifo_and_leaves_the_run_as_it_was(tmp_path: Path, manifest, name: str) -> None:
    run = _run(tmp_path, manifest)
    (run / name).unlink()
    os.mkfifo(run / name)
    before = (run / "manifest.json").read_text()
    with pytest.raises(HarnessError, match="not a regular file") as err:
        _within(10, lambda: RunRecord.resume(run, from_step=2, entry={"from_step": 2, "utc": UTC, "overrides": []},
                                             updates={}))
    assert str(run / name) in str(err.value) and "\n" not in str(err.value)
    assert (run / "manifest.json").read_text() == before  # still `interrupted`: it can be continued once fixed
    with pytest.raises(HarnessError, match="not a regular file"):
        if name == "mlperf.log":
            _within(5, lambda: MlperfLog(run, manifest, resume_from=2))
        else:
            _within(5, truncate_metrics, run / name, 1)


def test_a_signal_while_the_record_opens_is_one_line(tmp_path: Path) -> None:
    """The stop handlers are in place before the record is opened: SIGTERM during a stalled open ends the run with
    its one line and exit 143 (it used to kill the process silently, leaving the manifest `running`)."""
    script = f"""
import os, signal, sys, time
from harness.config.recipe import resolve
from harness.errors import HarnessError
from harness.run import runner

class Stalls:
    def __init__(self, *a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # an open that blocks

for name in ("set_determinism", "resolve_device", "speed_index"):
    setattr(runner, name, lambda *a, **k: 1.0)
runner.numerics.activate = lambda: None
runner.base_manifest = lambda *a, **k: {{}}
runner.RunRecord = Stalls
try:
    runner.train(resolve("qwen3_1_7b", "cpu", "smoke"), __import__("pathlib").Path({str(tmp_path / "run")!r}))
except HarnessError as err:
    print(err.exit_code, err.one_line())
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("143 stopped by SIGTERM"), (proc.returncode, proc.stderr)


def test_a_new_record_that_cannot_open_its_log_says_so_in_the_manifest(tmp_path: Path, manifest, monkeypatch) -> None:
    from harness.run import rundir

    def refuse(*a: Any, **k: Any) -> None:
        raise HarnessError("not a regular file (a FIFO, device or socket); not written", file="mlperf.log")
    monkeypatch.setattr(rundir, "MlperfLog", refuse)
    body = {k: v for k, v in manifest.items() if k not in ("schema_version", "status", "created_utc",
                                                           "finished_utc", "error")}
    with pytest.raises(HarnessError, match="not a regular file"):
        RunRecord(tmp_path / "run", body)
    saved = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert saved["status"] == "failed" and "not a regular file" in saved["error"]  # never left `running`


# ----------------------------------------------------------------------------- records that fail their checks
def test_mlperf_log_events_are_checked_line_by_line(tmp_path: Path) -> None:
    log = tmp_path / "mlperf.log"
    good = _mllog("init_start") + _mllog("epoch_stop", epoch_num=1)
    log.write_text(good + ':::MLLOG {"key": "epoch_st')  # a torn last line: dropped
    assert [ev["key"] for _, ev in read_events(log)] == ["init_start", "epoch_stop"]
    for bad, message in ((_mllog("epoch_stop", epoch_num="x"), "'epoch_num' is not an integer"),
                         (_mllog("eval_accuracy", "high", epoch_num=1), "not a number"),
                         (":::MLLOG [1, 2]\n", "without a string 'key'"),
                         ("garbage\n", "not a ':::MLLOG")):
        log.write_text(good + bad + good)
        with pytest.raises(HarnessError, match=message) as err:
            read_events(log)
        assert "line 3" in str(err.value) and "\n" not in str(err.value)


def test_trainer_state_is_checked_against_its_schema(tmp_path: Path) -> None:
    ckpt = tmp_path / "step-000002"
    ckpt.mkdir()
    state = {"step": 2, "tokens_seen": 10, "world_size": 1, "utc": UTC,
             "scheduler": {"base_lrs": [0.1], "last_epoch": 2, "lr_lambdas": [None]},
             "loader": {"epoch": 0, "position": 4, "seed": 1, "num_prompts": 8, "batch_size": 2}}
    (ckpt / "trainer-state.json").write_text(json.dumps(state))
    assert ck.load_trainer_state(ckpt, 2)["step"] == 2
    with pytest.raises(HarnessError, match="says step 2"):
        ck.load_trainer_state(ckpt, 4)
    for doc, message in (([], "top-level value must be an object"),
                         ({**state, "scheduler": "x"}, "/scheduler: 'x' is not of type 'object'"),
                         ({**state, "loader": {**state["loader"], "num_prompts": "abc"}}, "/loader/num_prompts"),
                         ({**state, "world_size": 0}, "/world_size")):
        (ckpt / "trainer-state.json").write_text(json.dumps(doc))
        with pytest.raises(HarnessError, match=message):
            ck.load_trainer_state(ckpt, 2)


def test_scheduler_state_must_match_the_live_scheduler() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    live = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0).state_dict()
    ck.check_like(json.loads(json.dumps(live)), live, "scheduler", Path("t.json"))
    for bad, message in (({**live, "optimizer": None}, "differs in 'optimizer'"),  # would replace its optimizer
                         ({**live, "last_epoch": 2.0}, "last_epoch: expected a int, got float"),
                         ({**live, "base_lrs": []}, "base_lrs: expected a list of 1 items")):
        with pytest.raises(HarnessError, match=message):
            ck.check_like(bad, live, "scheduler", Path("t.json"))


def test_rng_states_are_checked_before_any_is_restored() -> None:
    packed = ck.rng_pack()
    ck.check_rng(packed, Path("s.json"))
    ck.check_rng({**packed, "npu": [torch.zeros(3)]}, Path("s.json"))  # a generator this machine lacks: left out
    py, n = packed["python"], packed["numpy"]
    cases = (({**packed, "python": py[:2]}, "rng.python: expected a list of 3 items"),
             ({**packed, "python": [py[0], py[1][:-1], None]}, r"rng.python\[1\]: expected a list of 625"),
             ({**packed, "python": [py[0], [*py[1][:-1], 700], None]}, "version-3 Mersenne Twister"),
             ({**packed, "python": [py[0], [1 << 40, *py[1][1:]], None]}, "version-3 Mersenne Twister"),
             ({**packed, "python": [py[0], py[1], "x"]}, "version-3 Mersenne Twister"),
             ({**packed, "numpy": {**n, "kind": "PCG64"}}, "not an MT19937 state"),
             ({**packed, "numpy": {**n, "keys": n["keys"][:3]}}, "rng.numpy.keys: expected a torch.int64 tensor"),
             ({**packed, "torch": packed["torch"][:10]}, "rng.torch: expected a torch.uint8 tensor"),
             ({k: v for k, v in packed.items() if k != "numpy"}, "no 'numpy' state"))
    for bad, message in cases:
        with pytest.raises(HarnessError, match=message) as err:
            ck.check_rng(bad, Path("s.json"))
        assert str(err.value).startswith("s.json: corrupt training state")


def test_a_manifest_name_never_leads_outside_the_baselines(tmp_path: Path, manifest) -> None:
    from harness.judge.baseline import default_path
    from harness.judge.compare import judge
    from harness.paths import safe_name

    for name in ("qwen3_1_7b", "gpu-8x-h200-141g", "smoke", "v1.2"):
        assert safe_name(name, what="name") == name
    for name in ("../../../../x", "a/b", "..", ".", ".hidden", "a..b", "", "x\n", None):
        with pytest.raises(HarnessError, match="cannot be used in a path"):
            safe_name(name, what="recipe name")
    with pytest.raises(HarnessError, match="recipe name '../x'"):
        default_path("../x", "cpu", "smoke")
    run = tmp_path / "run"
    run.mkdir()
    doc = {**manifest, "status": "complete", "recipe": {**manifest["recipe"], "name": "../../../../x"}}
    (run / "manifest.json").write_text(json.dumps(doc))
    verdict = judge(run, None, write=False)
    assert verdict.status == "refused" and "/recipe/name" in verdict.reasons[0]  # not NO-BASELINE (exit 0)


# ----------------------------------------------------------------------------- read-only and full disks
def _fail_fsync(code: int, after: int = 0) -> Any:
    calls = {"n": 0}
    real = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] > after:
            raise OSError(code, os.strerror(code))
        real(fd)
    return fsync


def test_a_full_disk_is_one_line_naming_the_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "verdict.json"
    target.write_text("old\n")
    monkeypatch.setattr(os, "fsync", _fail_fsync(errno.ENOSPC))
    with pytest.raises(HarnessError) as err:
        write_bytes_atomic(target, b"new\n")
    assert str(err.value) == (f"{target}: cannot write (No space left on device) "
                              "(fix: free space on that file system, or write elsewhere)")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["verdict.json"]


def test_an_os_error_no_command_caught_is_one_line(monkeypatch, capsys) -> None:
    from harness import cli
    from harness.commands import report

    def read_only(args: Any) -> int:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), "/mnt/ro/run/report.html")
    monkeypatch.setattr(report, "execute", read_only)
    assert cli.main(["report", "/mnt/ro/run"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: /mnt/ro/run/report.html: cannot use the file (Read-only file system) (fix: choose a "
                   "directory on a writable file system)\n")


def test_keygen_on_a_full_disk_leaves_no_half_key(tmp_path: Path, monkeypatch) -> None:
    from harness.judge import attest

    out = tmp_path / "k"
    monkeypatch.setattr(os, "fsync", _fail_fsync(errno.ENOSPC, after=1))  # the private key fits, the public not
    with pytest.raises(HarnessError, match="No space left on device") as err:
        attest.keygen(out)
    assert str(out / attest.PUBLIC_KEY_FILE) in str(err.value)
    assert list(out.iterdir()) == []  # no 0-byte key, no temporary file: a retry is not "a key is already there"
    monkeypatch.undo()
    priv, pub, _ = attest.keygen(out)
    assert priv.stat().st_size > 0 and pub.stat().st_size > 0 and (priv.stat().st_mode & 0o777) == 0o600
    with pytest.raises(HarnessError, match="a key is already there"):
        attest.keygen(out)
    old = priv.read_bytes()
    monkeypatch.setattr(os, "fsync", _fail_fsync(errno.ENOSPC, after=1))
    with pytest.raises(HarnessError, match="No space left on device"):
        attest.keygen(out, force=True)  # --force on a full disk: the old pair stays whole
    assert priv.read_bytes() == old and sorted(p.name for p in out.iterdir()) == sorted([priv.name, pub.name])


def test_a_read_only_disk_is_one_line(tmp_path: Path, monkeypatch) -> None:
    real_open = os.open

    def read_only(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **k)
    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(HarnessError, match=r"metrics.jsonl: cannot create \(Read-only file system\)"):
        open_new(tmp_path / "metrics.jsonl")
    from harness.judge import attest

    with pytest.raises(HarnessError, match=r"signing-key.pem: cannot write \(Read-only file system\)"):
        attest.keygen(tmp_path / "k")
    assert list((tmp_path / "k").iterdir()) == []


def test_steps_are_held_to_the_schema_bound_everywhere() -> None:
    from harness.cli import build_parser
    from harness.schema import load_schema

    top = load_schema("resolved-recipe")["properties"]["trainer"]["properties"]["total_training_steps"]["maximum"]
    parser = build_parser()
    for argv in (["run", "r"], ["gate"], ["record-baseline", "r"], ["ckpt-resume", "r"],
                 ["slurm", "r", "--out", "d"]):
        assert parser.parse_args([*argv, "--steps", str(top)]).steps == top
        with pytest.raises(SystemExit) as err:
            parser.parse_args([*argv, "--steps", str(top + 1)])
        assert err.value.code == 2
