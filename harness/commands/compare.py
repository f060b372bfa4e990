"""``harness compare RUN_DIR``: (re-)judge a finished run against its baseline; writes verdict.json and report.html.

``harness compare --log verl:FILE --recipe R --profile P --scale S [--out DIR]`` judges a run another trainer
made from its log (:mod:`harness.judge.foreign`): statistical tier (band when forced), never exact or replay;
more ``--log`` are its candidate runs. verdict.json and the report go to ``--out`` (a new or empty directory;
nothing else is written); without ``--out`` (and with ``--no-report``) nothing is written at all.

Exit: 0 pass (or no baseline yet, with a notice naming the record-baseline command), 1 regression,
2 refused (not comparable: unfinished run, manifest failing its schema, other recipe hash,
architecture, profile or scale) or bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.errors import HarnessError, shown
from harness.judge.compare import exit_code, judge
from harness.judge.tiers import TIER_ORDER
from harness.records.base import dump
from harness.records.verdict import Verdict

HELP = "Judge a finished run (or another trainer's log: --log verl:FILE) against its baseline; write verdict.json."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR",
                   help="run directory (holds manifest.json, metrics.jsonl); not with --log")
    p.add_argument("--baseline", type=Path, help="baseline file (default: baselines/<recipe>/<profile>-<scale>.json)")
    p.add_argument("--tier", choices=TIER_ORDER, help="force a tier (default: the strictest eligible one); "
                   "exact is refused when the environment differs from the baseline's")
    p.add_argument("--no-report", action="store_true", help="do not re-render report.html")
    g = p.add_argument_group("another trainer's run, from its log")
    g.add_argument("--log", action="append", default=[], metavar="FORMAT:FILE",
                   help="a log to judge (verl:FILE — verl's FileLogger jsonl; trl:FILE — TRL's trainer_state.json); "
                        "given again, the runs of other seeds judged with it (the median)")
    g.add_argument("--recipe", metavar="R", help="the recipe the log's run ran (name or path)")
    g.add_argument("--profile", metavar="P", help="the hardware profile it ran on")
    g.add_argument("--scale", metavar="S", help="the recipe scale")
    g.add_argument("--out", type=Path, metavar="DIR", help="new or empty directory for verdict.json and the report")


def execute(args: argparse.Namespace) -> int:
    if args.log:
        return _execute_log(args)
    if args.run_dir is None:
        raise HarnessError("nothing to judge", key_path="RUN_DIR", fix="give a run directory, or --log verl:FILE "
                           "--recipe R --profile P --scale S")
    stray = [f"--{k}" for k in ("recipe", "profile", "scale", "out") if getattr(args, k) is not None]
    if stray:
        raise HarnessError(f"{stray[0]} is for --log; a run directory names its own", key_path=stray[0],
                           fix="leave it out, or judge a log with --log")
    verdict = judge(args.run_dir, None, baseline_path=args.baseline, tier=args.tier)
    if not args.no_report:
        from harness.judge.report import write_run_report

        write_run_report(args.run_dir, verdict)
    _print(verdict)
    if verdict.crosscheck:
        from harness.judge.foreign import crosscheck_lines

        print("\n".join(crosscheck_lines(verdict.crosscheck)))
    return exit_code(verdict)


def _print(verdict: Verdict) -> None:
    summary = verdict.summary_line
    print(shown(summary), flush=True)  # record content (metric names, recipe names) is printed escaped
    for line in verdict.reasons if verdict.status == "fail" else []:
        sys.stderr.write(f"  {shown(line)}\n")
    for line in verdict.notices:
        if line not in summary:
            sys.stderr.write(f"notice: {shown(line)}\n")


def _execute_log(args: argparse.Namespace) -> int:
    from harness.config.recipe import resolve
    from harness.judge.foreign import crosscheck_lines, judge_logs

    if args.run_dir is not None:
        raise HarnessError("give a run directory or --log, not both", key_path="--log",
                           fix="judge one thing at a time")
    missing = [f"--{k}" for k in ("recipe", "profile", "scale") if getattr(args, k) is None]
    if missing:
        raise HarnessError(f"a log does not say which recipe, profile and scale it ran: {', '.join(missing)} "
                           "missing", key_path=missing[0], fix="give --recipe R --profile P --scale S")
    if args.out is None and not args.no_report:
        raise HarnessError("a log's verdict and report need a directory", key_path="--out",
                           fix="give --out DIR (new or empty), or --no-report to print the verdict only")
    out = args.out
    if out is not None and (os.path.lexists(out) and (not out.is_dir() or out.is_symlink() or any(out.iterdir()))):
        raise HarnessError("--out must be a new or empty directory; nothing is overwritten", file=str(out),
                           key_path="--out", fix="choose a new directory")
    res = resolve(args.recipe, args.profile, args.scale)
    verdict, logs = judge_logs(args.log, res, args.baseline, forced=args.tier)
    if out is not None:
        from harness.judge.compare import write_verdict

        out.mkdir(parents=True, exist_ok=True)
        write_verdict(out, verdict)
        if not args.no_report:
            from harness.judge.report import write_run_report

            write_run_report(out, verdict, series=logs[0].series,
                             manifest={"logs": [dump(x) for x in verdict.logs or []]})
    _print(verdict)
    for line in crosscheck_lines(verdict.crosscheck or []):
        print(line)
    return exit_code(verdict)
