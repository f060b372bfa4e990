"""The committed JSON Schemas are generated from harness/config/schema_defs.py and their enums from the registries."""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from harness.config import schema_defs
from harness.core import algos, reward, tasks
from harness.paths import SCHEMAS_DIR


def test_committed_schemas_are_up_to_date() -> None:
    for name, schema in schema_defs.all_schemas().items():
        committed = (SCHEMAS_DIR / name).read_text(encoding="utf-8")
        assert committed == schema_defs.render(schema), f"{name} is stale: run `python -m harness.config.schema_defs`"
        Draft202012Validator.check_schema(json.loads(committed))


def test_enums_come_from_the_registries() -> None:
    """A newly registered estimator (or reward, task, KL kind) appears in the schema with no other edit."""
    props = schema_defs.recipe_schema(False)["properties"]
    assert props["algorithm"]["properties"]["adv_estimator"]["enum"] == sorted(algos.ADV_ESTIMATORS)
    assert props["reward"]["properties"]["name"]["enum"] == sorted(reward.reward_names())
    try:
        algos.register_adv_estimator("test_only_estimator")(algos.grpo_advantages)
        props = schema_defs.recipe_schema(False)["properties"]
        assert "test_only_estimator" in props["algorithm"]["properties"]["adv_estimator"]["enum"]
    finally:
        algos.ADV_ESTIMATOR_REGISTRY.pop("test_only_estimator", None)
    assert schema_defs.registered("task") == sorted(tasks.task_names())
    assert schema_defs.registered("kl") == sorted(algos.KL_KINDS)


def test_every_field_is_described() -> None:
    def walk(node: object, path: str) -> list[str]:
        missing = []
        if isinstance(node, dict):
            if "type" in node and "description" not in node and not path.endswith("/items"):
                missing.append(path)
            for key, sub in (node.get("properties") or {}).items():
                missing += walk(sub, f"{path}/{key}")
        return missing

    for name, schema in schema_defs.all_schemas().items():
        assert walk(schema, name) == [], f"undescribed fields in {name}"


def test_every_shipped_pair_reads_into_the_typed_recipe_unchanged() -> None:
    """The typed model (what the trainer takes) holds exactly the resolved document: no key dropped or added,
    no value or number type changed."""
    from harness.config.recipe import load_recipe_file, recipe_names, recipe_path, resolve, supported_pairs

    def same(a: object, b: object) -> bool:
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return type(a) is type(b) and a == b

    pairs = 0
    for name in recipe_names():
        for profile, scale in supported_pairs(load_recipe_file(recipe_path(name))):
            res = resolve(name, profile, scale)
            assert same(res.spec.model_dump(by_alias=True, exclude={"schema_ref"}), res.config), (name, profile, scale)
            assert res.hardware.name == profile
            pairs += 1
    assert pairs >= 20


def test_the_typed_recipe_refuses_what_its_schema_refuses() -> None:
    import pydantic
    import pytest

    from harness.config.recipe import resolve
    from harness.core.typed_recipe import Recipe

    doc = resolve("qwen3_vl_30b", "cpu", "smoke").config
    arr = doc["actor_rollout_ref"]
    for bad in ({**doc, "surprise": 1}, {**doc, "seed": -1},
                {**doc, "trainer": {**doc["trainer"], "resume_mode": "sometimes"}},
                {**doc, "algorithm": {**doc["algorithm"], "adv_estimator": "not_registered"}},
                {**doc, "actor_rollout_ref": {**arr, "actor": {**arr["actor"],
                                                               "veomni": {**arr["actor"]["veomni"], "fsdp_size": 0}}}}):
        with pytest.raises(pydantic.ValidationError):
            Recipe.model_validate(bad)


def test_committed_records_read_into_their_models() -> None:
    """The record models accept what was really written: the committed baselines, suites, the published
    certificate, and the manifests and verdicts of committed measurements (pydantic's own validation, beside
    the JSON Schema generated from the same models)."""
    from pathlib import Path

    from harness.jsonio import load_json_strict
    from harness.judge.attest import open_certificate
    from harness.records.baseline import Baseline
    from harness.records.certificate import Certificate, Suite
    from harness.records.run import Manifest
    from harness.records.verdict import Verdict

    root = Path(__file__).resolve().parents[2]
    seen = {Baseline: 0, Suite: 0, Certificate: 0, Manifest: 0, Verdict: 0}
    for path in sorted(root.glob("baselines/*/*.json")):
        Baseline.model_validate(load_json_strict(path))
        seen[Baseline] += 1
    for path in sorted(root.glob("recipes/certification/*.json")):
        Suite.model_validate(load_json_strict(path))
        seen[Suite] += 1
    for path in sorted(root.glob("certificates/*/certificate.json")):
        Certificate.model_validate(open_certificate(path).statement["predicate"])
        seen[Certificate] += 1
    for model, name in ((Manifest, "manifest.json"), (Verdict, "verdict.json")):
        for path in sorted(root.glob(f"bench/results/typed-recipe-2026-12-02/**/{name}")):
            model.model_validate(load_json_strict(path))
            seen[model] += 1
    assert all(seen.values()), seen
