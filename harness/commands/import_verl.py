"""`harness import-verl SCRIPT --out recipes/NAME.json`: turn a verl launcher into a recipe.

Fields verl has take the launcher's value, else verl's default; harness-only fields and values the
schema refuses take the template's (the shipped recipe of the model family). The sidecar
``NAME.import.json`` lists where each field came from, the overrides no recipe field holds and
the lint findings; the unmapped overrides are printed too.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from harness.config.schema_defs import FAMILIES
from harness.errors import EXIT_OK, HarnessError

HELP = "import a verl launcher script as a recipe (static; the script is never run)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", metavar="SCRIPT", help="bash launcher that runs verl's trainer")
    parser.add_argument("--out", required=True, metavar="recipes/NAME.json", help="recipe file to write")
    parser.add_argument("--model-family", choices=FAMILIES,
                        help="model family of the template recipe (default: from actor_rollout_ref.model.path)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing recipe and sidecar")


def execute(args: argparse.Namespace) -> int:
    from harness.jsonio import write_json_atomic
    from harness.verl.importer import import_launcher, sidecar, sidecar_path
    from harness.verl.lint import lint_file, read_script

    out = Path(args.out)
    if out.suffix != ".json" or not re.fullmatch(r"[a-z0-9_]+", out.stem):
        raise HarnessError(f"'{args.out}' is not a recipe file name", key_path="--out",
                           fix="use recipes/NAME.json with NAME of lowercase letters, digits and _")
    side = sidecar_path(out)
    for path in (out, side):
        if path.exists() and not args.force:
            raise HarnessError("refusing to overwrite an existing file", file=str(path),
                               fix="pass --force, or choose another --out")
    text = read_script(args.script)
    result = lint_file(args.script)
    imported = import_launcher(result, out.stem, args.model_family, text)
    write_json_atomic(out, imported.recipe)
    write_json_atomic(side, sidecar(imported, result, args.script, str(out)))
    print(f"wrote {out} (template {imported.template}, engine {imported.engine})")
    print(f"wrote {side} ({len(imported.unmapped)} unmapped override(s), {len(result.findings)} lint finding(s))")
    for item in imported.unmapped:
        print(f"{args.script}:{item['line']}: unmapped {item['override']} ({item['reason']})")
    for note in imported.notes:
        print(f"note: {note}")
    errors = [f for f in result.findings if f.severity == "error"]
    if errors:
        sys.stderr.write(f"warning: the launcher has {len(errors)} lint error(s); see {side} or run "
                         f"`harness lint-verl {args.script}`\n")
    return EXIT_OK
