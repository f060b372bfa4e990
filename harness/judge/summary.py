"""What a verdict says in words: its one-line summary and the reason of each failed check group.

Both read the verdict's own checks; the groups, their order and each tier's word for a pass come from the
tiers registry (:mod:`harness.judge.tiers`).
"""

from __future__ import annotations

import math

from harness.judge.tiers import GROUPS, MEMORY, STATISTICAL, THROUGHPUT, TIERS, fmt
from harness.records.verdict import Check, Verdict

WARM_START = "warm start"  # how a verdict's reason about the warm-start weights begins


def _k(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x / 1000:.1f}k" if abs(x) >= 1000 else f"{x:.0f}"


def failure_reasons(checks: list[Check]) -> list[str]:
    """One line per check group with failed checks, in the registry's order."""
    out = []
    for group in GROUPS:
        bad = [c for c in checks if c.group == group and not c.passed]
        if bad:
            names = ", ".join(c.metric for c in bad[:4]) + (f" (+{len(bad) - 4} more)" if len(bad) > 4 else "")
            out.append(f"{group}: {len(bad)} check(s) failed: {names} — {bad[0].metric}: {bad[0].detail}")
    return out


def _first_failure(bad: list[Check]) -> str:
    """The earliest failure: of the checks failing per step, the one whose first failing step comes first."""
    e = min(bad, key=lambda c: c.failing_steps[0] if c.failing_steps else math.inf)
    per_step = e.step is not None and e.group in TIERS and TIERS[e.group].per_step
    first = e.failing_steps[0] if per_step and e.failing_steps and e.failing_steps[0] != e.step else None
    where = (f" from step {first}, worst at step {e.step}" if first is not None
             else f" at step {e.step}" if per_step else "")
    return f"first failure: {e.group} {e.metric}{where} ({fmt(e.run_value)} vs {fmt(e.ref_value)})"


def summary_line(v: Verdict) -> str:
    """The line ``harness run`` and ``harness compare`` print (and the verdict stores)."""
    r = v.run
    head = f"{v.status.upper()} {r.recipe or '?'} {r.profile or '?'}:{r.scale or '?'}"
    if v.status in ("refused", "no-baseline"):
        return f"{head} {'; '.join(v.reasons or v.notices)}"
    parts = [f"{head} tier={v.tier}"]
    counts = v.counts
    if v.tier in counts:
        n = counts[v.tier]
        runs = 1 + len(v.candidates or []) + max(0, len(v.logs or []) - 1)
        parts.append(f"{n.checks - n.failed}/{n.checks} gated metrics {TIERS[v.tier].passes}"
                     + (f" (median of {runs} runs)" if v.tier == STATISTICAL.name and runs > 1 else ""))
    probe_group = next((t for t in TIERS.values() if t.needs_replay), None)
    if v.replay_probe is not None and probe_group is not None and probe_group.name in counts:
        n = counts[probe_group.name]
        parts.append(f"replay probe {n.checks - n.failed}/{n.checks} within tolerance "
                     f"({v.replay_probe.steps_compared} steps)")
    for g in TIERS:
        if g != v.tier and g in counts and counts[g].failed and not TIERS[g].needs_replay:
            parts.append(f"{g} {counts[g].failed} failed")
    for c in v.checks:
        if c.group == THROUGHPUT:
            tol = (c.tolerance or 0) / (c.ref_value or 1)
            parts.append(f"throughput {_k(c.run_value)} tok/s (ref {_k(c.ref_value)}, -{tol * 100:.0f}% floor)"
                         + ("" if c.passed else " SLOWER"))
        if c.group == MEMORY:
            ceil = (c.ref_value or 0) + (c.tolerance or 0)
            parts.append(f"memory {c.run_value:.2f} GB {'≤' if c.passed else '>'} {ceil:.2f} GB")
    if not any(c.group == THROUGHPUT for c in v.checks):  # say why, in a word (the notice has the rest)
        parts += [n.split(":")[0] for n in v.notices if n.startswith("throughput not ")][:1]
    bad = [c for c in v.checks if not c.passed]
    if bad:
        parts.append(_first_failure(bad))
    parts += [reason.split(" (fix:")[0] for reason in v.reasons if reason.startswith(WARM_START + ":")]
    if v.fault_injection:
        parts.append("fault injected: " + ",".join(f"{k}={x}" for k, x in
                                                   v.fault_injection.model_dump(by_alias=True,
                                                                                exclude_none=True).items()))
    if v.overrides:
        parts.append("overrides: " + ",".join(f"{o.key}={o.value}" for o in v.overrides))
    if v.changes:
        parts.append("changed: " + ", ".join(f"{c.key} {c.baseline} -> {c.run}" for c in v.changes))
    return parts[0] + " " + "; ".join(parts[1:])
