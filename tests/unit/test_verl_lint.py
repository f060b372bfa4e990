"""lint-verl: static evaluation of launcher scripts, one fixture per finding, clean scripts, robustness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.verl.bashparse import ScriptError, evaluate_script
from harness.verl.lint import LINT_RULES, VERL_RULES, lint_file, lint_text
from harness.verl.overrides import get_path, merged_config, parse_override, parse_value

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "verl"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "reference" / "verl-config"


def rules_of(path: Path, profile: str | None = None) -> set[str]:
    from harness.config.profiles import load_profile

    return {f.rule for f in lint_file(str(path), load_profile(profile) if profile else None).findings}


# ----------------------------------------------------------------------------- one script per finding
@pytest.mark.parametrize("name, expected", [
    ("passthrough.sh", {"argument-pass-through"}),
    ("undefined_variable.sh", {"undefined-variable"}),
    ("unknown_key.sh", {"unknown-key"}),
    ("append_existing_key.sh", {"append-existing-key"}),
    ("duplicate_key.sh", {"duplicate-key"}),
    ("code_loading.sh", {"code-loading-key"}),
    ("max_model_len.sh", {"max-model-len-too-small"}),
    ("batched_tokens.sh", {"batched-tokens-below-model-len"}),
    ("batch_divisible.sh", {"batch-divisible-by-world", "mini-batch-vs-train-batch"}),
    ("mini_batch.sh", {"mini-batch-vs-train-batch"}),
    ("micro_batch_exclusive.sh", {"micro-batch-exclusive"}),
    ("missing_mandatory.sh", {"missing-mandatory"}),
    ("unresolved_value.sh", {"unresolved-value"}),
    ("clean_fsdp.sh", set()),
    ("clean_veomni.sh", set()),
    ("clean_constructs.sh", set()),
])
def test_fixture_findings(name: str, expected: set[str]) -> None:
    assert rules_of(FIX / name) == expected


def test_devices_per_node_against_profile() -> None:
    assert rules_of(FIX / "devices_per_node.sh") == set()
    assert rules_of(FIX / "devices_per_node.sh", "gpu-8x-h200-141g") == set()
    assert rules_of(FIX / "devices_per_node.sh", "npu-16x-ascend-a3") == {"devices-per-node"}
    assert rules_of(FIX / "clean_veomni.sh", "gpu-8x-h100-80g") == set()


def test_seed_pr_bugs_all_found(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["lint-verl", str(FIX / "seed_pr.sh"), "--profile", "npu-16x-ascend-a3"])
    out = capsys.readouterr().out
    assert rc == 1
    lines = out.splitlines()

    def at(rule: str) -> list[int]:
        return sorted(int(x.split(":")[1]) for x in lines if f": {rule} " in x)

    assert at("argument-pass-through") == [30]
    assert at("code-loading-key") == [25]  # data.trust_remote_code=True
    assert at("max-model-len-too-small") == [26]  # 1024 < 512 + 2048
    assert at("duplicate-key") == [27]  # trainer.use_legacy_worker_impl twice: one finding, naming lines 27 and 28
    assert "given 2 times (lines 27, 28)" in out
    assert at("undefined-variable") == [29]  # ${ENGINE_FLAGS} under set -u
    assert at("devices-per-node") == [7, 23]  # trainer.device (verl default cuda) and n_gpus_per_node=8
    assert "n_gpus_per_node 8 != 16" in out
    assert at("unknown-key") == [27, 28]  # the key does not exist at the pinned verl revision


def test_human_and_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["lint-verl", str(FIX / "duplicate_key.sh")])
    out = capsys.readouterr().out
    assert rc == 1
    first = out.splitlines()[0]
    assert first.startswith(f"{FIX / 'duplicate_key.sh'}:23: duplicate-key error: ") and "(fix: " in first
    rc = main(["lint-verl", str(FIX / "duplicate_key.sh"), str(FIX / "clean_fsdp.sh"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    dup, clean = doc["files"]
    assert dup["errors"] == 1 and {f["line"] for f in dup["findings"]} == {23}
    assert "(lines 23, 25): the last one (line 25) wins" in dup["findings"][0]["message"]
    assert clean["findings"] == [] and clean["trainer_commands"][0]["program"] == "verl.trainer.main_ppo"


def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint-verl", str(FIX / "clean_fsdp.sh")]) == 0
    assert main(["lint-verl", str(FIX / "unresolved_value.sh")]) == 0  # warnings only
    binary = tmp_path / "bin.sh"
    binary.write_bytes(b"\x7fELF\x00\x01\x02")
    latin = tmp_path / "latin.sh"
    latin.write_bytes(b"echo caf\xe9\n")
    capsys.readouterr()
    for bad in (str(tmp_path / "missing.sh"), str(binary), str(latin), str(FIX / "unparseable.sh"), str(tmp_path)):
        assert main(["lint-verl", bad]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["lint-verl", str(FIX / "clean_fsdp.sh"), "--profile", "no-such"]) == 2
    assert "line 4" in _one_error(FIX / "unparseable.sh", capsys)


def _one_error(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    main(["lint-verl", str(path)])
    return capsys.readouterr().err


# ----------------------------------------------------------------------------- static evaluation
def test_constructs_keep_source_lines() -> None:
    res = lint_file(str(FIX / "clean_constructs.sh"))
    (call,) = res.calls
    lines = {o.key: o.line for o in call.overrides}
    assert lines["data.val_files"] == 14 and lines["data.train_batch_size"] == 15  # multi-line string
    assert lines["actor_rollout_ref.actor.optim.lr"] == 21 and lines["actor_rollout_ref.actor.use_kl_loss"] == 23
    assert lines["actor_rollout_ref.rollout.max_model_len"] == 29  # read from a here-document
    assert lines["data.max_response_length"] == 35  # $(cat <<EOF ...)
    assert lines["trainer.project_name"] == 80  # "$@" of a function called with explicit arguments
    values = {o.key: o.value for o in call.overrides}
    assert values["trainer.nnodes"] == 2 and values["trainer.n_gpus_per_node"] == 8
    assert values["actor_rollout_ref.model.path"] == "/models/Qwen3-VL-30B-A3B-Instruct"  # [[ -z ... ]] branch
    assert values["actor_rollout_ref.rollout.name"] == "vllm"  # [ "$ENGINE" = vllm ] picked the branch


def _values(script: str) -> dict[str, object]:
    (call,) = lint_text(script).calls
    return {o.key: (o.value if not o.unknown else "?") for o in call.overrides}


@pytest.mark.parametrize("script, key, value", [
    ("A=${X:-${Y:-7}}\npython3 -m verl.trainer.main_ppo trainer.nnodes=$A", "trainer.nnodes", 7),
    ("echo ${B:=3}\npython3 -m verl.trainer.main_ppo trainer.nnodes=$B", "trainer.nnodes", 3),
    ("N=2\npython3 -m verl.trainer.main_ppo trainer.nnodes=$((N * 4 - 1))", "trainer.nnodes", 7),
    ("A=(x y z)\npython3 -m verl.trainer.main_ppo trainer.nnodes=${#A[@]}", "trainer.nnodes", 3),
    ("P=/d/x.parquet/\npython3 -m verl.trainer.main_ppo data.train_files=${P%/}", "data.train_files", "/d/x.parquet"),
    ("E=$'a\\tb'\npython3 -m verl.trainer.main_ppo trainer.project_name=\"$E\"", "trainer.project_name", "a\tb"),
    ("X=1\nX+=0\npython3 -m verl.trainer.main_ppo trainer.nnodes=$X", "trainer.nnodes", 10),
    ("if [ -f /etc/x ]; then N=1; else N=2; fi\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N",
     "trainer.nnodes", "?"),
    ("if [ -f /etc/x ]; then N=1; else N=1; fi\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N",
     "trainer.nnodes", 1),
    ("E=b\ncase $E in a) N=1 ;; b|c) N=2 ;; esac\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N",
     "trainer.nnodes", 2),
    ("N=$(nproc)\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N", "trainer.nnodes", "?"),
    ("[ -z \"${N:-}\" ] && N=4\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N", "trainer.nnodes", 4),
    ("T=\"a=1 b=2\"\nread -r X Y <<< \"$T\"\npython3 -m verl.trainer.main_ppo trainer.experiment_name=$Y",
     "trainer.experiment_name", "b=2"),
    # a `$` right before the closing quote is a literal `$` (it once began a `$"..."` string and ate the script)
    ("P=\"cost$\"\npython3 -m verl.trainer.main_ppo trainer.project_name=\"$P\"", "trainer.project_name", "cost$"),
    ("python3 -m verl.trainer.main_ppo trainer.project_name=\"a$\" trainer.nnodes=2", "trainer.project_name", "a$"),
])
def test_static_values(script: str, key: str, value: object) -> None:
    assert _values(script)[key] == value


@pytest.mark.parametrize("tail", ['"$@"', "$@", "${@}", '"${@}"', "$*", '"$*"', "$1", "${EXTRA}"])
def test_pass_through_forms(tail: str) -> None:
    res = lint_text(f"python3 -m verl.trainer.main_ppo trainer.nnodes=1 {tail}\n")
    assert "argument-pass-through" in {f.rule for f in res.findings}


def test_pass_through_through_variables_and_functions() -> None:
    via_var = 'ARGS="$*"\npython3 -m verl.trainer.main_ppo trainer.nnodes=1 $ARGS\n'
    assert "argument-pass-through" in {f.rule for f in lint_text(via_var).findings}
    via_fn = 'run() { python3 -m verl.trainer.main_ppo "$@"; }\nrun "$@"\n'
    assert "argument-pass-through" in {f.rule for f in lint_text(via_fn).findings}
    literal = 'run() { python3 -m verl.trainer.main_ppo "$@"; }\nrun trainer.nnodes=1\n'
    assert "argument-pass-through" not in {f.rule for f in lint_text(literal).findings}
    value_only = "ENGINE=${1:-vllm}\npython3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=$ENGINE\n"
    assert "argument-pass-through" not in {f.rule for f in lint_text(value_only).findings}


def test_undefined_variable_only_under_set_u() -> None:
    tail = "python3 -m verl.trainer.main_ppo trainer.experiment_name=$NAME\n"
    assert "undefined-variable" in {f.rule for f in lint_text("set -euo pipefail\n" + tail).findings}
    assert "undefined-variable" in {f.rule for f in lint_text("set -o nounset\n" + tail).findings}
    plain = {f.rule for f in lint_text(tail).findings}
    assert "undefined-variable" not in plain and "unresolved-value" in plain
    for ok in ("set -u\nNAME=x\n", "set -u\n: ${NAME:=x}\n", "set -u\nsource ./env.sh\n", "set -u\nset +u\n"):
        assert "undefined-variable" not in {f.rule for f in lint_text(ok + tail).findings}, ok
    with_default = "set -u\npython3 -m verl.trainer.main_ppo trainer.experiment_name=${NAME:-x}\n"
    assert "undefined-variable" not in {f.rule for f in lint_text(with_default).findings}


@pytest.mark.parametrize("launcher", [
    "python3 -m verl.trainer.main_ppo {o}",
    "python -m main_ppo {o}",
    "python3 verl/trainer/main_ppo.py {o}",
    "torchrun --nproc_per_node 8 -m verl.trainer.main_ppo {o}",
    "ray job submit --address x -- python3 -m verl.trainer.main_ppo {o}",
    "PYTHONUNBUFFERED=1 nohup python3 -m verl.trainer.main_ppo {o} > log.txt 2>&1 &",
])
def test_trainer_command_forms(launcher: str) -> None:
    res = lint_text(launcher.format(o="trainer.nnodes=2 trainer.nnodes=3") + "\n")
    assert len(res.calls) == 1 and "duplicate-key" in {f.rule for f in res.findings}


@pytest.mark.parametrize("script, nnodes", [
    ("time python3 -m verl.trainer.main_ppo trainer.nnodes=2\n", 2),
    ("N=$[1 + 2]\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N\n", 3),
    ("for ((i = 0; i < 2; i++)); do echo $i; done\npython3 -m verl.trainer.main_ppo trainer.nnodes=4\n", 4),
    ("function run() {\n  python3 -m verl.trainer.main_ppo trainer.nnodes=5\n}\n# a comment\nrun\n", 5),
    ("A[2]=6\npython3 -m verl.trainer.main_ppo trainer.nnodes=${A[2]}\n", 6),
    ("N='1'\\\n'2'\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N\n", 12),  # one word across lines
    ("case \"$1\" in\n  a) N=3 ;;\n  *) N=3 ;;\nesac\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N\n", 3),
    ("E=()\npython3 -m verl.trainer.main_ppo \"${E[@]}\" trainer.nnodes=4 \"${E[@]:-}\"\n", 4),
    ("(N=1)\n{ N=7; }\npython3 -m verl.trainer.main_ppo trainer.nnodes=$N\n", 7),
])
def test_more_constructs(script: str, nnodes: int) -> None:
    assert _values(script)["trainer.nnodes"] == nnodes


@pytest.mark.parametrize("text, where", [
    ("set -u\r\nX=1\r\n", "line 1"),  # CRLF: bash itself fails
    ("if true; then\n  echo x\n", "line 3"),  # no fi
    ("echo \"unterminated\n", "line 1"),
    ("X=1\nfi\n", "line 2: bash syntax error near unexpected token 'fi'"),
    ("X=ab\n" + "X=$X$X\n" * 34 + "python3 -m verl.trainer.main_ppo a=$X\n", "grows past 131,072 characters"),
    ("X=abcdefghijklmnop\n" + "X=$X$X\n" * 12 + "echo $X $X $X $X\n" * 200, "add up to more than"),
])
def test_unparseable_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str) -> None:
    script = tmp_path / "bad.sh"
    script.write_bytes(text.encode())
    assert main(["lint-verl", str(script)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and where in err and "Traceback" not in err


def test_comment_only_script() -> None:
    assert {f.rule for f in lint_text("# nothing here\n\n  # at all\n").findings} == {"no-trainer-command"}


def test_no_trainer_command_is_a_warning() -> None:
    assert {f.rule for f in lint_text("echo hello\n").findings} == {"no-trainer-command"}


def test_hydra_prefixes_and_flags() -> None:
    ok = lint_text("python3 -m verl.trainer.main_ppo ++trainer.nnodes=2 +trainer.new_key=1 ~trainer.logger "
                   "hydra.run.dir=/tmp/x --config-path=/cfg\n")
    assert {f.rule for f in ok.errors} == {"missing-mandatory", "micro-batch-exclusive"}
    bad = lint_text("python3 -m verl.trainer.main_ppo ~trainer.no_such_key notanoverride\n")
    assert [f.rule for f in bad.findings].count("unknown-key") == 2
    other = lint_text("python3 -m verl.trainer.main_ppo --config-name my_trainer trainer.foo=1\n")
    assert "unknown-key" not in {f.rule for f in other.findings}
    assert "unresolved-value" in {f.rule for f in other.findings}


@pytest.mark.parametrize(("flags", "engine"), [("--config-name ppo_megatron_trainer", "megatron"),
                                                ("--config-name='ppo_megatron_trainer.yaml'", "megatron"),
                                                ("model_engine=megatron", "megatron"),
                                                ("model_engine=torchtitan", "torchtitan"), ("", "dp")])
def test_engine_keys_follow_the_config(flags: str, engine: str) -> None:
    script = (f"python3 -m verl.trainer.main_ppo {flags} actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 "
              "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=1 trainer.foo=1\n")
    result = lint_text(script)
    assert result.calls[0].engine == engine
    unknown = {f.key for f in result.findings if f.rule == "unknown-key"}
    megatron_keys = {"actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
                     "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size"}
    assert unknown == {"trainer.foo"} | (set() if engine == "megatron" else megatron_keys)


def test_append_allowed_where_hydra_allows_it() -> None:
    """Hydra refuses +key=value only over a value that is not null (and a scalar, not a mapping)."""
    script = ("python3 -m verl.trainer.main_ppo model_engine=megatron "
              "+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method=uniform "
              "+actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=fused\n")
    found = [f.key for f in lint_text(script).findings if f.rule == "append-existing-key"]
    assert found == ["actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"]


def test_engine_selects_known_keys() -> None:
    veomni_key = "actor_rollout_ref.actor.veomni.fsdp_size=16"
    assert "unknown-key" in {f.rule for f in lint_text(f"python3 -m verl.trainer.main_ppo {veomni_key}\n").findings}
    assert "unknown-key" not in {f.rule for f in lint_text(
        f"python3 -m verl.trainer.main_ppo model_engine=veomni {veomni_key}\n").findings}


def test_merge_resolves_interpolations() -> None:
    overrides = [parse_override(t, 1) for t in ("actor_rollout_ref.rollout.n=8", "trainer.project_name=p")]
    config = merged_config([o for o in overrides if o], "dp")
    assert get_path(config, "actor_rollout_ref.actor.rollout_n") == 8
    assert get_path(config, "trainer.default_local_dir") == "checkpoints/p/gsm8k"
    assert get_path(config, "data.tool_config_path") is None
    assert parse_value("[0.9, 0.999]") == [0.9, 0.999] and parse_value("'1'") == "1" and parse_value("1e-6") == 1e-6


def test_rule_registries_are_disjoint() -> None:
    from harness.config.safety import RULES

    assert not set(LINT_RULES) & set(RULES)
    assert set(VERL_RULES) <= set(RULES)
    engine_only = {"kl-in-reward-unsupported", "unsupported-parallelism", "vocab-covers-tokenizer", "memory-preflight"}
    assert not engine_only & set(VERL_RULES)


def test_engine_only_rules_not_run() -> None:
    script = ("python3 -m verl.trainer.main_ppo algorithm.use_kl_in_reward=True "
              "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2\n")
    rules = {f.rule for f in lint_text(script).findings}
    assert not rules & {"kl-in-reward-unsupported", "unsupported-parallelism"}


# ----------------------------------------------------------------------------- verl key data
def test_verl_keys_header() -> None:
    from harness.verl.overrides import verl_keys

    data = verl_keys()
    assert "Apache-2.0" in data["_source"] and len(data["revision"]) == 40
    assert data["keys"]["actor_rollout_ref.rollout.max_model_len"] is None
    assert set(data["engines"]) == {"dp", "megatron", "torchtitan", "veomni"}
    assert data["defaults"]["veomni"]["actor_rollout_ref.actor.strategy"] == "veomni"
    assert data["engines_of"]["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == ["megatron"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="verl reference configs not available")
def test_verl_keys_reproduce_each_engine_config() -> None:
    """Each engine view of the shipped JSON is exactly the flattened generated config it came from."""
    yaml = pytest.importorskip("yaml")
    from harness.verl.build_keys import engine_files, flatten
    from harness.verl.overrides import engine_defaults, verl_keys

    files = engine_files(SHARED)
    assert files and set(files) <= set(verl_keys()["engines"])
    for engine, path in files.items():
        assert engine_defaults(engine) == flatten(yaml.safe_load(path.read_text(encoding="utf-8"))), engine
    assert (SHARED / "REVISION").read_text().split()[0] == verl_keys()["revision"]


# ----------------------------------------------------------------------------- robustness
_PIECES = st.sampled_from(["$", "${", "}", "$(", "$((", ")", "(", "'", '"', "`", "\\", "\n", " ", "=", "[[", "]]",
                           "<<EOF\n", "EOF\n", "<<<", "|", "&&", ";", "#", "case x in", "esac", "if", "then", "fi",
                           "A=(", "\"$@\"", "${A[@]}", "python3 -m verl.trainer.main_ppo ", "trainer.nnodes=",
                           "set -u\n", "f() {", "for i in", "do", "done", "~", "+", "x", "1"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=80), st.lists(_PIECES, max_size=25).map("".join)))
def test_random_text_never_crashes(text: str) -> None:
    try:
        lint_text(text)
    except ScriptError as err:
        assert err.message and "\n" not in err.message


@pytest.mark.parametrize("text", ["A=(do|[) done", "A=(x;y)", "A=(a & b)", "A=(<in)"])
def test_metacharacter_in_an_array_literal_is_a_syntax_error(text: str) -> None:
    """Found by the fuzz test: the array scanner made no progress on a metacharacter and looped."""
    with pytest.raises(ScriptError, match="bash syntax error") as err:
        lint_text(text)
    assert err.value.line == 1


def test_evaluate_reports_issue_offsets() -> None:
    ev = evaluate_script("set -u\necho $A\n")
    assert [ev.line(i.pos) for i in ev.issues] == [2]


def test_group_override_leaves_its_package_unchecked() -> None:
    script = ("python3 -m verl.trainer.main_ppo actor@actor_rollout_ref.actor=mlite_actor "
              "actor_rollout_ref.actor.engine.tp=2 actor_rollout_ref.rollout.no_such_key=1\n")
    findings = lint_text(script).findings
    assert [f.key for f in findings if f.rule == "unknown-key"] == ["actor_rollout_ref.rollout.no_such_key"]
    assert any(f.rule == "unresolved-value" and "mlite_actor" in f.message for f in findings)
    assert not [f for f in findings if f.severity == "error" and f.rule != "unknown-key"]


@pytest.mark.parametrize(("script", "rule"), [
    ("python3 -m verl.trainer.main_ppo model_engine=megatron data.train_batch_size=3 actor_rollout_ref.rollout.n=1 "
     "trainer.n_gpus_per_node=8 trainer.nnodes=1\n", "batch-divisible-by-world"),
    ("python3 -m verl.trainer.main_ppo data.train_batch_size=3 actor_rollout_ref.rollout.n=1 "
     "actor_rollout_ref.actor.use_dynamic_bsz=True trainer.n_gpus_per_node=8 trainer.nnodes=1\n",
     "batch-divisible-by-world"),
    ("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.tensor_model_parallel_size=16 "
     "trainer.n_gpus_per_node=8 trainer.nnodes=2\n", "rollout-tp-fits"),
])
def test_checks_verl_does_not_make_are_warnings(script: str, rule: str) -> None:
    found = [f for f in lint_text(script).findings if f.rule == rule]
    assert found and all(f.severity == "warning" and "verl" in f.message for f in found)


def test_fsdp_batch_check_stays_an_error() -> None:
    script = ("python3 -m verl.trainer.main_ppo data.train_batch_size=3 actor_rollout_ref.rollout.n=1 "
              "trainer.n_gpus_per_node=8 trainer.nnodes=1\n")
    assert "batch-divisible-by-world" in {f.rule for f in lint_text(script).errors}
