"""Config-safety rules: a registry of named checks over a verl-shaped config.

Each rule has an id (kebab-case; ``grep -rn "'rule-id'" harness/config/safety`` finds it), a severity,
a one-line message and a fix hint. Rules read a :class:`RuleContext` — the resolved recipe
(or a verl launcher's overrides merged over verl's defaults), the chosen hardware profile and
the model architecture — and yield :class:`Finding` objects. They never change the config:
a finding refuses, it does not repair.
"""

from __future__ import annotations

from harness.config.safety import rules as _rules  # noqa: E402,F401  (registers every rule)
from harness.config.safety.registry import (  # noqa: F401 (the API)
                                     RULES,
                                     SEVERITIES,
                                     Finding,
                                     Rule,
                                     RuleContext,
                                     RuleFn,
                                     finding,
                                     iter_errors,
                                     register_rule,
                                     run_rules,
)
