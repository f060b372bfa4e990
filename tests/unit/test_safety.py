"""Safety rules, the memory pre-flight and the seed recipe's bug classes."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.recipe import resolve
from harness.config.safety import RULES, Finding, RuleContext, run_rules
from harness.config.safety import rules as _rules  # noqa: F401  (registers the rules)
from harness.config.safety.check import check_resolved, context_for, label, raise_on_errors
from harness.config.safety.memory import GB, count_params, estimate_memory
from harness.errors import HarnessError

RULE_IDS = [
    "code-loading-key", "max-model-len-too-small", "max-model-len-exceeds-positions", "batched-tokens-below-model-len",
    "duplicate-key", "devices-per-node", "batch-divisible-by-world", "mini-batch-vs-train-batch",
    "micro-batch-exclusive", "sp-needs-remove-padding", "ulysses-heads", "dp-vs-fsdp-size", "experts-vs-ep",
    "rollout-tp-fits", "kl-in-reward-unsupported", "unsupported-parallelism", "vocab-covers-tokenizer",
    "memory-preflight",
]
ROOT = Path(__file__).resolve().parents[2]
SEED = "qwen3_vl_30b"


def _set(config: dict, dotted: str, value) -> None:
    node = config
    *parents, last = dotted.split(".")
    for part in parents:
        node = node[part]
    node[last] = value


def ctx_of(recipe: str = SEED, profile: str = "cpu", scale: str = "smoke", **changes) -> RuleContext:
    """The rule context of a shipped recipe with ``changes`` (dotted keys, '__' for '.') applied."""
    res = resolve(recipe, profile, scale)
    config = copy.deepcopy(res.config)
    for key, value in changes.items():
        _set(config, key.replace("__", "."), value)
    return RuleContext(config=config, profile=res.profile, architecture=config["model"]["architecture"])


def ids(findings: list[Finding]) -> set[str]:
    return {f.rule for f in findings}


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text
    return code, text


def write_variant(tmp_path: Path, name: str, changes: dict, recipe: str = SEED) -> Path:
    data = json.loads((ROOT / "recipes" / f"{recipe}.json").read_text())
    data["name"] = name
    for key, value in changes.items():
        _set(data, key, value)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


# ----------------------------------------------------------------------------- registry
def test_every_rule_is_registered_with_its_severity():
    assert list(RULES) == RULE_IDS
    assert all(RULES[r].severity == "error" for r in RULE_IDS)
    assert all(RULES[r].summary for r in RULE_IDS)


def test_rules_skip_silently_without_their_keys():
    assert run_rules(RuleContext(config={})) == []
    partial = {"data": {"max_prompt_length": 1024}, "trainer": {"nnodes": 1}}
    assert run_rules(RuleContext(config=partial, profile={"name": "x"}, architecture={})) == []


def test_rules_tolerate_unresolved_verl_interpolations():
    config = {"data": {"train_batch_size": "${oc.env:BS}", "max_prompt_length": 512, "max_response_length": None},
              "actor_rollout_ref": {"rollout": {"max_model_len": "${x}", "n": 8}}, "trainer": {"nnodes": "2"}}
    assert run_rules(RuleContext(config=config, architecture={"text": {"vocab_size": "x"}})) == []


@pytest.mark.parametrize("recipe,profile,scale", [
    (SEED, "cpu", "smoke"), (SEED, "gpu-8x-h100-80g", "full"), (SEED, "npu-16x-ascend-a3", "full"),
    ("qwen3_1_7b", "gpu-1x-h200", "full"), ("qwen3_30b_a3b", "gpu-8x-h200-141g", "full"),
])
def test_shipped_pairs_have_no_findings(recipe, profile, scale):
    assert check_resolved(resolve(recipe, profile, scale)) == []


# ----------------------------------------------------------------------------- rules, one by one
@pytest.mark.parametrize("key", ["data.trust_remote_code", "actor_rollout_ref.model.trust_remote_code",
                                 "actor_rollout_ref.model.external_lib", "custom_reward_function.path",
                                 "data.custom_cls.path", "actor_rollout_ref.rollout.multi_turn.function_tool_path",
                                 "actor_rollout_ref.rollout.agent.custom_async_server.path"])
def test_code_loading_key_is_an_error(key):
    value = True if key.endswith("trust_remote_code") else "mod.py"
    found = [f for f in run_rules(ctx_of(**{key.replace(".", "__"): value})) if f.rule == "code-loading-key"]
    assert [(f.severity, f.key) for f in found] == [("error", key)]


def test_code_loading_key_needs_opt_in_and_pinned_revision():
    on = {"data__trust_remote_code": True, "security__allow_code_loading": True}
    unpinned = run_rules(ctx_of(**on), only=["code-loading-key"])
    assert unpinned[0].severity == "error" and "not a pinned" in unpinned[0].message
    pinned = run_rules(ctx_of(**on, model__revision="a" * 40), only=["code-loading-key"])
    assert [f.severity for f in pinned] == ["warning"]
    assert run_rules(ctx_of(data__trust_remote_code="false"), only=["code-loading-key"]) == []


def test_max_model_len_too_small_names_the_numbers():
    (f,) = run_rules(ctx_of(SEED, "gpu-8x-h100-80g", "full", actor_rollout_ref__rollout__max_model_len=1024),
                     only=["max-model-len-too-small"])
    assert "1024 < max_prompt_length 1024 + max_response_length 2048 = 3072" in f.message
    assert f.key == "actor_rollout_ref.rollout.max_model_len" and ">= 3072" in f.fix


def test_max_model_len_positions_uses_the_override_then_the_architecture():
    ctx = ctx_of(SEED, "gpu-8x-h100-80g", "full", actor_rollout_ref__rollout__max_model_len=40000,
                 actor_rollout_ref__rollout__max_num_batched_tokens=40000)
    (f,) = run_rules(ctx, only=["max-model-len-exceeds-positions"])
    assert "32768" in f.message and "override_config" in f.message
    ctx.config["actor_rollout_ref"]["model"]["override_config"] = {}
    assert run_rules(ctx, only=["max-model-len-exceeds-positions"]) == []  # 40000 <= 262144
    null_len = ctx_of(actor_rollout_ref__rollout__max_model_len=None, data__max_prompt_length=5000)
    assert "5016" in run_rules(null_len, only=["max-model-len-exceeds-positions"])[0].message  # prompt + response


def test_batched_tokens_only_without_chunked_prefill():
    ctx = ctx_of(actor_rollout_ref__rollout__max_num_batched_tokens=100, actor_rollout_ref__rollout__name="vllm")
    assert ids(run_rules(ctx, only=["batched-tokens-below-model-len"])) == {"batched-tokens-below-model-len"}
    ctx.config["actor_rollout_ref"]["rollout"]["name"] = "hf"  # the harness's own sampler has no such limit
    assert run_rules(ctx, only=["batched-tokens-below-model-len"]) == []
    ctx.config["actor_rollout_ref"]["rollout"]["name"] = "vllm"
    ctx.config["actor_rollout_ref"]["rollout"]["enable_chunked_prefill"] = True
    assert run_rules(ctx, only=["batched-tokens-below-model-len"]) == []


def test_duplicate_key_rule_is_a_no_op_and_the_loader_reports_it(tmp_path, capsys):
    assert list(RULES["duplicate-key"].fn(ctx_of())) == []
    path = tmp_path / "qwen3_vl_30b.json"
    text = (ROOT / "recipes" / "qwen3_vl_30b.json").read_text()
    path.write_text(text.replace('"seed": 42,', '"seed": 42, "seed": 1,'))
    code, text = run_cli(["validate", str(path)], capsys)
    assert code == 1 and "[duplicate-key]" in text and "/seed" in text


def test_devices_per_node_and_device_type():
    (f,) = run_rules(ctx_of(SEED, "npu-16x-ascend-a3", "full", trainer__n_gpus_per_node=8), only=["devices-per-node"])
    assert "8 != 16" in f.message and f.key == "trainer.n_gpus_per_node"
    (f,) = run_rules(ctx_of(trainer__device="npu"), only=["devices-per-node"])
    assert f.key == "trainer.device"


def test_batch_divisible_by_world():
    (f,) = run_rules(ctx_of(SEED, "gpu-8x-h200-141g", "full", data__train_batch_size=33),
                     only=["batch-divisible-by-world"])
    assert "264" in f.message and "16" in f.message


def test_mini_batch_follows_verl_normalisation_with_sp():
    base = dict(data__train_batch_size=64, actor_rollout_ref__actor__ppo_mini_batch_size=32)
    ok = ctx_of(SEED, "gpu-8x-h200-141g", "full", **base)  # 32 * 8 // 16 = 16 per rank, micro 1
    assert run_rules(ok, only=["mini-batch-vs-train-batch"]) == []
    bad = ctx_of(SEED, "gpu-8x-h200-141g", "full", actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=32, **base)
    (f,) = run_rules(bad, only=["mini-batch-vs-train-batch"])
    assert "32 × 8 // 16 = 16" in f.message and "% ppo_micro_batch_size_per_gpu == 0" in f.message
    # with sp = 2 the per-rank mini-batch is 32 * 8 // (16 / 2) = 32, which micro 32 divides
    sp = ctx_of(SEED, "gpu-8x-h200-141g", "full", actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=32,
                actor_rollout_ref__actor__veomni__ulysses_parallel_size=2, **base)
    assert run_rules(sp, only=["mini-batch-vs-train-batch"]) == []
    dyn = ctx_of(SEED, "gpu-8x-h200-141g", "full", actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=32,
                 actor_rollout_ref__actor__use_dynamic_bsz=True, **base)
    assert run_rules(dyn, only=["mini-batch-vs-train-batch"]) == []


@pytest.mark.parametrize("changes,fragment", [
    ({"actor_rollout_ref__actor__ppo_mini_batch_size": 128}, "128 > train_batch_size 64"),
    ({"actor_rollout_ref__actor__ppo_mini_batch_size": 24}, "not a multiple of ppo_mini_batch_size 24"),
    ({"actor_rollout_ref__actor__ppo_mini_batch_size": 1, "data__train_batch_size": 1}, "world / sp = 16"),
    ({"actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu": None,
      "actor_rollout_ref__actor__ppo_micro_batch_size": 8}, "less than one sample per rank"),
])
def test_mini_batch_cases(changes, fragment):
    found = run_rules(ctx_of(SEED, "gpu-8x-h200-141g", "full", **changes), only=["mini-batch-vs-train-batch"])
    assert any(fragment in f.message for f in found), found


def test_micro_batch_exclusive_for_actor_ref_and_rollout():
    both = run_rules(ctx_of(actor_rollout_ref__actor__ppo_micro_batch_size=4), only=["micro-batch-exclusive"])
    assert [f.key for f in both] == ["actor_rollout_ref.actor.ppo_micro_batch_size"]
    none = ctx_of(actor_rollout_ref__ref__log_prob_micro_batch_size_per_gpu=None,
                  actor_rollout_ref__rollout__log_prob_micro_batch_size_per_gpu=None)
    assert len(run_rules(none, only=["micro-batch-exclusive"])) == 2
    none.config["actor_rollout_ref"]["actor"]["use_kl_loss"] = False  # no reference model: ref is not checked
    assert len(run_rules(none, only=["micro-batch-exclusive"])) == 1
    dyn = ctx_of(actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=None,
                 actor_rollout_ref__actor__use_dynamic_bsz=True)
    assert run_rules(dyn, only=["micro-batch-exclusive"]) == []


def test_sequence_parallel_rules():
    ctx = ctx_of(SEED, "gpu-8x-h200-141g", "full", actor_rollout_ref__actor__veomni__ulysses_parallel_size=8,
                 actor_rollout_ref__model__use_remove_padding=False)
    assert {"sp-needs-remove-padding", "unsupported-parallelism"} <= ids(run_rules(ctx))
    ctx.config["model"]["architecture"]["text"]["num_key_value_heads"] = 3
    assert "neither divides" in run_rules(ctx, only=["ulysses-heads"])[0].message


def test_dp_vs_fsdp_size():
    for fsdp, fires in ((-1, False), (16, False), (32, False), (8, False), (3, True), (0, True)):
        ctx = ctx_of(SEED, "gpu-8x-h200-141g", "full", actor_rollout_ref__actor__veomni__fsdp_size=fsdp)
        assert bool(run_rules(ctx, only=["dp-vs-fsdp-size"])) == fires, fsdp


def test_dp_vs_fsdp_reads_verl_fsdp_engine_keys():
    config = {"trainer": {"nnodes": 1, "n_gpus_per_node": 8},
              "actor_rollout_ref": {"actor": {"fsdp_config": {"fsdp_size": 3}, "ulysses_sequence_parallel_size": 1}}}
    (f,) = run_rules(RuleContext(config=config), only=["dp-vs-fsdp-size"])
    assert f.key == "actor_rollout_ref.actor.fsdp_config.fsdp_size"


def test_experts_vs_ep_and_unsupported_parallelism():
    ctx = ctx_of(SEED, "gpu-8x-h200-141g", "full", actor_rollout_ref__actor__veomni__expert_parallel_size=3)
    assert len(run_rules(ctx, only=["experts-vs-ep"])) == 2
    (f,) = run_rules(ctx, only=["unsupported-parallelism"])
    assert "not supported by this engine" in f.message


def test_rollout_tp_fits():
    def tp(value, **kw):
        return [f.message for f in run_rules(ctx_of(SEED, "gpu-8x-h200-141g", "full",
                                                     actor_rollout_ref__rollout__tensor_model_parallel_size=value,
                                                     **kw), only=["rollout-tp-fits"])]
    assert tp(4) == [] and tp(8) == []
    assert any("> 8 devices per node" in m for m in tp(16))
    assert len(tp(3)) == 4  # world, heads, kv heads, vision heads
    assert tp(2, model__architecture__text__num_key_value_heads=3) == [
        "num_key_value_heads 3 and tensor_model_parallel_size 2: neither divides the other"]


def test_kl_in_reward_is_refused():
    (f,) = run_rules(ctx_of(algorithm__use_kl_in_reward=True), only=["kl-in-reward-unsupported"])
    assert f.key == "algorithm.use_kl_in_reward"


def test_vocab_covers_tokenizer(monkeypatch):
    (f,) = run_rules(ctx_of(model__architecture__text__vocab_size=300), only=["vocab-covers-tokenizer"])
    assert "300 < the tokenizer's 500" in f.message
    monkeypatch.setitem(sys.modules, "harness.core.tokenizer", None)  # not importable: the rule skips
    assert run_rules(ctx_of(model__architecture__text__vocab_size=300), only=["vocab-covers-tokenizer"]) == []


def test_check_helpers_and_raise_on_errors():
    res = resolve(SEED, "cpu", "smoke")
    assert context_for(res).architecture == res.config["model"]["architecture"]
    assert label(res).endswith("qwen3_vl_30b.json [cpu:smoke]")
    raise_on_errors([Finding("code-loading-key", "warning", "w", "f")], "x.json")  # warnings never raise
    findings = run_rules(ctx_of(data__trust_remote_code=True, algorithm__use_kl_in_reward=True))
    with pytest.raises(HarnessError) as err:
        raise_on_errors(findings, "r.json")
    line = err.value.one_line()
    assert err.value.exit_code == 1 and line.startswith("r.json::data.trust_remote_code: code-loading-key error")
    assert "[+1 more error(s)" in line and "\n" not in line


# ----------------------------------------------------------------------------- memory pre-flight
def test_parameter_counts_match_the_published_models():
    def count(recipe, profile="gpu-8x-h200-141g"):
        return count_params(resolve(recipe, profile, "full").config["model"]["architecture"]).total / 1e9
    assert count(SEED) == pytest.approx(31.07, abs=0.05)  # Qwen3-VL-30B-A3B: 31.1 B
    assert count("qwen3_30b_a3b") == pytest.approx(30.53, abs=0.05)  # Qwen3-30B-A3B: 30.5 B
    assert count("qwen3_1_7b", "gpu-1x-h200") == pytest.approx(1.72, abs=0.02)  # Qwen3-1.7B: 1.7 B (tied)


def test_memory_estimate_seed_full_scale_on_h100():
    res = resolve(SEED, "gpu-8x-h100-80g", "full")
    est = estimate_memory(res.config, res.profile)
    assert est.fits and est.shard == 16 and est.budget == pytest.approx(76 * GB)
    assert est.params == 0 and est.optimizer == 0 and est.ref == pytest.approx(31.07e9 * 2 / 16, rel=1e-3)
    assert est.total == pytest.approx(51.9 * GB, rel=0.01) and est.phase == "rollout"
    text = est.explain()
    assert "GB per device" in text and "76.0 GB budget" in text and "\n" not in text

    config = copy.deepcopy(res.config)
    config["actor_rollout_ref"]["actor"]["veomni"].update(param_offload=False, optimizer_offload=False)
    est = estimate_memory(config, res.profile)
    assert not est.fits and est.total == pytest.approx(83.0 * GB, rel=0.01)
    assert est.optimizer == pytest.approx(31.07e9 * 12 / 16, rel=1e-3)  # 12 bytes/param: AdamW m, v + fp32 master


def test_memory_preflight_refuses_the_seed_without_offload(tmp_path, capsys):
    off = {"actor_rollout_ref.actor.veomni.param_offload": False,
           "actor_rollout_ref.actor.veomni.optimizer_offload": False}
    path = write_variant(tmp_path, "seed_no_offload", off)
    code, text = run_cli(["validate", str(path), "--profile", "gpu-8x-h100-80g", "--scale", "full"], capsys)
    assert code == 1 and "memory-preflight error: needs 83.0 GB per device > 76.0 GB budget" in text
    assert "optimizer 23.3" in text and "param_offload" in text
    code, text = run_cli(["validate", SEED, "--profile", "gpu-8x-h100-80g", "--scale", "full"], capsys)
    assert code == 0 and "0 errors" in text


def test_memory_phases_and_budgets():
    ctx = ctx_of()  # cpu: budget is host memory, rollout is the policy's own KV cache
    est = estimate_memory(ctx.config, ctx.profile)
    assert est.budget == pytest.approx(0.95 * 8 * GB) and est.engine_needs == 0
    res = resolve(SEED, "gpu-8x-h100-80g", "full")
    config = copy.deepcopy(res.config)
    config["actor_rollout_ref"]["rollout"]["free_cache_engine"] = False
    kept = estimate_memory(config, res.profile)
    assert kept.train_total == pytest.approx(estimate_memory(res.config, res.profile).train_total + 48 * GB)
    config["actor_rollout_ref"]["model"]["enable_gradient_checkpointing"] = False
    assert estimate_memory(config, res.profile).activations > 10 * kept.activations
    config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] = 0.05
    found = run_rules(RuleContext(config=config, profile=res.profile, architecture=config["model"]["architecture"]),
                      only=["memory-preflight"])
    assert any("cannot hold its tensor-parallel weights" in f.message for f in found)


def test_memory_preflight_skips_without_profile_or_architecture():
    ctx = ctx_of()
    assert run_rules(RuleContext(config=ctx.config), only=["memory-preflight"]) == []
    assert run_rules(RuleContext(config={"model": {}}, profile=ctx.profile), only=["memory-preflight"]) == []


# ----------------------------------------------------------------------------- the seed's bug classes
def test_seed_bug_trust_remote_code_in_the_file(tmp_path, capsys):
    path = write_variant(tmp_path, "seed_trc", {"data.trust_remote_code": True})
    code, text = run_cli(["validate", str(path), "--profile", "cpu", "--scale", "smoke"], capsys)
    assert code == 1 and "code-loading-key error" in text and "data.trust_remote_code" in text


def test_seed_bug_trust_remote_code_through_set(capsys):
    code, text = run_cli(["validate", SEED, "--set", "data.trust_remote_code=True"], capsys)
    assert code == 2 and "code-loading-key" in text and text.count("\n") == 1


def test_seed_bug_max_model_len_1024(tmp_path, capsys):
    path = write_variant(tmp_path, "seed_len", {"actor_rollout_ref.rollout.max_model_len": 1024,
                                                "data.max_response_length": 1024})
    code, text = run_cli(["validate", str(path), "--profile", "gpu-8x-h100-80g", "--scale", "full"], capsys)
    assert code == 1 and "max-model-len-too-small" in text and "1024 + max_response_length 1024 = 2048" in text


def test_seed_bug_eight_devices_on_the_16_npu_node(tmp_path, capsys):
    path = write_variant(tmp_path, "seed_npu", {"profiles.npu-16x-ascend-a3.full.trainer.n_gpus_per_node": 8})
    code, text = run_cli(["validate", str(path), "--profile", "npu-16x-ascend-a3", "--scale", "full"], capsys)
    assert code == 1 and "devices-per-node error: trainer.n_gpus_per_node 8 != 16" in text

