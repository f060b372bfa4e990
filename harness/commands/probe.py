"""`harness probe`: the live machine, and how it compares with each hardware profile."""

from __future__ import annotations

import argparse
import json

from harness.config.profiles import load_profile, mismatches, probe_machine, profile_names
from harness.errors import EXIT_OK
from harness.records.base import dump

HELP = "Show the live machine and which hardware profiles it matches."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def execute(args: argparse.Namespace) -> int:
    machine = probe_machine()
    verdicts = {name: mismatches(load_profile(name), machine) for name in profile_names()}
    if args.json:
        print(json.dumps({"machine": dump(machine), "profiles": verdicts}, indent=2))
        return EXIT_OK
    print(f"machine: {machine.device_count} x {machine.device_model} ({machine.device_type}, "
          f"{machine.device_memory_gb} GB), {machine.cpu_cores} cores, {machine.host_memory_gb} GB host")
    for name, diff in verdicts.items():
        print(f"  {name:20s} {'matches' if not diff else 'no: ' + '; '.join(diff)}")
    return EXIT_OK
