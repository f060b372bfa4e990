"""Static word expansion: what bash would make of one word, without running anything.

A word is read from the original source at the offset the syntax tree reports and expanded the way bash
does — quotes, escapes, ``$x`` / ``${x}`` / ``${x:-default}`` / ``${x:=default}`` / ``${x:+alt}`` /
``${#x}`` / ``${x#pat}`` ..., arrays (``${A[@]}``, ``"${A[@]}"``), ``$@`` / ``$*``, arithmetic,
field splitting of unquoted expansions, ``$(cat <<EOF ... EOF)`` — but every character keeps the
source offset it came from, so an override that sits in a string defined on line 12 and is
expanded on line 40 is reported on line 12.

What cannot be known without running the script (command substitution, a variable the environment
provides, a script argument) becomes a :class:`Chunk` with ``unknown`` set: it is carried along
and reported, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.verl.bashparams import ParamExpansion
from harness.verl.bashscan import (
    BashSyntaxError,
    skip_ansi,
    skip_arith,
    skip_backtick,
    skip_braced,
    skip_dollar,
    skip_double,
    skip_old_arith,
    skip_single,
)
from harness.verl.bashtree import Heredoc, parse
from harness.verl.bashtypes import (
    BREAK,
    ENVIRONMENT,
    IFS,
    META,
    Chunk,
    Field,
    Issue,
    Item,
    Unknown,
    Var,
    first_offset,
    join_items,
    quoted_part,
    split_fields,
    text_of,
    unknown_chunk,
    unknowns,
    word_end,
)

MAX_VALUE = 131_072  # characters in one value (Linux refuses a longer single argument: MAX_ARG_STRLEN)
MAX_WORK = 10_000_000  # characters expanded in one script

__all__ = ["BREAK", "ENVIRONMENT", "IFS", "META", "Chunk", "Field", "Issue", "Item", "Shell", "Unknown", "Var",
           "first_offset", "join_items", "split_fields", "text_of", "unknowns", "word_end"]


@dataclass
class Shell(ParamExpansion):
    """Variables, positional parameters and flags of the script being evaluated."""

    src: str
    vars: dict[str, Var] = field(default_factory=dict)
    positional: list[Field] | None = None  # None: the script's own arguments (unknown)
    nounset: bool = False
    opaque: str | None = None  # set after ``source`` / ``eval``: why undefined names may be defined elsewhere
    issues: list[Issue] = field(default_factory=list)
    reported: set[tuple[str, int]] = field(default_factory=set)
    spent: list[int] = field(default_factory=lambda: [0])  # characters expanded so far (shared by forks)

    def charge(self, n: int, pos: int) -> None:
        """Count ``n`` expanded characters; past the budget the evaluation stops with one error."""
        self.spent[0] += n
        if n > MAX_VALUE or self.spent[0] > MAX_WORK:
            what = f"a value grows past {MAX_VALUE:,} characters" if n > MAX_VALUE else \
                f"expansions add up to more than {MAX_WORK:,} characters"
            raise BashSyntaxError(f"expansion too large to evaluate statically: {what}", pos)

    # -- public API --------------------------------------------------------------------------
    def expand_word(self, start: int) -> list[Field]:
        """Fields of the word starting at ``start`` (field splitting applied)."""
        end = word_end(self.src, start)
        return split_fields(self.items(start, end, mode="word"))

    def expand_value(self, start: int, end: int) -> Field:
        """An assignment's value (no field splitting; multi-element expansions joined by spaces)."""
        return join_items(self.items(start, end, mode="word"))

    def expand_span(self, start: int, end: int, mode: str = "word") -> list[Item]:
        return self.items(start, end, mode=mode)

    def heredoc_body(self, doc: Heredoc) -> Field:
        if doc.quoted:
            text = self.src[doc.body_start:doc.body_end]
            return (Chunk(text, tuple(range(doc.body_start, doc.body_end)), True),)
        return join_items(self.items(doc.body_start, doc.body_end, mode="heredoc"))

    def set_scalar(self, name: str, value: Field, pos: int) -> None:
        self.charge(sum(len(c.text) for c in value), pos)
        self.vars[name] = Var(scalar=tuple(value), pos=pos)

    def set_array(self, name: str, items: list[Field], pos: int, append: bool = False) -> None:
        old = self.vars.get(name)
        base = old.elements() if (append and old is not None) else []
        elems = base + list(items)
        self.charge(sum(len(c.text) for e in elems for c in e), pos)
        self.vars[name] = Var(array=elems, pos=pos)

    def parse_array(self, open_paren: int) -> tuple[list[Field], int]:
        """Elements of an array literal whose ``(`` is at ``open_paren``; returns (fields, end)."""
        src, i = self.src, open_paren + 1
        out: list[Field] = []
        while i < len(src):
            c = src[i]
            if c in " \t\n":
                i += 1
            elif src.startswith("\\\n", i):
                i += 2
            elif c == ")":
                return out, i + 1
            elif c == "#":
                nl = src.find("\n", i)
                i = len(src) if nl < 0 else nl
            else:
                end = word_end(src, i)
                if end == i:  # a metacharacter (| ; & < >) cannot stand in an array literal
                    raise BashSyntaxError(f"syntax error near unexpected token '{c}' in an array literal", i)
                out.extend(split_fields(self.items(i, end, mode="word")))
                i = end
        return out, i

    # -- scanning ----------------------------------------------------------------------------
    def items(self, i: int, end: int, mode: str) -> list[Item]:
        """mode: word (unquoted context), dq (inside double quotes), heredoc (unquoted here-doc body)."""
        src = self.src
        out: list[Item] = []
        lit: list[str] = []
        lit_offs: list[int] = []
        lit_quoted = mode != "word"
        start = i

        def add(ch: str, off: int, quoted: bool) -> None:
            nonlocal lit_quoted
            if lit and quoted != lit_quoted:
                flush()
            lit_quoted = quoted
            lit.append(ch)
            lit_offs.append(off)

        def flush() -> None:
            if lit:
                out.append(Chunk("".join(lit), tuple(lit_offs), lit_quoted))
                lit.clear()
                lit_offs.clear()

        while i < end:
            c = src[i]
            if c == "\\":
                nxt = src[i + 1] if i + 1 < end else ""
                if nxt == "\n":
                    i += 2
                    continue
                if mode == "word" or nxt in '$`\\"' and mode == "dq" or nxt in "$`\\" and mode == "heredoc":
                    if nxt:
                        add(nxt, i + 1, True)
                    i += 2
                    continue
                add(c, i, mode != "word")
                i += 1
                continue
            if c == "$":
                flush()
                i = self._dollar(i, out, quoted=mode != "word")
                continue
            if c == "`":
                flush()
                j = skip_backtick(src, i)
                out.append(unknown_chunk(src[i:j], i, mode != "word", "cmdsub", "command substitution"))
                i = j
                continue
            if mode == "word" and c == "'":
                j = skip_single(src, i)
                flush()
                out.append(Chunk(src[i + 1:j - 1], tuple(range(i + 1, j - 1)), True))
                i = j
                continue
            if mode == "word" and c == '"':
                j = skip_double(src, i)
                flush()
                inner = self.items(i + 1, j - 1, mode="dq")
                out.extend(quoted_part(inner))
                i = j
                continue
            if mode == "word" and c == "~" and i == start and (i + 1 >= end or src[i + 1] in "/:"):
                flush()
                out.append(unknown_chunk("~", i, False, "env", "the home directory of whoever runs the script"))
                i += 1
                continue
            add(c, i, mode != "word")
            i += 1
        flush()
        self.charge(sum(len(c.text) for c in out if isinstance(c, Chunk)), start)
        return out

    def _dollar(self, i: int, out: list[Item], quoted: bool) -> int:
        src = self.src
        nxt = src[i + 1] if i + 1 < len(src) else ""
        if nxt == "(" and src.startswith("((", i + 1):
            try:
                j = skip_arith(src, i)
            except Exception:  # noqa: BLE001 - ``$( (cmd) )`` without the space
                j = skip_dollar(src, i)
                out.append(unknown_chunk(src[i:j], i, quoted, "cmdsub", "command substitution"))
                return j
            out.append(self._arith(src[i + 3:j - 2], i, j, quoted))
            return j
        if nxt == "(":
            j = skip_dollar(src, i)
            out.extend(self._cmdsub(i, j, quoted))
            return j
        if nxt == "{":
            j = skip_braced(src, i)
            out.extend(self._param(i, j, quoted))
            return j
        if nxt == "[":
            j = skip_old_arith(src, i)
            out.append(self._arith(src[i + 2:j - 1], i, j, quoted))
            return j
        if nxt == "'":
            j = skip_ansi(src, i)
            text, offs = _ansi_c(src, i + 2, j - 1)
            out.append(Chunk(text, offs, True))
            return j
        if nxt == '"' and not quoted:
            j = skip_double(src, i + 1)
            out.extend(quoted_part(self.items(i + 2, j - 1, mode="dq")))
            return j
        if nxt and (nxt.isalpha() or nxt == "_"):
            j = i + 1
            while j < len(src) and (src[j].isalnum() or src[j] == "_") and src[j].isascii():
                j += 1
            out.extend(self._lookup_items(src[i + 1:j], None, i, j, quoted))
            return j
        if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
            out.extend(self._lookup_items(nxt, None, i, i + 2, quoted))
            return i + 2
        out.append(Chunk("$", (i,), quoted))
        return i + 1

    def _cmdsub(self, i: int, j: int, quoted: bool) -> list[Item]:
        """``$(cat <<EOF ... EOF)`` is the here-document's text; any other command is unknown."""
        doc = _cat_heredoc(self.src[i + 2:j - 1], i + 2)
        if doc is not None:
            value = list(self.heredoc_body(doc))
            while value and value[-1].text.endswith("\n"):  # $(...) drops trailing newlines
                last = value.pop()
                stripped = last.text.rstrip("\n")
                if stripped:
                    value.append(Chunk(stripped, last.offs[:len(stripped)], last.quoted, last.unknown))
                    break
            return [Chunk(c.text, c.offs, quoted, c.unknown) for c in value]
        return [unknown_chunk(self.src[i:j], i, quoted, "cmdsub", "command substitution")]


def _cat_heredoc(inner: str, base: int) -> Heredoc | None:
    """The here-document of ``inner`` when it is exactly ``cat <<DELIM ... DELIM``."""
    if not inner.lstrip().startswith("cat"):
        return None
    try:
        tree = parse(inner, base)
    except BashSyntaxError:
        return None
    stmts = [c for c in tree.root.named_children if c.type != "comment"]
    if len(stmts) != 1 or stmts[0].type != "redirected_statement":
        return None
    body, *rest = stmts[0].named_children
    if body.type != "command" or tree.text(body).strip() != "cat" or len(rest) != 1:
        return None
    if rest[0].type != "heredoc_redirect" or any(c.type in ("&&", "||", "|") for c in rest[0].children):
        return None
    return tree.heredoc(rest[0])


def _ansi_c(src: str, i: int, end: int) -> tuple[str, tuple[int, ...]]:
    escapes = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
               "E": "\x1b", "\\": "\\", "'": "'", '"': '"', "?": "?"}
    chars: list[str] = []
    offs: list[int] = []
    while i < end:
        if src[i] == "\\" and i + 1 < end and src[i + 1] in escapes:
            chars.append(escapes[src[i + 1]])
            offs.append(i)
            i += 2
        else:
            chars.append(src[i])
            offs.append(i)
            i += 1
    return "".join(chars), tuple(offs)


