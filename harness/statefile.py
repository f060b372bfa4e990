"""Training state on disk without pickle: tensors in safetensors, everything else in JSON.

A state is a tree of dicts (string keys), lists, tuples, tensors and scalars — a model or optimizer
state dict, RNG states. :func:`save_state` writes ``<stem>.safetensors`` (every tensor, by name)
and ``<stem>.json`` (the tree, tensors replaced by their names). Nothing in either file is code:
loading them parses JSON and reads raw tensor bytes, so a file planted in a run directory can
give wrong numbers, never run anything.

Exactness: tensors keep their dtype and bytes; floats are stored as ``float.hex`` (infinities and
NaN included), Python ints as JSON integers, so RNG states and counters round-trip bit for bit.

Sharded tensors (FSDP2's ``DTensor``) are stored as this rank's local shard. :func:`load_state`
returns them as :class:`Shard`; :func:`restore_like` turns the loaded tree back into the live
layout using a template (the state dict of the model being resumed): shapes and dtypes must
match, else a one-line error.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.errors import HarnessError
from harness.jsonio import MiB, dumps, load_json_strict

FORMAT = "harness-state/1"
TREE_LIMIT = 256 * MiB


@dataclass(frozen=True)
class Shard:
    """This rank's local piece of a sharded tensor, as loaded (see :func:`restore_like`)."""

    local: torch.Tensor


def _is_dtensor(t: Any) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed
        return False
    return isinstance(t, DTensor)


def _encode(obj: Any, tensors: dict[str, torch.Tensor], seen: set[int]) -> Any:
    if isinstance(obj, torch.Tensor):
        tag = "D" if _is_dtensor(obj) else "T"
        t = (obj.to_local() if tag == "D" else obj).detach().cpu().contiguous()  # type: ignore[attr-defined]  # DTensor
        ptr = t.untyped_storage().data_ptr()
        if t.numel() and ptr in seen:  # safetensors refuses tensors that share memory (tied weights)
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        name = f"t{len(tensors)}"
        tensors[name] = t
        return {tag: name}
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return {"v": obj}
    if isinstance(obj, int):
        return {"v": int(obj)}
    if isinstance(obj, float):
        return {"f": float(obj).hex()}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError(f"state dict keys must be strings, got {sorted({type(k).__name__ for k in obj})}")
        return {"d": {k: _encode(v, tensors, seen) for k, v in obj.items()}}
    if isinstance(obj, tuple):
        return {"t": [_encode(v, tensors, seen) for v in obj]}
    if isinstance(obj, list):
        return {"l": [_encode(v, tensors, seen) for v in obj]}
    raise TypeError(f"cannot store a {type(obj).__name__} in a training state")


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_state(obj: Any, stem: Path) -> list[Path]:
    """Write ``stem.safetensors`` and ``stem.json`` (new files, fsynced); returns both paths."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(obj, tensors, set())
    st_path, js_path = stem.with_name(stem.name + ".safetensors"), stem.with_name(stem.name + ".json")
    for p in (st_path, js_path):
        if os.path.lexists(p):
            raise FileExistsError(p)
    save_file(tensors, str(st_path), metadata={"format": FORMAT})
    _fsync_file(st_path)
    fd = os.open(js_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(dumps({"format": FORMAT, "tensors": len(tensors), "tree": tree}))
        fh.flush()
        os.fsync(fh.fileno())
    return [st_path, js_path]


def _bad(path: Path, message: str) -> HarnessError:
    return HarnessError(f"corrupt training state: {message}", file=str(path),
                        fix="resume from another checkpoint, or start a new run")


def _decode(node: Any, tensors: Any, path: Path, depth: int = 0) -> Any:
    if depth > 64:
        raise _bad(path, "nested too deeply")
    if not isinstance(node, dict) or len(node) != 1:
        raise _bad(path, "a node is not a one-key object")
    (tag, val), = node.items()
    if tag == "v":
        if isinstance(val, (dict, list)):
            raise _bad(path, "a scalar node holds a container")
        return val
    if tag == "f":
        try:
            return float.fromhex(val)
        except (TypeError, ValueError):
            raise _bad(path, f"bad float {val!r}") from None
    if tag in ("T", "D"):
        if not isinstance(val, str) or val not in tensors.keys():
            raise _bad(path, f"tensor {val!r} is not in the tensor file")
        t = tensors.get_tensor(val)
        return Shard(t) if tag == "D" else t
    if tag == "d" and isinstance(val, dict):
        return {k: _decode(v, tensors, path, depth + 1) for k, v in val.items()}
    if tag in ("l", "t") and isinstance(val, list):
        items = [_decode(v, tensors, path, depth + 1) for v in val]
        return tuple(items) if tag == "t" else items
    raise _bad(path, f"unknown node {tag!r}")


def check_regular(path: Path) -> None:
    """A one-line error unless ``path`` is a regular file (symbolic links refused)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise HarnessError("file missing", file=str(path), fix="resume from a complete checkpoint") from None
    if not stat.S_ISREG(st.st_mode):
        raise HarnessError("not a regular file (a link, FIFO, device or directory); refused", file=str(path),
                           fix="a checkpoint holds only regular files written by the harness")


def load_state(stem: Path) -> Any:
    """The tree :func:`save_state` wrote at ``stem`` (tensors on the CPU; sharded ones as :class:`Shard`)."""
    from safetensors import SafetensorError, safe_open

    st_path, js_path = stem.with_name(stem.name + ".safetensors"), stem.with_name(stem.name + ".json")
    for p in (js_path, st_path):
        check_regular(p)
    doc = load_json_strict(js_path, TREE_LIMIT, follow_symlinks=False)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "tree" not in doc:
        raise _bad(js_path, f"not a {FORMAT} file")
    try:
        with safe_open(str(st_path), framework="pt", device="cpu") as tensors:
            if (tensors.metadata() or {}).get("format") != FORMAT:
                raise _bad(st_path, f"not a {FORMAT} tensor file")
            return _decode(doc["tree"], tensors, js_path)
    except SafetensorError as err:
        raise _bad(st_path, str(err).splitlines()[0] if str(err) else "unreadable") from None
    except RecursionError:
        raise _bad(js_path, "nested too deeply") from None


def restore_like(loaded: Any, template: Any, where: str, path: Path) -> Any:
    """``loaded`` shaped like ``template``: tensors moved to the template's device, shards re-wrapped.

    Every tensor must have the template's shape and dtype; a key the template has must be present.
    """
    if _is_dtensor(template):
        if not isinstance(loaded, (Shard, torch.Tensor)):
            raise _bad(path, f"{where}: expected a sharded tensor")
        from torch.distributed.tensor import DTensor

        local, mine = template.to_local(), loaded.local if isinstance(loaded, Shard) else loaded
        _same(mine, local, where, path)
        return DTensor.from_local(mine.to(local.device), template.device_mesh, template.placements,
                                  run_check=False, shape=template.shape, stride=template.stride())
    if isinstance(template, torch.Tensor):
        if not isinstance(loaded, torch.Tensor):
            raise _bad(path, f"{where}: expected a tensor")
        _same(loaded, template, where, path)
        return loaded.to(template.device)
    if isinstance(loaded, (Shard, torch.Tensor)) and template is not None:
        raise _bad(path, f"{where}: unexpected tensor")
    if isinstance(template, dict):
        if not isinstance(loaded, dict):
            raise _bad(path, f"{where}: expected an object")
        missing = [k for k in template if k not in loaded]
        if missing:
            raise _bad(path, f"{where}: missing {missing[0]!r} (the checkpoint does not match this model)")
        return {k: restore_like(v, template.get(k), f"{where}.{k}", path) for k, v in loaded.items()}
    if isinstance(template, (list, tuple)) and isinstance(loaded, (list, tuple)):
        if len(template) != len(loaded):
            raise _bad(path, f"{where}: {len(loaded)} items, expected {len(template)}")
        out = [restore_like(a, b, f"{where}[{i}]", path) for i, (a, b) in enumerate(zip(loaded, template))]
        return tuple(out) if isinstance(loaded, tuple) else out
    if isinstance(loaded, Shard):
        raise _bad(path, f"{where}: a sharded tensor where the model has none")
    return loaded


def _same(a: torch.Tensor, b: torch.Tensor, where: str, path: Path) -> None:
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        raise _bad(path, f"{where}: {a.dtype} {tuple(a.shape)} where the model has {b.dtype} {tuple(b.shape)}")
