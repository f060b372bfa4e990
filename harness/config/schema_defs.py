"""Generates ``schemas/v1/*.schema.json`` (JSON Schema 2020-12): ``python -m harness.config.schema_defs``.

Every schema comes from a typed model: the recipe from :mod:`harness.core.typed_recipe` (descriptions, bounds,
``x-overridable`` and the registries' enums are field metadata there), the recipe file and the profile
from :mod:`harness.config.typed_files`, the run records and certification from
:mod:`harness.records`. pydantic writes each model's schema; :func:`from_model` puts it in
the committed style (inlined, ``type: [T, "null"]`` for optional values). The files are committed; a test
fails when they drift from their models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.config import typed_files
from harness.core import typed_recipe
from harness.core.typed_recipe import registered  # noqa: F401 - re-exported (tests read the enums through it)
from harness.records import baseline, certificate, gate, run, verdict

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE = "https://harness.invalid/schemas/v1/"
FAMILIES = list(typed_recipe.FAMILIES)
INT32_MAX = 2**31 - 1


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
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
        inner = next(v for v in variants if v != {"type": "null"})
        node = {**inner, **rest, "type": [inner["type"], "null"]}
        if "enum" in node:
            node["enum"] = [*node["enum"], None]
    elif isinstance(variants, list) and all(isinstance(v, dict) and list(v) == ["type"] for v in variants):
        node = {**rest, "type": [v["type"] for v in variants]}  # a union of plain types: one type list
    if node.get("additionalProperties") is True:
        del node["additionalProperties"]  # pydantic's spelling of "any value" for dict[str, Any]
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


def from_model(model: type[BaseModel], name: str, description: str, *, capped: bool = True) -> dict[str, Any]:
    """The JSON Schema (2020-12) of ``model``, as committed in ``schemas/v1/<name>.schema.json`` (``capped``: every
    integer without a maximum gets INT32_MAX, as recipe integers do)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    body = _tidy(_inline(raw, raw.get("$defs", {})))
    body = _capped(body) if capped else body
    body["description"] = description
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_BASE + f"{name}.schema.json", "title": name, **body}


def recipe_schema(resolved: bool) -> dict[str, Any]:
    if resolved:
        return from_model(typed_recipe.Recipe, "resolved-recipe", "A recipe resolved for one profile and scale.")
    return from_model(typed_files.RecipeFile, "recipe", "A GRPO recipe.")


def profile_schema() -> dict[str, Any]:
    return from_model(typed_files.Profile, "profile", "A hardware profile: one node type, described MLPerf-style.")


def record_schemas() -> dict[str, dict[str, Any]]:
    """The run records' and certification's schemas (their integers keep their own bounds)."""
    out = {f"{name}.schema.json": from_model(model, name, (model.__doc__ or "").strip(), capped=False)
           for name, model in (("manifest", run.Manifest), ("baseline", baseline.Baseline),
                               ("verdict", verdict.Verdict), ("trainer-state", run.TrainerState),
                               ("gate", gate.Gate),
                               ("suite", certificate.Suite),
                               ("certificate", certificate.Certificate))}
    resolved = {k: v for k, v in recipe_schema(resolved=True).items() if k not in ("$schema", "$id", "title")}
    out["manifest.schema.json"]["properties"]["resolved_config"] = resolved  # the recipe, as the run resolved it
    return out


def all_schemas() -> dict[str, dict[str, Any]]:
    """File name → schema, for every generated schema."""
    return {
        "recipe.schema.json": recipe_schema(resolved=False),
        "resolved-recipe.schema.json": recipe_schema(resolved=True),
        "profile.schema.json": profile_schema(),
        **record_schemas(),
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
