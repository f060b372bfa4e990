"""``harness validate``: schema, patches, overrides and safety rules for recipes, without running anything.

With no PATHS every recipe in ``recipes/`` is checked for every (profile, scale) pair it lists.
A PATH is a recipe name, a recipe file, or a hardware profile file under ``recipes/hardware/``
(schema-checked). Each finding is one line ``file [profile:scale]::key: RULE-ID severity: message
(fix: ...)``; a file that cannot be loaded gives one ``error:`` line and the others are still
checked. Exit: 0 no error findings, 1 error findings, 2 bad input (the largest over all PATHS).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.recipe import (
    load_recipe_file,
    overridable_keys,
    parse_override,
    recipe_names,
    recipe_path,
    resolve,
    supported_pairs,
)
from harness.config.safety import RULES, Finding
from harness.config.safety.check import check_resolved, label
from harness.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, HarnessError
from harness.jsonio import load_json_strict
from harness.paths import PROFILES_DIR
from harness.schema import SchemaErrors, check

HELP = "Check recipes and profiles (schema, scale/profile patches, overrides, safety rules); run nothing."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="recipe name, recipe .json file, or profile file under recipes/hardware/ "
                             "(default: every recipe in recipes/)")
    parser.add_argument("--profile", metavar="P", help="only this hardware profile")
    parser.add_argument("--scale", metavar="S", help="only this scale (smoke, full, ...)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="allowlisted override applied before the rules run (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of lines")
    parser.add_argument("--list-overrides", action="store_true", help="print the keys --set accepts and exit")
    parser.add_argument("--list-rules", action="store_true", help="print every safety rule and exit")


@dataclass
class _Report:
    results: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # finding lines, in order

    def add(self, file: str, profile: str, scale: str, tag: str, findings: list[Finding]) -> None:
        self.results.append({"file": file, "profile": profile, "scale": scale,
                             "findings": [f.as_dict() for f in findings]})
        self.lines.extend(f.one_line(tag) for f in findings)

    def fail(self, file: str, err: BaseException, profile: str | None = None, scale: str | None = None) -> None:
        if isinstance(err, SchemaErrors):  # every schema error, one line each
            for line in err.lines():
                self.errors.append({"file": file, "profile": profile, "scale": scale, "message": line,
                                    "exit": err.exit_code})
            return
        if isinstance(err, HarnessError):
            text, code = err.one_line(), err.exit_code
            if not err.file:  # e.g. a profile the recipe lists but this checkout lacks: say which recipe
                text = f"{file}{f' [{profile}:{scale}]' if profile else ''}: {text}"
        else:  # a bug must still read as one line, never a traceback
            text = f"{file}: unexpected error while validating ({type(err).__name__}: {err})"[:500]
            text, code = " ".join(text.split()), EXIT_USAGE
        self.errors.append({"file": file, "profile": profile, "scale": scale, "message": text, "exit": code})

    def unloadable(self) -> int:
        """Files (or recipe × profile pairs) that could not be loaded or resolved."""
        return len({(e["file"], e["profile"], e["scale"]) for e in self.errors})

    def counts(self) -> tuple[int, int]:
        sev = [f["severity"] for r in self.results for f in r["findings"]]
        return sev.count("error"), sev.count("warning")

    def exit_code(self) -> int:
        code = EXIT_FINDINGS if self.counts()[0] else EXIT_OK
        return max([code] + [e["exit"] for e in self.errors])


def _is_profile_file(ref: str) -> bool:
    p = Path(ref)
    if p.suffix != ".json":
        return False
    try:
        return p.resolve().parent == PROFILES_DIR.resolve() or p.parent.name == "hardware"
    except (OSError, RuntimeError):
        return False


def _check_profile(ref: str, report: _Report) -> None:
    try:
        data = load_json_strict(ref)
        check(data, "profile", ref)
        if data["name"] != Path(ref).stem:
            raise HarnessError(f"profile name '{data['name']}' differs from the file name", file=ref, key_path="/name",
                               fix=f"set name to '{Path(ref).stem}' or rename the file")
        report.profiles.append(ref)
    except Exception as err:  # noqa: BLE001 - reported as one line
        report.fail(ref, err)


def _pairs(recipe: dict[str, Any], profile: str | None, scale: str | None) -> list[tuple[str, str]]:
    if profile and scale:
        return [(profile, scale)]
    return [(p, s) for p, s in supported_pairs(recipe) if (profile or p) == p and (scale or s) == s]


def _check_recipe(ref: str, args: argparse.Namespace, report: _Report, *, explicit: bool) -> None:
    file = ref
    try:
        path = recipe_path(ref)
        file = str(path)
        recipe = load_recipe_file(path)
        pairs = _pairs(recipe, args.profile, args.scale)
        if not pairs and explicit:
            listed = ", ".join(f"{p}:{s}" for p, s in supported_pairs(recipe))
            want = ":".join(x or "*" for x in (args.profile, args.scale))
            raise HarnessError(f"recipe lists no (profile, scale) pair matching {want}", file=file,
                               key_path="/profiles", fix=f"use one of (profile:scale) {listed}")
    except Exception as err:  # noqa: BLE001 - reported as one line
        report.fail(file, err)
        return
    for prof, scale in pairs:
        try:
            res = resolve(file, prof, scale, args.overrides)
            report.add(file, prof, scale, label(res), check_resolved(res))
        except Exception as err:  # noqa: BLE001 - reported as one line
            report.fail(file, err, prof, scale)


def _list_rules(as_json: bool) -> int:
    from harness.config.safety import rules as _rules  # noqa: F401  (registers the rules)

    rows = [{"id": r.id, "severity": r.severity, "summary": r.summary} for r in RULES.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        width = max(len(r["id"]) for r in rows)
        for r in rows:
            print(f"{r['id']:<{width}}  {r['severity']:<7}  {r['summary']}")
    return EXIT_OK


def _list_overrides(as_json: bool) -> int:
    keys = overridable_keys()
    print(json.dumps(keys, indent=2) if as_json else "\n".join(keys))
    return EXIT_OK


def execute(args: argparse.Namespace) -> int:
    if args.list_rules:
        return _list_rules(args.json)
    if args.list_overrides:
        return _list_overrides(args.json)
    for text in args.overrides:  # a bad override is bad input for every recipe: refuse once, up front
        parse_override(text)
    from harness.config.safety import rules as _rules  # noqa: F401  (registers the rules before any run)

    report = _Report()
    explicit = bool(args.paths)
    for ref in args.paths or recipe_names():
        if _is_profile_file(ref):
            _check_profile(ref, report)
        else:
            _check_recipe(ref, args, report, explicit=explicit)
    if not explicit and not report.results and not report.errors:
        raise HarnessError("no recipe lists a (profile, scale) pair matching the filters", key_path="--profile",
                           fix="check --profile / --scale against the recipes' profiles")
    errors, warnings = report.counts()
    code = report.exit_code()
    if args.json:
        print(json.dumps({"results": report.results, "profiles": report.profiles, "errors": report.errors,
                          "summary": {"pairs": len(report.results), "errors": errors, "warnings": warnings,
                                      "unloadable": report.unloadable()}, "exit": code}, indent=2))
        return code
    for line in report.lines:
        print(line)
    sys.stdout.flush()
    for err in report.errors:
        sys.stderr.write(f"error: {err['message']}\n")
    sys.stderr.flush()
    summary = f"{len(report.results)} recipe × profile pairs checked, {errors} errors, {warnings} warnings"
    if report.profiles:
        summary += f", {len(report.profiles)} profile file(s) ok"
    if report.errors:
        summary += f", {report.unloadable()} could not be loaded or resolved"
        if len(report.errors) > report.unloadable():
            summary += f" ({len(report.errors)} error lines)"
    print(summary)
    return code
