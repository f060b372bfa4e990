"""How the package reads its records: the figures behind the records redesign (issue 34), from the source (ast).

- class names defined more than once under ``harness/``;
- string literals equal to a tier name (a tier named outside its registration);
- string-key lookups of record fields: ``x["key"]`` and ``x.get("key")`` where ``key`` is the name (or alias) of
  a field of any record model (:mod:`harness.records`) — reads of a record as a dict. Recipe and profile
  documents share some key names (``name``, ``model``, ``steps``), so the count is an upper bound.

    python bench/record_access.py [--json]
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib
import inspect
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402

RECORD_MODULES = ("harness.records.common", "harness.records.run", "harness.records.baseline",
                  "harness.records.verdict", "harness.records.gate", "harness.records.certificate")


def record_keys() -> set[str]:
    names: set[str] = set()
    for name in RECORD_MODULES:
        mod = importlib.import_module(name)
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, BaseModel) and cls.__module__ == mod.__name__:
                names |= {info.alias or field for field, info in cls.model_fields.items()}
    return names


def key_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        return node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def measure(pkg: Path) -> dict[str, object]:
    from harness.judge.tiers import TIER_ORDER

    keys = record_keys()
    classes: dict[str, list[str]] = collections.defaultdict(list)
    tier_literals: collections.Counter[str] = collections.Counter()
    lookups: collections.Counter[str] = collections.Counter()
    for path in sorted(pkg.rglob("*.py")):
        rel = str(path.relative_to(pkg.parent))
        in_records = path.parent.name == "records"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append(rel)
            if isinstance(node, ast.Constant) and node.value in TIER_ORDER:
                tier_literals[rel] += 1
            if not in_records and key_of(node) in keys:
                lookups[rel] += 1
    return {"duplicate_class_names": {k: v for k, v in sorted(classes.items()) if len(v) > 1},
            "tier_literals": sum(tier_literals.values()), "tier_literals_by_file": dict(tier_literals.most_common()),
            "record_key_lookups": sum(lookups.values()), "record_key_lookups_by_file": dict(lookups.most_common())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = measure(ROOT / "harness")
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"class names defined twice: {len(res['duplicate_class_names'])}")  # type: ignore[arg-type]
    print(f"tier-name string literals: {res['tier_literals']}")
    print(f"string-key lookups of record fields: {res['record_key_lookups']}")
    for rel, n in list(res["record_key_lookups_by_file"].items())[:15]:  # type: ignore[union-attr]
        print(f"  {n:4d}  {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
