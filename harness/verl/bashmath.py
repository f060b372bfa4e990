"""Bash integer arithmetic (``$((...))``), evaluated without running anything.

Supports integer literals (decimal, ``0x`` hex, ``0`` octal), variables (by name or ``$name``),
parentheses, unary ``+ - ! ~`` and the binary operators ``** * / % + - << >> < <= > >= == !=
& ^ | && ||``. Anything else (assignment operators, ``?:``, commas) raises :class:`NotStatic`.
"""

from __future__ import annotations

from collections.abc import Callable

# precedence, lowest first (bash follows C)
_BINARY: list[tuple[str, ...]] = [
    ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<=", ">=", "<", ">"), ("<<", ">>"),
    ("+", "-"), ("*", "/", "%"),
]
_OPS = sorted({op for group in _BINARY for op in group} | {"**", "(", ")", "!", "~"}, key=len, reverse=True)
_MAX = 1 << 63


class NotStatic(Exception):
    """The expression cannot be evaluated statically (the message says why)."""


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in " \t\n":
            i += 1
            continue
        if c.isalnum() or c in "_$":
            j = i + 1
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(text[i:j])
            i = j
            continue
        for op in _OPS:
            if text.startswith(op, i):
                out.append(op)
                i += len(op)
                break
        else:
            raise NotStatic(f"unsupported '{c}' in arithmetic")
    return out


def _wrap(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= _MAX else value


def evaluate(text: str, lookup: Callable[[str], str | None]) -> int:
    """Evaluate ``text``; ``lookup(name)`` returns a variable's text, None when not static."""
    toks = _tokens(text)
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(toks):
            raise NotStatic("arithmetic expression ends early")
        pos += 1
        return toks[pos - 1]

    def atom() -> int:
        tok = take()
        if tok == "(":
            value = binary(0)
            if take() != ")":
                raise NotStatic("unbalanced parentheses in arithmetic")
            return value
        if tok in ("-", "+", "!", "~"):
            value = unary()
            return {"-": -value, "+": value, "!": int(not value), "~": ~value}[tok]
        if tok[0].isdigit():
            try:
                if tok.lower().startswith("0x"):
                    return int(tok, 16)
                return int(tok, 8) if len(tok) > 1 and tok[0] == "0" else int(tok)
            except ValueError:
                raise NotStatic(f"bad number '{tok}'") from None
        name = tok.lstrip("$")
        if not name:
            raise NotStatic("'$' without a name in arithmetic")
        raw = lookup(name)
        if raw is None:
            raise NotStatic(f"${name} is not known statically")
        raw = raw.strip()
        if not raw:
            return 0
        return evaluate(raw, lookup) if raw != name else 0

    def unary() -> int:
        base = atom()
        if peek() == "**":
            take()
            exp = unary()
            if exp < 0:
                raise NotStatic("negative exponent")
            if exp > 256:
                raise NotStatic("exponent too large")
            return _wrap(base ** exp)
        return base

    def binary(level: int) -> int:
        if level == len(_BINARY):
            return unary()
        left = binary(level + 1)
        while peek() in _BINARY[level]:
            op = take()
            right = binary(level + 1)
            left = _apply(op, left, right)
        return left

    value = binary(0)
    if pos != len(toks):
        raise NotStatic(f"unexpected '{toks[pos]}' in arithmetic")
    return value


def _apply(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise NotStatic("division by zero")
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # bash truncates toward zero
        return q if op == "/" else a - q * b
    if op in ("<<", ">>") and not 0 <= b < 64:
        raise NotStatic("shift out of range")
    table: dict[str, Callable[[int, int], int]] = {
        "||": lambda x, y: int(bool(x) or bool(y)), "&&": lambda x, y: int(bool(x) and bool(y)),
        "|": lambda x, y: x | y, "^": lambda x, y: x ^ y, "&": lambda x, y: x & y,
        "==": lambda x, y: int(x == y), "!=": lambda x, y: int(x != y), "<=": lambda x, y: int(x <= y),
        ">=": lambda x, y: int(x >= y), "<": lambda x, y: int(x < y), ">": lambda x, y: int(x > y),
        "<<": lambda x, y: x << y, ">>": lambda x, y: x >> y, "+": lambda x, y: x + y, "-": lambda x, y: x - y,
        "*": lambda x, y: x * y,
    }
    return _wrap(table[op](a, b))
