"""`harness export-verl RECIPE --profile P [--scale full] [--format overrides|script]`.

Prints the Hydra overrides a verl launcher needs to run the recipe (one ``key=value`` per line),
or a complete bash launcher (``set -euo pipefail``, every override listed, no argument pass-through,
no code-loading keys) for running the recipe with verl itself. Both turn on verl's file logger
(``trainer.logger=['console','file']``); the script also exports ``VERL_FILE_LOGGER_PATH``, so the run
leaves the log ``harness compare --log verl:FILE`` judges.
"""

from __future__ import annotations

import argparse
import sys

from harness.errors import EXIT_OK, HarnessError

HELP = "print the verl overrides (or a complete bash launcher) that run a recipe with verl itself"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", metavar="RECIPE", help="recipe name or path")
    parser.add_argument("--profile", required=True, metavar="P", help="hardware profile to resolve the recipe for")
    parser.add_argument("--scale", default="full", help="recipe scale (default: full)")
    parser.add_argument("--format", choices=("overrides", "script"), default="overrides",
                        help="overrides: one key=value per line (default); script: a bash launcher")
    parser.add_argument("--log-file", metavar="PATH",
                        help="script: the default of VERL_FILE_LOGGER_PATH, where verl's file logger writes the run's "
                             "log (default: $PWD/verl-RECIPE-PROFILE-SCALE.jsonl)")
    parser.add_argument("--no-file-logger", action="store_true",
                        help="leave verl's loggers as the recipe has them (no file log to judge)")


def execute(args: argparse.Namespace) -> int:
    from harness.config.recipe import resolve
    from harness.verl.mapping import (
        default_log_path,
        export_overrides,
        launcher_script,
        override_lines,
        with_file_logger,
    )

    if args.log_file is not None and (args.no_file_logger or args.format != "script" or not args.log_file.strip()
                                      or "\n" in args.log_file):
        raise HarnessError("--log-file goes with --format script and the file logger", key_path="--log-file",
                           fix="use --format script without --no-file-logger, and a one-line path")
    resolved = resolve(args.recipe, args.profile, args.scale)
    pairs = export_overrides(resolved.config)
    if not args.no_file_logger:
        pairs = with_file_logger(pairs)
    if args.format == "script":
        source = resolved.config["source"]["launcher"]
        log = None if args.no_file_logger else (args.log_file or default_log_path(resolved.name, args.profile,
                                                                                    args.scale))
        sys.stdout.write(launcher_script(resolved.name, source, args.profile, args.scale, pairs, log))
    else:
        sys.stdout.write("\n".join(override_lines(pairs)) + "\n")
    return EXIT_OK
