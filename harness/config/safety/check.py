"""Run the safety rules over a resolved recipe; turn error findings into one-line refusals."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from harness.config.recipe import Resolved
from harness.config.safety import Finding, RuleContext, iter_errors, run_rules
from harness.errors import EXIT_FINDINGS, HarnessError


def context_for(res: Resolved) -> RuleContext:
    """The rule context of a resolved recipe: its config, its profile and its model architecture."""
    model = res.config.get("model")
    arch: Any = model.get("architecture") if isinstance(model, dict) else None
    return RuleContext(config=res.config, profile=res.profile, architecture=arch if isinstance(arch, dict) else None)


def check_resolved(res: Resolved) -> list[Finding]:
    """Every finding (errors and warnings) of every registered rule for ``res``."""
    return run_rules(context_for(res))


def label(res: Resolved) -> str:
    """How findings of ``res`` name their file: ``path [profile:scale]``."""
    return f"{res.path} [{res.profile_name}:{res.scale}]"


def raise_on_errors(findings: Sequence[Finding], file: str | None = None) -> None:
    """Raise a one-line :class:`HarnessError` (exit 1) for the first error finding, counting the rest."""
    errors = list(iter_errors(findings))
    if not errors:
        return
    first = errors[0]
    more = f" [+{len(errors) - 1} more error(s); run `harness validate`]" if len(errors) > 1 else ""
    raise HarnessError(f"{first.rule} error: {first.message}{more}", file=file, key_path=first.key, fix=first.fix,
                       exit_code=EXIT_FINDINGS)


def preflight(res: Resolved, skip: Sequence[str] = ()) -> list[Finding]:
    """Safety rules + memory pre-flight before anything runs: warnings to stderr, the first error raised
    (exit 1, the others counted). ``skip``: rules whose findings a more exact check replaces (``harness plan``
    traces the memory the analytic ``memory-preflight`` estimates)."""
    findings = [f for f in check_resolved(res) if f.rule not in skip]
    for f in findings:
        if f.severity != "error":
            sys.stderr.write(f"warning: {f.one_line(res.path)}\n")
    raise_on_errors(findings, res.path)
    return findings
