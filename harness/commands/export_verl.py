"""`harness export-verl RECIPE --profile P [--scale full] [--format overrides|script]`.

Prints the Hydra overrides a verl launcher needs to run the recipe (one ``key=value`` per line),
or a complete bash launcher (``set -euo pipefail``, every override listed, no argument pass-through,
no code-loading keys) for running the recipe with verl itself.
"""

from __future__ import annotations

import argparse
import sys

from harness.errors import EXIT_OK

HELP = "print the verl overrides (or a complete bash launcher) that run a recipe with verl itself"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", metavar="RECIPE", help="recipe name or path")
    parser.add_argument("--profile", required=True, metavar="P", help="hardware profile to resolve the recipe for")
    parser.add_argument("--scale", default="full", help="recipe scale (default: full)")
    parser.add_argument("--format", choices=("overrides", "script"), default="overrides",
                        help="overrides: one key=value per line (default); script: a bash launcher")


def execute(args: argparse.Namespace) -> int:
    from harness.config.recipe import resolve
    from harness.verl.mapping import export_overrides, launcher_script, override_lines

    resolved = resolve(args.recipe, args.profile, args.scale)
    pairs = export_overrides(resolved.config)
    if args.format == "script":
        source = resolved.config["source"]["launcher"]
        sys.stdout.write(launcher_script(resolved.name, source, args.profile, args.scale, pairs))
    else:
        sys.stdout.write("\n".join(override_lines(pairs)) + "\n")
    return EXIT_OK
