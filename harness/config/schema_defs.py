"""Generates ``schemas/v1/*.schema.json`` (JSON Schema 2020-12): ``python -m harness.config.schema_defs``.

The recipe, resolved-recipe and profile schemas come from the typed models of :mod:`harness.core.spec`
and :mod:`harness.config.models` (descriptions, bounds, ``x-overridable`` and the registries' enums are
field metadata there); the run records' and certificates' schemas are built with the small builders
below (:mod:`harness.config.schema_defs_records`, :mod:`harness.config.schema_defs_cert`). The files
are committed; a test fails when they drift from their source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.config import models
from harness.core import spec
from harness.core.spec import PROFILE_NAME, registered  # noqa: F401 - re-exported for the record schemas

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE = "https://harness.invalid/schemas/v1/"
FAMILIES = list(spec.FAMILIES)
INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------- builders
def _leaf(kind: str | list[str], desc: str, override: bool = False, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "description": desc}
    out.update(kw)
    if override:
        out["x-overridable"] = True
    return out




def _capped(node: Any) -> Any:
    """``node`` with ``maximum: INT32_MAX`` on every integer leaf that has no maximum of its own."""
    if isinstance(node, dict):
        out = {k: _capped(v) for k, v in node.items()}
        kind = node.get("type")
        if (kind == "integer" or (isinstance(kind, list) and "integer" in kind)) and "maximum" not in node:
            out["maximum"] = INT32_MAX
        return out
    if isinstance(node, list):
        return [_capped(v) for v in node]
    return node


def integer(desc: str, minimum: int | None = None, maximum: int | None = None, *, override: bool = False,
            nullable: bool = False) -> dict[str, Any]:
    kw = {k: v for k, v in (("minimum", minimum), ("maximum", maximum)) if v is not None}
    return _leaf(["integer", "null"] if nullable else "integer", desc, override, **kw)


def number(desc: str, minimum: float | None = None, maximum: float | None = None, *, exclusive_min: float | None = None,
           override: bool = False) -> dict[str, Any]:
    kw = {k: v for k, v in (("minimum", minimum), ("maximum", maximum), ("exclusiveMinimum", exclusive_min))
          if v is not None}
    return _leaf("number", desc, override, **kw)


def boolean(desc: str) -> dict[str, Any]:
    return _leaf("boolean", desc)


def string(desc: str, *, enum: list[str] | None = None, pattern: str | None = None, nullable: bool = False,
           min_length: int | None = None, override: bool = False) -> dict[str, Any]:
    kind: str | list[str] = ["string", "null"] if nullable else "string"
    out = _leaf(kind, desc, override and enum is not None)  # only enumerated strings can be overridden
    if enum is not None:
        out["enum"] = enum + ([None] if nullable else [])
    if pattern is not None:
        out["pattern"] = pattern
    if min_length is not None:
        out["minLength"] = min_length
    return out


def obj(desc: str, props: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "description": desc,
        "properties": props,
        "required": [k for k in props if k not in optional],
        "additionalProperties": False,
    }


def array(desc: str, items: dict[str, Any], min_items: int | None = None, max_items: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "description": desc, "items": items}
    if min_items is not None:
        out["minItems"] = min_items
    if max_items is not None:
        out["maxItems"] = max_items
    return out


# ----------------------------------------------------------------------------- from the typed models
_DROP = ("title", "default")  # pydantic's generated titles and the `$schema` field's default: not part of the contract
_SCHEMA_KEYS = ("items", "additionalProperties", "not", "propertyNames")


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with every ``$ref`` to ``$defs`` replaced by the definition (the reference's own keys win)."""
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}


def _tidy(node: dict[str, Any]) -> dict[str, Any]:
    """One schema node in the committed style: ``type: [T, "null"]`` for an optional value (not ``anyOf``),
    no titles or defaults, no ``type`` beside a ``const``, ``type`` and ``description`` first."""
    node = dict(node)
    variants = node.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
        inner = next(v for v in variants if v != {"type": "null"})
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**inner, **rest, "type": [inner["type"], "null"]}
        if "enum" in node:
            node["enum"] = [*node["enum"], None]
    for key in _DROP:
        node.pop(key, None)
    if "const" in node:
        node.pop("type", None)
    if isinstance(node.get("properties"), dict):
        node["properties"] = {k: _tidy(v) for k, v in node["properties"].items()}
    for key in _SCHEMA_KEYS:
        if isinstance(node.get(key), dict):
            node[key] = _tidy(node[key])
    head = {k: node[k] for k in ("type", "description") if k in node}
    return {**head, **{k: v for k, v in node.items() if k not in head}}


def from_model(model: type[BaseModel], name: str, description: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of ``model``, as committed in ``schemas/v1/<name>.schema.json``."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    body = _capped(_tidy(_inline(raw, raw.get("$defs", {}))))
    body["description"] = description
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_BASE + f"{name}.schema.json", "title": name, **body}


def recipe_schema(resolved: bool) -> dict[str, Any]:
    if resolved:
        return from_model(spec.Recipe, "resolved-recipe", "A recipe resolved for one profile and scale.")
    return from_model(models.RecipeFile, "recipe", "A GRPO recipe.")


def profile_schema() -> dict[str, Any]:
    return from_model(models.Profile, "profile", "A hardware profile: one node type, described MLPerf-style.")


def all_schemas() -> dict[str, dict[str, Any]]:
    """File name → schema, for every generated schema."""
    return {
        "recipe.schema.json": recipe_schema(resolved=False),
        "resolved-recipe.schema.json": recipe_schema(resolved=True),
        "profile.schema.json": profile_schema(),
        **__import__("harness.config.schema_defs_records", fromlist=["record_schemas"]).record_schemas(),
        **__import__("harness.config.schema_defs_cert", fromlist=["cert_schemas"]).cert_schemas(),
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def main() -> None:
    from harness.paths import SCHEMAS_DIR

    for name, schema in all_schemas().items():
        Path(SCHEMAS_DIR / name).write_text(render(schema), encoding="utf-8")
        print(f"wrote {SCHEMAS_DIR / name}")


if __name__ == "__main__":
    main()
