"""Turn a verl launcher into a recipe (``harness import-verl``).

Each recipe field verl has a key for takes, in this order: the launcher's override; else verl's
default (for the launcher's engine); else — for harness-only fields, verl defaults the recipe
schema refuses (``adv_estimator: gae``, ``total_training_steps: null``), values the script leaves
unresolved, and code-loading keys the launcher turns on — the template recipe's value. The
template is the shipped recipe of the model family. ``scales`` and the smoke patches of
``profiles`` come from the template; each profile's ``full`` patch spreads the launcher's world
size (nnodes × n_gpus_per_node) over that profile's devices per node (profiles that cannot hold
it get no ``full`` scale), and a (profile, scale) pair the schema or the safety rules refuse (e.g.
a rollout TP group larger than the profile's devices per node) is dropped with a note, so the
recipe written passes ``harness validate``. Where each field came from, the overrides no recipe field holds and the
lint findings are written to a sidecar ``NAME.import.json``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.recipe import deep_merge, get_dotted, load_recipe_file, recipe_names, recipe_path, set_dotted
from harness.config.safety import RuleContext, run_rules
from harness.config.safety.check import iter_errors
from harness.config.safety.code_loading import is_code_loading_key, is_enabled
from harness.errors import HarnessError
from harness.schema import schema_errors
from harness.verl.lint import LintResult, TrainerCall, recipe_for_model
from harness.verl.mapping import MODEL_PATH, NO_VERL_DEFAULT, mapped_keys
from harness.verl.overrides import MISSING, get_path

SOURCE_MARK = "# source launcher:"
IMPORTABLE_ENGINES = ("dp", "veomni")  # the engines a recipe's actor strategy names (harness.verl.mapping)


@dataclass
class Imported:
    recipe: dict[str, Any]
    origins: dict[str, str]  # recipe key -> launcher | verl-default | template
    unmapped: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    template: str = ""
    engine: str = ""


def template_for(family: str | None, model_path: Any) -> tuple[str, dict[str, Any]]:
    """(name, recipe) of the template: the shipped recipe of ``family`` (or of the launcher's model)."""
    recipes: dict[str, dict[str, Any]] = {}
    for name in recipe_names():
        try:
            recipes[name] = load_recipe_file(recipe_path(name))
        except HarnessError:
            continue  # not a recipe (an import sidecar, say) or a broken one: not a template
    if family is None:
        found = recipe_for_model(model_path)
        if found is None:
            families = sorted({r["model"]["family"] for r in recipes.values()})
            raise HarnessError(f"cannot tell the model family from actor_rollout_ref.model.path={model_path!r}",
                               key_path="--model-family", fix=f"pass --model-family ({', '.join(families)})")
        return found[0], recipes[found[0]]
    for name, recipe in sorted(recipes.items()):
        if recipe["model"]["family"] == family:
            return name, recipe
    raise HarnessError(f"no shipped recipe of model family '{family}'", key_path="--model-family",
                       fix="use " + ", ".join(sorted({r["model"]["family"] for r in recipes.values()})))


def source_of(text: str, script: str) -> str:
    for line in text.splitlines()[:20]:
        if line.startswith(SOURCE_MARK) and line[len(SOURCE_MARK):].strip():
            return line[len(SOURCE_MARK):].strip()
    return script


def import_launcher(result: LintResult, name: str, family: str | None, script_text: str) -> Imported:
    if not result.calls:
        raise HarnessError("no verl trainer command line found", file=result.file,
                           fix="import the script that runs `python3 -m verl.trainer.main_ppo ...`")
    call = result.calls[0]
    if call.engine not in IMPORTABLE_ENGINES:
        what = f"model_engine {call.engine}" if call.engine else "a config whose keys are not known statically"
        raise HarnessError(f"the trainer command uses {what}; recipes run verl's "
                           f"{' or '.join(IMPORTABLE_ENGINES)} engine", file=result.file,
                           key_path=f"line {call.line}", fix="import a launcher of the ppo_trainer config with "
                           "model_engine dp (FSDP) or veomni")
    model_value = _model_text(call)
    template_name, template = template_for(family, model_value)
    source = source_of(script_text, result.file)
    recipe = copy.deepcopy(template)
    recipe["name"] = name
    recipe["description"] = f"Imported from the verl launcher {source}."
    recipe["source"] = {"launcher": source, "reference": "verl launcher imported with `harness import-verl`"}
    out = Imported(recipe, {}, [], template=template_name, engine=call.engine)
    if len(result.calls) > 1:
        out.notes.append(f"{len(result.calls)} trainer command lines found; imported the first (line {call.line})")
    consumed = {"model_engine"}
    for rkey, (vkey, _prefix) in mapped_keys(template, call.engine).items():
        consumed.add(vkey)
        _fill(out, call, rkey, vkey, template, model_value)
    _dataset(out, call)
    _profiles(out, template)
    _validate(out, template)
    for ov in call.overrides:
        if ov.key not in consumed:
            out.unmapped.append({"line": ov.line, "override": ov.raw, "reason": "no recipe field holds this key"})
    return out


def _model_text(call: TrainerCall) -> Any:
    ov = next((o for o in reversed(call.overrides) if o.key == MODEL_PATH), None)
    return ov.raw.split("=", 1)[1] if ov is not None else get_path(call.config, MODEL_PATH)


def _fill(out: Imported, call: TrainerCall, rkey: str, vkey: str, template: dict[str, Any], model_value: Any) -> None:
    overridden = any(o.key == vkey for o in call.overrides)
    if rkey == "model.name":
        known = recipe_for_model(model_value)
        if known is not None:
            value = load_recipe_file(recipe_path(known[0]))["model"]["name"]
        elif vkey in call.unresolved or not isinstance(model_value, str):
            out.origins[rkey] = "template"
            return
        else:
            value = model_value
        set_dotted(out.recipe, rkey, value)
        out.origins[rkey] = "launcher" if overridden else "verl-default"
        return
    if vkey in call.unresolved:
        out.origins[rkey] = "template"
        out.unmapped.append({"line": call.unresolved[vkey].line, "override": call.unresolved[vkey].raw,
                             "reason": "value not known statically; the template's value "
                                       f"({_get(template, rkey)!r}) is used"})
        return
    if not overridden and rkey in NO_VERL_DEFAULT:
        set_dotted(out.recipe, rkey, None)
        out.origins[rkey] = "none (verl's default names a file that is not here)"
        return
    value = get_path(call.config, vkey, MISSING)
    if value == MISSING:
        out.origins[rkey] = "template"
        return
    if is_code_loading_key(vkey) and is_enabled(value):
        ov = next((o for o in call.overrides if o.key == vkey), None)
        out.origins[rkey] = "template"
        out.unmapped.append({"line": ov.line if ov else call.line, "override": ov.raw if ov else f"{vkey}={value}",
                             "reason": "loads code: never imported (rule code-loading-key)"})
        return
    set_dotted(out.recipe, rkey, copy.deepcopy(value))
    out.origins[rkey] = "launcher" if overridden else "verl-default"


def _dataset(out: Imported, call: TrainerCall) -> None:
    """``data.dataset`` (a label) from the train file's folder: ``.../data/geo3k/train.parquet`` -> geo3k."""
    ov = next((o for o in reversed(call.overrides) if o.key == "data.train_files"), None)
    if ov is None or ov.value_text is None:
        out.origins["data.dataset"] = "template"
        return
    parts = ov.value_text.strip("'\"").split("/")
    label = parts[-2] if len(parts) >= 2 else ""
    if label and all(ch.isalnum() or ch in "_-." for ch in label) and not label.startswith("$"):
        out.recipe["data"]["dataset"] = label
        out.origins["data.dataset"] = "launcher (folder of data.train_files)"
    else:
        out.origins["data.dataset"] = "template"


def _profiles(out: Imported, template: dict[str, Any]) -> None:
    from harness.config.profiles import load_profile

    trainer = out.recipe["trainer"]
    world = trainer["nnodes"] * trainer["n_gpus_per_node"] if all(
        isinstance(trainer.get(k), int) for k in ("nnodes", "n_gpus_per_node")) else None
    profiles: dict[str, Any] = {}
    for prof_name, scales in template["profiles"].items():
        prof = load_profile(prof_name)
        entry = {scale: copy.deepcopy(patch) for scale, patch in scales.items() if scale != "full"}
        per_node = prof["accelerator"]["count_per_node"]
        if prof["device_type"] != "cpu" and world is not None and world % per_node == 0:
            full = copy.deepcopy(scales.get("full", {}))
            full["trainer"] = {**full.get("trainer", {}), "device": prof["device_type"], "nnodes": world // per_node,
                               "n_gpus_per_node": per_node}
            entry["full"] = full
        elif "full" in scales:
            out.notes.append(f"profile {prof_name}: {per_node} devices per node cannot hold the launcher's world "
                             f"size {world}; no full scale")
        if entry:
            profiles[prof_name] = entry
    out.recipe["profiles"] = profiles


def _validate(out: Imported, template: dict[str, Any]) -> None:
    """Fall back to the template's value for every field the schema refuses; drop pairs that do not resolve."""
    for _ in range(8):
        errors = schema_errors(out.recipe, "recipe")
        if not errors:
            break
        for ptr, msg, _fix in errors:
            key = ".".join(p for p in ptr.strip("/").split("/") if p)
            while key and _get(template, key) is _NONE:
                key = key.rsplit(".", 1)[0] if "." in key else ""
            if not key:
                raise HarnessError(f"imported recipe does not validate: {msg}", key_path=ptr,
                                   fix="report this with the launcher attached")
            value = _get(out.recipe, key)
            set_dotted(out.recipe, key, copy.deepcopy(_get(template, key)))
            out.origins[key] = "template"
            out.notes.append(f"{key}: {value!r} does not fit the recipe schema ({msg}); the template's value is used")
    else:
        raise HarnessError("imported recipe does not validate", fix="report this with the launcher attached")
    body = {k: v for k, v in out.recipe.items() if k not in ("scales", "profiles", "$schema")}
    for prof_name, scales in list(out.recipe["profiles"].items()):
        for scale in list(scales):
            try:
                merged = deep_merge(body, out.recipe["scales"].get(scale, {}), where="", file="")
                merged = deep_merge(merged, scales[scale], where="", file="")
            except HarnessError as err:
                merged, errs = None, [("", err.message, "")]
            else:
                errs = schema_errors(merged, "resolved-recipe") or _rule_errors(merged, prof_name)
            if errs:
                del scales[scale]
                out.notes.append(f"profile {prof_name} scale {scale} dropped: {errs[0][1]}")
        if not scales:
            del out.recipe["profiles"][prof_name]
    if not out.recipe["profiles"]:
        why = "; ".join(n for n in out.notes if " dropped: " in n)[:600]
        raise HarnessError(f"no (profile, scale) pair of the imported recipe passes `harness validate` ({why})",
                           fix="fix the launcher's errors (`harness lint-verl`), or its trainer.nnodes / "
                               "n_gpus_per_node for a shipped profile")


def _rule_errors(config: dict[str, Any], profile_name: str) -> list[tuple[str, str, str]]:
    """The safety rules' errors for one resolved (profile, scale) pair, as ``harness validate`` runs them."""
    from harness.config.profiles import load_profile

    model = config.get("model")
    arch = model.get("architecture") if isinstance(model, dict) else None
    ctx = RuleContext(config=config, profile=load_profile(profile_name),
                      architecture=arch if isinstance(arch, dict) else None)
    return [(f.key or "", f"{f.rule}: {f.message}", f.fix) for f in iter_errors(run_rules(ctx))]


_NONE = object()


def _get(node: Any, key: str) -> Any:
    try:
        return get_dotted(node, key)
    except (KeyError, TypeError):
        return _NONE


def sidecar(imp: Imported, result: LintResult, script: str, recipe_file: str) -> dict[str, Any]:
    return {
        "script": script,
        "recipe": recipe_file,
        "template": imp.template,
        "engine": imp.engine,
        "field_origins": dict(sorted(imp.origins.items())),
        "other_fields": f"every field not in field_origins (harness-only ones: model.architecture, data.synthetic, "
                        f"reward, warm_start, scales, ...) comes from the template recipe {imp.template}",
        "unmapped": imp.unmapped,
        "notes": imp.notes,
        "findings": [f.as_dict() for f in result.findings],
    }


def sidecar_path(out: Path) -> Path:
    return out.with_name(out.stem + ".import.json")

