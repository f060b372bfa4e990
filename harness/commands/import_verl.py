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
from typing import Any

from harness.config.schema_defs import FAMILIES
from harness.errors import EXIT_OK, HarnessError

HELP = "import a verl launcher script as a recipe (static; the script is never run)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", metavar="SCRIPT", help="bash launcher that runs verl's trainer")
    parser.add_argument("--out", required=True, metavar="recipes/NAME.json", help="recipe file to write")
    parser.add_argument("--model-family", choices=FAMILIES,
                        help="model family of the template recipe (default: from actor_rollout_ref.model.path)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing recipe and sidecar")


def import_one(script: str, name: str, family: str | None, out: str) -> dict[str, Any]:
    """Lint and import one launcher (run in the child of :func:`harness.verl.isolate.run_isolated`): the recipe,
    the sidecar and the lines to print; the parent writes the files."""
    from harness.verl.importer import import_launcher, sidecar, sidecar_path
    from harness.verl.lint import lint_file, read_script

    text = read_script(script)
    result = lint_file(script)
    imported = import_launcher(result, name, family, text)
    side = sidecar_path(Path(out))
    lines = [f"wrote {out} (template {imported.template}, engine {imported.engine})",
             f"wrote {side} ({len(imported.unmapped)} unmapped override(s), {len(result.findings)} lint finding(s))"]
    lines += [f"{script}:{item['line']}: unmapped {item['override']} ({item['reason']})" for item in imported.unmapped]
    lines += [f"note: {note}" for note in imported.notes]
    return {"recipe": imported.recipe, "sidecar": sidecar(imported, result, script, out), "lines": lines,
            "errors": len(result.errors)}


def execute(args: argparse.Namespace) -> int:
    from harness.jsonio import write_json_atomic
    from harness.verl.importer import sidecar_path  # with the lint: imported here, inherited by the child
    from harness.verl.isolate import run_isolated

    out = Path(args.out)
    if out.suffix != ".json" or not re.fullmatch(r"[a-z0-9_]+", out.stem):
        raise HarnessError(f"'{args.out}' is not a recipe file name", key_path="--out",
                           fix="use recipes/NAME.json with NAME of lowercase letters, digits and _")
    side = sidecar_path(out)
    for path in (out, side):
        if path.exists() and not args.force:
            raise HarnessError("refusing to overwrite an existing file", file=str(path),
                               fix="pass --force, or choose another --out")
    # the parser runs in a child process (a crash there is one line here); only this process writes
    done = run_isolated(lambda: import_one(args.script, out.stem, args.model_family, str(out)), args.script)
    write_json_atomic(out, done["recipe"])
    write_json_atomic(side, done["sidecar"])
    for line in done["lines"]:
        print(line)
    if done["errors"]:
        sys.stderr.write(f"warning: the launcher has {done['errors']} lint error(s); see {side} or run "
                         f"`harness lint-verl {args.script}`\n")
    return EXIT_OK
