"""import-verl / export-verl: recipes from launchers, launchers from recipes, and the round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.recipe import load_recipe_file
from harness.errors import HarnessError
from harness.schema import schema_errors
from harness.verl.lint import lint_file

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "verl"


def _import(script: Path, out: Path, *extra: str) -> dict:
    assert main(["import-verl", str(script), "--out", str(out), *extra]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def test_import_veomni_launcher(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "geo3k_veomni.json"
    recipe = _import(FIX / "clean_veomni.sh", out)
    printed = capsys.readouterr().out
    assert schema_errors(recipe, "recipe") == []
    assert load_recipe_file(out)["name"] == "geo3k_veomni"
    arr = recipe["actor_rollout_ref"]
    assert recipe["model"]["name"] == "Qwen/Qwen3-VL-30B-A3B-Instruct" and recipe["model"]["family"] == "qwen3_vl_moe"
    assert recipe["data"]["train_batch_size"] == 64 and recipe["data"]["dataset"] == "geo3k"
    assert recipe["data"]["train_files"] == "/data/geo3k/train.parquet"
    assert arr["actor"]["strategy"] == "veomni" and arr["actor"]["veomni"]["fsdp_size"] == 16
    assert arr["actor"]["optim"]["lr"] == 1e-6 and arr["rollout"]["max_model_len"] == 4096
    assert arr["model"]["override_config"]["max_position_embeddings"] == 32768
    assert recipe["trainer"]["nnodes"] == 2 and recipe["trainer"]["total_training_steps"] == 200
    # a field the launcher leaves unset takes verl's default (veomni engine)
    assert arr["actor"]["clip_ratio_c"] == 3.0 and arr["rollout"]["temperature"] == 1.0
    side = json.loads((tmp_path / "geo3k_veomni.import.json").read_text(encoding="utf-8"))
    assert side["template"] == "qwen3_vl_30b" and side["engine"] == "veomni" and side["findings"] == []
    origins = side["field_origins"]
    assert origins["data.train_batch_size"] == "launcher"
    assert origins["actor_rollout_ref.actor.clip_ratio_c"] == "verl-default"
    unmapped = {u["override"] for u in side["unmapped"]}
    assert "trainer.project_name=verl_grpo_geo3k" in unmapped  # no recipe field holds it
    assert "data.filter_overlong_prompts=True" not in unmapped  # a recipe field does
    assert "trainer.project_name=verl_grpo_geo3k" in printed and "unmapped" in printed
    # the full scale spreads the launcher's 16 devices over each profile's node
    assert recipe["profiles"]["npu-16x-ascend-a3"]["full"]["trainer"] == {"device": "npu", "nnodes": 1,
                                                                         "n_gpus_per_node": 16}
    assert "full" not in recipe["profiles"]["cpu"]


def test_import_keeps_findings_and_refuses_code(tmp_path: Path) -> None:
    out = tmp_path / "seed.json"
    recipe = _import(FIX / "seed_pr.sh", out, "--model-family", "qwen3_vl_moe")
    assert recipe["data"]["trust_remote_code"] is False  # never imported
    assert recipe["actor_rollout_ref"]["rollout"]["max_model_len"] == 1024  # imported as written; lint says why
    side = json.loads((tmp_path / "seed.import.json").read_text(encoding="utf-8"))
    rules = {f["rule"] for f in side["findings"]}
    assert {"argument-pass-through", "code-loading-key", "duplicate-key", "undefined-variable",
            "max-model-len-too-small"} <= rules
    reasons = {u["override"]: u["reason"] for u in side["unmapped"]}
    assert "loads code" in reasons["data.trust_remote_code=True"]
    assert "trainer.use_legacy_worker_impl=disable" in reasons


def test_import_refuses_overwrite_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "clean.json"
    _import(FIX / "clean_fsdp.sh", out)
    assert main(["import-verl", str(FIX / "clean_fsdp.sh"), "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["import-verl", str(FIX / "clean_fsdp.sh"), "--out", str(out), "--force"]) == 0
    assert main(["import-verl", str(FIX / "clean_fsdp.sh"), "--out", str(tmp_path / "Bad-Name.json")]) == 2
    no_cmd = tmp_path / "nocmd.sh"
    no_cmd.write_text("echo hi\n", encoding="utf-8")
    assert main(["import-verl", str(no_cmd), "--out", str(tmp_path / "x.json")]) == 2
    unknown_model = tmp_path / "other.sh"
    unknown_model.write_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=/m/Llama-3\n")
    capsys.readouterr()
    assert main(["import-verl", str(unknown_model), "--out", str(tmp_path / "y.json")]) == 2
    assert "--model-family" in capsys.readouterr().err
    # verl's defaults (rollout.n 1, no micro-batch size) fit no shipped profile: the import says why
    assert main(["import-verl", str(unknown_model), "--out", str(tmp_path / "y.json"), "--model-family",
                 "qwen3"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "passes `harness validate`" in err and "micro-batch" in err
    assert not (tmp_path / "y.json").exists()
    assert main(["import-verl", str(tmp_path / "missing.sh"), "--out", str(tmp_path / "z.json")]) == 2


# seed_pr.sh is not here: its max_model_len error leaves the imported recipe no full scale to export
@pytest.mark.parametrize("fixture, profile", [
    ("clean_veomni.sh", "gpu-8x-h200-141g"),
    ("clean_fsdp.sh", "gpu-8x-h100-80g"),
    ("clean_constructs.sh", "gpu-8x-h200-141g"),
])
def test_round_trip_is_stable(tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture: str, profile: str) -> None:
    first = _import(FIX / fixture, tmp_path / "a" / "rt.json")
    capsys.readouterr()
    assert main(["export-verl", str(tmp_path / "a" / "rt.json"), "--profile", profile, "--format", "script"]) == 0
    script = tmp_path / "exported.sh"
    script.write_text(capsys.readouterr().out, encoding="utf-8")
    second = _import(script, tmp_path / "b" / "rt.json")
    assert second == first


@pytest.mark.parametrize("fixture", ["clean_veomni.sh", "clean_fsdp.sh", "clean_constructs.sh", "seed_pr.sh"])
def test_imported_recipe_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture: str) -> None:
    out = tmp_path / "imported.json"
    recipe = _import(FIX / fixture, out)
    assert main(["validate", str(out)]) == 0, capsys.readouterr().out
    if fixture == "seed_pr.sh":  # max_model_len 1024 < 512 + 2048 on every profile: smoke scales only
        assert all(set(scales) == {"smoke"} for scales in recipe["profiles"].values())
    if fixture == "clean_veomni.sh":  # TP 4 does not fit 1 or 2 devices per node: no full scale there
        assert "full" not in recipe["profiles"]["gpu-1x-h200"] and "full" not in recipe["profiles"]["gpu-2x-h200"]
        assert "full" in recipe["profiles"]["gpu-8x-h200-141g"]


def test_export_overrides_and_script(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["export-verl", "qwen3_vl_30b", "--profile", "npu-16x-ascend-a3", "--scale", "full"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "model_engine=veomni"
    values = dict(line.split("=", 1) for line in lines)
    assert values["trainer.n_gpus_per_node"] == "16" and values["trainer.device"] == "npu"
    assert values["actor_rollout_ref.actor.veomni.attn_implementation"] == "sdpa"
    assert values["actor_rollout_ref.rollout.max_model_len"] == "4096"
    assert values["+actor_rollout_ref.model.override_config.max_position_embeddings"] == "32768"
    assert not any("trust_remote_code" in k or k.endswith(".path") and k != "actor_rollout_ref.model.path"
                   for k in values)
    assert main(["export-verl", "qwen3_vl_30b", "--profile", "npu-16x-ascend-a3", "--format", "script"]) == 0
    text = capsys.readouterr().out
    assert "set -euo pipefail" in text and "$@" not in text and "$*" not in text
    script = tmp_path / "run.sh"
    script.write_text(text, encoding="utf-8")
    from harness.config.profiles import load_profile

    result = lint_file(str(script), load_profile("npu-16x-ascend-a3"))
    assert result.errors == [] and {f.rule for f in result.findings} <= {"unresolved-value"}


def test_export_refuses_code_loading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = json.loads(Path("recipes/qwen3_1_7b.json").read_text(encoding="utf-8"))
    recipe["name"] = "with_code"
    recipe["security"]["allow_code_loading"] = True
    recipe["model"]["revision"] = "0" * 40
    recipe["custom_reward_function"]["path"] = "/opt/reward.py"
    path = tmp_path / "with_code.json"
    path.write_text(json.dumps(recipe), encoding="utf-8")
    assert main(["export-verl", str(path), "--profile", "gpu-1x-h200", "--scale", "smoke"]) == 2
    err = capsys.readouterr().err
    assert "code-loading" in err and len(err.strip().splitlines()) == 1


def test_export_unknown_profile_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-verl", "qwen3_vl_30b", "--profile", "no-such"]) == 2
    assert main(["export-verl", "qwen3_vl_30b", "--profile", "cpu", "--scale", "full"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 2


def test_recipe_text_never_starts_a_launcher_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A source.launcher holding a newline is refused by the schema (validate and export alike), and whatever text
    the exporter copies, each comment and value stays on its own line."""
    recipe = json.loads(Path("recipes/qwen3_1_7b.json").read_text(encoding="utf-8"))
    recipe["name"], recipe["source"]["launcher"] = "pwn", "x\ntouch X/PWNED\n#"
    path = tmp_path / "pwn.json"
    path.write_text(json.dumps(recipe), encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    assert "$.source.launcher" in capsys.readouterr().err
    assert main(["export-verl", str(path), "--profile", "gpu-8x-h200-141g", "--format", "script"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "/source/launcher" in err[0] and "one line" in err[0]
    from harness.verl.mapping import launcher_script

    text = launcher_script("n", "x\ntouch X/PWNED\n#\u2028y\x1b", "p", "s", [("trainer.project_name", "a b")])
    assert text.splitlines()[2] == "# source launcher: x\\ntouch X/PWNED\\n#\\u2028y\\x1b"
    assert not any(line.startswith("touch") for line in text.splitlines())
    with pytest.raises(HarnessError, match="control character .U\\+000A.") as err_:
        launcher_script("n", "s", "p", "s", [("trainer.project_name", "a\nid")])
    assert err_.value.key_path == "trainer.project_name"
    bad = json.loads(Path("recipes/qwen3_1_7b.json").read_text(encoding="utf-8"))
    bad["model"]["name"] = "Qwen/Qwen3\n-1.7B"
    from harness.verl.mapping import export_overrides

    with pytest.raises(HarnessError, match="control character"):
        export_overrides(bad)
