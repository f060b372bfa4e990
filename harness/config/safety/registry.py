"""The safety-rule registry: findings, the context rules read, ``register_rule`` and ``run_rules``.

The leaf of ``harness.config.safety``: the rules (``rules``, ``memory``) register themselves here; importing
``harness.config.safety`` imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.registry import Registry

SEVERITIES = ("error", "warning")


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    message: str
    fix: str
    key: str | None = None  # dotted config key the finding is about
    line: int | None = None  # source line, when the config came from a file we can point into

    def one_line(self, file: str | None = None) -> str:
        where = file or ""
        if self.line is not None:
            where += f":{self.line}"
        if self.key and self.line is None:
            where += f"::{self.key}" if where else self.key
        prefix = f"{where}: " if where else ""
        return f"{prefix}{self.rule} {self.severity}: {self.message} (fix: {self.fix})"

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class RuleContext:
    """What a rule may read. ``config`` is verl-shaped (``data``, ``actor_rollout_ref``, ...)."""

    config: dict[str, Any]
    profile: dict[str, Any] | None = None
    architecture: dict[str, Any] | None = None
    lines: dict[str, int] = field(default_factory=dict)  # dotted key -> source line

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def has(self, *dotted: str) -> bool:
        sentinel = object()
        return all(self.get(k, sentinel) is not sentinel for k in dotted)


RuleFn = Callable[[RuleContext], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    summary: str
    fn: RuleFn


RULES: Registry[Rule] = Registry("safety rule")


def register_rule(rule_id: str, severity: str, summary: str) -> Callable[[RuleFn], RuleFn]:
    """Register a rule under ``rule_id``; a duplicate id is a programming error."""
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r}")

    def deco(fn: RuleFn) -> RuleFn:
        RULES.register(rule_id)(Rule(rule_id, severity, summary, fn))
        return fn

    return deco


def finding(rule_id: str, message: str, fix: str, key: str | None = None, ctx: RuleContext | None = None) -> Finding:
    """Build a finding for a registered rule (severity from the registry, line from the context)."""
    rule = RULES[rule_id]
    line = ctx.lines.get(key) if (ctx is not None and key) else None
    return Finding(rule_id, rule.severity, message, fix, key, line)


def run_rules(ctx: RuleContext, only: Iterable[str] | None = None) -> list[Finding]:
    """Run every registered rule (or ``only`` these ids) and return the findings in rule order."""
    ids = list(only) if only is not None else list(RULES)
    out: list[Finding] = []
    for rule_id in ids:
        out.extend(RULES[rule_id].fn(ctx))
    return out


def iter_errors(findings: Iterable[Finding]) -> Iterator[Finding]:
    return (f for f in findings if f.severity == "error")
