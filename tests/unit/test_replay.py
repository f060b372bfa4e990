"""Recorded rollouts: exact round trip, checksums, no pickle, and the prompts they were made for."""

from __future__ import annotations

import hashlib
import io
import zipfile

import numpy as np
import pytest
import torch

from harness.core import replay as R
from harness.core.rollout import RolloutBatch
from harness.errors import HarnessError


def _batch(seed: int = 0) -> tuple[RolloutBatch, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 100, (4, 6), generator=g)
    mask = torch.ones(4, 6, dtype=torch.long)
    mask[0, :2] = 0
    resp = torch.randint(5, 100, (4, 5), generator=g)
    rmask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    rb = RolloutBatch(prompt_ids=prompt, prompt_mask=mask, response_ids=resp, response_mask=rmask,
                      rollout_logp=torch.zeros(4, 5), group_ids=["a", "a", "b", "b"], pixels=[None] * 4,
                      grids=[None] * 4)
    scores = torch.tensor([0.1, 1.0, 0.9000000357627869, 0.0])
    return rb, {"scores": scores, "acc": (scores > 0.5).float(), "format": torch.ones(4)}


def _recorded(tmp_path, steps=2):
    run = tmp_path / "run"
    R.save_initial(run, torch.nn.Linear(2, 2))
    for step in range(1, steps + 1):
        R.save_step(run, step, R.rollout_arrays(*_batch(step)))
    out = tmp_path / "b.rollouts.npz"
    return out, R.pack(run, steps, out)


def test_round_trip_is_exact(tmp_path):
    out, sha = _recorded(tmp_path)
    src = R.ReplaySource.open(out, sha, 2)
    rb, rewards = _batch(2)
    got, got_rewards = R.replayed_batch(src.step(2), rb.prompt_ids, rb.prompt_mask, rb.pixels, rb.grids, step=2,
                                        source=out)
    assert torch.equal(got.response_ids, rb.response_ids) and torch.equal(got.response_mask, rb.response_mask)
    assert got.response_ids.dtype == torch.long and got.group_ids == rb.group_ids
    assert torch.equal(got_rewards["scores"], rewards["scores"])  # float32 bits kept


def test_other_prompts_are_refused(tmp_path):
    out, sha = _recorded(tmp_path)
    src = R.ReplaySource.open(out, sha, 2)
    rb, _ = _batch(1)
    with pytest.raises(HarnessError, match="made for other prompts"):
        R.replayed_batch(src.step(2), rb.prompt_ids, rb.prompt_mask, rb.pixels, rb.grids, step=2, source=out)
    with pytest.raises(HarnessError, match="cannot be replayed"):
        src.step(3)


def test_checksum_size_and_missing_steps(tmp_path):
    out, sha = _recorded(tmp_path)
    with pytest.raises(HarnessError, match="SHA-256"):
        R.ReplaySource.open(out, "0" * 64, 2)
    with pytest.raises(HarnessError, match="lack"):
        R.ReplaySource.open(out, sha, 3)
    with pytest.raises(HarnessError, match="not found"):
        R.ReplaySource.open(tmp_path / "nope.npz", sha, 2)
    with pytest.raises(HarnessError, match="no recorded rollout for step 3"):
        R.pack(tmp_path / "run", 3, tmp_path / "x.npz")
    (tmp_path / "run" / "rollouts" / "initial.npz").unlink()
    with pytest.raises(HarnessError, match="no recorded initial policy"):
        R.pack(tmp_path / "run", 2, tmp_path / "y.npz")


def test_pickled_arrays_are_never_loaded(tmp_path):
    """An archive holding an object array (pickle) is refused, even with a matching checksum."""
    evil = tmp_path / "evil.npz"
    np.savez(evil, **{"1/prompt_ids": np.array([object()], dtype=object)})
    with pytest.raises(HarnessError, match="only plain numeric or text arrays"):
        R.ReplaySource.open(evil, __import__("hashlib").sha256(evil.read_bytes()).hexdigest(), 1)


def _open(path, steps=1):
    return R.ReplaySource.open(path, hashlib.sha256(path.read_bytes()).hexdigest(), steps)


def _npy_header(shape, dtype="<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_a_decompression_bomb_is_refused_before_any_data_is_read(tmp_path, monkeypatch):
    """The zip directory and each member's .npy header decide: no array is decompressed past the limit."""
    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, **{"initial/w": np.zeros(1 << 20, dtype=np.float32)})  # 4 MiB of zeros, ~4 KB
    assert bomb.stat().st_size < 64 << 10
    monkeypatch.setattr(R, "MAX_DECOMPRESSED", 1 << 20)
    read = []
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: read.append(a))
    with pytest.raises(HarnessError, match=r"decompress to more than 1,048,576 bytes") as err:
        _open(bomb)
    assert read == [] and "bomb.npz::initial/w.npy" in str(err.value)


def test_npz_members_are_checked_against_their_headers_and_names(tmp_path):
    def archive(name, members):
        path = tmp_path / name
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            for member, data in members:
                zf.writestr(member, data)
        return path

    claims = archive("claims.npz", [("1/scores.npy", _npy_header((10 ** 6,)) + bytes(16))])
    with pytest.raises(HarnessError, match=r"\(1000000,\) is 4,000,000 bytes but the member holds 16"):
        _open(claims)
    stray = archive("stray.npz", [("payload.npy", _npy_header((1,)) + bytes(4))])
    with pytest.raises(HarnessError, match="'payload.npy' is not expected here"):
        _open(stray)
    for odd in ("7/scores", "²/acc", "0/acc", "1" * 5000 + "/acc"):
        late = archive("late.npz", [(f"{odd}.npy", _npy_header((1,)) + bytes(4))])
        with pytest.raises(HarnessError, match="is not expected here"):
            _open(late, steps=2)
    with pytest.warns(UserWarning, match="Duplicate name"):
        twice = archive("twice.npz", [("1/acc.npy", _npy_header((1,)) + bytes(4))] * 2)
    with pytest.raises(HarnessError, match="appears twice"):
        _open(twice)
    structured = archive("rec.npz", [("1/acc.npy", _npy_header((1,), [("a", "<f4")]) + bytes(4))])
    with pytest.raises(HarnessError, match="only plain numeric or text arrays"):
        _open(structured)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(HarnessError, match="not a readable .npz archive"):
        _open(garbage)


def test_pack_reads_the_run_directory_through_the_same_checks(tmp_path):
    """record-baseline packs a run directory that may come from elsewhere: its archives are checked too."""
    run = tmp_path / "run"
    R.save_initial(run, torch.nn.Linear(2, 2))
    R.save_step(run, 1, R.rollout_arrays(*_batch(1)))
    np.savez(R.step_file(run, 1), prompt_ids=np.array([object()], dtype=object))
    with pytest.raises(HarnessError, match="recorded rollout: member 'prompt_ids.npy' has dtype"):
        R.pack(run, 1, tmp_path / "out.npz")
    np.savez(R.step_file(run, 1), **{"extra": np.zeros(1)})
    with pytest.raises(HarnessError, match="'extra.npy' is not expected here"):
        R.pack(run, 1, tmp_path / "out.npz")


def test_initial_policy_round_trips_and_must_fit(tmp_path):
    run = tmp_path / "run"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).to(torch.bfloat16)
    R.save_initial(run, model)
    R.save_step(run, 1, R.rollout_arrays(*_batch(1)))
    out = tmp_path / "b.rollouts.npz"
    src = R.ReplaySource.open(out, R.pack(run, 1, out), 1)
    other = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).to(torch.bfloat16)
    src.load_initial(other)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))
    with pytest.raises(HarnessError, match="does not fit"):
        src.load_initial(torch.nn.Linear(3, 4))


def test_a_model_at_real_width_keeps_no_replay_archive(monkeypatch):
    """The initial policy goes into the archive in float32: a model over the limit is not kept (and says why)."""
    small = torch.nn.Linear(10, 10)  # 110 values
    assert R.replay_storable(small) is None
    monkeypatch.setattr(R, "REPLAY_MAX_PARAMS", 100)
    why = R.replay_storable(small)
    assert why is not None and why.startswith("rollouts not kept for replay") and "0 M values" in why
    monkeypatch.setattr(R, "REPLAY_MAX_PARAMS", 110)
    assert R.replay_storable(small) is None  # the limit itself still fits


@pytest.mark.parametrize("shares", [[[0, 1], [2, 3]], [[0], [1], [2], [3]], [[0, 1, 2], [3]]])
def test_ranks_record_and_replay_what_one_process_records(shares):
    """A sharded job's rollout, gathered in the batch's own order (each rank's prompts padded to its own longest),
    is the one-process record bit for bit; each rank's replay takes back exactly its rows, cropped to its width."""
    whole = R.rollout_arrays(*_batch(3))
    pad = 0
    whole["prompt_ids"] = np.where(whole["prompt_mask"] == 1, whole["prompt_ids"], pad)  # left padding, as collated
    parts = []
    for rows in shares:
        mine = {f: whole[f][rows] for f in R.FIELDS}
        lead = int((mine["prompt_mask"] == 0).all(axis=0).cumprod().sum())  # this rank pads to its own longest
        mine["prompt_ids"], mine["prompt_mask"] = mine["prompt_ids"][:, lead:], mine["prompt_mask"][:, lead:]
        parts.append((rows, mine))
    merged = R.merge_ranks(list(reversed(parts)), pad)  # arrival order does not matter
    for f in R.FIELDS:
        assert merged[f].dtype == whole[f].dtype and np.array_equal(merged[f], whole[f]), f
    for rows, mine in parts:
        back = R.rank_rows(merged, rows, mine["prompt_ids"].shape[1])
        for f in R.FIELDS:
            assert np.array_equal(back[f], mine[f]), f


def test_ranks_that_miss_a_row_are_refused():
    whole = R.rollout_arrays(*_batch(3))
    parts = [([0, 1], {f: whole[f][[0, 1]] for f in R.FIELDS}), ([1, 3], {f: whole[f][[1, 3]] for f in R.FIELDS})]
    with pytest.raises(HarnessError, match="cover the step's batch once"):
        R.merge_ranks(parts, 0)
