"""The syntax tree of a bash script, from tree-sitter-bash, with offsets in characters of the source.

tree-sitter reads all of bash (``case`` patterns, ``[[ ]]``, ``(( ))``, arrays, here-documents,
``||`` at the start of a continued line); it reports byte offsets, which :class:`Tree` turns into
offsets into the ``str`` the word expander (:mod:`harness.verl.bashwords`) reads. A tree with an
error node is a script bash would refuse too: :func:`parse` raises with the line. Text holding a character
:mod:`harness.verl.bashchars` refuses (some crash the parser) is never handed to tree-sitter.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from harness.verl.bashchars import first_refused
from harness.verl.bashscan import BashSyntaxError, skip_braced

MAX_DEPTH = 400  # nesting beyond this is refused rather than walked
CLOSERS = {"then", "elif", "else", "fi", "do", "done", "esac"}


@dataclass(frozen=True)
class Heredoc:
    op: int  # offset of the ``<<`` operator
    body_start: int
    body_end: int  # end of the body (start of the terminator line)
    quoted: bool  # delimiter was quoted: no expansion in the body
    strip_tabs: bool  # ``<<-``


@dataclass(frozen=True)
class Redirect:
    kind: str  # "<<" | "<<-" | "<<<" | ">" | "<" | ...
    heredoc: Heredoc | None = None
    word: int | None = None  # offset of the target word (here-string, file)


@functools.cache
def _parser() -> Any:
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


class Tree:
    """A parsed script: ``root`` and the byte -> character offset map."""

    def __init__(self, src: str, base: int = 0) -> None:
        self.src = src
        data = src.encode("utf-8")
        self.root = _parser().parse(data).root_node
        self._chars: list[int] | None = None
        if len(data) != len(src):
            self._chars = []
            for k, ch in enumerate(src):
                self._chars.extend([k] * len(ch.encode("utf-8")))
            self._chars.append(len(src))
        self.base = base

    def at(self, byte: int) -> int:
        """Character offset of a byte offset."""
        return self.base + (byte if self._chars is None else self._chars[byte])

    def start(self, node: Any) -> int:
        return self.at(node.start_byte)

    def end(self, node: Any) -> int:
        return self.at(node.end_byte)

    def text(self, node: Any) -> str:
        return self.src[self.start(node) - self.base:self.end(node) - self.base]

    def heredoc(self, node: Any) -> Heredoc:
        """The :class:`Heredoc` of a ``heredoc_redirect`` node."""
        op = node.children[0]
        start = next((c for c in node.children if c.type == "heredoc_start"), None)
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        end = next((c for c in node.children if c.type == "heredoc_end"), None)
        delim = self.text(start) if start is not None else ""
        if body is not None:
            a, b = self.start(body), self.end(body)
        else:  # an empty body: it ends where the terminator line starts
            a = b = self.start(end) if end is not None else self.end(node)
        return Heredoc(self.start(op), a, b, any(q in delim for q in "'\"\\"), self.text(op) == "<<-")

    def redirect(self, node: Any) -> Redirect:
        if node.type == "heredoc_redirect":
            doc = self.heredoc(node)
            return Redirect("<<-" if doc.strip_tabs else "<<", heredoc=doc)
        op = next((c for c in node.children if not c.is_named), None)
        target = next((c for c in reversed(node.children) if c.is_named and c.type != "file_descriptor"), None)
        kind = self.text(op) if op is not None else ""
        return Redirect(kind, word=self.start(target) if target is not None else None)


def parse(src: str, base: int = 0) -> Tree:
    """Parse ``src``; raise :class:`BashSyntaxError` at the first error node, or at the first character
    the parser is not given (:func:`harness.verl.bashchars.first_refused`)."""
    refused = first_refused(src)
    if refused is not None:
        raise BashSyntaxError(f"{refused.code} is {refused.why}", base + refused.pos)
    tree = Tree(src, base)
    bad = _first_error(tree) if tree.root.has_error else None
    if bad is not None:
        where = tree.start(bad)
        what = "missing " + repr(bad.type) if bad.is_missing else "unexpected text"
        near = tree.text(bad).strip().splitlines()[0][:40] if tree.text(bad).strip() else ""
        raise BashSyntaxError(f"bash syntax error: {what}{f' near {near!r}' if near else ''}", where)
    if not depth_ok(tree.root):
        raise BashSyntaxError("script nested too deeply to evaluate", base)
    stray = _stray_keyword(tree)
    if stray is not None:
        raise BashSyntaxError(f"bash syntax error near unexpected token '{tree.text(stray)}'", tree.start(stray))
    return tree


def _stray_keyword(tree: Tree) -> Any:
    """A command named by a reserved word that closes or continues a compound (``fi``, ``done``, ...):
    tree-sitter reads it as a command, bash refuses it."""
    stack = [tree.root]
    while stack:
        cur = stack.pop()
        if cur.type == "command_name" and tree.text(cur) in CLOSERS:
            return cur
        stack.extend(cur.children)
    return None


def _first_error(tree: Tree) -> Any:
    """The first error node that matters. Inside ``${...}`` tree-sitter-bash refuses some valid text
    (``${X:-$(((a + b) * 2))}``, ``${X:-['a','b']}``); the word expander reads every ``${...}`` from
    the source itself, so an error there is ignored when both agree where the expansion ends."""
    stack = [tree.root]
    while stack:
        cur = stack.pop()
        if cur.is_error or cur.is_missing:
            return cur
        if cur.type == "expansion" and _braced_end(tree, cur) == tree.end(cur):
            continue
        if cur.has_error:
            stack.extend(reversed(cur.children))
    return None


def _braced_end(tree: Tree, node: Any) -> int | None:
    start = tree.start(node) - tree.base
    try:
        return skip_braced(tree.src, start) + tree.base
    except BashSyntaxError:
        return None


def depth_ok(node: Any) -> bool:
    """False when the tree under ``node`` nests deeper than :data:`MAX_DEPTH`."""
    stack = [(node, 0)]
    while stack:
        cur, d = stack.pop()
        if d > MAX_DEPTH:
            return False
        stack.extend((c, d + 1) for c in cur.children)
    return True


def assignments(node: Any) -> list[Any]:
    """The ``variable_assignment`` nodes of an assignment statement (one, or several on a line)."""
    return [node] if node.type == "variable_assignment" else [c for c in node.named_children
                                                             if c.type == "variable_assignment"]


def elif_parts(node: Any) -> tuple[list[Any], list[Any]]:
    """(condition, body) of an ``elif`` clause."""
    cond: list[Any] = []
    body: list[Any] = []
    state = "cond"
    for c in node.children:
        if c.type == "then":
            state = "then"
        elif c.is_named and c.type != "comment":
            (cond if state == "cond" else body).append(c)
    return cond, body


def assigned_in_arith(node: Any, tree: Tree) -> list[str]:
    """Names an arithmetic command assigns (``x = ...``, ``x += ...``, ``x++``, ``--x``)."""
    names: list[str] = []
    stack = [node]
    while stack:
        cur = stack.pop()
        kids = cur.children
        if cur.type in ("binary_expression", "postfix_expression", "unary_expression") and kids:
            ops = [c.type for c in kids if not c.is_named]
            target = kids[0] if cur.type != "unary_expression" else kids[-1]
            assigning = any(op.endswith("=") and op not in ("==", "!=", "<=", ">=") or op in ("++", "--")
                            for op in ops)
            if assigning and target.type in ("variable_name", "word"):
                names.append(tree.text(target))
        stack.extend(kids)
    return names
