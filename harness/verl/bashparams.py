"""Parameter expansion and arithmetic for the static bash evaluation (a mixin of ``Shell``).

``$x``, ``${x}``, ``${x:-default}`` / ``${x-default}``, ``${x:=default}`` (assigns), ``${x:+alt}``,
``${x:?msg}``, ``${#x}``, ``${x#pat}`` / ``##`` / ``%`` / ``%%``, ``${x/a/b}`` with a literal
pattern, ``${x^^}`` / ``${x,,}``, ``${x:off:len}``, arrays (``${A[@]}``, ``${A[n]}``,
``${#A[@]}``), positional and special parameters, and ``$((...))``. A name never set is
*undefined* under ``set -u`` (reported), *unknown* when the environment may provide it.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from harness.verl import bashmath
from harness.verl.bashtypes import (
    ENVIRONMENT,
    Chunk,
    Field,
    Issue,
    Item,
    join_items,
    multi,
    requote,
    text_of,
    unknown_chunk,
    unknowns,
)


class ParamExpansion:
    """Needs ``src``, ``vars``, ``positional``, ``nounset``, ``opaque``, ``issues``, ``reported``,
    ``items()`` and ``set_scalar()`` from the class it is mixed into."""

    src: str
    vars: dict[str, Any]
    positional: list[Field] | None
    nounset: bool
    opaque: str | None
    issues: list[Issue]
    reported: set[tuple[str, int]]

    def items(self, i: int, end: int, mode: str) -> list[Item]:  # pragma: no cover - provided by Shell
        raise NotImplementedError

    def set_scalar(self, name: str, value: Field, pos: int) -> None:  # pragma: no cover - provided by Shell
        raise NotImplementedError

    def _arith(self, expr: str, i: int, j: int, quoted: bool) -> Chunk:
        def lookup(name: str) -> str | None:
            if name.isdigit() or name in "@*#?$!-":
                return None
            var = self.vars.get(name)
            if var is None:
                if name in ENVIRONMENT or self.opaque:
                    return None
                self._undefined(name, i)
                return "0"
            value = var.first()
            return None if unknowns(value) else text_of(value)

        try:
            value = bashmath.evaluate(expr, lookup)
        except (bashmath.NotStatic, RecursionError) as err:
            return unknown_chunk(self.src[i:j], i, quoted, "other", f"arithmetic not known statically ({err})")
        text = str(value)
        return Chunk(text, (i,) * len(text), quoted)


    def _lookup_items(self, name: str, index: str | None, i: int, j: int, quoted: bool) -> list[Item]:
        """``$name`` / ``${name}`` / ``${name[index]}`` with undefined-variable handling."""
        elems, ok = self._values(name, index, i, j)
        if not ok:
            return [self._missing(name, i, j, quoted)]
        if name in "@*" or index in ("@", "*"):
            return multi(elems, quoted, star=(name == "*" or index == "*"))
        return [requote(c, quoted) for c in (elems[0] if elems else ())]

    def _values(self, name: str, index: str | None, i: int, j: int) -> tuple[list[Field], bool]:
        """(elements, is_set) for a parameter; unknown parameters yield one unknown element."""
        src_text = self.src[i:j]
        if name in ("@", "*"):
            if self.positional is None:
                why = "the arguments the script was called with"
                return [(unknown_chunk(src_text, i, True, "passthrough", why),)], True
            return list(self.positional), True
        if name == "#":
            if self.positional is None:
                return [(unknown_chunk(src_text, i, True, "arg", "the number of script arguments"),)], True
            return [(Chunk(str(len(self.positional)), (i,), True),)], True
        if name.isdigit():
            k = int(name)
            if k == 0:
                return [(unknown_chunk(src_text, i, True, "other", "the script's own path"),)], True
            if self.positional is None:
                return [(unknown_chunk(src_text, i, True, "arg", f"script argument {k}"),)], True
            return ([self.positional[k - 1]], True) if k <= len(self.positional) else ([], False)
        if name in "?$!-":
            return [(unknown_chunk(src_text, i, True, "other", "a value bash sets at run time"),)], True
        var = self.vars.get(name)
        if var is None:
            return [], False
        if index in (None, "0") or index in ("@", "*"):
            return (var.elements() if index in ("@", "*") else [var.first()]), True
        assert index is not None  # None was answered above
        try:
            k = bashmath.evaluate(index, lambda n: text_of(self.vars[n].first()) if n in self.vars else None)
        except (bashmath.NotStatic, RecursionError):
            return [(unknown_chunk(src_text, i, True, "other", "an array index not known statically"),)], True
        elems = var.elements()
        return ([elems[k]], True) if -len(elems) <= k < len(elems) else ([], False)

    def _missing(self, name: str, i: int, j: int, quoted: bool) -> Chunk:
        text = self.src[i:j]
        if name in ENVIRONMENT:
            return unknown_chunk(text, i, quoted, "env", f"environment variable ${name}")
        if name.isdigit():
            return unknown_chunk(text, i, quoted, "arg", f"argument {name} (not given)")
        if self.opaque:
            return unknown_chunk(text, i, quoted, "source", f"not set here; may come from {self.opaque}")
        if self.nounset:
            self._undefined(name, i)
            why = f"${name} is never set and `set -u` aborts the script here"
            return unknown_chunk(text, i, quoted, "undefined", why)
        why = f"${name} is not set in the script (empty unless the environment sets it)"
        return unknown_chunk(text, i, quoted, "unset", why)

    def _undefined(self, name: str, i: int) -> None:
        key = (name, i)
        if key not in self.reported:
            self.reported.add(key)
            self.issues.append(Issue("undefined", i, name, f"${name} is used but never set, and `set -u` makes bash "
                                                              f"abort here unless the caller exports {name}"))

    def _param(self, i: int, j: int, quoted: bool) -> list[Item]:
        src, body_start, body_end = self.src, i + 2, j - 1
        body = src[body_start:body_end]
        text = src[i:j]
        if not body:
            return [unknown_chunk(text, i, quoted, "other", "bad substitution")]
        if body[0] == "#" and len(body) > 1:
            name, index, _ = _param_name(body[1:])
            elems, ok = self._values(name, index, i, j) if name else ([], False)
            if name and (ok or not self.nounset):
                if any(unknowns(e) for e in elems):
                    return [unknown_chunk(text, i, quoted, "other", "length of a value not known statically")]
                n = len(elems) if index in ("@", "*") else len(text_of(elems[0])) if elems else 0
                return [Chunk(str(n), (i,) * len(str(n)), quoted)]
            return [self._missing(name or body, i, j, quoted)]
        if body[0] == "!":
            return [unknown_chunk(text, i, quoted, "other", "indirect expansion")]
        name, index, rest_at = _param_name(body)
        if not name:
            return [unknown_chunk(text, i, quoted, "other", "parameter expansion not understood")]
        rest = body[rest_at:]
        word_start = body_start + rest_at
        if not rest:
            return self._lookup_items(name, index, i, j, quoted)
        elems, is_set = self._values(name, index, i, j)
        several = name in "@*" or index in ("@", "*")
        value_items: list[Item] = multi(elems, quoted, star=(name == "*" or index == "*")) if several else \
            [requote(c, quoted) for c in (elems[0] if elems else ())]
        is_null = not is_set or (not several and not text_of(elems[0] if elems else ()) and not unknowns(
            elems[0] if elems else ()))
        for op in (":-", ":=", ":+", ":?", "-", "=", "+", "?"):
            if rest.startswith(op):
                arg_start = word_start + len(op)
                empty = is_null if op.startswith(":") else not is_set
                arg = lambda: [requote(c, quoted) if isinstance(c, Chunk) else c  # noqa: E731
                               for c in self.items(arg_start, body_end, mode="dq" if quoted else "word")]
                kind = op[-1]
                if kind == "-":
                    return arg() if empty else value_items
                if kind == "=":
                    if empty:
                        value = join_items(arg())
                        if not name.isdigit() and name not in "@*#?$!-":
                            self.set_scalar(name, value, i)
                        return list(value)
                    return value_items
                if kind == "+":
                    return [] if empty else arg()
                if empty:  # ``?``
                    return [unknown_chunk(text, i, quoted, "required", f"${name} must be provided by the environment")]
                return value_items
        if not is_set:
            return [self._missing(name, i, j, quoted)]
        if several or any(unknowns(e) for e in elems):
            return [unknown_chunk(text, i, quoted, "other", "parameter operation on a value not known statically")]
        scalar = text_of(elems[0] if elems else ())
        result = self._operate(scalar, rest, word_start, body_end)
        if result is None:
            return [unknown_chunk(text, i, quoted, "other", "parameter operation not evaluated statically")]
        return [Chunk(result, (i,) * len(result), quoted)]

    def _operate(self, value: str, rest: str, word_start: int, body_end: int) -> str | None:
        """``#`` ``##`` ``%`` ``%%`` ``/`` ``//`` ``^`` ``^^`` ``,`` ``,,`` ``:off:len`` on a known value."""
        for op in ("##", "#", "%%", "%", "//", "/", "^^", "^", ",,", ","):
            if rest.startswith(op):
                arg = join_items(self.items(word_start + len(op), body_end, mode="word"))
                if unknowns(arg):
                    return None
                pat = text_of(arg)
                if op in ("#", "##"):
                    cuts = [k for k in range(len(value) + 1) if fnmatch.fnmatchcase(value[:k], pat)]
                    return value[(max(cuts) if op == "##" else min(cuts)):] if cuts else value
                if op in ("%", "%%"):
                    cuts = [k for k in range(len(value) + 1) if fnmatch.fnmatchcase(value[k:], pat)]
                    return value[:(min(cuts) if op == "%%" else max(cuts))] if cuts else value
                if op in ("/", "//"):
                    old, _, new = pat.partition("/")
                    if any(ch in old for ch in "*?[") or not old:
                        return None
                    return value.replace(old, new) if op == "//" else value.replace(old, new, 1)
                if op in ("^^", ",,"):
                    return value.upper() if op == "^^" else value.lower()
                return (value[:1].upper() if op == "^" else value[:1].lower()) + value[1:]
        if rest.startswith(":"):
            parts = rest[1:].split(":")
            lookup = lambda n: text_of(self.vars[n].first()) if n in self.vars else None  # noqa: E731
            try:
                off = bashmath.evaluate(parts[0], lookup) if parts[0].strip() else 0
                length = bashmath.evaluate(parts[1], lookup) if len(parts) > 1 else None
            except (bashmath.NotStatic, RecursionError):
                return None
            off = max(0, len(value) + off) if off < 0 else off
            if length is None:
                return value[off:]
            return value[off:off + length] if length >= 0 else value[off:len(value) + length]
        return None




def _param_name(body: str) -> tuple[str, str | None, int]:
    """(name, index or None, offset after them) at the start of a ``${...}`` body."""
    if not body:
        return "", None, 0
    if body[0] in "@*#?$!-" or body[0].isdigit():
        k = 1
        if body[0].isdigit():
            while k < len(body) and body[k].isdigit():
                k += 1
        name = body[:k]
    else:
        k = 0
        while k < len(body) and (body[k].isalnum() or body[k] == "_") and body[k].isascii():
            k += 1
        name = body[:k]
        if not name or name[0].isdigit():
            return "", None, 0
    index = None
    if k < len(body) and body[k] == "[":
        close = body.find("]", k)
        if close < 0:
            return "", None, 0
        index, k = body[k + 1:close], close + 1
    return name, index, k


