"""``harness report DIR``: re-render report.html (and its PNG curves) of a run or a gate directory.

A run directory with a verdict.json is rendered from it; without one the run is judged first
(default baseline) and the verdict written. A gate directory (holding gate.json) gets the gate page.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import EXIT_OK, HarnessError

HELP = "Re-render report.html for a run directory (or a gate directory)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="DIR", help="run directory, or a gate output directory")


def execute(args: argparse.Namespace) -> int:
    from harness.judge import report
    from harness.records.base import read
    from harness.records.gate import Gate
    from harness.records.verdict import Verdict

    d: Path = args.run_dir
    if (d / "gate.json").is_file():
        path = report.write_gate_report(d, read(d / "gate.json", Gate, "gate"))
    elif (d / "manifest.json").is_file():
        vpath = d / "verdict.json"
        if vpath.is_file():
            verdict = read(vpath, Verdict, "verdict")
        else:
            from harness.judge.compare import judge

            verdict = judge(d, None)
        path = report.write_run_report(d, verdict)
    else:
        raise HarnessError("neither a run directory (manifest.json) nor a gate directory (gate.json)", file=str(d),
                           fix="give the directory a run or `harness gate --out` wrote")
    print(path)
    return EXIT_OK
