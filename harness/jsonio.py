"""Strict JSON in, atomic JSON out.

``load_json_strict`` refuses what ``json.load`` silently accepts: duplicate keys (the later one
would win), NaN/Infinity and trailing data. Errors name the file, the key path and the line. It
parses in time linear in the text and bounds what a hostile file can make it build: at most
``MAX_OBJECT_KEYS`` keys in one object and ``MAX_VALUES`` keys and array items in one document
(callers reading tensor-file headers or training-state trees raise the first to ``TENSOR_INDEX_KEYS``).
``write_json_atomic`` writes to a temporary file in the same directory, fsyncs and renames, so
a reader never sees a half-written file and a crash leaves the old one in place; the file gets
the usual mode of a new file (0666 less the umask), not the temporary file's 0600.

Every file the harness reads goes through :func:`read_bytes_limited`: it must be a regular file
(a FIFO, a device such as /dev/zero, a directory or a socket is refused without blocking) and no
larger than a limit, checked before anything is read into memory.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
import tempfile
from json.decoder import JSONDecodeError, scanstring  # type: ignore[attr-defined]  # not in typeshed
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, os_error

_WS = " \t\n\r"
MiB = 1 << 20
JSON_LIMIT = 64 * MiB  # recipes, manifests, baselines, certificates, verdicts
# Keys of one object, and values (keys + array items) of one document. A committed record's largest object
# holds 33 keys and its largest document ~30,000 values; tensor-file headers and training-state trees (one key
# per tensor) pass TENSOR_INDEX_KEYS instead.
MAX_OBJECT_KEYS = 10_000
MAX_VALUES = 4_000_000
TENSOR_INDEX_KEYS = 1_000_000


def _umask() -> int:
    """The process umask (read without changing it where /proc allows)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


FILE_MODE = 0o666 & ~_umask()


def open_regular(path: str | os.PathLike[str], *, what: str = "file",
                 follow_symlinks: bool = True) -> tuple[int, os.stat_result]:
    """A blocking read descriptor of a regular file and its ``fstat``, or a one-line :class:`HarnessError`.

    The file is opened non-blocking (a FIFO cannot stall the open), then checked with ``fstat`` on the
    open descriptor, so what is read is what was checked. The caller closes the descriptor.
    """
    p = str(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise HarnessError(f"{what} not found", file=p, fix="check the path") from None
    except IsADirectoryError:
        raise HarnessError(f"is a directory, not a {what}", file=p, fix=f"name a {what}") from None
    except OSError as err:
        if not follow_symlinks and os.path.islink(p):
            raise HarnessError("is a symbolic link; the harness does not follow links here", file=p,
                               fix="replace the link by the file itself") from None
        raise HarnessError(f"cannot read ({err.strerror})", file=p, fix="check the path and its permissions") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise HarnessError(f"is a directory, not a {what}", file=p, fix=f"name a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise HarnessError("not a regular file (a FIFO, device or socket); refused", file=p,
                               fix=f"name a regular {what}")
        os.set_blocking(fd, True)
    except OSError as err:
        os.close(fd)
        raise HarnessError(f"cannot read ({err.strerror})", file=p, fix="check the path and its permissions") from None
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes_limited(path: str | os.PathLike[str], limit: int, *, what: str = "file",
                       follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or a one-line :class:`HarnessError`.

    Opened with :func:`open_regular`; the size is checked before anything is read into memory.
    """
    p = str(path)
    fd, st = open_regular(path, what=what, follow_symlinks=follow_symlinks)
    try:
        if st.st_size > limit:
            raise HarnessError(f"{what} is {st.st_size} bytes, over the limit of {limit}", file=p,
                               fix=f"use a {what} of at most {limit // MiB or 1} MiB")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise HarnessError(f"{what} is over the limit of {limit} bytes", file=p, fix=f"use a smaller {what}")
        return b"".join(chunks)
    except OSError as err:
        raise HarnessError(f"cannot read ({err.strerror})", file=p, fix="check the path and its permissions") from None
    finally:
        os.close(fd)


def read_text_limited(path: str | os.PathLike[str], limit: int = JSON_LIMIT, *, what: str = "file",
                      follow_symlinks: bool = True) -> str:
    """:func:`read_bytes_limited` decoded as UTF-8 (a one-line error when it is not)."""
    return decode_utf8(read_bytes_limited(path, limit, what=what, follow_symlinks=follow_symlinks), str(path))


def decode_utf8(data: bytes, file: str) -> str:
    """``data`` as UTF-8 text, or a one-line :class:`HarnessError` naming ``file`` and the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HarnessError(f"not UTF-8 text (byte {err.start})", file=file, fix="save the file as UTF-8") from None


_SCALAR = json.JSONDecoder(parse_constant=lambda name: _refuse_constant(name))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _join(path: str, key: str | int) -> str:
    """Extend a JSON pointer (RFC 6901) by one key or index."""
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


class _StrictParser:
    """A small recursive-descent JSON parser that tracks key paths and positions.

    Line numbers are computed only for an error (a count of newlines from the start of the text), so a
    parse stays linear in the size of the document.
    """

    def __init__(self, text: str, file: str, max_object_keys: int = MAX_OBJECT_KEYS,
                 max_values: int = MAX_VALUES) -> None:
        self.text = text
        self.file = file
        self.max_object_keys = max_object_keys
        self.max_values = max_values
        self.values = 0

    def count(self, pos: int, path: str) -> None:
        """One more key or array item; a one-line error past the document's limit."""
        self.values += 1
        if self.values > self.max_values:
            raise self.fail(pos, f"more than {self.max_values:,} keys and array items in one document "
                                 "(the limit for this kind of file)", path or "/",
                            "harness recipes and records hold far fewer; use the file as it was written")

    def fail(self, pos: int, message: str, path: str = "", fix: str | None = None) -> HarnessError:
        line = _line_of(self.text, pos)
        return HarnessError(f"line {line}: {message}", file=self.file, key_path=path or None, fix=fix)

    def skip(self, pos: int) -> int:
        while pos < len(self.text) and self.text[pos] in _WS:
            pos += 1
        return pos

    def value(self, pos: int, path: str) -> tuple[Any, int]:
        pos = self.skip(pos)
        if pos >= len(self.text):
            raise self.fail(pos, "unexpected end of file", path, "complete the JSON document")
        ch = self.text[pos]
        if ch == "{":
            return self.obj(pos + 1, path)
        if ch == "[":
            return self.arr(pos + 1, path)
        try:
            value, end = _SCALAR.raw_decode(self.text, pos)
        except (JSONDecodeError, ValueError) as err:
            raise self.fail(pos, f"invalid JSON value ({getattr(err, 'msg', err)})", path,
                            "use a JSON string, number, true, false, null, object or array") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(pos, "number out of range (overflows to infinity)", path, "use a finite number")
        return value, end

    def obj(self, pos: int, path: str) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        first_seen: dict[str, int] = {}
        pos = self.skip(pos)
        if pos < len(self.text) and self.text[pos] == "}":
            return out, pos + 1
        while True:
            pos = self.skip(pos)
            if pos >= len(self.text) or self.text[pos] != '"':
                raise self.fail(pos, "expected a double-quoted key", path, "quote every key and drop trailing commas")
            key_pos = pos
            try:
                key, pos = scanstring(self.text, pos + 1, True)
            except JSONDecodeError as err:
                raise self.fail(pos, f"bad key string ({err.msg})", path) from None
            key_path = _join(path, key)
            if key in first_seen:
                raise HarnessError(
                    f"line {_line_of(self.text, key_pos)}: duplicate key '{key}' "
                    f"(first defined on line {_line_of(self.text, first_seen[key])}) [duplicate-key]",
                    file=self.file, key_path=key_path, fix="keep one definition of the key",
                    exit_code=1,
                )
            first_seen[key] = key_pos
            if len(first_seen) > self.max_object_keys:
                raise self.fail(key_pos, f"object has more than {self.max_object_keys:,} keys (the limit for this "
                                         "kind of file)", path or "/",
                                "remove keys: harness recipes and records hold a few dozen per object")
            self.count(key_pos, key_path)
            pos = self.skip(pos)
            if pos >= len(self.text) or self.text[pos] != ":":
                raise self.fail(pos, "expected ':' after key", key_path)
            out[key], pos = self.value(pos + 1, key_path)
            pos = self.skip(pos)
            if pos < len(self.text) and self.text[pos] == ",":
                pos += 1
                continue
            if pos < len(self.text) and self.text[pos] == "}":
                return out, pos + 1
            raise self.fail(pos, "expected ',' or '}'", key_path, "separate members with commas")

    def arr(self, pos: int, path: str) -> tuple[list[Any], int]:
        out: list[Any] = []
        pos = self.skip(pos)
        if pos < len(self.text) and self.text[pos] == "]":
            return out, pos + 1
        while True:
            self.count(pos, path)
            item, pos = self.value(pos, _join(path, len(out)))
            out.append(item)
            pos = self.skip(pos)
            if pos < len(self.text) and self.text[pos] == ",":
                pos += 1
                continue
            if pos < len(self.text) and self.text[pos] == "]":
                return out, pos + 1
            raise self.fail(pos, "expected ',' or ']'", path, "separate items with commas")


class _NotStrict(Exception):
    """The fast path met something the strict parser refuses: the strict parser runs and says what."""


def _fast_loads(text: str, max_object_keys: int) -> Any:
    """``json.loads`` (its C scanner) with the strict parser's refusals as hooks: a duplicate key, an object of
    more than ``max_object_keys`` keys, NaN/Infinity and a number that overflows to infinity raise
    :class:`_NotStrict`; so does anything ``json.loads`` refuses."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items) or len(out) > max_object_keys:
            raise _NotStrict
        return out

    def number(literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            raise _NotStrict
        return value

    def constant(name: str) -> Any:
        raise _NotStrict

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_float=number, parse_constant=constant)
    except (_NotStrict, ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise _NotStrict from None


def loads_strict(text: str, file: str = "<string>", *, max_object_keys: int = MAX_OBJECT_KEYS,
                 max_values: int = MAX_VALUES) -> Any:
    """Parse JSON text strictly (see module docstring); at most ``max_object_keys`` keys in one object and
    ``max_values`` keys and array items in all.

    A text shorter than ``2 * max_values`` characters cannot hold ``max_values`` values (each key or item takes
    a character and a separator), so it is first parsed by :func:`_fast_loads`; whatever that refuses, and every
    longer text, goes through the strict parser, which names the line and key path. Both give the same value
    (``tests/unit/test_jsonio_fast.py`` checks it on generated and mutated documents).
    """
    if len(text) < 2 * max_values:
        try:
            return _fast_loads(text, max_object_keys)
        except _NotStrict:
            pass
    return _strict_loads(text, file, max_object_keys, max_values)


def _strict_loads(text: str, file: str, max_object_keys: int, max_values: int) -> Any:
    """The recursive-descent parse (:class:`_StrictParser`): a one-line error with line and key path."""
    parser = _StrictParser(text, file, max_object_keys, max_values)
    try:
        value, pos = parser.value(0, "")
    except RecursionError:
        raise HarnessError("nesting too deep", file=file, fix="flatten the document") from None
    pos = parser.skip(pos)
    if pos != len(text):
        raise parser.fail(pos, "extra data after the JSON document", fix="keep one JSON value per file")
    return value


def load_json_strict(path: str | os.PathLike[str], limit: int = JSON_LIMIT, *, follow_symlinks: bool = True,
                     max_object_keys: int = MAX_OBJECT_KEYS, max_values: int = MAX_VALUES) -> Any:
    """Read and strictly parse a JSON file (regular, at most ``limit`` bytes, UTF-8): a one-line error otherwise."""
    p = Path(path)
    return loads_strict(read_text_limited(p, limit, what="JSON file", follow_symlinks=follow_symlinks), str(p),
                        max_object_keys=max_object_keys, max_values=max_values)


def dumps(obj: Any) -> str:
    """Canonical pretty JSON (sorted keys are NOT used: recipe order is meaningful to readers)."""
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same dir, fsync, rename, fsync dir.

    The rename replaces whatever ``path`` was (a symbolic link is replaced, never followed). A file system
    error (read-only, full, no permission) is a one-line :class:`HarnessError` naming ``path``; the old file
    is left as it was and no temporary file is left behind.
    """
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as err:
        raise os_error(err, p) from None
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError):
            raise os_error(err, p) from None
        raise
    dir_fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """:func:`write_bytes_atomic` of ``text`` as UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


def open_new(path: str | os.PathLike[str], *, append_existing: bool = False) -> int:
    """A write descriptor for a file created here (``O_EXCL``), never through a symbolic link.

    ``append_existing``: an existing regular file is opened for appending instead (a resumed run). The open
    does not block (a FIFO planted in its place is refused at once) and the descriptor is checked with
    ``fstat``: only a regular file is written.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_APPEND if append_existing else os.O_EXCL
    try:
        fd = os.open(path, flags, 0o666)
    except FileExistsError:
        raise HarnessError("already exists; not overwritten", file=str(path),
                           fix="choose a new or empty run directory") from None
    except OSError as err:
        if os.path.lexists(path) and not os.path.islink(path) and not os.path.isfile(path):
            raise _not_regular(path) from None  # e.g. a FIFO with no reader (ENXIO)
        if err.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES):
            raise os_error(err, path, doing="create") from None
        raise HarnessError(f"cannot create ({err.strerror}; symbolic links are not followed)", file=str(path),
                           fix="choose a new or empty run directory") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_regular(path)
    os.set_blocking(fd, True)
    return fd


def _not_regular(path: str | os.PathLike[str]) -> HarnessError:
    return HarnessError("not a regular file (a FIFO, device or socket); not written", file=str(path),
                        fix="remove it, or choose a new run directory")


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    write_text_atomic(path, dumps(obj))


def file_sha256(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
