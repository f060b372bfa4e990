"""``harness compare RUN_DIR``: (re-)judge a finished run against its baseline; writes verdict.json and report.html.

Exit: 0 pass (or no baseline yet, with a notice naming the record-baseline command), 1 regression,
2 refused (not comparable: unfinished run, manifest failing its schema, other recipe hash,
architecture, profile or scale) or bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import shown
from harness.judge.compare import TIER_ORDER, judge

HELP = "Judge a finished run against its baseline (tiers exact / band / statistical); write verdict.json."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="run directory (holds manifest.json, metrics.jsonl)")
    p.add_argument("--baseline", type=Path, help="baseline file (default: baselines/<recipe>/<profile>-<scale>.json)")
    p.add_argument("--tier", choices=TIER_ORDER, help="force a tier (default: the strictest eligible one); "
                   "exact is refused when the environment differs from the baseline's")
    p.add_argument("--no-report", action="store_true", help="do not re-render report.html")


def execute(args: argparse.Namespace) -> int:
    verdict = judge(args.run_dir, None, baseline_path=args.baseline, tier=args.tier)
    if not args.no_report:
        from harness.judge.report import write_run_report

        write_run_report(args.run_dir, verdict)
    summary = verdict.summary_line()
    print(shown(summary), flush=True)  # record content (metric names, recipe names) is printed escaped
    for line in verdict.reasons if verdict.status == "fail" else []:
        sys.stderr.write(f"  {shown(line)}\n")
    for line in verdict.notices:
        if line not in summary:
            sys.stderr.write(f"notice: {shown(line)}\n")
    return verdict.exit_code
