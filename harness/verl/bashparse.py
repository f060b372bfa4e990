"""Evaluate a bash launcher statically: find the verl trainer command lines and their arguments.

The script is never executed. tree-sitter-bash gives its syntax tree (:mod:`harness.verl.bashtree`)
and this module walks it in order, keeping the variables a run would have (:class:`harness.verl.bashwords.Shell`): assignments, ``export``/``declare``/
``local``, arrays, ``read`` from here-documents and here-strings, ``set -u``, functions (called
with their arguments), ``if``/``case``/``&&``/``||`` (a condition that compares known strings or
numbers picks its branch; otherwise every branch is evaluated and a variable the branches set
differently becomes unknown), loops (the body is evaluated once, its variable unknown), ``source``
and ``eval`` (after them an unset name may be set elsewhere, so it is unknown rather than
undefined). Every ``python -m verl.trainer.main_*`` (or ``.../main_ppo.py``) command becomes an
:class:`Invocation` whose arguments keep their source lines.
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
from dataclasses import dataclass, field
from typing import Any

from harness.verl.bashbuiltins import BUILTINS, Builtins, Exit, Return, test_words
from harness.verl.bashscan import BashSyntaxError
from harness.verl.bashtree import Redirect, Tree, assigned_in_arith, assignments, elif_parts, parse
from harness.verl.bashwords import Chunk, Field, Issue, Shell, Unknown, Var, first_offset, text_of, unknowns, word_end

MAX_CALL_DEPTH = 16
MAX_NODES = 200_000
MAX_TRAINER_CALLS = 64  # trainer command lines one script may hold (each is merged over verl's whole config)


class ScriptError(Exception):
    """The script cannot be read or parsed; ``line`` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass(frozen=True)
class Arg:
    text: str
    pos: int
    line: int
    unknown: tuple[Unknown, ...] = ()

    @property
    def passthrough(self) -> bool:
        return any(u.kind == "passthrough" for u in self.unknown)


@dataclass
class Invocation:
    line: int
    program: str  # the module (``verl.trainer.main_ppo``) or script path
    args: list[Arg]
    conditional: bool


@dataclass
class Evaluation:
    src: str
    invocations: list[Invocation] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    nounset: bool = False

    def line(self, pos: int) -> int:
        return line_of(self.src, self._newlines, pos)

    @functools.cached_property
    def _newlines(self) -> list[int]:
        return newlines(self.src)


def newlines(src: str) -> list[int]:
    """Offsets of the newlines of ``src``, for :func:`line_of`."""
    out, k = [], src.find("\n")
    while k >= 0:
        out.append(k)
        k = src.find("\n", k + 1)
    return out


def line_of(src: str, nl: list[int], pos: int) -> int:
    """1-based line of offset ``pos`` in ``src`` whose :func:`newlines` are ``nl`` (a bisection: the many
    lookups of a long script stay fast)."""
    return bisect.bisect_left(nl, max(0, min(pos, len(src)))) + 1


def is_trainer_module(name: str) -> bool:
    return name == "main_ppo" or name.startswith("verl.trainer.main_")


def is_trainer_script(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return path.endswith(".py") and (base == "main_ppo.py" or "verl/trainer/main_" in path)


class Evaluator(Builtins):
    def __init__(self, tree: Tree) -> None:
        self.t = tree
        self.src = tree.src
        self.sh = Shell(tree.src)
        self.functions: dict[str, Any] = {}
        self.invocations: list[Invocation] = []
        self.cond = 0  # > 0 inside a branch that may not run
        self.depth = 0
        self.visited = 0
        self.newlines = newlines(tree.src)

    def line(self, pos: int) -> int:
        return line_of(self.src, self.newlines, pos)

    # -- driver -------------------------------------------------------------------------------
    def run(self) -> Evaluation:
        try:
            self.block(self.t.root.children)
        except (Exit, Return):
            pass
        return Evaluation(self.src, self.invocations, self.sh.issues, self.sh.nounset)

    def block(self, nodes: list[Any]) -> bool | None:
        result = None
        for node in nodes:
            if node.is_named and node.type != "comment":
                result = self.node(node)
        return result

    def node(self, node: Any, redirects: tuple[Redirect, ...] = ()) -> bool | None:
        """Evaluate one statement; returns the truth of a test command when it is known."""
        self.visited += 1
        if self.visited > MAX_NODES:
            raise ScriptError("script too large to evaluate statically")
        kind = node.type
        if kind == "command":
            return self.command(node, redirects)
        if kind in ("variable_assignment", "variable_assignments"):
            for a in assignments(node):
                self.assign(self.t.start(a))
            return True
        if kind == "declaration_command":
            return self.declaration(node)
        if kind == "unset_command":
            self.builtin_unset([()] + self._fields(node.named_children), [], [])
            return None
        if kind == "redirected_statement":
            return self.redirected(node)
        if kind == "list":
            return self.list_node(node.children)
        if kind == "pipeline":
            saved = self._fork()
            for part in node.named_children:
                self.node(part)
            self.sh = saved
            return None
        if kind == "subshell":
            saved = self._fork()
            try:
                return self.block(node.children)
            finally:
                self.sh = saved
        if kind == "compound_statement":
            if node.children and node.children[0].type == "((":
                self.arith_command(node)
                return None
            return self.block(node.children)
        if kind == "negated_command":
            result = self.block(node.children)
            return None if result is None else not result
        if kind == "test_command":
            return self.test_command(node)
        if kind == "if_statement":
            self.if_node(node)
        elif kind == "case_statement":
            self.case(node)
        elif kind in ("for_statement", "c_style_for_statement", "while_statement", "select_statement"):
            self.loop(node)
        elif kind == "function_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name is not None and body is not None:
                self.functions[self.t.text(name)] = body
        return None

    def list_node(self, parts: list[Any], result: bool | None = None) -> bool | None:
        """``a && b || c`` (tree-sitter nests these to the left); ``result``: of a command before ``parts``."""
        op = None
        for part in parts:
            if not part.is_named:
                op = part.type
                continue
            if part.type == "comment":
                continue
            if op in ("&&", "||"):
                if result is not None:
                    if (op == "&&") == result:
                        result = self.node(part)
                    op = None
                    continue
                self.maybe(lambda p=part: self.node(p), at=self.t.start(part))
                result, op = None, None
                continue
            result = self.node(part)
            op = None
        return result

    def redirected(self, node: Any) -> bool | None:
        body = node.child_by_field_name("body") or next((c for c in node.named_children), None)
        redirects: list[Redirect] = []
        chained: list[Any] = []  # ``cmd <<EOF || other``: tree-sitter hangs the list off the here-document
        for child in node.children:
            if child is body:
                continue
            if child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                redirects.append(self.t.redirect(child))
                if child.type == "heredoc_redirect":
                    seen_op = False
                    for sub in child.children:
                        seen_op = seen_op or sub.type in ("&&", "||", "|")
                        if seen_op and sub.type not in ("heredoc_body", "heredoc_end"):
                            chained.append(sub)
        result = self.node(body, tuple(redirects)) if body is not None else None
        if chained:
            if chained[0].type == "|":
                saved = self._fork()
                self.block(chained)
                self.sh = saved
                return None
            return self.list_node(chained, result)
        return result

    # -- branching ------------------------------------------------------------------------------
    def _fork(self) -> Shell:
        """Keep the current shell; continue on a copy (issues are shared)."""
        saved = self.sh
        self.sh = Shell(saved.src, dict(saved.vars), saved.positional, saved.nounset, saved.opaque, saved.issues,
                        saved.reported, saved.spent)
        return saved

    def maybe(self, *branches: Any, always: bool = False, at: int = 0) -> None:
        """Evaluate alternative branches; unless ``always``, not running any of them is possible too."""
        base = self.sh
        results: list[Shell] = []
        self.cond += 1
        try:
            for branch in branches:
                self._fork()
                try:
                    branch()
                except (Exit, Return):
                    pass
                results.append(self.sh)
                self.sh = base
        finally:
            self.cond -= 1
        if not always:
            results.append(base)
        self.sh = _merge(base, results, at)

    def if_node(self, node: Any) -> None:
        clauses: list[tuple[list[Any], list[Any]]] = []
        else_body: list[Any] | None = None
        cond: list[Any] = []
        body: list[Any] = []
        state = None
        for part in node.children:
            if part.type in ("if", "then", "fi"):
                if part.type == "then":
                    state = "then"
                elif part.type == "if":
                    state = "cond"
                continue
            if part.type == "elif_clause":
                clauses.append((cond, body))
                cond, body = elif_parts(part)
                continue
            if part.type == "else_clause":
                clauses.append((cond, body))
                cond, body = [], []
                else_body = [c for c in part.children if c.is_named]
                state = None
                continue
            if part.is_named and part.type != "comment":
                (cond if state == "cond" else body).append(part)
        if else_body is None:
            clauses.append((cond, body))
        possible: list[list[Any]] = []
        for cond_nodes, body_nodes in clauses:
            truth = self.block(cond_nodes)
            if truth is True:
                possible.append(body_nodes)
                break
            if truth is None:
                possible.append(body_nodes)
        else:
            possible.append(else_body if else_body is not None else [])
        if len(possible) == 1:
            self.block(possible[0])
            return
        self.maybe(*[lambda b=b: self.block(b) for b in possible], always=True, at=self.t.start(node))

    def loop(self, node: Any) -> None:
        at = self.t.start(node)
        var = node.child_by_field_name("variable") if node.type in ("for_statement", "select_statement") else None
        cond = [c for c in node.children if c.is_named and c.type not in ("do_group", "comment")] \
            if node.type == "while_statement" else []
        body = next((c for c in node.children if c.type in ("do_group", "compound_statement")), None)

        names = [self.t.text(var)] if var is not None else []
        if node.type == "c_style_for_statement":
            for part in node.children:
                if part.type == "variable_assignment" and part.named_children:
                    names.append(self.t.text(part.named_children[0]))
                elif part.type not in ("do_group", "compound_statement"):
                    names.extend(assigned_in_arith(part, self.t))

        def run_body() -> None:
            for name in dict.fromkeys(names):
                text = f"${name}"
                self.sh.set_scalar(name, (Chunk(text, (at,) * len(text), True,
                                                Unknown("loop", text, "a loop variable")),), at)
            self.block(cond)
            if body is not None:
                self.block(body.children)

        self.maybe(run_body, at=at)

    def arith_command(self, node: Any) -> None:
        """``(( ... ))``: the variables it assigns become unknown (its value is not evaluated)."""
        at = self.t.start(node)
        for name in assigned_in_arith(node, self.t):
            text = f"${name}"
            self.sh.set_scalar(name, (Chunk(text, (at,) * len(text), True,
                                            Unknown("other", text, "set by an arithmetic command")),), at)

    # -- commands ---------------------------------------------------------------------------
    def _fields(self, nodes: list[Any]) -> list[Field]:
        fields: list[Field] = []
        for w in nodes:
            fields.extend(self.sh.expand_word(self.t.start(w)))
        return fields

    def command(self, node: Any, redirects: tuple[Redirect, ...] = ()) -> bool | None:
        assigns, words = [], []
        redirects = tuple(redirects)
        name_node = node.child_by_field_name("name")
        covered = -1  # end of the last shell word: tree-sitter splits ``'a'\<newline>'b'``, bash does not
        for child in node.named_children:
            if child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect", "comment"):
                pass
            elif self.t.start(child) < covered:
                continue
            else:
                covered = word_end(self.src, self.t.start(child))
            if child.type == "variable_assignment" and (name_node is None or child.start_byte < name_node.start_byte):
                assigns.append(child)
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                redirects += (self.t.redirect(child),)
            elif child.type == "command_name":
                words.append(child.named_children[0] if child.named_children else child)
            elif child.type != "comment":
                words.append(child)
        if assigns and words and "\n" in _between(self.src, self.t.end(assigns[-1]), self.t.start(words[0])):
            for a in assigns:  # ``A=1 B=2`` then a newline: a statement of its own, not a prefix
                self.assign(self.t.start(a))
            assigns = []
        if not words:
            for a in assigns:
                self.assign(self.t.start(a))
            return True
        fields = self._fields(words)
        if not fields:
            return None
        name = text_of(fields[0]) if not unknowns(fields[0]) else ""
        if assigns:  # ``VAR=x cmd``: evaluated for its expansions, not kept
            saved = self._fork()
            for a in assigns:
                self.assign(self.t.start(a))
            self.sh = saved
        self.detect_trainer(fields, self.t.start(node))
        if name in self.functions:
            self.call(name, fields[1:])
            return None
        if name in BUILTINS:
            return getattr(self, "builtin_" + BUILTINS[name])(fields, words, list(redirects))
        return None

    def declaration(self, node: Any) -> bool:
        """``export`` / ``declare`` / ``local`` / ``readonly`` / ``typeset`` (``local`` is treated as global)."""
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(self.t.start(child))
        return True

    def detect_trainer(self, fields: list[Field], start: int) -> None:
        texts = [text_of(f) if not unknowns(f) else "" for f in fields]
        for k, text in enumerate(texts):
            if text == "-m" and k + 1 < len(texts) and is_trainer_module(texts[k + 1]):
                self._record(texts[k + 1], fields[k + 2:], fields[k + 1], start)
                return
            if is_trainer_script(text):
                self._record(text, fields[k + 1:], fields[k], start)
                return

    def _record(self, program: str, rest: list[Field], at: Field, start: int) -> None:
        args = [Arg(text_of(f), first_offset(f, start), self.line(first_offset(f, start)), tuple(unknowns(f)))
                for f in rest]
        line = self.line(first_offset(at, start))
        if len(self.invocations) >= MAX_TRAINER_CALLS:
            raise ScriptError(f"more than {MAX_TRAINER_CALLS} trainer command lines (a launcher starts the trainer "
                              "once or a few times)", line)
        self.invocations.append(Invocation(line, program, args, self.cond > 0))

    def call(self, name: str, args: list[Field]) -> None:
        if self.depth >= MAX_CALL_DEPTH:
            return None
        saved_pos = self.sh.positional
        self.sh.positional = list(args)
        self.depth += 1
        try:
            self.node(self.functions[name])
        except Return:
            pass
        finally:
            self.depth -= 1
            self.sh.positional = saved_pos
        return None

    def assign(self, pos: int) -> None:
        src = self.src
        end = word_end(src, pos)
        k = pos
        while k < end and (src[k].isalnum() or src[k] == "_") and src[k].isascii():
            k += 1
        name = src[pos:k]
        index = None
        if k < end and src[k] == "[":
            close = src.find("]", k)
            if close < 0 or close >= end:
                return
            index, k = src[k + 1:close], close + 1
        append = src.startswith("+=", k)
        k += 2 if append else 1
        if not name or k > end or src[k - 1] != "=":
            return
        if k < len(src) and src[k] == "(":
            items, _ = self.sh.parse_array(k)
            self.sh.set_array(name, items, pos, append=append)
            return
        value = self.sh.expand_value(k, end)
        if index is not None:
            var = self.sh.vars.get(name)
            elems = var.elements() if var else []
            try:
                idx = int(index)
            except ValueError:
                return
            elems += [()] * (idx + 1 - len(elems))
            elems[idx] = value
            self.sh.vars[name] = Var(array=elems, pos=pos)
            return
        if append:
            old = self.sh.vars.get(name)
            if old is not None and old.array is not None:
                self.sh.set_array(name, [value], pos, append=True)
                return
            value = (old.first() if old else ()) + value
        self.sh.set_scalar(name, value, pos)

    def test_command(self, node: Any) -> bool | None:
        """``[[ ... ]]`` (patterns on the right of ``==``) or ``[ ... ]`` on known operands."""
        first, last = node.children[0], node.children[-1]
        src, i, stop = self.src, self.t.end(first), self.t.start(last)
        toks: list[Field] = []
        while i < stop:
            if src[i] in " \t\n" or src.startswith("\\\n", i):
                i += 1
                continue
            j = min(word_end(src, i), stop)
            if j <= i:
                return None
            toks.append(self.sh.expand_value(i, j))
            i = j
        return test_words(toks, pattern=first.type == "[[")

    def case(self, node: Any) -> None:
        subject_node = node.child_by_field_name("value")
        if subject_node is None:
            return
        at = self.t.start(subject_node)
        subject = self.sh.expand_value(at, self.t.end(subject_node))
        known = not unknowns(subject)
        possible: list[list[Any]] = []
        for arm in (c for c in node.named_children if c.type == "case_item"):
            patterns, body, after = [], [], False
            for c in arm.children:
                if c.type == ")" and not after:
                    after = True
                elif not after and c.is_named:
                    patterns.append(c)
                elif after and c.is_named and c.type != "comment":
                    body.append(c)
            matched: bool | None = False
            for pat_node in patterns:
                pat = self.sh.expand_value(self.t.start(pat_node), self.t.end(pat_node))
                if not unknowns(pat) and text_of(pat) == "*":  # matches any subject, known or not
                    matched = True
                    break
                if not known or unknowns(pat):
                    matched = None
                elif fnmatch.fnmatchcase(text_of(subject), text_of(pat)):
                    matched = True
                    break
            if matched is True:
                possible.append(body)
                break
            if matched is None:
                possible.append(body)
        else:
            possible.append([])
        if len(possible) == 1:
            self.block(possible[0])
        else:
            self.maybe(*[lambda b=b: self.block(b) for b in possible], always=True, at=self.t.start(node))


# ----------------------------------------------------------------------------- helpers
def _same(a: Var | None, b: Var | None) -> bool:
    if a is None or b is None:
        return a is b
    ea, eb = a.elements(), b.elements()
    return (a.array is None) == (b.array is None) and len(ea) == len(eb) and all(
        _same_field(x, y) for x, y in zip(ea, eb))


def _merge(base: Shell, results: list[Shell], at: int) -> Shell:
    out = Shell(base.src, {}, base.positional, any(r.nounset for r in results),
                next((r.opaque for r in results if r.opaque), None), base.issues, base.reported, base.spent)
    names = set().union(*(r.vars for r in results))
    for name in names:
        values = [r.vars.get(name) for r in results]
        if all(_same(values[0], v) for v in values[1:]):
            if values[0] is not None:
                out.vars[name] = values[0]
            continue
        text = f"${name}"
        line = base.src.count("\n", 0, at) + 1
        why = f"set differently in branches of the condition on line {line}"
        unknown = (Chunk(text, (at,) * len(text), True, Unknown("branch", text, why)),)
        if all(v is not None and v.array is not None for v in values):
            # arrays the branches extend differently: the common leading elements stay known
            arrays = [v.elements() for v in values if v is not None]
            common = 0
            while all(len(a) > common for a in arrays) and all(_same_field(arrays[0][common], a[common])
                                                               for a in arrays[1:]):
                common += 1
            tail = f"${{{name}[@]}}"
            rest = (Chunk(tail, (at,) * len(tail), True,
                          Unknown("branch", tail, f"elements after the first {common} differ between the "
                                  f"branches of the condition on line {line}")),)
            out.vars[name] = Var(array=arrays[0][:common] + [rest], pos=at)
            continue
        out.vars[name] = Var(scalar=unknown, pos=at)
    return out


def _same_field(x: Field, y: Field) -> bool:
    return text_of(x) == text_of(y) and unknowns(x) == unknowns(y)


def _between(src: str, a: int, b: int) -> str:
    return src[a:b].replace("\\\n", "")


def evaluate_script(text: str) -> Evaluation:
    """Parse and evaluate ``text``; raises :class:`ScriptError` when it cannot be parsed."""
    if "\x00" in text:
        raise ScriptError("not a text file (it contains NUL bytes)")
    if "\r\n" in text:
        raise ScriptError("Windows (CRLF) line endings: bash reads the \\r as part of every line and fails",
                          text.count("\n", 0, text.index("\r\n")) + 1)
    try:
        tree = parse(text)
    except BashSyntaxError as err:
        raise ScriptError(str(err), text.count("\n", 0, max(0, err.pos)) + 1) from None
    evaluator = Evaluator(tree)
    try:
        return evaluator.run()
    except BashSyntaxError as err:
        raise ScriptError(str(err), evaluator.line(err.pos)) from None
    except RecursionError:
        raise ScriptError("script nested too deeply to evaluate") from None
