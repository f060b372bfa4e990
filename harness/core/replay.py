"""Recorded rollouts: what a run sampled and scored at each step, and replaying it teacher-forced.

A free run writes the policy it starts GRPO from (after any warm start: the seed checkpoint) to
``rollouts/initial.npz`` and each step's rollout (prompt / response token ids, masks, group ids,
reward parts) to ``rollouts/step-NNNNNN.npz``; a baseline packs its primary run's into one
checksummed ``<profile>-<scale>.rollouts.npz``. A **replay** run starts from that same policy and
feeds those rollouts to the training side instead of sampling: old / reference log-probs,
advantages, losses, gradient norm and the update are computed by the candidate from the
baseline's weights, tokens and rewards. Sampling chaos (and the warm start's own drift) is taken
out, so what is compared is "does this machine / kernel / version train the same".

Files are numpy ``.npz`` archives, and every one is read through :func:`load_npz_checked` (no
code can ride along, nothing is decompressed unchecked): a regular file of bounded size, read once
(a baseline's: its SHA-256 checked against the baseline that names it before those same bytes are
parsed); then, from the zip directory and each member's ``.npy`` header alone, before any array
data is decompressed: the member names the caller expects, no encryption, plain numeric or text
dtypes (no object, structured or sub-array dtype), each member's size equal to its header plus
shape x item size, and the decompressed total within ``MAX_DECOMPRESSED``.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import HarnessError
from harness.jsonio import read_bytes_limited, write_bytes_atomic

FIELDS = ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "group_ids", "scores", "acc", "format")
MAX_BYTES = 512 * 1024 * 1024  # a rollouts archive larger than this is refused unread
MAX_DECOMPRESSED = 2 << 30  # its arrays, decompressed (an initial policy at REPLAY_MAX_PARAMS is 256 MB)
MAX_MEMBERS = 200_000  # arrays in one archive (a smoke baseline holds ~400)
NPY_KINDS = "biufU"  # bool, integers, floats, unicode text (group ids)
STEP_DIR = "rollouts"


INITIAL = "initial"


def step_file(run_dir: Path, step: int) -> Path:
    return run_dir / STEP_DIR / f"step-{step:06d}.npz"


# A baseline's replay archive holds the initial policy in float32: beyond this many parameters (a model at its
# real width: 3 B parameters would be 12 GB) the run keeps no rollouts and its baseline has no replay tier.
REPLAY_MAX_PARAMS = 64_000_000
NOT_KEPT = "rollouts not kept for replay"  # how a run's manifest notes it (model.notes)


def replay_storable(model: torch.nn.Module) -> str | None:
    """None when the model's initial policy fits a replay archive, else why it is not kept."""
    n = sum(t.numel() for t in model.state_dict().values())
    if n <= REPLAY_MAX_PARAMS:
        return None
    return (f"{NOT_KEPT}: the initial policy has {n / 1e6:,.0f} M values, over the "
            f"{REPLAY_MAX_PARAMS / 1e6:,.0f} M a replay archive holds (float32)")


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole state on the CPU in float32; a sharded (FSDP2) model's shards are gathered, so every rank
    of the job must call it."""
    from torch.distributed.tensor import DTensor

    return {name: (t.full_tensor() if isinstance(t, DTensor) else t).detach().to("cpu", torch.float32)
            for name, t in model.state_dict().items()}


def save_initial(run_dir: Path | None, model: torch.nn.Module) -> None:
    """The policy's weights before step 1 (float32 numpy: exact for fp32 and bf16 parameters). Every rank of a
    sharded job calls it (the shards are gathered); the one with ``run_dir`` writes it."""
    arrays = {name: t.numpy() for name, t in full_state(model).items()}
    if run_dir is not None:
        _atomic_npz(run_dir / STEP_DIR / f"{INITIAL}.npz", arrays)


def _atomic_npz(path: Path, arrays: dict[str, np.ndarray]) -> str:
    """Write ``arrays`` as a compressed .npz (atomically, umask mode); returns the SHA-256 of its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub: **arrays meets allow_pickle
    data = buf.getvalue()
    write_bytes_atomic(path, data)
    return hashlib.sha256(data).hexdigest()


def rollout_arrays(rb: Any, rewards: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The arrays of one step's rollout (CPU numpy; exact float32 reward bits)."""
    as_np = lambda t, dt: t.detach().to("cpu").numpy().astype(dt)  # noqa: E731
    return {
        "prompt_ids": as_np(rb.prompt_ids, np.int32), "prompt_mask": as_np(rb.prompt_mask, np.uint8),
        "response_ids": as_np(rb.response_ids, np.int32), "response_mask": as_np(rb.response_mask, np.uint8),
        "group_ids": np.asarray([str(g) for g in rb.group_ids]),
        "scores": as_np(rewards["scores"], np.float32), "acc": as_np(rewards["acc"], np.float32),
        "format": as_np(rewards["format"], np.float32),
    }


def save_step(run_dir: Path, step: int, arrays: dict[str, np.ndarray]) -> None:
    _atomic_npz(step_file(run_dir, step), arrays)


def _pad_to(a: np.ndarray, width: int, value: int, left: bool) -> np.ndarray:
    extra = width - a.shape[1]
    if extra <= 0:
        return a
    fill = np.full((a.shape[0], extra), value, dtype=a.dtype)
    return np.concatenate([fill, a] if left else [a, fill], axis=1)


def merge_ranks(parts: list[tuple[list[int], dict[str, np.ndarray]]], pad_id: int) -> dict[str, np.ndarray]:
    """One step's rollout as one process would have recorded it, from each rank's (global rows, arrays): rows
    in the global prompt order, prompts left-padded to the widest rank's, responses right-padded to the longest.
    A replay at any world size takes its rows back with :func:`rank_rows`."""
    total = sum(len(rows) for rows, _ in parts)
    p_w = max(a["prompt_ids"].shape[1] for _, a in parts)
    r_w = max(a["response_ids"].shape[1] for _, a in parts)
    order = np.empty(total, dtype=np.int64)
    pieces: dict[str, list[np.ndarray]] = {f: [] for f in FIELDS}
    at = 0
    for rows, a in parts:
        order[at:at + len(rows)] = rows
        at += len(rows)
        pieces["prompt_ids"].append(_pad_to(a["prompt_ids"], p_w, pad_id, left=True))
        pieces["prompt_mask"].append(_pad_to(a["prompt_mask"], p_w, 0, left=True))
        pieces["response_ids"].append(_pad_to(a["response_ids"], r_w, pad_id, left=False))
        pieces["response_mask"].append(_pad_to(a["response_mask"], r_w, 0, left=False))
        for f in ("group_ids", "scores", "acc", "format"):
            pieces[f].append(a[f])
    inverse = np.argsort(order, kind="stable")
    if not np.array_equal(order[inverse], np.arange(total)):
        raise HarnessError("the ranks' prompts do not cover the step's batch once each", key_path="rollouts",
                           fix="report this: the data-parallel split of the batch is inconsistent")
    return {f: np.concatenate(v, axis=0)[inverse] for f, v in pieces.items()}


def rank_rows(rec: dict[str, np.ndarray], rows: list[int], prompt_width: int) -> dict[str, np.ndarray]:
    """The ``rows`` of a recorded step (a rank's share), their prompts cropped on the left to
    ``prompt_width`` (the width this rank's own batch pads to; the columns cropped hold padding only, or the
    prompts differ and :func:`replayed_batch` says so)."""
    if rows and max(rows) >= len(rec["prompt_ids"]):
        return rec  # more prompts than recorded: replayed_batch names the mismatch
    out = {f: rec[f][rows] for f in FIELDS}
    cut = out["prompt_ids"].shape[1] - prompt_width
    if cut > 0 and not out["prompt_mask"][:, :cut].any():
        out["prompt_ids"], out["prompt_mask"] = out["prompt_ids"][:, cut:], out["prompt_mask"][:, cut:]
    return out


def load_npz_checked(source: Path | bytes, *, what: str, fix: str,
                     expect: Callable[[str], bool] | None = None, name: str | None = None) -> dict[str, np.ndarray]:
    """The arrays of a foreign ``.npz`` (a path, or its bytes already read), checked before any data is read.

    ``expect(key)`` says whether an array name belongs in this archive. Every refusal is one line naming
    ``name`` (default: the path), the member and ``fix``.
    """
    where = name or str(source if not isinstance(source, bytes) else "<bytes>")
    raw = source if isinstance(source, bytes) else read_bytes_limited(source, MAX_BYTES, what=what)

    def bad(message: str, key: str | None = None) -> HarnessError:
        return HarnessError(f"{what}: {message}", file=where, key_path=key, fix=fix)

    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as err:
        raise bad(f"not a readable .npz archive ({err})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise bad(f"{len(infos):,} members, over the limit of {MAX_MEMBERS:,}")
        seen: set[str] = set()
        total = 0
        for info in infos:
            key = info.filename[:-4] if info.filename.endswith(".npy") else None
            if key is None or key in seen or (expect is not None and not expect(key)):
                why = "is not a .npy array" if key is None else "appears twice" if key in seen else "is not expected here"
                raise bad(f"member {info.filename!r} {why}", info.filename)
            seen.add(key)
            if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise bad(f"member {info.filename!r} is encrypted or compressed with method {info.compress_type} "
                          "(numpy writes stored or deflated members)", info.filename)
            total += info.file_size
            if total > MAX_DECOMPRESSED:
                raise bad(f"the arrays decompress to more than {MAX_DECOMPRESSED:,} bytes (the limit)", info.filename)
            _check_npy_header(zf, info, bad)
        out: dict[str, np.ndarray] = {}
        for info in infos:
            try:
                with zf.open(info) as fp:
                    out[info.filename[:-4]] = np.lib.format.read_array(fp, allow_pickle=False)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:  # a CRC or length mismatch included
                raise bad(f"member {info.filename!r} is unreadable ({err})", info.filename) from None
        return out


def _check_npy_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, bad: Callable[..., HarnessError]) -> None:
    """One member's ``.npy`` header: a plain dtype, and exactly header + shape x item size bytes (no data read)."""
    try:
        with zf.open(info) as fp:
            version = np.lib.format.read_magic(fp)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
            else:
                raise ValueError(f".npy format version {version} (numpy writes 1.0 or 2.0 for plain arrays)")
            header_len = fp.tell()
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise bad(f"member {info.filename!r} has no readable .npy header ({err})", info.filename) from None
    if dtype.hasobject or dtype.kind not in NPY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise bad(f"member {info.filename!r} has dtype {dtype.str!r}; only plain numeric or text arrays are read",
                  info.filename)
    if any(d < 0 for d in shape):
        raise bad(f"member {info.filename!r} has a negative dimension in its shape {tuple(shape)}", info.filename)
    nbytes = math.prod(shape) * dtype.itemsize
    if header_len + nbytes != info.file_size:
        raise bad(f"member {info.filename!r}: {dtype.str} {tuple(shape)} is {nbytes:,} bytes but the member holds "
                  f"{info.file_size - header_len:,}", info.filename)


def _is_field(key: str) -> bool:
    return key in FIELDS


def _is_any(key: str) -> bool:
    return bool(key)


def baseline_keys(steps: int) -> Callable[[str], bool]:
    """The array names of a baseline's archive: ``initial/<parameter>`` and ``<step>/<field>``, step <= ``steps``."""
    def ok(key: str) -> bool:
        head, _, tail = key.partition("/")
        if head == INITIAL:
            return bool(tail)
        return re.fullmatch(r"[1-9][0-9]{0,8}", head) is not None and int(head) <= steps and tail in FIELDS

    return ok


RECORD_FIX = "record the baseline from a run made by this version of the harness"


def _step_problem(rec: dict[str, np.ndarray]) -> str | None:
    """What is wrong with one step's arrays (shapes and kinds a replay reads), or None."""
    rows = None
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask"):
        a = rec[name]
        if a.ndim != 2 or a.dtype.kind not in "biu":
            return f"{name} is not a 2-D integer array ({a.dtype}, shape {a.shape})"
        rows = a.shape[0] if rows is None else rows
        if a.shape[0] != rows:
            return f"{name} has {a.shape[0]} rows, not {rows}"
    if rec["prompt_ids"].shape != rec["prompt_mask"].shape or rec["response_ids"].shape != rec["response_mask"].shape:
        return "an id array and its mask differ in shape"
    for name in ("group_ids", "scores", "acc", "format"):
        a = rec[name]
        kinds = "biuU" if name == "group_ids" else "biuf"
        if a.shape != (rows,) or a.dtype.kind not in kinds:
            return f"{name} is not one value per row ({a.dtype}, shape {a.shape}, {rows} rows)"
    return None


def pack(run_dir: Path, steps: int, out: Path) -> str:
    """Pack a run's per-step rollouts into one archive (keys ``<step>/<field>``); returns its SHA-256."""
    arrays: dict[str, np.ndarray] = {}
    initial = run_dir / STEP_DIR / f"{INITIAL}.npz"
    if not initial.is_file():
        raise HarnessError("the run has no recorded initial policy", file=str(initial),
                           fix="record the baseline from a run made by this version of the harness")
    for key, value in load_npz_checked(initial, what="recorded initial policy", fix=RECORD_FIX,
                                       expect=_is_any).items():
        arrays[f"{INITIAL}/{key}"] = value
    for step in range(1, steps + 1):
        f = step_file(run_dir, step)
        if not f.is_file():
            raise HarnessError(f"the run has no recorded rollout for step {step}", file=str(f),
                               fix="record the baseline from a run made by this version of the harness")
        for key, value in load_npz_checked(f, what="recorded rollout", fix=RECORD_FIX, expect=_is_field).items():
            arrays[f"{step}/{key}"] = value
    return _atomic_npz(out, arrays)


@dataclass
class ReplaySource:
    """A baseline's recorded rollouts, verified, step by step."""

    path: Path
    arrays: dict[str, np.ndarray]
    steps: int

    @classmethod
    def open(cls, path: Path, sha256: str, steps: int) -> ReplaySource:
        path = Path(path)
        data = read_bytes_limited(path, MAX_BYTES, what="rollouts archive")  # hashed and loaded: the same bytes
        if hashlib.sha256(data).hexdigest() != sha256:
            raise HarnessError("recorded rollouts do not match the SHA-256 the baseline names", file=str(path),
                               fix="restore the file recorded with the baseline (it was changed or replaced)")
        arrays = load_npz_checked(data, what="recorded rollouts", fix="re-record the baseline",
                                  expect=baseline_keys(steps), name=str(path))
        for step in range(1, steps + 1):
            missing = [f for f in FIELDS if f"{step}/{f}" not in arrays]
            if missing:
                raise HarnessError(f"recorded rollouts lack {', '.join(missing)} at step {step}", file=str(path),
                                   fix="re-record the baseline")
            problem = _step_problem({f: arrays[f"{step}/{f}"] for f in FIELDS})
            if problem:
                raise HarnessError(f"recorded rollouts of step {step}: {problem}", file=str(path),
                                   fix="re-record the baseline")
        return cls(path, arrays, steps)

    def load_initial(self, model: torch.nn.Module) -> None:
        """Load the recorded initial policy into ``model`` (every parameter and buffer, cast to its dtype)."""
        prefix = f"{INITIAL}/"
        state = {k[len(prefix):]: torch.from_numpy(v) for k, v in self.arrays.items() if k.startswith(prefix)}
        own = model.state_dict()
        if set(state) != set(own) or any(tuple(state[k].shape) != tuple(own[k].shape) for k in own):
            raise HarnessError("the recorded initial policy does not fit this run's model", file=str(self.path),
                               fix="replay with the recipe and scale the baseline was recorded with")
        from torch.distributed.tensor import DTensor, distribute_tensor

        with torch.no_grad():
            for name, tensor in own.items():
                value = state[name].to(tensor.dtype)
                if isinstance(tensor, DTensor):  # a sharded model: this rank's shard, cut locally (no collective)
                    value = distribute_tensor(value.to(tensor.device), tensor.device_mesh, tensor.placements,
                                              src_data_rank=None)
                tensor.copy_(value)

    def step(self, step: int) -> dict[str, np.ndarray]:
        if not 1 <= step <= self.steps:
            raise HarnessError(f"the baseline recorded {self.steps} steps; step {step} cannot be replayed",
                               key_path="--steps", fix=f"give --steps {self.steps} or fewer")
        return {f: self.arrays[f"{step}/{f}"] for f in FIELDS}


def replayed_batch(rec: dict[str, np.ndarray], prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                   pixels: list[Any], grids: list[Any], *, step: int, source: Path) -> tuple[Any, dict[str, torch.Tensor]]:
    """The RolloutBatch and rewards of a recorded step, on the prompts this run built (checked equal)."""
    from harness.core.rollout import RolloutBatch

    device = prompt_ids.device
    want_ids = torch.from_numpy(rec["prompt_ids"].astype(np.int64))
    want_mask = torch.from_numpy(rec["prompt_mask"].astype(np.int64))
    if want_ids.shape != prompt_ids.shape or not torch.equal(want_ids, prompt_ids.cpu()) \
            or not torch.equal(want_mask, prompt_mask.cpu()):
        raise HarnessError(f"the recorded rollout of step {step} was made for other prompts than this run builds "
                           f"(recorded {tuple(want_ids.shape)}, built {tuple(prompt_ids.shape)})", file=str(source),
                           fix="replay with the recipe, scale and data the baseline was recorded with")
    f32 = lambda a: torch.from_numpy(a.astype(np.float32)).to(device)  # noqa: E731
    response_ids = torch.from_numpy(rec["response_ids"].astype(np.int64)).to(device)
    rb = RolloutBatch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                      response_mask=torch.from_numpy(rec["response_mask"].astype(np.int64)).to(device),
                      rollout_logp=torch.zeros(response_ids.shape, dtype=torch.float32, device=device),
                      group_ids=[str(g) for g in rec["group_ids"].tolist()], pixels=pixels, grids=grids)
    return rb, {"scores": f32(rec["scores"]), "acc": f32(rec["acc"]), "format": f32(rec["format"])}
