"""`harness slurm RECIPE --profile P --out RUN_DIR`: the Slurm batch script of a multi-node run.

One task per node; each runs the harness's torchrun launcher with ``NODE_RANK=$SLURM_NODEID`` and the
rendezvous on the first node (``HARNESS_RDZV_ENDPOINT``), then the first task's shell judges the run
(``harness compare``). The recipe, its overrides and the safety rules are checked before a line is
written, so a script is never produced for a run the harness would refuse. Prints the script, or writes
it atomically with ``--write FILE`` (an existing file only with ``--force``).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from harness.commands import add_override_argument, add_target_arguments, chosen_profile, steps_count
from harness.config.recipe import resolve
from harness.config.safety.check import preflight
from harness.errors import EXIT_OK, LINE_BREAKING, HarnessError
from harness.jsonio import write_text_atomic

HELP = "Write the Slurm batch script of a multi-node run (sbatch it on the cluster)."
PARTITION = re.compile(r"[A-Za-z0-9_,-]+")  # one partition name or a comma-separated list
# Slurm's --time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
TIME = re.compile(r"[0-9]+(:[0-9]{1,2}){0,2}|[0-9]+-[0-9]{1,2}(:[0-9]{1,2}){0,2}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="the run directory on the cluster's shared disk")
    p.add_argument("--steps", type=steps_count(), help="stop after N steps (default: the recipe's)")
    add_override_argument(p, ", passed on to every node")
    p.add_argument("--partition", help="#SBATCH --partition")
    p.add_argument("--time", default="04:00:00", metavar="HH:MM:SS", help="#SBATCH --time (default 04:00:00)")
    p.add_argument("--write", type=Path, metavar="FILE", help="write the script here instead of printing it")
    p.add_argument("--force", action="store_true", help="replace an existing --write FILE")


def check_arguments(args: argparse.Namespace) -> None:
    """Every text that goes into the batch script is one line of the expected form (else exit 2, one line)."""
    if args.partition is not None and not PARTITION.fullmatch(args.partition):
        raise HarnessError(f"{args.partition!r} is not a Slurm partition name", key_path="--partition",
                           fix="use letters, digits, _ and - (a comma between several partitions)")
    if not TIME.fullmatch(args.time):
        raise HarnessError(f"{args.time!r} is not a Slurm time limit", key_path="--time",
                           fix="use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 04:00:00)")
    texts = [("RECIPE", args.recipe), ("--out", args.out), ("--profile", args.profile), ("--scale", args.scale),
             *(("--set", o) for o in args.overrides)]
    for option, text in texts:
        if text is not None and (m := LINE_BREAKING.search(text)):
            raise HarnessError(f"{text!r} holds a control character (U+{ord(m.group()):04X}); every value goes on "
                               "one line of the batch script", key_path=option, fix="remove it")


def execute(args: argparse.Namespace) -> int:
    from harness.run.runtime.torchrun import sbatch_script

    check_arguments(args)
    if args.steps is not None and args.steps < 1:
        raise HarnessError(f"--steps must be >= 1, got {args.steps}", key_path="--steps", fix="give 1 or more")
    res = resolve(args.recipe, chosen_profile(args), args.scale, tuple(args.overrides))
    preflight(res)
    text = sbatch_script(res, steps=args.steps, out=args.out, partition=args.partition, time_limit=args.time)
    if args.write is None:
        print(text, end="")
        return EXIT_OK
    if os.path.lexists(args.write) and not args.force:
        raise HarnessError("file exists", file=str(args.write), key_path="--write",
                           fix="choose another --write FILE, or --force to replace it")
    write_text_atomic(args.write, text)
    print(f"wrote {args.write}: sbatch it on the cluster (`sbatch {args.write}`)")
    return EXIT_OK
