"""Fuzzing ``harness validate``: any file gives exit 0, 1 or 2 and one-line messages, never an exception.

Two generators: arbitrary (mostly malformed) JSON text, and random mutations of a valid recipe
(delete a key, replace a value with any JSON value, add an unknown key, nudge a number), written
to a temporary file named after the recipe so the name check does not hide everything else.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.paths import RECIPES_DIR

BASE: dict[str, Any] = json.loads((RECIPES_DIR / "qwen3_vl_30b.json").read_text(encoding="utf-8"))
PAIRS = [("cpu", "smoke"), ("gpu-8x-h100-80g", "full"), ("npu-16x-ascend-a3", "full")]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append(prefix + (key,))
            out.extend(_paths(value, prefix + (key,)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.append(prefix + (i,))
            out.extend(_paths(value, prefix + (i,)))
    return out


PATHS = [p for p in _paths(BASE) if p != ("name",)]

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**40), max_value=2**40)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def validate(text: str | bytes, name: str = "fuzz_recipe", pair: tuple[str, str] | None = None) -> tuple[int, str]:
    """Run ``harness validate`` in-process on ``text`` written to ``<name>.json``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.json"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
        argv = ["validate", str(path)] + (["--profile", pair[0], "--scale", pair[1]] if pair else [])
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    text_out = out.getvalue() + err.getvalue()
    assert code in (0, 1, 2), text_out
    assert "Traceback" not in text_out and "unexpected error" not in text_out, text_out
    for line in err.getvalue().splitlines():
        assert line.startswith("error: "), line
    return code, text_out


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    code, _ = validate(text)
    assert code == 2


@FUZZ
@given(st.binary(max_size=64))
def test_arbitrary_bytes(data):
    assert validate(data)[0] == 2


@FUZZ
@given(json_values)
def test_arbitrary_json_values(value):
    assert validate(json.dumps(value))[0] == 2  # never a recipe: schema error


def _set(doc: Any, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    doc[path[-1]] = value


def _delete(doc: Any, path: tuple) -> None:
    for part in path[:-1]:
        doc = doc[part]
    del doc[path[-1]]


def _get(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


mutation = st.one_of(
    st.tuples(st.just("replace"), st.sampled_from(PATHS), json_values),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.none()),
    st.tuples(st.just("add"), st.sampled_from(PATHS), st.text(min_size=1, max_size=8)),
    st.tuples(st.just("nudge"), st.sampled_from(PATHS), st.integers(min_value=-3, max_value=10**6)),
)


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=3), st.sampled_from(PAIRS), st.booleans())
def test_mutated_recipes(mutations, pair, use_pair):
    doc = copy.deepcopy(BASE)
    doc["name"] = "mutant"
    for op, path, arg in mutations:
        try:
            target = _get(doc, path)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced the parent
        if op == "replace":
            _set(doc, path, arg)
        elif op == "delete":
            if isinstance(path[-1], int):
                continue
            _delete(doc, path)
        elif op == "add" and isinstance(target, dict):
            target[arg] = 1
        elif op == "nudge" and isinstance(target, (int, float)) and not isinstance(target, bool):
            _set(doc, path, arg if isinstance(target, int) else arg / 7)
    validate(json.dumps(doc, indent=1), name="mutant", pair=pair if use_pair else None)


@FUZZ
@given(st.sampled_from(["data.train_batch_size", "actor_rollout_ref.rollout.n", "trainer.n_gpus_per_node",
                        "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.veomni.fsdp_size",
                        "actor_rollout_ref.rollout.tensor_model_parallel_size",
                        "actor_rollout_ref.actor.veomni.ulysses_parallel_size", "model.architecture.text.hidden_size",
                        "model.architecture.text.num_hidden_layers", "actor_rollout_ref.rollout.max_model_len"]),
       st.integers(min_value=-2, max_value=10**30), st.sampled_from(PAIRS))
def test_extreme_integers_reach_the_rules(key, value, pair):
    doc = copy.deepcopy(BASE)
    doc["name"] = "extreme"
    _set(doc, tuple(key.split(".")), value)
    validate(json.dumps(doc), name="extreme", pair=pair)


@functools.cache
def _resolved() -> list:
    from harness.config.recipe import resolve

    return [resolve("qwen3_vl_30b", p, s) for p, s in PAIRS]


@FUZZ
@given(st.lists(st.tuples(st.integers(min_value=0), json_values | st.integers()), min_size=1, max_size=4),
       st.integers(min_value=0, max_value=len(PAIRS) - 1))
def test_rules_never_raise_on_unchecked_configs(changes, which):
    """The lint tool feeds the rules configs no schema has checked: any value type must be survivable."""
    from harness.config.safety import RuleContext, run_rules

    res = _resolved()[which]
    config = copy.deepcopy(res.config)
    leaves = [p for p in _paths(config) if not isinstance(_get(config, p), (dict, list))]
    for index, value in changes:
        _set(config, leaves[index % len(leaves)], value)
    arch = config["model"]["architecture"]
    findings = run_rules(RuleContext(config=config, profile=res.profile, architecture=arch))
    assert all("\n" not in f.message for f in findings)
