"""Lexical pass over a bash script, before bashlex parses it.

bashlex (0.18) builds the command structure we walk, but it refuses several constructs real
launchers use: array literals ``A=(x y)``, arithmetic ``$((...))``, ``[[ ... ]]`` tests, ``case``
statements and quoted here-document delimiters. :func:`prepare` finds those with a small bash
lexer and returns a *masked* copy of the source of the same length, with the same newlines,
that bashlex accepts: the inside of every ``$(...)``, ``${...}``, `` `...` `` and ``$((...))`` is
blanked (the expander re-reads the original text at the same offsets), array literals become
quoted strings, ``[[ ... ]]`` and ``case ... esac`` become the no-op ``:`` (their original text is
recorded and evaluated separately), and here-document bodies are blanked.

The helpers ``skip_*`` (:mod:`harness.verl.bashskip`) find where a quoted string or expansion
ends; the word expander (:mod:`harness.verl.bashwords`) uses the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.verl.bashskip import (BashSyntaxError, parens_end, skip_ansi, skip_arith, skip_backtick, skip_braced,
                                   skip_dollar, skip_double, skip_old_arith, skip_single)

__all__ = ["BashSyntaxError", "CaseArm", "CaseStmt", "Heredoc", "Prepared", "Scanner", "prepare", "skip_ansi",
           "skip_arith", "skip_backtick", "skip_braced", "skip_dollar", "skip_double", "skip_old_arith",
           "skip_single"]

BLANKS = " \t"
META = set(" \t\n;&|<>()")
KEYWORDS = {"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"}


@dataclass(frozen=True)
class Heredoc:
    op: int  # offset of the ``<<`` operator
    body_start: int
    body_end: int  # end of the body (start of the terminator line)
    quoted: bool  # delimiter was quoted: no expansion in the body
    strip_tabs: bool  # ``<<-``


@dataclass(frozen=True)
class CaseArm:
    patterns: tuple[tuple[int, int], ...]  # spans of the pattern words
    body: tuple[int, int]  # span of the arm's commands


@dataclass(frozen=True)
class CaseStmt:
    start: int
    end: int
    subject: int  # offset of the subject word
    arms: tuple[CaseArm, ...]


@dataclass
class Prepared:
    src: str
    masked: str  # what bashlex parses (top level)
    inner: str  # masked, except case statements are left in place (their arm bodies get parsed)
    heredocs: dict[int, Heredoc] = field(default_factory=dict)
    tests: dict[int, int] = field(default_factory=dict)  # ``[[`` offset -> end offset
    cases: dict[int, CaseStmt] = field(default_factory=dict)

    def line(self, pos: int) -> int:
        return self.src.count("\n", 0, max(0, min(pos, len(self.src)))) + 1



# ----------------------------------------------------------------------------- scanner
class Scanner:
    def __init__(self, src: str) -> None:
        self.src = src
        self.n = len(src)
        self.masks: list[tuple[int, int, str]] = []  # (start, end, kind) over the original text
        self.case_masks: list[tuple[int, int]] = []
        self.heredocs: dict[int, Heredoc] = {}
        self.tests: dict[int, int] = {}
        self.cases: dict[int, CaseStmt] = {}

    # -- command text -----------------------------------------------------------------------
    def command_text(self, i: int, closer: str | None = None, record: bool = True, case_arm: bool = False) -> int:
        """Scan commands from ``i``; return the offset of ``closer`` (or of ``;;`` / ``esac`` in a case
        arm, or the end of input)."""
        src, n = self.src, self.n
        pending: list[tuple[int, str, bool, bool]] = []
        depth = 0
        cmd_pos = True
        word_begin = -1
        while i < n:
            c = src[i]
            if word_begin < 0 and c not in META and not src.startswith("\\\n", i):
                word_begin = i
                if cmd_pos:
                    j = self._command_word(i, record, case_arm)
                    if j is not None:
                        if j < 0:  # ``esac`` closing the arm's statement
                            return i
                        i, word_begin, cmd_pos = j, -1, False
                        continue
            if c == "\n":
                i += 1
                if pending:
                    i = self._heredoc_bodies(i, pending, record)
                    pending = []
                cmd_pos, word_begin = True, -1
                continue
            if c in BLANKS:
                if word_begin >= 0:
                    cmd_pos = src[word_begin:i] in KEYWORDS or (cmd_pos and _is_assignment(src[word_begin:i]))
                word_begin = -1
                i += 1
                continue
            if c == "\\":
                i += 2
                continue
            if c == "#" and word_begin == i:
                end = src.find("\n", i)
                i = n if end < 0 else end
                word_begin = -1
                continue
            if c == "'":
                i = skip_single(src, i)
            elif c == '"':
                i = self._double(i, record)
            elif c == "`":
                end = skip_backtick(src, i)
                self._mask(i, end, "subst", record)
                i = end
            elif c == "$":
                i = self._dollar(i, record)
            elif c == "(":
                prefix = src[word_begin:i] if word_begin >= 0 else ""
                if prefix.endswith("=") and _is_assignment(prefix):
                    i = self._array(i, record)
                    continue
                depth += 1
                i += 1
                cmd_pos, word_begin = True, -1
            elif c == ")":
                if depth == 0 and closer == ")":
                    return i
                depth -= 1
                i += 1
                word_begin = -1
            elif c == ";" and case_arm and depth == 0 and src.startswith(";;", i):
                return i
            elif c == ";" and case_arm and depth == 0 and src.startswith(";&", i):
                return i
            elif c in ";&|":
                i += 1
                cmd_pos, word_begin = True, -1
            elif c == "<" and src.startswith("<<", i) and not src.startswith("<<<", i):
                i = self._heredoc_op(i, pending, record)
                word_begin = -1
            elif c in "<>":
                i += 3 if src.startswith("<<<", i) else 1
                word_begin = -1
            else:
                i += 1
        if closer is not None:
            raise BashSyntaxError(f"missing '{closer}'", i)
        return n

    def _command_word(self, i: int, record: bool, case_arm: bool) -> int | None:
        """Handle ``[[``, ``case`` and (in a case arm) ``esac`` at a command position."""
        src = self.src
        word_end = i
        while word_end < self.n and src[word_end] not in META:
            word_end += 1
        word = src[i:word_end]
        if case_arm and word == "esac":
            return -1
        if word == "[[":
            end = self._skip_words_until(word_end, "]]")
            self.tests[i] = end
            if record:
                self.masks.append((i, end, "test"))
            return end
        if word == "time" and record:  # bashlex does not know ``time``; it changes nothing we read
            self.masks.append((i, word_end, "blank"))
            return None
        if word == "for":
            j = word_end
            while j < self.n and src[j] in BLANKS:
                j += 1
            if src.startswith("((", j):  # C-style for: bashlex refuses it; the loop variable is unknown anyway
                end = parens_end(src, j)
                if record:
                    self.masks.append((j, end, "cfor"))
                return end
        if word == "case":
            stmt = self._case(i, word_end, record)
            self.cases[i] = stmt
            if record:
                self.case_masks.append((i, stmt.end))
            return stmt.end
        return None

    def _skip_words_until(self, i: int, stop: str) -> int:
        src = self.src
        while i < self.n:
            c = src[i]
            if c in " \t\n":
                i += 1
                continue
            if c == "\\":
                i += 2
                continue
            start = i
            i = _word_end(src, i, " \t\n", meta=False)
            if src[start:i] == stop or src[start:i].rstrip(";") == stop:
                return start + len(stop)
        raise BashSyntaxError(f"missing '{stop}'", i)

    def _case(self, start: int, i: int, record: bool) -> CaseStmt:
        src = self.src
        i = self._skip_space(i)
        subject = i
        i = _word_end(src, i)
        i = self._skip_space(i)
        if not src.startswith("in", i):
            raise BashSyntaxError("'case' without 'in'", i)
        i += 2
        arms: list[CaseArm] = []
        while True:
            i = self._skip_space(i, newlines=True)
            if i >= self.n:
                raise BashSyntaxError("'case' without 'esac'", start)
            if src.startswith("esac", i) and (i + 4 >= self.n or src[i + 4] in META):
                return CaseStmt(start, i + 4, subject, tuple(arms))
            if src[i] == "(":
                i += 1
            pats: list[tuple[int, int]] = []
            while True:
                i = self._skip_space(i)
                end = _word_end(src, i, stops="|)")
                pats.append((i, end))
                i = self._skip_space(end)
                if i < self.n and src[i] == "|":
                    i += 1
                    continue
                if i < self.n and src[i] == ")":
                    i += 1
                    break
                raise BashSyntaxError("bad case pattern", i)
            body_end = self.command_text(i, record=record, case_arm=True)
            arms.append(CaseArm(tuple(pats), (i, body_end)))
            i = body_end
            for sep in (";;&", ";;", ";&"):
                if src.startswith(sep, i):
                    i += len(sep)
                    break

    def _skip_space(self, i: int, newlines: bool = False) -> int:
        src = self.src
        while i < self.n:
            if src[i] in BLANKS or (newlines and src[i] in "\n;"):
                i += 1
            elif src.startswith("\\\n", i):
                i += 2
            elif newlines and src[i] == "#":
                end = src.find("\n", i)
                i = self.n if end < 0 else end
            else:
                break
        return i

    def _double(self, i: int, record: bool) -> int:
        src = self.src
        j = i + 1
        while j < self.n:
            c = src[j]
            if c == "\\":
                j += 2
            elif c == '"':
                return j + 1
            elif c == "$":
                j = self._dollar(j, record)
            elif c == "`":
                end = skip_backtick(src, j)
                self._mask(j, end, "subst", record)
                j = end
            else:
                j += 1
        raise BashSyntaxError("unterminated double quote", i)

    def _dollar(self, i: int, record: bool) -> int:
        src = self.src
        nxt = src[i + 1] if i + 1 < self.n else ""
        if nxt in "{([":
            end = skip_dollar(src, i)
            self._mask(i + 1, end, "oldarith" if nxt == "[" else "subst", record)
            return end
        if nxt == "'":
            return skip_ansi(src, i)
        return i + 1

    def _array(self, i: int, record: bool) -> int:
        """An array literal ``(...)`` after ``NAME=``; returns the offset after ``)``."""
        src = self.src
        j = i + 1
        while j < self.n:
            c = src[j]
            if c == ")":
                if record:
                    self.masks.append((i, j + 1, "array"))
                return j + 1
            if c == "\\":
                j += 2
            elif c == "'":
                j = skip_single(src, j)
            elif c == '"':
                j = skip_double(src, j)
            elif c == "$":
                j = skip_dollar(src, j)
            elif c == "`":
                j = skip_backtick(src, j)
            elif c == "#" and (j == 0 or src[j - 1] in " \t\n("):
                end = src.find("\n", j)
                j = self.n if end < 0 else end
            else:
                j += 1
        raise BashSyntaxError("unterminated array literal", i)

    def _heredoc_op(self, i: int, pending: list[tuple[int, str, bool, bool]], record: bool) -> int:
        src = self.src
        op = i
        i += 2
        strip = src.startswith("-", i)
        if strip:
            i += 1
        while i < self.n and src[i] in BLANKS:
            i += 1
        start = i
        delim: list[str] = []
        quoted = False
        while i < self.n and src[i] not in META:
            c = src[i]
            if c in "'\"":
                end = src.find(c, i + 1)
                if end < 0:
                    raise BashSyntaxError("unterminated here-document delimiter", i)
                delim.append(src[i + 1:end])
                quoted, i = True, end + 1
            elif c == "\\":
                delim.append(src[i + 1:i + 2])
                quoted, i = True, i + 2
            else:
                delim.append(c)
                i += 1
        word = "".join(delim)
        if not word:
            raise BashSyntaxError("here-document without a delimiter", op)
        if quoted and record:
            self.masks.append((start, i, "delim:" + word))
        pending.append((op, word, quoted, strip))
        return i

    def _heredoc_bodies(self, i: int, pending: list[tuple[int, str, bool, bool]], record: bool) -> int:
        src = self.src
        for op, word, quoted, strip in pending:
            body_start = i
            while True:
                if i >= self.n:
                    raise BashSyntaxError(f"here-document delimited by end of file (wanted '{word}')", op)
                end = src.find("\n", i)
                end = self.n if end < 0 else end
                line = src[i:end]
                if (line.lstrip("\t") if strip else line) == word:
                    self.heredocs[op] = Heredoc(op, body_start, i, quoted, strip)
                    if record:
                        self.masks.append((body_start, i, "body"))
                    i = min(end + 1, self.n)
                    break
                i = end + 1
        return i

    def _mask(self, start: int, end: int, kind: str, record: bool) -> None:
        if record and end > start:
            self.masks.append((start, end, kind))


def _is_assignment(word: str) -> bool:
    """``NAME=`` / ``NAME+=`` (optionally with a value)."""
    name = word.split("=", 1)[0] if "=" in word else ""
    name = name[:-1] if name.endswith("+") else name
    return bool(name) and name.isidentifier() and name.isascii()


def _word_end(src: str, i: int, stops: str = "", *, meta: bool = True) -> int:
    """End of the shell word at ``i``: quotes and ``$`` constructs inside are skipped whole."""
    while i < len(src) and src[i] not in stops and not (meta and src[i] in META):
        if src[i] == "'":
            i = skip_single(src, i)
        elif src[i] == '"':
            i = skip_double(src, i)
        elif src[i] == "$":
            i = skip_dollar(src, i)
        elif src[i] == "\\":
            i += 2
        else:
            i += 1
    return i


def _apply(chars: list[str], start: int, end: int, kind: str) -> None:
    def blank(a: int, b: int, fill: str) -> None:
        for k in range(a, b):
            if chars[k] != "\n":
                chars[k] = fill

    if kind == "array":
        blank(start, end, "_")
        chars[start], chars[end - 1] = "'", "'"
    elif kind in ("test", "case"):
        blank(start, end, " ")
        chars[start] = ":"
    elif kind == "body":
        blank(start, end, "x")
    elif kind == "blank":
        blank(start, end, " ")
    elif kind == "cfor":
        blank(start, end, "_")
        chars[start:start + 5] = list("_ in ")
    elif kind == "oldarith":  # ``$[...]`` -> ``$(___)``
        blank(start, end, "_")
        chars[start], chars[end - 1] = "(", ")"
    elif kind.startswith("delim:"):
        word = kind[6:]
        blank(start, end, " ")
        chars[start:start + len(word)] = list(word)
    elif kind == "subst":  # keep the delimiters: ``${...}`` / ``$(...)`` / `` `...` ``
        blank(start + 1, end - 1, "_")
    else:
        blank(start, end, "_")


def prepare(src: str) -> Prepared:
    """Lex ``src`` and return its masked copies and the tables the evaluator needs."""
    scanner = Scanner(src)
    scanner.command_text(0)
    chars = list(src)
    for start, end, kind in scanner.masks:
        _apply(chars, start, end, kind)
    inner = "".join(chars)
    for start, end in scanner.case_masks:
        _apply(chars, start, end, "case")
    return Prepared(src, "".join(chars), inner, scanner.heredocs, scanner.tests, scanner.cases)
