"""The warm-start cache key: everything that decides the weights, the training core's source included."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from harness.config.recipe import resolve
from harness.core import warmstart


def _trainer(seed: int = 42) -> SimpleNamespace:
    cfg = resolve("qwen3_vl_30b", "cpu", "smoke").spec
    tok = SimpleNamespace(backend_tokenizer=SimpleNamespace(to_str=lambda: '{"vocab": 1}'))
    return SimpleNamespace(cfg=cfg, seed=seed, tok=tok, device=torch.device("cpu"))


def test_key_is_stable_and_follows_its_inputs() -> None:
    assert warmstart.cache_key(_trainer()) == warmstart.cache_key(_trainer())
    assert warmstart.cache_key(_trainer(1)) != warmstart.cache_key(_trainer(2))
    shorter = _trainer()
    shorter.cfg = shorter.cfg.model_copy(update={"warm_start": shorter.cfg.warm_start.model_copy(update={"steps": 1})})
    assert warmstart.cache_key(shorter) != warmstart.cache_key(_trainer())


def test_a_changed_core_gets_a_new_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached warm start trained by older core code must not be reused (its weights differ)."""
    before = warmstart.cache_key(_trainer())
    assert len(warmstart.code_fingerprint()) == 64
    monkeypatch.setattr(warmstart, "code_fingerprint", lambda: "0" * 64)
    assert warmstart.cache_key(_trainer()) != before


def test_fingerprint_covers_every_core_module(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    core = tmp_path / "core"
    core.mkdir()
    (core / "warmstart.py").write_text("a = 1\n")
    (core / "update.py").write_text("b = 1\n")
    monkeypatch.setattr(warmstart, "__file__", str(core / "warmstart.py"))
    first = warmstart.code_fingerprint()
    (core / "update.py").write_text("b = 2\n")
    assert warmstart.code_fingerprint() != first


def test_cache_entries_are_verified_and_never_unpickled(tmp_path) -> None:
    import hashlib
    import json
    import pickle

    from safetensors.torch import save

    from harness.errors import HarnessError

    model = torch.nn.Linear(3, 2)
    path = tmp_path / "k.safetensors"
    data = save({k: v.detach().clone() for k, v in model.state_dict().items()}, metadata={"key": "k"})
    path.write_bytes(data)
    (tmp_path / "k.json").write_text(json.dumps({"key": "k", "sha256": hashlib.sha256(data).hexdigest()}))
    other = torch.nn.Linear(3, 2)
    warmstart.load_cached(other, path, "k", torch.device("cpu"))
    assert torch.equal(other.weight, model.weight)
    with pytest.raises(HarnessError, match="does not match the model"):
        warmstart.load_cached(torch.nn.Linear(3, 4), path, "k", torch.device("cpu"))
    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self):
            return (marker.touch, ())

    path.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(HarnessError, match="digest or key does not match") as err:
        warmstart.load_cached(other, path, "k", torch.device("cpu"))
    assert "\n" not in str(err.value) and not marker.exists()
    bad = pickle.dumps(Payload())
    (tmp_path / "k.json").write_text(json.dumps({"key": "k", "sha256": hashlib.sha256(bad).hexdigest()}))
    with pytest.raises(HarnessError, match="warm-start cache file: header length"):  # digest matches, no safetensors
        warmstart.load_cached(other, path, "k", torch.device("cpu"))
    assert not marker.exists()


class Tied(torch.nn.Module):
    """An embedding and an output head that share one tensor (tie_word_embeddings)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(4, 3)
        self.head = torch.nn.Linear(3, 4, bias=False)
        self.head.weight = self.embed.weight
        self.down_proj = torch.nn.Linear(3, 3)


def _entry(tmp_path, state, key="k"):
    import hashlib
    import json

    from safetensors.torch import save

    data = save({k: v.detach().clone() for k, v in state.items()}, metadata={"key": key})
    path = tmp_path / f"{key}.safetensors"
    path.write_bytes(data)
    (tmp_path / f"{key}.json").write_text(json.dumps({"key": key, "sha256": hashlib.sha256(data).hexdigest()}))
    return path


def test_a_tied_entry_whose_embedding_and_head_differ_is_refused(tmp_path) -> None:
    """Loading would keep one of the two silently; an entry the warm start wrote always has them equal."""
    from harness.errors import HarnessError

    torch.manual_seed(0)
    model = Tied()
    assert warmstart._tied_groups(model) == [["embed.weight", "head.weight"]]
    state = model.state_dict()
    other = Tied()
    warmstart.load_cached(other, _entry(tmp_path, state), "k", torch.device("cpu"))
    assert torch.equal(other.embed.weight, model.embed.weight)
    planted = {**state, "head.weight": state["head.weight"] * 3}
    with pytest.raises(HarnessError, match="'embed.weight' and 'head.weight' are tied in the model but hold different"):
        warmstart.load_cached(Tied(), _entry(tmp_path, planted), "k", torch.device("cpu"))


def test_the_weights_digest_follows_the_values_only() -> None:
    """The manifest's warm-start digest: equal weights, equal digest (whatever file held them); down_proj x 3 not."""
    torch.manual_seed(0)
    a, b = Tied(), Tied()
    b.load_state_dict(a.state_dict())
    assert warmstart.weights_sha256(a) == warmstart.weights_sha256(b)
    assert len(warmstart.weights_sha256(a)) == 64
    with torch.no_grad():
        b.down_proj.weight.mul_(3)
    assert warmstart.weights_sha256(a) != warmstart.weights_sha256(b)
    half = Tied().to(torch.bfloat16)  # no numpy bfloat16: hashed as bytes
    assert warmstart.weights_sha256(half) != warmstart.weights_sha256(half.float())


def _sft_trainer(monkeypatch: pytest.MonkeyPatch, tmp_path) -> SimpleNamespace:
    """A two-parameter 'model' with the warm start's SFT loop around it (no tokenizer, no data)."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(warmstart, "cache_key", lambda tr: "k")
    rb = SimpleNamespace(response_mask=torch.ones(1, 2))
    monkeypatch.setattr(warmstart, "_demo_batch", lambda tr, rng, size: (rb, []))
    monkeypatch.setattr(warmstart, "sequence_logprobs", lambda model, rb, **kw: (model(torch.ones(1, 2)), None))
    cfg = SimpleNamespace(warm_start=SimpleNamespace(steps=2, lr=1e-3, batch_size=1))
    return SimpleNamespace(cfg=cfg, models=SimpleNamespace(actor=torch.nn.Linear(2, 2)), device=torch.device("cpu"),
                           bias=None, ids={"image_pad": 0}, seed=1)


def test_a_cache_that_cannot_be_written_is_found_first_and_the_run_goes_on(tmp_path, monkeypatch, capsys) -> None:
    import errno
    import tempfile

    assert warmstart.cache_unwritable(tmp_path / "w") is None and list((tmp_path / "w").iterdir()) == []

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert warmstart.cache_unwritable(tmp_path / "w") == "Read-only file system"

    tr = _sft_trainer(monkeypatch, tmp_path)
    monkeypatch.setattr(warmstart, "cache_unwritable", lambda d: "Read-only file system")
    monkeypatch.setattr(warmstart, "write_bytes_atomic", lambda *a: pytest.fail("wrote to a read-only cache"))
    info = warmstart.run_warm_start(tr)
    assert info["cached"] is False and info["final_loss"] is not None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("notice: the warm-start cache ") and "Read-only file system" in err[0]


def test_a_cache_write_that_fails_after_training_is_a_notice(tmp_path, monkeypatch, capsys) -> None:
    from harness.errors import HarnessError

    tr = _sft_trainer(monkeypatch, tmp_path)

    def full(path, data):
        raise HarnessError("cannot write (No space left on device)", file=str(path))
    monkeypatch.setattr(warmstart, "write_bytes_atomic", full)
    assert warmstart.run_warm_start(tr)["cached"] is False
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "the warm start was not cached" in err[0] and "No space left" in err[0]
    left = sorted(p.name for p in (tmp_path / "cache" / "warm_start").iterdir())
    assert [n for n in left if not n.endswith(".lock")] == []  # no partial entry (the empty lock file stays)


def test_a_second_process_waits_for_the_warm_start_being_trained_and_never_hangs(tmp_path, capsys):
    """The training lock: held by another open (another process), a waiter gets it once it is released; held for
    longer than the wait, the waiter goes on with a notice; a directory that cannot hold a lock locks nothing."""
    import fcntl
    import threading
    import time

    from harness.core.warmstart import training_lock

    other = os.open(tmp_path / "k.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(other, fcntl.LOCK_EX)
    threading.Timer(0.4, lambda: os.close(other)).start()  # the trainer finishes
    t0 = time.monotonic()
    with training_lock(tmp_path, "k", wait_s=30):
        waited = time.monotonic() - t0
    assert 0.3 < waited < 10 and "waiting for another process that trains the same warm start (k)" in \
        capsys.readouterr().err
    stuck = os.open(tmp_path / "k.lock", os.O_RDWR)
    fcntl.flock(stuck, fcntl.LOCK_EX)
    t0 = time.monotonic()
    with training_lock(tmp_path, "k", wait_s=0.3):
        waited = time.monotonic() - t0
    os.close(stuck)
    assert 0.3 <= waited < 10 and "training it here too" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    with training_lock(tmp_path / "file" / "sub", "k"):  # cannot be made (a file is in the way): no lock, no error
        pass
