"""``harness validate``: the bad-input corpus, the positive variants, output formats and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.recipe import overridable_keys
from harness.paths import PROFILES_DIR

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recipes"
NEGATIVE = FIXTURES / "negative"
POSITIVE = FIXTURES / "positive"
EXPECTED = json.loads((NEGATIVE / "expected.json").read_text(encoding="utf-8"))
SEED = "qwen3_vl_30b"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


# ----------------------------------------------------------------------------- corpus
def test_corpus_is_complete():
    files = sorted(p.name for p in NEGATIVE.glob("*.json") if p.name != "expected.json")
    assert files == sorted(EXPECTED) and len(files) >= 40
    assert {e["exit"] for e in EXPECTED.values()} == {1, 2}
    rule_ids = {e["contains"] for e in EXPECTED.values() if e["exit"] == 1}
    from harness.config.safety import RULES
    from harness.config.safety import rules as _rules  # noqa: F401

    assert rule_ids == set(RULES), set(RULES) - rule_ids  # every rule has a negative example


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_negative_corpus(name, capsys):
    exp = EXPECTED[name]
    argv = ["validate", str(NEGATIVE / name)]
    if "profile" in exp:
        argv += ["--profile", exp["profile"], "--scale", exp["scale"]]
    code, out, err = run(argv, capsys)
    assert code == exp["exit"], out + err
    assert exp["contains"] in out + err, out + err
    if exp["exit"] == 2:
        lines = err.splitlines()  # bad input: one line per problem, each naming the file and a fix
        assert lines and all(ln.startswith("error: ") and name in ln and "(fix: " in ln for ln in lines)
    else:
        lines = [ln for ln in (out + err).splitlines() if exp["contains"] in ln]
        assert lines and all(name in ln and "(fix: " in ln for ln in lines)


@pytest.mark.parametrize("path", sorted(POSITIVE.glob("*.json")), ids=lambda p: p.stem)
def test_positive_variants_pass_on_every_listed_pair(path, capsys):
    code, out, err = run(["validate", str(path)], capsys)
    assert code == 0, out + err
    assert " 0 errors" in out and err == ""


def test_reviewed_code_loading_is_a_warning(capsys):
    code, out, _ = run(["validate", str(POSITIVE / "code_loading_reviewed.json"), "--profile", "cpu"], capsys)
    assert code == 0 and "code-loading-key warning" in out and "1 warnings" in out


# ----------------------------------------------------------------------------- shipped recipes
def test_shipped_recipes_pass(capsys):
    code, out, err = run(["validate"], capsys)
    assert code == 0, out + err


@pytest.mark.parametrize("flags", [["--scale", "full"], ["--profile", "cpu"], ["--profile", "gpu-1x-h200"]])
def test_shipped_recipes_pass_where_known_good(flags, capsys):
    code, out, err = run(["validate", *flags], capsys)
    assert code == 0 and err == "" and "0 errors, 0 warnings" in out, out


def test_profile_files_are_schema_checked(tmp_path, capsys):
    shipped = sorted(str(p) for p in PROFILES_DIR.glob("*.json"))
    code, out, _ = run(["validate", *shipped], capsys)
    assert code == 0 and f"{len(shipped)} profile file(s) ok" in out
    bad_dir = tmp_path / "hardware"
    bad_dir.mkdir()
    data = json.loads((PROFILES_DIR / "cpu.json").read_text())
    data["name"], data["accelerator"]["count_per_node"] = "tiny", 0
    (bad_dir / "tiny.json").write_text(json.dumps(data))
    code, _, err = run(["validate", str(bad_dir / "tiny.json")], capsys)
    assert code == 2 and "::$.accelerator.count_per_node: 0 is less than the minimum of 1" in err


# ----------------------------------------------------------------------------- output and exit codes
def test_summary_and_finding_format(capsys):
    path = NEGATIVE / "kl_in_reward.json"
    code, out, _ = run(["validate", str(path)], capsys)
    first, summary = out.splitlines()
    assert code == 1
    assert first.startswith(f"{path} [cpu:smoke]::algorithm.use_kl_in_reward: kl-in-reward-unsupported error: ")
    assert summary == "1 recipe × profile pairs checked, 1 errors, 0 warnings"


def test_several_paths_keep_going_and_exit_with_the_worst(capsys):
    paths = [str(NEGATIVE / n) for n in ("kl_in_reward.json", "json_empty_file.json", "schema_enum.json")]
    code, out, err = run(["validate", *paths, SEED, "--profile", "cpu"], capsys)
    assert code == 2
    assert "kl-in-reward-unsupported" in out and len(err.splitlines()) == 2
    assert "2 recipe × profile pairs checked, 1 errors, 0 warnings, 2 could not be loaded" in out


def test_json_output(capsys):
    paths = [str(NEGATIVE / "kl_in_reward.json"), str(NEGATIVE / "json_nan.json"), SEED]
    code, out, err = run(["validate", *paths, "--json", "--profile", "cpu"], capsys)
    doc = json.loads(out)
    assert code == 2 and doc["exit"] == 2 and err == ""
    assert [(r["profile"], r["scale"]) for r in doc["results"]] == [("cpu", "smoke")] * 2
    assert doc["results"][0]["findings"][0]["rule"] == "kl-in-reward-unsupported"
    assert doc["results"][1]["findings"] == []
    assert len(doc["errors"]) == 1 and "NaN" in doc["errors"][0]["message"] and doc["errors"][0]["exit"] == 2
    assert doc["summary"] == {"pairs": 2, "errors": 1, "warnings": 0, "unloadable": 1}


def test_list_rules_and_overrides(capsys):
    code, out, _ = run(["validate", "--list-rules"], capsys)
    assert code == 0 and out.splitlines()[0].split()[:2] == ["code-loading-key", "error"]
    assert len(out.splitlines()) == 18
    code, out, _ = run(["validate", "--list-overrides"], capsys)
    assert code == 0 and out.split() == overridable_keys() and "data.train_batch_size" in out.split()
    code, out, _ = run(["validate", "--list-rules", "--json"], capsys)
    assert {r["id"] for r in json.loads(out)} >= {"memory-preflight", "duplicate-key"}


def test_overrides_reach_the_rules(capsys):
    code, out, _ = run(["validate", SEED, "--profile", "cpu", "--set", "actor_rollout_ref.rollout.max_model_len=64"],
                       capsys)
    assert code == 1 and "max-model-len-too-small" in out
    code, _, err = run(["validate", SEED, "--set", "trainer.nnodes=2"], capsys)
    assert code == 2 and "not overridable" in err
    code, _, err = run(["validate", SEED, "--set", "actor_rollout_ref.model.external_lib=x"], capsys)
    assert code == 2 and "code-loading-key" in err


@pytest.mark.parametrize("argv,fragment", [
    (["validate", "no_such_recipe"], "unknown recipe"),
    (["validate", "recipes/nope.json"], "recipe file not found"),
    (["validate", SEED, "--profile", "tpu"], "lists no (profile, scale) pair"),
    (["validate", SEED, "--profile", "cpu", "--scale", "full"], "does not support profile 'cpu' at scale 'full'"),
    (["validate", "--profile", "tpu"], "no recipe lists"),
])
def test_bad_arguments_are_one_line_exit_2(argv, fragment, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2 and fragment in err and len(err.splitlines()) == 1


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as err:
        main(["validate", "--no-such-flag"])
    assert err.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_directory_and_unreadable_inputs(tmp_path, capsys):
    code, _, err = run(["validate", str(tmp_path)], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50000 + "]" * 50000)
    code, _, err = run(["validate", str(deep)], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    huge = tmp_path / "huge.json"
    huge.write_text((Path(__file__).resolve().parents[2] / "recipes" / f"{SEED}.json").read_text()
                    .replace('"name": "qwen3_vl_30b"', '"name": "huge"').replace('"lr": 1e-06', '"lr": 1e400'))
    code, _, err = run(["validate", str(huge), "--profile", "cpu"], capsys)
    assert code == 2 and len(err.splitlines()) == 1


def test_every_schema_error_is_listed_with_its_json_path(capsys, tmp_path):
    """Three mistakes in one recipe: three lines `file::$.json.path: message (fix: ...)`, like check-jsonschema,
    and no advice to run the command that was just run."""
    doc = json.loads(Path(SEED).read_text()) if Path(SEED).is_file() else None
    if doc is None:
        from harness.config.recipe import recipe_path

        doc = json.loads(recipe_path(SEED).read_text())
    doc["trainer"]["save_freq"] = "often"
    doc["data"]["train_batch_size"] = -3
    doc["trainer"]["bogus_key"] = 1
    bad = tmp_path / "three_mistakes.json"
    bad.write_text(json.dumps(doc))
    code, out, err = run(["validate", str(bad)], capsys)
    assert code == 2
    assert err.splitlines() == [
        f"error: {bad}::$.data.train_batch_size: -3 is less than the minimum of 1 (fix: use a value >= 1)",
        f"error: {bad}::$.trainer: unknown key 'bogus_key' (fix: remove ['bogus_key']; allowed keys: device, "
        "max_actor_ckpt_to_keep, n_gpus_per_node, nnodes, resume_mode, save_freq, test_freq, total_training_steps, "
        "val_before_train)",
        f"error: {bad}::$.trainer.save_freq: 'often' is not of type 'integer' (fix: use a value of type integer)"]
    assert "1 could not be loaded or resolved (3 error lines)" in out and "run `harness validate" not in err
    code, out, _ = run(["validate", str(bad), "--json"], capsys)
    assert json.loads(out)["summary"]["unloadable"] == 1 and len(json.loads(out)["errors"]) == 3


def test_json_path_of_a_pointer():
    from harness.schema import json_path

    assert json_path("/") == "$"
    assert json_path("/data/items/0/a~1b") == "$.data.items[0]['a/b']"
