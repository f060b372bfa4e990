"""Shell builtins the static evaluation understands (a mixin of ``Evaluator``).

``set`` (``-u`` / ``-o nounset`` / ``set --``), ``unset``, ``source`` / ``.`` and ``eval`` (after
them a name the script never sets may be set elsewhere), ``shift``, ``exit`` / ``return``,
``true`` / ``false`` / ``:``, ``read`` and ``mapfile`` from here-documents and here-strings, and
``test`` / ``[`` on known operands. ``export`` / ``declare`` / ``local`` ... are declaration commands
of the syntax tree (``Evaluator.declaration``). Every other command is only searched for a trainer call.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from harness.verl.bashtree import Redirect
from harness.verl.bashwords import (
    Chunk,
    Field,
    Shell,
    Unknown,
    first_offset,
    join_items,
    split_fields,
    text_of,
    unknowns,
    word_end,
)

BUILTINS = {"set": "set", "unset": "unset", "source": "source", ".": "source", "eval": "eval",
            "shift": "shift", "exit": "exit", "return": "return", "true": "true", ":": "true", "false": "false",
            "read": "read", "mapfile": "mapfile", "readarray": "mapfile", "test": "test", "[": "bracket"}


class Return(Exception):
    """``return`` (or ``exit`` where the script may go on): leave the current function or branch."""


class Exit(Exception):
    """``exit`` at the top level: nothing after it runs."""


class Builtins:
    """Needs ``sh``, ``src``, ``functions``, ``cond``, ``depth``, ``line()`` and ``assign()``."""

    sh: Shell
    src: str
    functions: dict[str, Any]
    cond: int
    depth: int

    def assign(self, pos: int) -> None:  # pragma: no cover - provided by Evaluator
        raise NotImplementedError

    def line(self, pos: int) -> int:  # pragma: no cover - provided by Evaluator
        raise NotImplementedError

    def builtin_set(self, fields: list[Field], words: Any, redirects: Any) -> None:
        args = [text_of(f) for f in fields[1:]]
        for k, arg in enumerate(args):
            if arg == "--":
                self.sh.positional = list(fields[k + 2:])
                return
            if arg in ("-o", "+o") and k + 1 < len(args) and args[k + 1] == "nounset":
                self.sh.nounset = arg == "-o"
            elif arg[:1] in "-+" and arg[1:].isalpha() and "u" in arg:
                self.sh.nounset = arg[0] == "-"

    def builtin_unset(self, fields: list[Field], words: Any, redirects: Any) -> None:
        names = [text_of(f) for f in fields[1:]]
        table: dict[str, Any] = self.functions if "-f" in names else self.sh.vars
        for name in names:
            table.pop(name, None)

    def builtin_source(self, fields: list[Field], words: Any, redirects: Any) -> None:
        self.sh.opaque = f"the file sourced on line {self.line(first_offset(fields[0]))}"

    def builtin_eval(self, fields: list[Field], words: Any, redirects: Any) -> None:
        self.sh.opaque = f"the eval on line {self.line(first_offset(fields[0]))}"

    def builtin_shift(self, fields: list[Field], words: Any, redirects: Any) -> None:
        if self.sh.positional is not None:
            n = int(text_of(fields[1])) if len(fields) > 1 and text_of(fields[1]).isdigit() else 1
            self.sh.positional = self.sh.positional[n:]

    def builtin_exit(self, fields: list[Field], words: Any, redirects: Any) -> None:
        if self.cond == 0 and self.depth == 0:
            raise Exit()
        raise Return()

    def builtin_return(self, fields: list[Field], words: Any, redirects: Any) -> None:
        if self.depth > 0:
            raise Return()

    def builtin_true(self, *_: Any) -> bool:
        return True

    def builtin_false(self, *_: Any) -> bool:
        return False

    def builtin_read(self, fields: list[Field], words: Any, redirects: Any) -> None:
        args = [text_of(f) for f in fields[1:]]
        names: list[str] = []
        array: str | None = None
        whole = False
        k = 0
        while k < len(args):
            arg = args[k]
            if arg.startswith("-") and len(arg) > 1:
                for flag in arg[1:]:
                    if flag in "adnNptu":
                        value = args[k + 1] if k + 1 < len(args) else ""
                        if flag == "a":
                            array = value
                        elif flag == "d":
                            whole = value == ""
                        k += 1
                        break
                k += 1
                continue
            names.append(arg)
            k += 1
        text = self._stdin(redirects, fields[0])
        if not whole and not unknowns(text):
            first = text_of(text).split("\n", 1)[0]
            text = _prefix(text, len(first))
        parts = split_fields([Chunk(c.text, c.offs, False, c.unknown) for c in text])
        if array:
            self.sh.set_array(array, parts, first_offset(fields[0]))
            return
        names = names or ["REPLY"]
        for k, name in enumerate(names):
            field = _join_fields(parts[k:]) if k == len(names) - 1 else parts[k] if k < len(parts) else ()
            self.sh.set_scalar(name, field, first_offset(fields[0]))

    def builtin_mapfile(self, fields: list[Field], words: Any, redirects: Any) -> None:
        names = [text_of(f) for f in fields[1:] if not text_of(f).startswith("-")]
        text = self._stdin(redirects, fields[0])
        if unknowns(text):
            lines: list[Field] = [text]
        else:
            lines = []
            cur: list[tuple[str, int]] = []
            for c in text:
                for ch, off in zip(c.text, c.offs or (0,) * len(c.text)):
                    if ch == "\n":
                        lines.append((Chunk("".join(x[0] for x in cur), tuple(x[1] for x in cur), True),))
                        cur = []
                    else:
                        cur.append((ch, off))
            if cur:
                lines.append((Chunk("".join(x[0] for x in cur), tuple(x[1] for x in cur), True),))
        self.sh.set_array(names[-1] if names else "MAPFILE", lines, first_offset(fields[0]))

    def _stdin(self, redirects: list[Redirect], at: Field) -> Field:
        for r in redirects:
            if r.heredoc is not None:
                return self.sh.heredoc_body(r.heredoc)
            if r.kind == "<<<" and r.word is not None:
                start = r.word
                return join_items(list(self.sh.expand_value(start, word_end(self.src, start)))) + (
                    Chunk("\n", (), True),)
        pos = first_offset(at)
        return (Chunk("<stdin>", (pos,) * 7, True, Unknown("other", "read", "input read at run time")),)

    # -- tests ------------------------------------------------------------------------------------
    def builtin_test(self, fields: list[Field], words: Any, redirects: Any) -> bool | None:
        return test_words([f for f in fields[1:]])

    def builtin_bracket(self, fields: list[Field], words: Any, redirects: Any) -> bool | None:
        if not fields or text_of(fields[-1]) != "]":
            return None
        return test_words(fields[1:-1])



def _prefix(value: Field, n: int) -> Field:
    out: list[Chunk] = []
    for c in value:
        if n <= 0:
            break
        out.append(Chunk(c.text[:n], c.offs[:n], c.quoted, c.unknown))
        n -= len(c.text)
    return tuple(out)


def _join_fields(parts: list[Field]) -> Field:
    out: list[Chunk] = []
    for k, part in enumerate(parts):
        if k:
            out.append(Chunk(" ", (), True))
        out.extend(Chunk(c.text, c.offs, True, c.unknown) for c in part)
    return tuple(out)



def _num(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def test_words(toks: list[Field], pattern: bool = False) -> bool | None:
    """``test`` / ``[`` / ``[[`` on known operands; None when it depends on something unknown."""
    if any(unknowns(t) for t in toks):
        return None
    words = [text_of(t) for t in toks]
    if words[:1] == ["!"]:
        inner = test_words(toks[1:], pattern)
        return None if inner is None else not inner
    if len(words) == 1:
        return words[0] != ""
    if len(words) == 2 and words[0] in ("-z", "-n"):
        return (words[1] == "") == (words[0] == "-z")
    if len(words) == 3:
        a, op, b = words
        if op in ("=", "=="):
            return fnmatch.fnmatchcase(a, b) if pattern else a == b
        if op == "!=":
            return not fnmatch.fnmatchcase(a, b) if pattern else a != b
        nums = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__, "-gt": int.__gt__,
                "-ge": int.__ge__}
        if op in nums:
            x, y = _num(a), _num(b)
            return None if x is None or y is None else bool(nums[op](x, y))
    return None


