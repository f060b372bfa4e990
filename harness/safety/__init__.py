"""Config-safety rules: a registry of named checks over a verl-shaped config.

Each rule has an id (kebab-case; ``grep -rn "'rule-id'" harness/safety`` finds it), a severity,
a one-line message and a fix hint. Rules read a :class:`RuleContext` — the resolved recipe
(or a verl launcher's overrides merged over verl's defaults), the chosen hardware profile and
the model architecture — and yield :class:`Finding` objects. They never change the config:
a finding refuses, it does not repair.
"""

from __future__ import annotations

from harness.safety.registry import (RULES, SEVERITIES, Finding, Rule, RuleContext, RuleFn,  # noqa: F401 (the API)
                                     finding, iter_errors, register_rule, run_rules)
from harness.safety import rules as _rules  # noqa: E402,F401  (registers every rule)
