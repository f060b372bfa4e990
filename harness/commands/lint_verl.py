"""`harness lint-verl SCRIPT... [--profile NAME] [--json]`: lint verl launcher scripts without running them."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Any

from harness.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, HarnessError

HELP = ("lint verl launcher scripts statically (never executed): Hydra overrides, argument pass-through, "
        "undefined variables, unknown keys and verl's startup rules")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scripts", nargs="+", metavar="SCRIPT", help="bash launcher(s) that start verl's trainer")
    parser.add_argument("--profile", metavar="NAME",
                        help="hardware profile the launcher must fit (devices per node, device type), "
                             "e.g. npu-16x-ascend-a3")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of lines")


def lint_one(path: str, profile: dict[str, Any] | None) -> dict[str, Any]:
    """The report of one launcher (run in the child of :func:`harness.verl.isolate.run_isolated`)."""
    from harness.verl.lint import lint_file

    try:
        result = lint_file(path, profile)
    except HarnessError:
        raise
    except Exception as err:  # noqa: BLE001 - a launcher must never produce a traceback
        line = " ".join(f"{path}: cannot lint this script (internal error: {type(err).__name__}: {err})".split())
        raise HarnessError(line, fix="report it with the script attached") from None
    return {"report": result.as_dict(), "lines": [f.one_line(path) for f in result.findings],
            "errors": len(result.errors), "calls": len(result.calls)}


def execute(args: argparse.Namespace) -> int:
    import harness.verl.lint  # noqa: F401 - imported here once: each child inherits it
    from harness.config.profiles import load_profile
    from harness.verl.isolate import run_isolated

    profile = load_profile(args.profile) if args.profile else None
    reports: list[dict[str, Any]] = []
    bad = errors = 0
    for path in args.scripts:
        try:  # the parser runs in a child process: a crash there is one line here
            done = run_isolated(functools.partial(lint_one, path, profile), path)
        except HarnessError as err:
            bad += 1
            reports.append({"file": path, "error": err.one_line()})
            if not args.json:
                sys.stderr.write(f"error: {err.one_line()}\n")
            continue
        errors += done["errors"]
        reports.append(done["report"])
        if not args.json:
            for line in done["lines"]:
                print(line)
            n_err, n_warn = done["errors"], len(done["lines"]) - done["errors"]
            print(f"{path}: {n_err} error(s), {n_warn} warning(s) in {done['calls']} trainer command(s)"
                  + (f" [profile {args.profile}]" if args.profile else ""))
    if args.json:
        print(json.dumps({"profile": args.profile, "files": reports}, indent=2, sort_keys=False))
    if bad:
        return EXIT_USAGE
    return EXIT_FINDINGS if errors else EXIT_OK
