"""Where a bash quoted string or expansion ends: the lexical helpers of the static evaluation.

Each ``skip_*`` takes the source and the offset of the construct's first character and returns the
offset just past it, or raises :class:`BashSyntaxError` (an unterminated quote, say).
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
    j = i + 1
    while j < len(src):
        c = src[j]
        if c == "\\":
            j += 2
        elif c == '"':
            return j + 1
        elif c == "$":
            j = skip_dollar(src, j)
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
        from harness.verl.bashscan import Scanner  # the command inside $( ) is lexed like the script

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
