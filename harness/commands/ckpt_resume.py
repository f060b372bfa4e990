"""`harness ckpt-resume RECIPE`: N steps straight vs N/2, SIGTERM, resume N/2 — metrics must match bitwise.

Exit codes: 0 identical (timing and perf fields aside), 1 a mismatch or a run failed, 2 bad input.
Prints one line, or the result as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from harness.commands import (
    add_override_argument,
    add_simulate_arguments,
    add_target_arguments,
    as_asked,
    chosen_profile,
    steps_count,
)
from harness.config.recipe import resolve
from harness.errors import EXIT_FINDINGS, EXIT_OK, HarnessError

HELP = "Check that an interrupted run resumes bit for bit (N straight vs N/2 + resume N/2)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    p.add_argument("--steps", type=steps_count(2), default=6, help="steps of the straight run (default 6; resumed at N/2)")
    add_override_argument(p, ", applied to both runs")
    p.add_argument("--nproc-per-node", type=int, default=1, help="processes (torchrun) on the cpu profile; 1 = local")
    p.add_argument("--workdir", type=Path, help="where the two runs go (default: a temporary directory)")
    add_simulate_arguments(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def execute(args: argparse.Namespace) -> int:
    from harness.run.resume_check import ckpt_resume_check

    profile = chosen_profile(args)
    if args.steps < 2:
        raise HarnessError(f"--steps must be >= 2, got {args.steps}", key_path="--steps", fix="give 2 or more")
    res = as_asked(args, resolve(args.recipe, profile, args.scale, tuple(args.overrides)))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"ckpt-resume-{res.name}-"))
    result = ckpt_resume_check(res, workdir, args.steps, nproc=args.nproc_per_node)
    if args.json:
        print(json.dumps(result, indent=2))
    elif result["pass"]:
        print(f"PASS ckpt-resume {res.name} ({profile}): {args.steps} steps straight == {args.steps // 2} + resume, "
              f"bitwise (runs in {workdir})")
    else:
        m = result["first_mismatch"]
        print(f"FAIL ckpt-resume {res.name} ({profile}): step {m['step']} {m['key']}: straight {m['straight']!r} "
              f"vs resumed {m['resumed']!r} (runs in {workdir})")
    return EXIT_OK if result["pass"] else EXIT_FINDINGS
