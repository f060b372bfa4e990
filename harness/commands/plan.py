"""`harness plan RECIPE --profile P --scale S`: does one GRPO step fit on the profile, and how long does it take.

The recipe is resolved exactly as `run` resolves it (overrides through the allowlist, the safety rules
first); one step is then traced at full size on rank 0 of a fake process group of the profile's world
size (:mod:`harness.plan.trace`), and judged against the profile's memory and rates
(:mod:`harness.plan.estimate`). Nothing is allocated and no device is needed.

Exit codes: 0 fits; 1 does not fit (the largest consumer and a fix are named) or safety findings; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.commands import add_override_argument, add_target_arguments, chosen_profile
from harness.errors import EXIT_FINDINGS, EXIT_OK

HELP = "Trace one full-size GRPO step on fake ranks: memory per rank and phase, collectives, step time; no device."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    add_override_argument(p)
    p.add_argument("--json", action="store_true", help="print the plan as one JSON document")
    p.add_argument("--rank", type=int, default=0, help="the rank traced (default 0; ranks hold equal shares)")
    p.add_argument("--max-prompt-length", action="store_true",
                   help="plan every prompt at data.max_prompt_length, the longest the recipe allows (default: the "
                        "longest prompt of the recipe's own data, as the run's loader encodes it)")


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f}"


def render(doc: dict[str, Any]) -> str:
    """The plan as a terminal table (per phase: peak and what it holds, time and its bound)."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{doc['recipe']} on {doc['profile']} ({doc['scale']}): rank {doc['rank']} of "
                    f"{doc['world_size']} ({doc['nnodes']} × {doc['devices_per_node']}), GB per rank")
    for col in ("phase", "peak", "params", "grads", "optim", "activ", "kv", "time s", "bound"):
        t.add_column(col, justify="left" if col in ("phase", "bound") else "right")
    for name, p in doc["phases"].items():
        b = p["breakdown"]
        t.add_row(name, _gb(p["peak_bytes"]), _gb(b["parameters"]), _gb(b["gradients"]), _gb(b["optimizer"]),
                  _gb(b["activations"]), _gb(b["kv_cache"]), f"{p['time_s']:.2f}", p["bound"])
    buf = StringIO()
    Console(file=buf, width=110, color_system=None).print(t)
    verdict = "fits" if doc["fits"] else "DOES NOT FIT"
    lines = [buf.getvalue().rstrip(),
             f"peak {_gb(doc['per_rank_peak_bytes'])} GB per rank ({doc['peak_phase']}) vs "
             f"{_gb(doc['budget_bytes'])} GB usable of {_gb(doc['device_memory_bytes'])}: {verdict}, headroom "
             f"{_gb(doc['headroom_bytes'])} GB; offloaded to the host {_gb(doc['host_bytes_per_node'])} GB per node",
             f"step time ≈ {doc['step_time_s']:.1f} s (from the profile's declared rates)"]
    for c in doc["collectives"]:
        lines.append(f"  {c['phase']:>9} {c['kind']:<15} {c['count']:>8} × per step, {c['bytes'] / 1e9:,.1f} GB")
    if not doc["fits"]:
        lines.append(f"largest consumer: {doc['largest_consumer']} (fix: {doc['fix']})")
    return "\n".join(lines)


def execute(args: argparse.Namespace) -> int:
    from harness.config.recipe import resolve
    from harness.config.safety.check import preflight
    from harness.plan.estimate import make_plan

    res = resolve(args.recipe, chosen_profile(args), args.scale, tuple(args.overrides))
    preflight(res, skip=("memory-preflight",))  # the trace measures what that rule estimates
    doc = make_plan(res, args.rank, longest_allowed=args.max_prompt_length)
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    if not doc["fits"]:
        sys.stderr.write(f"error: {res.name} needs {_gb(doc['per_rank_peak_bytes'])} GB per rank in the "
                         f"{doc['peak_phase']} phase > {_gb(doc['budget_bytes'])} GB usable on {res.profile_name}; "
                         f"largest consumer {doc['largest_consumer']} (fix: {doc['fix']})\n")
        return EXIT_FINDINGS
    return EXIT_OK
