"""Recipes: strict load → schema check → resolve (scale, profile) → allowlisted overrides.

Resolution order: the recipe's published values, then ``scales[scale]``, then
``profiles[profile][scale]`` (each a deep-merge patch), then ``--set`` overrides. Patches may
only change keys the recipe has; overrides only keys the schema marks ``x-overridable``, typed
by the schema. The recipe hash is the hash of the file's content: overrides never change it
(they are recorded separately), so a run with overrides is still judged against the recipe's
baseline.
"""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness.config.profiles import load_profile
from harness.config.safety.code_loading import is_code_loading_key
from harness.config.typed_files import Profile
from harness.core.typed_recipe import Recipe
from harness.errors import HarnessError
from harness.jsonio import load_json_strict
from harness.paths import RECIPES_DIR
from harness.schema import check, load_schema, pointer

SCALES_DEFAULT = "smoke"
M = TypeVar("M", bound=BaseModel)


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.json") if not p.name.endswith(".import.json"))


def recipe_path(ref: str) -> Path:
    """A recipe name from ``recipes/`` or a path to a recipe file."""
    p = Path(ref)
    if p.suffix == ".json" or "/" in ref or p.exists():
        if not p.is_file():
            raise HarnessError("recipe file not found", file=ref, fix="check the path, or give a recipe name: "
                               + ", ".join(recipe_names()))
        return p
    cand = RECIPES_DIR / f"{ref}.json"
    if not cand.is_file():
        close = difflib.get_close_matches(ref, recipe_names(), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise HarnessError(f"unknown recipe '{ref}'", key_path="RECIPE",
                           fix=f"{hint}use one of {', '.join(recipe_names())} or a path to a .json file")
    return cand


def canonical_hash(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def load_recipe_file(path: Path) -> dict[str, Any]:
    data = load_json_strict(path)
    check(data, "recipe", str(path))
    if data["name"] != path.stem:
        raise HarnessError(f"recipe name '{data['name']}' differs from the file name", file=str(path),
                           key_path="/name", fix=f"set name to '{path.stem}' or rename the file")
    return data


def deep_merge(base: Any, patch: Any, *, where: str, file: str) -> Any:
    """Merge ``patch`` into a copy of ``base``; a patch key the base lacks is an error."""
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return copy.deepcopy(patch)
    out = dict(base)
    for key, value in patch.items():
        if key not in base:
            close = difflib.get_close_matches(key, list(base), n=1)
            raise HarnessError(f"patch sets unknown key '{key}'", file=file, key_path=f"{where}/{key}",
                               fix=(f"did you mean '{close[0]}'?" if close else "remove it")
                               + " (patches may only change keys the recipe has)")
        out[key] = deep_merge(base[key], value, where=f"{where}/{key}", file=file)
    return out


# ----------------------------------------------------------------------------- overrides
def _schema_at(dotted: str) -> dict[str, Any] | None:
    node: dict[str, Any] = load_schema("resolved-recipe")
    for part in dotted.split("."):
        props = node.get("properties") or {}
        if part not in props:
            return None
        node = props[part]
    return node


def steps_maximum() -> int:
    """The most GRPO steps a run may ask for: the schema's bound on ``trainer.total_training_steps`` (the one
    ``--set`` is held to, so ``--steps`` is held to it too)."""
    node = _schema_at("trainer.total_training_steps")
    assert node is not None and "maximum" in node, "the recipe schema bounds trainer.total_training_steps"
    return int(node["maximum"])


def overridable_keys() -> list[str]:
    """Every dotted key ``--set`` accepts."""
    out: list[str] = []

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, sub in (node.get("properties") or {}).items():
            path = f"{prefix}.{key}" if prefix else key
            if sub.get("x-overridable"):
                out.append(path)
            walk(sub, path)

    walk(load_schema("resolved-recipe"), "")
    return sorted(out)


def parse_override(text: str) -> tuple[str, Any]:
    """``dotted.key=value`` → (key, typed value), refused unless the schema allows overriding it."""
    if "=" not in text:
        raise HarnessError(f"override '{text}' has no '='", key_path="--set", fix="write --set dotted.key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if is_code_loading_key(key):
        raise HarnessError(f"'{key}' loads code and can never be set by an override [code-loading-key]",
                           key_path="--set", fix="remove the override; code loading needs an explicit, reviewed "
                                                 "recipe with security.allow_code_loading and a pinned model.revision")
    node = _schema_at(key)
    if node is None or not node.get("x-overridable"):
        close = difflib.get_close_matches(key, overridable_keys(), n=1)
        why = "is not a recipe key" if node is None else "is not overridable"
        raise HarnessError(f"'{key}' {why}", key_path="--set",
                           fix=(f"did you mean '{close[0]}'? " if close else "")
                           + "only numeric hyperparameters, steps, seed, batch and length keys and model.dtype can be "
                             "overridden (`harness validate --list-overrides` lists them)")
    kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
    raw = raw.strip()
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if value is None and "null" in kinds:
        return key, None
    if "integer" in kinds and isinstance(value, int) and not isinstance(value, bool):
        return key, value
    if "number" in kinds and isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value or value in (float("inf"), float("-inf")):  # pragma: no cover - json refuses these
            raise HarnessError(f"'{raw}' is not a finite number", key_path=f"--set {key}", fix="give a finite number")
        return key, float(value)
    if "string" in kinds and isinstance(value, str) and value in node.get("enum", []):
        return key, value
    raise HarnessError(f"'{raw}' is not a valid {' or '.join(kinds)}", key_path=f"--set {key}",
                       fix=f"give a {' or '.join(kinds)}"
                           + (f" (one of {', '.join(str(e) for e in node['enum'] if e is not None)})"
                              if node.get("enum") else f" ({node.get('description', '')})"))


def set_dotted(config: dict[str, Any], key: str, value: Any) -> None:
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def get_dotted(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node[part]
    return node


# ----------------------------------------------------------------------------- resolution
@dataclass(frozen=True)
class Resolved:
    """A recipe resolved for one profile and scale; ``config`` is the resolved-recipe document."""

    name: str
    path: str
    recipe_hash: str
    profile_name: str
    profile: dict[str, Any]
    scale: str
    config: dict[str, Any]
    overrides: list[dict[str, Any]] = field(default_factory=list)
    simulation: dict[str, Any] | None = None  # the layout simulated on CPU ranks (harness.run.simulate); None: real

    @property
    def config_hash(self) -> str:
        return canonical_hash(self.config)

    @functools.cached_property
    def spec(self) -> Recipe:
        """The resolved recipe as its typed model (what the trainer and the stages read)."""
        return typed(Recipe, self.config, self.path)

    @functools.cached_property
    def hardware(self) -> Profile:
        """The hardware profile as its typed model."""
        return typed(Profile, self.profile, self.profile_name)


def typed(model: type[M], doc: dict[str, Any], file: str) -> M:
    """``doc`` (already valid under the model's JSON Schema) as ``model``; a rule across fields that the schema
    cannot state (e.g. a vision family without a vision tower) is one line naming the key."""
    try:
        return model.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]  # a model's own rule reads "what is wrong; the fix"
        what, _, fix = str(first["msg"]).removeprefix("Value error, ").partition("; ")
        raise HarnessError(what, file=file, key_path=pointer(first["loc"]), fix=fix or "see the recipe schema") from None


def supported_pairs(recipe: dict[str, Any]) -> list[tuple[str, str]]:
    return [(prof, scale) for prof, scales in recipe["profiles"].items() for scale in scales]


def resolve(ref: str, profile: str, scale: str = SCALES_DEFAULT, overrides: list[str] | tuple[str, ...] = ()) -> Resolved:
    path = recipe_path(ref)
    recipe = load_recipe_file(path)
    file = str(path)
    if scale not in recipe["scales"]:
        raise HarnessError(f"recipe has no scale '{scale}'", file=file, key_path="/scales",
                           fix=f"use --scale {' or '.join(recipe['scales'])}")
    if profile not in recipe["profiles"] or scale not in recipe["profiles"][profile]:
        pairs = ", ".join(f"{p}:{s}" for p, s in supported_pairs(recipe))
        raise HarnessError(f"recipe does not support profile '{profile}' at scale '{scale}'", file=file,
                           key_path=f"/profiles/{profile}", fix=f"use one of (profile:scale) {pairs}")
    prof = load_profile(profile)
    body = {k: v for k, v in recipe.items() if k not in ("scales", "profiles", "$schema")}
    config = deep_merge(body, recipe["scales"][scale], where=f"/scales/{scale}", file=file)
    config = deep_merge(config, recipe["profiles"][profile][scale], where=f"/profiles/{profile}/{scale}", file=file)
    applied: list[dict[str, Any]] = []
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(config, key, value)
        applied.append({"key": key, "value": value})
    where = f"{file} [{profile}:{scale}{' + --set' if applied else ''}]"
    check(config, "resolved-recipe", where)
    typed(Recipe, config, where)
    return Resolved(name=recipe["name"], path=file, recipe_hash=canonical_hash(recipe), profile_name=profile,
                    profile=prof, scale=scale, config=config, overrides=applied)
