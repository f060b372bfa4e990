"""`harness mlperf-check RUN_DIR`: mlperf-logging's compliance checker on a run's ``mlperf.log``.

Runs ``python -m mlperf_logging.compliance_checker --usage training --ruleset 6.1.0 --config
<harness/mlperf/rules/training_6.1.0/common.yaml> RUN_DIR/mlperf.log`` (the benchmark's own rules
are enqueued from there; :mod:`harness.mlperf.rules`) on the log's absolute path, and prints its
output (escaped: it quotes the log's lines) and its verdict; a checker that crashed is one line naming
the error, never its traceback. Exit 0 on SUCCESS, 1 when the checker finds the log non-compliant (or
cannot check it), 2 when RUN_DIR has no mlperf.log.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
from pathlib import Path

from harness.errors import EXIT_FINDINGS, EXIT_OK, HarnessError, shown

HELP = "Check a run's mlperf.log with mlperf-logging's compliance checker and the harness's MLPerf rules."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="run directory (or its mlperf.log)")


def execute(args: argparse.Namespace) -> int:
    from harness.mlperf import LOG_FILE
    from harness.mlperf.rules import check_log, checker_command

    log = (args.run_dir if args.run_dir.is_file() else args.run_dir / LOG_FILE).resolve()
    if not log.is_file():
        raise HarnessError("no mlperf.log here", file=str(log), key_path="RUN_DIR",
                       fix="give a run directory written by this harness version")
    try:
        ok, output = check_log(log)
    except subprocess.TimeoutExpired:
        raise HarnessError("the compliance checker did not finish in time", file=str(log),
                           fix="check the log's size") from None
    for line in output.splitlines():
        print(shown(line))
    print(shown("$ " + shlex.join(checker_command(log, Path("compliance.log")))))
    hint = (" (its submission_benchmark has no rules: only a recipe scale whose reference baseline has a validation "
            "is an MLPerf benchmark)" if "CHECK for 'submission_benchmark' failed" in output else "")
    print(shown(f"{'SUCCESS' if ok else 'FAILED'} {log}: MLPerf Training {'compliant' if ok else 'non-compliant'} "
                f"under the harness's rules{hint}"))
    return EXIT_OK if ok else EXIT_FINDINGS
