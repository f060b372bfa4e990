"""A small lexer of bash: where a quoted string or expansion ends, and where the command text inside
``$( ... )`` ends.

Each ``skip_*`` takes the source and the offset of the construct's first character and returns the
offset just past it, or raises :class:`BashSyntaxError` (an unterminated quote, say). The syntax tree
(:mod:`harness.verl.bashtree`) gives the script's statements, but the word expander reads words from
the source itself and must know where a command substitution ends: its ``)`` may follow a ``case``
pattern's ``)``, quotes, nested expansions, array literals or a here-document body. :class:`Scanner`
lexes commands far enough to find it; :func:`skip_dollar` uses it for ``$( )``, and the scanner uses
the ``skip_*`` helpers for the words of a command (one module: the two recurse into each other).
"""

from __future__ import annotations


class BashSyntaxError(Exception):
    """Input the lexer cannot make sense of (an unterminated quote, say)."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


def skip_single(src: str, i: int) -> int:
    end = src.find("'", i + 1)
    if end < 0:
        raise BashSyntaxError("unterminated single quote", i)
    return end + 1


def skip_ansi(src: str, i: int) -> int:
    """``$'...'`` starting at the ``$``."""
    j = i + 2
    while j < len(src):
        if src[j] == "\\":
            j += 2
            continue
        if src[j] == "'":
            return j + 1
        j += 1
    raise BashSyntaxError("unterminated $'...' string", i)


def skip_double(src: str, i: int) -> int:
    """``"..."`` starting at the opening quote; a ``$`` right before the closing quote is a literal ``$``."""
    j = i + 1
    while j < len(src):
        c = src[j]
        if c == "\\":
            j += 2
        elif c == '"':
            return j + 1
        elif c == "$":
            j = j + 1 if src.startswith('"', j + 1) else skip_dollar(src, j)
        elif c == "`":
            j = skip_backtick(src, j)
        else:
            j += 1
    raise BashSyntaxError("unterminated double quote", i)


def skip_backtick(src: str, i: int) -> int:
    j = i + 1
    while j < len(src):
        if src[j] == "\\":
            j += 2
        elif src[j] == "`":
            return j + 1
        else:
            j += 1
    raise BashSyntaxError("unterminated backquote", i)


def _balanced(src: str, i: int, start: int, depth: int, opener: str, closer: str, what: str, *,
              quoted: bool = False, expansions: bool = False) -> int:
    """End of a bracketed construct: scan from ``start`` at ``depth`` until it returns to 0.

    ``quoted``: quotes, escapes and backquotes inside are skipped whole; ``expansions``: so are
    ``$`` constructs. ``i`` (where the construct began) is only for the error.
    """
    j = start
    while j < len(src):
        c = src[j]
        if quoted and c == "\\":
            j += 2
            continue
        if quoted and c in "'\"`":
            j = {"'": skip_single, '"': skip_double, "`": skip_backtick}[c](src, j)
            continue
        if expansions and c == "$":
            j = skip_dollar(src, j)
            continue
        if c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise BashSyntaxError(f"unterminated {what}", i)


def skip_braced(src: str, i: int) -> int:
    """``${...}`` starting at the ``$``; nested braces, quotes and expansions allowed."""
    return _balanced(src, i, i + 2, 1, "{", "}", "${...}", quoted=True, expansions=True)


def skip_arith(src: str, i: int) -> int:
    """``$((...))`` starting at the ``$``."""
    return _balanced(src, i, i + 3, 2, "(", ")", "$((...))", expansions=True)


def skip_dollar(src: str, i: int) -> int:
    """Any ``$`` construct starting at ``i``; a lone ``$`` is one character."""
    nxt = src[i + 1] if i + 1 < len(src) else ""
    if nxt == "{":
        return skip_braced(src, i)
    if nxt == "(":
        if src.startswith("((", i + 1):
            try:
                return skip_arith(src, i)
            except BashSyntaxError:
                pass  # ``$( (cmd) )`` written without the space
        return Scanner(src).command_text(i + 2, closer=")") + 1
    if nxt == "'":
        return skip_ansi(src, i)
    if nxt == '"':
        return skip_double(src, i + 1)
    if nxt == "[":
        return skip_old_arith(src, i)
    return i + 1


def skip_old_arith(src: str, i: int) -> int:
    """``$[...]`` (old arithmetic) starting at the ``$``."""
    return _balanced(src, i, i + 2, 1, "[", "]", "$[...]")


def parens_end(src: str, i: int) -> int:
    """End of ``((...))`` starting at ``i``."""
    return _balanced(src, i, i, 0, "(", ")", "((...))")


BLANKS = " \t"
META = set(" \t\n;&|<>()")
KEYWORDS = {"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"}


# ----------------------------------------------------------------------------- scanner
class Scanner:
    def __init__(self, src: str) -> None:
        self.src = src
        self.n = len(src)

    # -- command text -----------------------------------------------------------------------
    def command_text(self, i: int, closer: str | None = None, case_arm: bool = False) -> int:
        """Scan commands from ``i``; return the offset of ``closer`` (or of ``;;`` / ``esac`` in a case
        arm, or the end of input)."""
        src, n = self.src, self.n
        pending: list[tuple[int, str, bool]] = []
        depth = 0
        cmd_pos = True
        word_begin = -1
        while i < n:
            c = src[i]
            if word_begin < 0 and c not in META and not src.startswith("\\\n", i):
                word_begin = i
                if cmd_pos:
                    j = self._command_word(i, case_arm)
                    if j is not None:
                        if j < 0:  # ``esac`` closing the arm's statement
                            return i
                        i, word_begin, cmd_pos = j, -1, False
                        continue
            if c == "\n":
                i += 1
                if pending:
                    i = self._heredoc_bodies(i, pending)
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
                i = skip_double(self.src, i)
            elif c == "`":
                i = skip_backtick(src, i)
            elif c == "$":
                i = self._dollar(i)
            elif c == "(":
                prefix = src[word_begin:i] if word_begin >= 0 else ""
                if prefix.endswith("=") and _is_assignment(prefix):
                    i = self._array(i)
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
                i = self._heredoc_op(i, pending)
                word_begin = -1
            elif c in "<>":
                i += 3 if src.startswith("<<<", i) else 1
                word_begin = -1
            else:
                i += 1
        if closer is not None:
            raise BashSyntaxError(f"missing '{closer}'", i)
        return n

    def _command_word(self, i: int, case_arm: bool) -> int | None:
        """Handle ``[[``, ``case`` and (in a case arm) ``esac`` at a command position."""
        src = self.src
        word_end = i
        while word_end < self.n and src[word_end] not in META:
            word_end += 1
        word = src[i:word_end]
        if case_arm and word == "esac":
            return -1
        if word == "[[":
            return self._skip_words_until(word_end, "]]")
        if word == "for":
            j = word_end
            while j < self.n and src[j] in BLANKS:
                j += 1
            if src.startswith("((", j):  # C-style for: its ``;`` and parentheses are not commands
                return parens_end(src, j)
        if word == "case":
            return self._case(i, word_end)
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

    def _case(self, start: int, i: int) -> int:
        """Offset just past the ``esac`` of the ``case`` at ``start``."""
        src = self.src
        i = self._skip_space(i)
        i = _word_end(src, i)
        i = self._skip_space(i)
        if not src.startswith("in", i):
            raise BashSyntaxError("'case' without 'in'", i)
        i += 2
        while True:
            i = self._skip_space(i, newlines=True)
            if i >= self.n:
                raise BashSyntaxError("'case' without 'esac'", start)
            if src.startswith("esac", i) and (i + 4 >= self.n or src[i + 4] in META):
                return i + 4
            if src[i] == "(":
                i += 1
            while True:
                i = self._skip_space(i)
                i = self._skip_space(_word_end(src, i, stops="|)"))
                if i < self.n and src[i] == "|":
                    i += 1
                    continue
                if i < self.n and src[i] == ")":
                    i += 1
                    break
                raise BashSyntaxError("bad case pattern", i)
            i = self.command_text(i, case_arm=True)
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


    def _dollar(self, i: int) -> int:
        src = self.src
        nxt = src[i + 1] if i + 1 < self.n else ""
        if nxt in "{([":
            return skip_dollar(src, i)
        if nxt == "'":
            return skip_ansi(src, i)
        return i + 1

    def _array(self, i: int) -> int:
        """An array literal ``(...)`` after ``NAME=``; returns the offset after ``)``."""
        src = self.src
        j = i + 1
        while j < self.n:
            c = src[j]
            if c == ")":
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

    def _heredoc_op(self, i: int, pending: list[tuple[int, str, bool]]) -> int:
        src = self.src
        op = i
        i += 2
        strip = src.startswith("-", i)
        if strip:
            i += 1
        while i < self.n and src[i] in BLANKS:
            i += 1
        delim: list[str] = []
        while i < self.n and src[i] not in META:
            c = src[i]
            if c in "'\"":
                end = src.find(c, i + 1)
                if end < 0:
                    raise BashSyntaxError("unterminated here-document delimiter", i)
                delim.append(src[i + 1:end])
                i = end + 1
            elif c == "\\":
                delim.append(src[i + 1:i + 2])
                i += 2
            else:
                delim.append(c)
                i += 1
        word = "".join(delim)
        if not word:
            raise BashSyntaxError("here-document without a delimiter", op)
        pending.append((op, word, strip))
        return i

    def _heredoc_bodies(self, i: int, pending: list[tuple[int, str, bool]]) -> int:
        src = self.src
        for op, word, strip in pending:
            while True:
                if i >= self.n:
                    raise BashSyntaxError(f"here-document delimited by end of file (wanted '{word}')", op)
                end = src.find("\n", i)
                end = self.n if end < 0 else end
                line = src[i:end]
                if (line.lstrip("\t") if strip else line) == word:
                    i = min(end + 1, self.n)
                    break
                i = end + 1
        return i


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
