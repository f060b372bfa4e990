"""Evaluate a bash launcher statically: find the verl trainer command lines and their arguments.

The script is never executed. :mod:`harness.verl.bashscan` masks what bashlex cannot parse,
bashlex gives the command structure, and this module walks it in order, keeping the variables a
run would have (:class:`harness.verl.bashwords.Shell`): assignments, ``export``/``declare``/
``local``, arrays, ``read`` from here-documents and here-strings, ``set -u``, functions (called
with their arguments), ``if``/``case``/``&&``/``||`` (a condition that compares known strings or
numbers picks its branch; otherwise every branch is evaluated and a variable the branches set
differently becomes unknown), loops (the body is evaluated once, its variable unknown), ``source``
and ``eval`` (after them an unset name may be set elsewhere, so it is unknown rather than
undefined). Every ``python -m verl.trainer.main_*`` (or ``.../main_ppo.py``) command becomes an
:class:`Invocation` whose arguments keep their source lines.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from harness.verl.bashbuiltins import BUILTINS, Builtins, Exit, Return, test_words
from harness.verl.bashscan import BashSyntaxError, Prepared, prepare
from harness.verl.bashwords import Chunk, Field, Issue, Shell, Unknown, Var, first_offset, text_of, unknowns, word_end

MAX_CALL_DEPTH = 16
MAX_NODES = 200_000


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
        return self.src.count("\n", 0, max(0, min(pos, len(self.src)))) + 1


def is_trainer_module(name: str) -> bool:
    return name == "main_ppo" or name.startswith("verl.trainer.main_")


def is_trainer_script(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return path.endswith(".py") and (base == "main_ppo.py" or "verl/trainer/main_" in path)


class Evaluator(Builtins):
    def __init__(self, prepared: Prepared) -> None:
        self.p = prepared
        self.src = prepared.src
        self.sh = Shell(prepared.src)
        self.functions: dict[str, Any] = {}
        self.invocations: list[Invocation] = []
        self.cond = 0  # > 0 inside a branch that may not run
        self.depth = 0
        self.visited = 0

    # -- driver -------------------------------------------------------------------------------
    def run(self, nodes: list[Any]) -> Evaluation:
        try:
            self.block(nodes)
        except (Exit, Return):
            pass
        return Evaluation(self.src, self.invocations, self.sh.issues, self.sh.nounset)

    def block(self, nodes: list[Any]) -> None:
        for node in nodes:
            self.node(node)

    def node(self, node: Any) -> bool | None:
        """Evaluate one node; returns the truth of a test command when it is known."""
        self.visited += 1
        if self.visited > MAX_NODES:
            raise ScriptError("script too large to evaluate statically")
        kind = getattr(node, "kind", None)
        if kind == "list":
            return self.list_node(node.parts)
        if kind == "command":
            return self.command(node)
        if kind == "pipeline":
            saved = self._fork()
            for part in node.parts:
                if getattr(part, "kind", None) == "command":
                    self.command(part)
            self.sh = saved
            return None
        if kind == "compound":
            return self.compound(node)
        if kind == "if":
            self.if_node(node)
        elif kind in ("for", "while", "until"):
            self.loop(node)
        elif kind == "function":
            name = next((p.word for p in node.parts if p.kind == "word"), None)
            if name:
                self.functions[name] = node.parts[-1]
        return None

    def list_node(self, parts: list[Any]) -> bool | None:
        result: bool | None = None
        op = None
        for part in parts:
            kind = getattr(part, "kind", None)
            if kind == "operator":
                op = part.op
                continue
            if op in ("&&", "||"):
                if result is not None:
                    if (op == "&&") == result:
                        result = self.node(part)
                    op = None
                    continue
                self.maybe(lambda p=part: self.node(p))
                result, op = None, None
                continue
            result = self.node(part)
            op = None
        return result

    def compound(self, node: Any) -> bool | None:
        items = node.list
        subshell = bool(items) and getattr(items[0], "kind", None) == "reservedword" and items[0].word == "("
        saved = self._fork() if subshell else None
        result = None
        for item in items:
            if getattr(item, "kind", None) != "reservedword":
                result = self.node(item)
        if saved is not None:
            self.sh = saved
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
        state, cond, body = None, [], []
        for part in node.parts:
            if getattr(part, "kind", None) == "reservedword" and part.word in ("if", "elif", "then", "else", "fi"):
                if part.word in ("elif", "else", "fi") and state == "then":
                    clauses.append((cond, body))
                if part.word == "fi" and state == "else":
                    else_body = body
                state = {"if": "cond", "elif": "cond", "then": "then", "else": "else", "fi": None}[part.word]
                if state == "cond":
                    cond = []
                if state in ("then", "else"):
                    body = []
                continue
            (cond if state == "cond" else body).append(part)
        possible: list[list[Any]] = []
        for cond_nodes, body_nodes in clauses:
            truth = self.condition(cond_nodes)
            if truth is True:
                possible.append(body_nodes)
                break
            if truth is None:
                possible.append(body_nodes)
        else:
            if else_body is not None:
                possible.append(else_body)
            else:
                possible.append([])
        if len(possible) == 1:
            self.block(possible[0])
            return
        self.maybe(*[lambda b=b: self.block(b) for b in possible], always=True, at=node.pos[0])

    def condition(self, nodes: list[Any]) -> bool | None:
        result = None
        for node in nodes:
            result = self.node(node)
        return result

    def loop(self, node: Any) -> None:
        parts = node.parts
        body: list[Any] = []
        after_do = False
        loop_var = None
        for k, part in enumerate(parts):
            if getattr(part, "kind", None) == "reservedword":
                if part.word == "do":
                    after_do = True
                elif part.word == "done":
                    after_do = False
                continue
            if after_do:
                body.append(part)
            elif node.kind == "for" and k == 1 and getattr(part, "kind", None) == "word":
                loop_var = part.word

        def run_body() -> None:
            if loop_var:
                text = f"${loop_var}"
                self.sh.set_scalar(loop_var, (Chunk(text, (node.pos[0],) * len(text), True,
                                                    Unknown("loop", text, "a loop variable")),), node.pos[0])
            self.block(body)

        self.maybe(run_body, at=node.pos[0])

    # -- commands ---------------------------------------------------------------------------
    def command(self, node: Any) -> bool | None:
        start = node.pos[0]
        if start in self.p.tests:
            return self.test_brackets(start, self.p.tests[start])
        if start in self.p.cases:
            self.case(start)
            return None
        assigns = [p for p in node.parts if p.kind == "assignment"]
        words = [p for p in node.parts if p.kind == "word"]
        redirects = [p for p in node.parts if p.kind == "redirect"]
        if not words:
            for a in assigns:
                self.assign(a.pos[0])
            return True
        if not assigns and _is_element_assignment(self.src, words[0].pos[0]):  # ``A[3]=x``
            self.assign(words[0].pos[0])
            return True
        fields: list[Field] = []
        for w in words:
            fields.extend(self.sh.expand_word(w.pos[0]))
        if not fields:
            return None
        name = text_of(fields[0]) if not unknowns(fields[0]) else ""
        if assigns:  # ``VAR=x cmd``: evaluated for its expansions, not kept
            saved = self._fork()
            for a in assigns:
                self.assign(a.pos[0])
            self.sh = saved
        self.detect_trainer(fields, start)
        if name in self.functions:
            return self.call(name, fields[1:])
        if name in BUILTINS:
            return getattr(self, "builtin_" + BUILTINS[name])(fields, words, redirects)
        return None

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
        args = [Arg(text_of(f), first_offset(f, start), self.p.line(first_offset(f, start)), tuple(unknowns(f)))
                for f in rest]
        line = self.p.line(first_offset(at, start))
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

    def test_brackets(self, start: int, end: int) -> bool | None:
        src, i, toks = self.src, start + 2, []
        stop = end - 2
        while i < stop:
            if src[i] in " \t\n" or src.startswith("\\\n", i):
                i += 1
                continue
            j = min(word_end(src, i), stop)
            if j <= i:
                return None
            toks.append(self.sh.expand_value(i, j))
            i = j
        return test_words(toks, pattern=True)

    def case(self, start: int) -> None:
        stmt = self.p.cases[start]
        subject = self.sh.expand_value(stmt.subject, word_end(self.src, stmt.subject))
        known = not unknowns(subject)
        possible: list[tuple[int, int]] = []
        for arm in stmt.arms:
            matched: bool | None = False
            for a, b in arm.patterns:
                pat = self.sh.expand_value(a, b)
                if not known or unknowns(pat):
                    matched = None
                elif fnmatch.fnmatchcase(text_of(subject), text_of(pat)):
                    matched = True
                    break
            if matched is True:
                possible.append(arm.body)
                break
            if matched is None:
                possible.append(arm.body)
        else:
            possible.append((0, 0))
        bodies = [self._parse_region(a, b) for a, b in possible]
        if len(bodies) == 1:
            self.block(bodies[0])
        else:
            self.maybe(*[lambda b=b: self.block(b) for b in bodies], always=True, at=start)

    def _parse_region(self, a: int, b: int) -> list[Any]:
        if b <= a:
            return []
        text = "".join(ch if ch == "\n" else " " for ch in self.p.inner[:a]) + self.p.inner[a:b]
        return parse_masked(text, self.p)


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
        why = f"set differently in branches of the condition on line {base.src.count(chr(10), 0, at) + 1}"
        unknown = (Chunk(text, (at,) * len(text), True, Unknown("branch", text, why)),)
        if all(v is not None and v.array is not None for v in values):
            # arrays the branches extend differently: the common leading elements stay known
            arrays = [v.elements() for v in values if v is not None]
            common = 0
            while all(len(a) > common for a in arrays) and all(_same_field(arrays[0][common], a[common])
                                                               for a in arrays[1:]):
                common += 1
            out.vars[name] = Var(array=arrays[0][:common] + [unknown], pos=at)
            continue
        out.vars[name] = Var(scalar=unknown, pos=at)
    return out


def _same_field(x: Field, y: Field) -> bool:
    return text_of(x) == text_of(y) and unknowns(x) == unknowns(y)


def parse_masked(text: str, p: Prepared) -> list[Any]:
    import bashlex

    if all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()):
        return []  # bashlex fails on a script of comments only
    try:
        return list(bashlex.parse(text))
    except bashlex.errors.ParsingError as err:
        pos, rest = getattr(err, "position", None), getattr(err, "s", None)
        if isinstance(pos, int) and isinstance(rest, str) and text.endswith(rest):
            pos += len(text) - len(rest)  # bashlex reports the offset into the statement it was reading
        line = p.line(pos) if isinstance(pos, int) else None
        raise ScriptError(f"bash syntax bashlex cannot parse: {getattr(err, 'message', err)}", line) from None
    except NotImplementedError as err:
        what = str(err).split("}", 1)[0].split("{", 1)[-1] if "type = {" in str(err) else str(err)
        raise ScriptError(f"bash construct not supported by bashlex: {what}") from None
    except RecursionError:
        raise ScriptError("script nested too deeply to parse") from None
    except Exception as err:  # noqa: BLE001 - bashlex fails on some malformed input with internal errors
        raise ScriptError(f"bashlex cannot parse this script ({type(err).__name__}: {err})") from None


def _is_element_assignment(src: str, pos: int) -> bool:
    k = pos
    while k < len(src) and (src[k].isalnum() or src[k] == "_") and src[k].isascii():
        k += 1
    if k == pos or k >= len(src) or src[k] != "[":
        return False
    close = src.find("]", k)
    return close > 0 and src.startswith("=", close + 1) and "\n" not in src[k:close]


def evaluate_script(text: str) -> Evaluation:
    """Parse and evaluate ``text``; raises :class:`ScriptError` when it cannot be parsed."""
    if "\x00" in text:
        raise ScriptError("not a text file (it contains NUL bytes)")
    if "\r\n" in text:
        raise ScriptError("Windows (CRLF) line endings: bash reads the \\r as part of every line and fails",
                          text.count("\n", 0, text.index("\r\n")) + 1)
    try:
        prepared = prepare(text)
    except BashSyntaxError as err:
        raise ScriptError(str(err), text.count("\n", 0, max(0, err.pos)) + 1) from None
    except RecursionError:
        raise ScriptError("script nested too deeply to parse") from None
    nodes = parse_masked(prepared.masked, prepared)
    try:
        return Evaluator(prepared).run(nodes)
    except BashSyntaxError as err:
        raise ScriptError(str(err), prepared.line(err.pos)) from None
    except RecursionError:
        raise ScriptError("script nested too deeply to evaluate") from None
