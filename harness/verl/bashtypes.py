"""Values of the static bash evaluation: text chunks that remember where each character came from.

A :class:`Chunk` is a piece of expanded text with the source offset of every character, whether it
is protected from field splitting (quoted) and, when the text cannot be known without running the
script, an :class:`Unknown` saying why. Variables (:class:`Var`) hold chunks, so a value defined on
one line and expanded on another still points at its definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from harness.verl.bashscan import skip_backtick, skip_dollar, skip_double, skip_single

META = set(" \t\n;&|<>()")
IFS = " \t\n"
# Variables any login environment provides: used without a default they are unknown, never "undefined".
ENVIRONMENT = {"HOME", "USER", "LOGNAME", "PATH", "PWD", "OLDPWD", "SHELL", "HOSTNAME", "TMPDIR", "LANG", "TERM",
               "RANDOM", "SECONDS", "LINENO", "BASH_SOURCE", "BASH_VERSION", "UID", "EUID", "PPID", "IFS",
               "FUNCNAME", "BASHPID", "OSTYPE", "HOSTTYPE", "MACHTYPE", "PIPESTATUS", "SHLVL"}


@dataclass(frozen=True)
class Unknown:
    kind: str  # cmdsub | env | undefined | unset | arg | passthrough | branch | loop | source | other
    text: str  # what the script says (e.g. ``$(date)``), for messages
    why: str  # one phrase

    def describe(self) -> str:
        return f"{self.text}: {self.why}"


@dataclass(frozen=True)
class Chunk:
    text: str
    offs: tuple[int, ...]  # source offset of each character (for unknown chunks: one per character too)
    quoted: bool  # protected from field splitting
    unknown: Unknown | None = None


BREAK = "BREAK"  # field boundary inside a quoted multi-element expansion ("$@", "${A[@]}")
NOTHING = "NOTHING"  # a quoted "$@" / "${A[@]}" of no elements: no field at all, not an empty one
Item = Union[Chunk, str]
Field = tuple[Chunk, ...]


def text_of(chunks: Field | list[Chunk]) -> str:
    return "".join(c.text for c in chunks)


def unknowns(chunks: Field | list[Chunk]) -> list[Unknown]:
    return [c.unknown for c in chunks if c.unknown is not None]


def first_offset(chunks: Field | list[Chunk], default: int = 0) -> int:
    for c in chunks:
        if c.offs:
            return c.offs[0]
    return default


@dataclass
class Var:
    scalar: Field | None = None
    array: list[Field] | None = None
    pos: int = 0  # where it was (last) assigned

    def elements(self) -> list[Field]:
        if self.array is not None:
            return list(self.array)
        return [self.scalar] if self.scalar is not None else []

    def first(self) -> Field:
        if self.array is not None:
            return self.array[0] if self.array else ()
        return self.scalar or ()


@dataclass(frozen=True)
class Issue:
    kind: str  # undefined
    pos: int
    name: str
    message: str




def unknown_chunk(text: str, pos: int, quoted: bool, kind: str, why: str) -> Chunk:
    return Chunk(text, (pos,) * len(text), quoted, Unknown(kind, text, why))


def quoted_part(inner: list[Item]) -> list[Item]:
    """The items of a double-quoted part: ``""`` is one empty field unless only "${A[@]}" of nothing
    is inside (then there is no field)."""
    return inner if inner else [Chunk("", (), True)]


def requote(c: Chunk, quoted: bool) -> Chunk:
    return c if c.quoted == quoted else Chunk(c.text, c.offs, quoted, c.unknown)


def multi(elems: list[Field], quoted: bool, star: bool) -> list[Item]:
    if not elems and quoted and not star:
        return [NOTHING]
    out: list[Item] = []
    for k, elem in enumerate(elems):
        if k:
            if quoted and not star:
                out.append(BREAK)
            else:
                out.append(Chunk(" ", (), quoted))
        out.extend(requote(c, quoted) for c in elem)
    return out



def word_end(src: str, i: int) -> int:
    """Offset just past the shell word starting at ``i``."""
    n = len(src)
    while i < n and src[i] not in META:
        c = src[i]
        if c == "\\":
            i += 2
        elif c == "'":
            i = skip_single(src, i)
        elif c == '"':
            i = skip_double(src, i)
        elif c == "$":
            i = skip_dollar(src, i)
        elif c == "`":
            i = skip_backtick(src, i)
        else:
            i += 1
    return min(i, n)


def split_fields(items: list[Item]) -> list[Field]:
    """Field splitting: unquoted known text splits at blanks; BREAK always splits."""
    fields: list[Field] = []
    cur: list[Chunk] = []
    has = False  # the current field exists (even if empty, e.g. from "")

    def end_field() -> None:
        nonlocal cur, has
        if has:
            fields.append(tuple(cur))
        cur, has = [], False

    for item in items:
        if item == NOTHING:
            continue
        if item == BREAK:
            end_field()
            has = True
            continue
        assert isinstance(item, Chunk)
        if item.quoted or item.unknown is not None:
            cur.append(item)
            has = True
            continue
        piece: list[str] = []
        offs: list[int] = []
        for ch, off in zip(item.text, item.offs or (0,) * len(item.text)):
            if ch in IFS:
                if piece:
                    cur.append(Chunk("".join(piece), tuple(offs), False))
                    piece, offs = [], []
                end_field()
            else:
                piece.append(ch)
                offs.append(off)
                has = True
        if piece:
            cur.append(Chunk("".join(piece), tuple(offs), False))
    end_field()
    return fields


def join_items(items: list[Item]) -> Field:
    out: list[Chunk] = []
    for item in items:
        if item == NOTHING:
            continue
        if item == BREAK:
            out.append(Chunk(" ", (), True))
        else:
            assert isinstance(item, Chunk)
            out.append(Chunk(item.text, item.offs, True, item.unknown))
    return tuple(out)
