"""JSON Schema validation with errors a person can act on.

Every error is one line: ``file::/json/pointer: message (fix: hint)``. All errors of a file are
collected (``iter_errors``), the most relevant first, so a user fixes a file in one pass.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Iterable
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from harness.errors import HarnessError
from harness.jsonio import load_json_strict
from harness.paths import SCHEMAS_DIR


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """Load ``schemas/v1/<name>.schema.json``."""
    return load_json_strict(SCHEMAS_DIR / f"{name}.schema.json")


@functools.cache
def validator(name: str) -> Draft202012Validator:
    """The validator of a shipped schema. The schemas themselves are checked against JSON Schema's metaschema by
    the unit tests (tests/unit/test_schemas.py), not again by every process (0.23 s of each run's start)."""
    return Draft202012Validator(load_schema(name), format_checker=jsonschema.FormatChecker())


def pointer(path: Iterable[Any]) -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else "/"


def _fix_hint(err: ValidationError) -> str:
    v, kw, schema = err.validator_value, err.validator, err.schema
    if kw == "additionalProperties" and isinstance(err.instance, dict):
        allowed = sorted((schema.get("properties") or {}).keys())
        extra = [k for k in err.instance if k not in allowed]
        close = difflib.get_close_matches(extra[0], allowed, n=1) if extra else []
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"{hint}remove {extra}; allowed keys: {', '.join(allowed)}"
    if kw == "required":
        missing = [k for k in v if isinstance(err.instance, dict) and k not in err.instance]
        descs = [(schema.get("properties") or {}).get(k, {}).get("description", "") for k in missing]
        return "add " + "; ".join(f"'{k}' ({d.rstrip('.')})" if d else f"'{k}'" for k, d in zip(missing, descs))
    if kw == "enum":
        return "use one of " + ", ".join(repr(x) for x in v)
    if kw == "const":
        return f"use {v!r}"
    if kw == "type":
        return f"use a value of type {v if isinstance(v, str) else ' or '.join(v)}"
    if kw in ("minimum", "exclusiveMinimum"):
        return f"use a value {'>=' if kw == 'minimum' else '>'} {v}"
    if kw in ("maximum", "exclusiveMaximum"):
        return f"use a value {'<=' if kw == 'maximum' else '<'} {v}"
    if kw == "pattern":
        return str(schema.get("x-fix") or f"match the pattern {v}")  # x-fix: the field's own words
    if kw in ("minItems", "maxItems"):
        return f"give {'at least' if kw == 'minItems' else 'at most'} {v} items"
    if kw == "minLength":
        return "give a non-empty string"
    desc = schema.get("description") if isinstance(schema, dict) else None
    return desc or "see the schema"


def _message(err: ValidationError) -> str:
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set((err.schema.get("properties") or {}).keys())
        extra = [k for k in err.instance if k not in allowed]
        return f"unknown key{'s' if len(extra) > 1 else ''} {', '.join(repr(k) for k in extra)}"
    if err.validator == "not":
        return f"{err.instance!r} is not allowed"
    if not err.absolute_path and err.validator == "type":
        return f"top-level value must be an object, got {type(err.instance).__name__}"
    msg = err.message
    return msg if len(msg) <= 200 else msg[:197] + "..."


def schema_errors(instance: Any, schema_name: str) -> list[tuple[str, str, str]]:
    """All validation errors as (json pointer, message, fix), deepest and most relevant first."""
    errors = sorted(validator(schema_name).iter_errors(instance), key=lambda e: (list(e.absolute_path), e.validator))
    out = []
    for err in errors:
        best = jsonschema.exceptions.best_match(err.context) if err.context else err
        out.append((pointer(best.absolute_path), _message(best), _fix_hint(best)))
    return out


def json_path(ptr: str) -> str:
    """A JSON pointer as a JSONPath (``/data/items/0`` → ``$.data.items[0]``), as check-jsonschema prints it."""
    out = "$"
    for part in ptr.split("/")[1:] if ptr != "/" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        out += f"[{part}]" if part.isdigit() else f".{part}" if part.isidentifier() else f"[{part!r}]"
    return out


class SchemaErrors(HarnessError):
    """A document failing its schema: one line for the first error (the others counted); ``errors`` holds all
    of them as (json pointer, message, fix) for `harness validate` to list."""

    def __init__(self, errors: list[tuple[str, str, str]], file: str) -> None:
        ptr, msg, fix = errors[0]
        more = f" [+{len(errors) - 1} more error(s): `harness validate` lists them]" if len(errors) > 1 else ""
        super().__init__(f"{msg}{more}", file=file, key_path=ptr, fix=fix)
        self.errors = errors

    def lines(self) -> list[str]:
        """Every error as ``file::$.json.path: message (fix: ...)``."""
        return [f"{self.file}::{json_path(p)}: {m}" + (f" (fix: {f})" if f else "") for p, m, f in self.errors]


def check(instance: Any, schema_name: str, file: str) -> None:
    """Raise :class:`SchemaErrors` (one line for the first error, the others counted) if ``instance`` fails."""
    errs = schema_errors(instance, schema_name)
    if errs:
        raise SchemaErrors(errs, file)


def load_checked(path: str | os.PathLike[str], schema_name: str) -> Any:
    """A JSON file, strictly parsed and checked against ``schemas/v1/<schema_name>.schema.json``."""
    data = load_json_strict(path)
    check(data, schema_name, str(path))
    return data
