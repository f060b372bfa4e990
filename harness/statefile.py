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

:func:`safetensors_index` checks a safetensors file that came from elsewhere (a checkpoint, the
warm-start cache, a model directory) before the native loader sees it: the 8-byte header length
within ``SAFETENSORS_HEADER_LIMIT`` and the file, the header read by the strict JSON reader, every
tensor's dtype, shape and offsets inside the file, their byte counts equal to shape x item size, the
tensors back to back over the whole data section. Only the header is read.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.jsonio import TENSOR_INDEX_KEYS, MiB, dumps, load_json_strict, loads_strict, open_regular
from harness.lazyimport import lazy_import

if TYPE_CHECKING:
    import torch
else:  # checking a foreign file's header, or refusing a run before it starts, needs no torch
    torch = lazy_import("torch")

FORMAT = "harness-state/1"
TREE_LIMIT = 256 * MiB
SAFETENSORS_HEADER_LIMIT = 16 * MiB  # ~100 bytes a tensor: 160,000 tensors in one file
MAX_DIMS = 64  # dimensions of one tensor (torch's own limit)
# bytes per element of each safetensors dtype the harness reads (safetensors.torch's table)
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E4M3FNUZ": 1, "F8_E5M2": 1, "F8_E5M2FNUZ": 1,
               "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
               "F64": 8, "C64": 8}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header: dtype, shape and byte range within the data section."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _split_header(size: int, read: Callable[[int, int], bytes], what: str, name: str) -> tuple[bytes, int]:
    """The JSON header of a safetensors file of ``size`` bytes (``read(n, offset)``) and its data section's size."""
    head = read(8, 0) if size >= 8 else b""
    if len(head) < 8:
        raise HarnessError(f"{what} of {size} bytes is shorter than the 8-byte safetensors header length", file=name)
    n = int.from_bytes(head, "little")
    if n > SAFETENSORS_HEADER_LIMIT:
        raise HarnessError(f"{what}: header length {n:,} bytes, over the limit of {SAFETENSORS_HEADER_LIMIT:,}",
                           file=name)
    if 8 + n > size:
        raise HarnessError(f"{what}: header length {n:,} bytes runs past the end of the file ({size:,} bytes)",
                           file=name)
    header = read(n, 8)
    if len(header) != n:
        raise HarnessError(f"{what} changed while being read", file=name)
    return header, size - 8 - n


def _header_bytes(source: Path | bytes, what: str) -> tuple[bytes, int]:
    """:func:`_split_header` of a buffer, or of a file (only its first 8 + n bytes are read)."""
    if isinstance(source, bytes):
        return _split_header(len(source), lambda n, off: source[off:off + n], what, "<bytes>")
    fd, st = open_regular(source, what=what)
    try:
        return _split_header(st.st_size, lambda n, off: os.pread(fd, n, off), what, str(source))
    except OSError as err:
        raise HarnessError(f"cannot read ({err.strerror})", file=str(source)) from None
    finally:
        os.close(fd)


def safetensors_index(source: Path | bytes, *, what: str = "safetensors file", fix: str,
                      name: str | None = None) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    """Tensors and metadata of a safetensors file (a path: only its header is read) or buffer, checked.

    Anything the native loader could choke on, allocate for or read past is a one-line
    :class:`HarnessError` naming ``name`` (default: the path), the header key and ``fix``.
    """
    where = name or ("<bytes>" if isinstance(source, bytes) else str(source))
    try:
        raw, data_len = _header_bytes(source, what)
    except HarnessError as err:
        raise HarnessError(err.message, file=where, fix=fix) from None

    def bad(message: str, key: str | None = None) -> HarnessError:
        return HarnessError(f"{what}: {message}", file=where, key_path=key, fix=fix)

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("the safetensors header is not UTF-8") from None
    try:
        doc = loads_strict(text, f"{where} (header)", max_object_keys=TENSOR_INDEX_KEYS,
                           max_values=8 * TENSOR_INDEX_KEYS)
    except HarnessError as err:
        raise bad(f"unreadable safetensors header: {err.message}", err.key_path) from None
    if not isinstance(doc, dict):
        raise bad("the safetensors header is not a JSON object")
    meta = doc.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise bad("__metadata__ must map strings to strings", "/__metadata__")
    out: dict[str, TensorEntry] = {}
    for key, entry in doc.items():
        ptr = "/" + key.replace("~", "~0").replace("/", "~1")
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise bad("a tensor entry needs exactly dtype, shape and data_offsets", ptr)
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPE_BYTES:
            raise bad(f"dtype {dtype!r} is not one the harness reads ({', '.join(DTYPE_BYTES)})", ptr + "/dtype")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise bad(f"shape must be a list of at most {MAX_DIMS} non-negative integers", ptr + "/shape")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(
                isinstance(o, int) and not isinstance(o, bool) for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise bad("data_offsets must be [begin, end] with 0 <= begin <= end", ptr + "/data_offsets")
        if offsets[1] > data_len:
            raise bad(f"data_offsets {offsets} run past the end of the data ({data_len:,} bytes)",
                      ptr + "/data_offsets")
        nbytes = math.prod(shape) * DTYPE_BYTES[dtype]
        if nbytes != offsets[1] - offsets[0]:
            raise bad(f"{dtype} {shape} is {nbytes:,} bytes but data_offsets {offsets} hold "
                      f"{offsets[1] - offsets[0]:,}", ptr + "/data_offsets")
        out[key] = TensorEntry(dtype, tuple(shape), offsets[0], offsets[1])
    pos = 0
    for key, e in sorted(out.items(), key=lambda kv: (kv[1].begin, kv[1].end)):
        if e.begin != pos:
            raise bad(f"tensors are not back to back: {key!r} starts at byte {e.begin:,}, expected {pos:,}",
                      "/" + key.replace("~", "~0").replace("/", "~1") + "/data_offsets")
        pos = e.end
    if pos != data_len:
        raise bad(f"the tensors cover {pos:,} of the {data_len:,} data bytes")
    return out, dict(meta)


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
    doc = load_json_strict(js_path, TREE_LIMIT, follow_symlinks=False, max_object_keys=TENSOR_INDEX_KEYS,
                           max_values=8 * TENSOR_INDEX_KEYS)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "tree" not in doc:
        raise _bad(js_path, f"not a {FORMAT} file")
    safetensors_index(st_path, what="corrupt training state", fix="resume from another checkpoint, or start a new run")
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
