"""Recipe keys <-> verl keys, and the verl override list a resolved recipe stands for.

A recipe's training sections use verl's key names, so most keys map to themselves. The
exceptions: the engine block ``actor_rollout_ref.actor.veomni.*`` is verl's ``veomni.*`` under
``model_engine=veomni`` and ``fsdp_config.*`` (or ``actor.ulysses_sequence_parallel_size``) under
the FSDP engine; ``actor_rollout_ref.ref.param_offload`` lives in the ref's engine block;
``actor_rollout_ref.model.override_config.*`` is added with ``+`` (verl's default is ``{}``);
``model.name`` is ``actor_rollout_ref.model.path``. Harness-only fields (``model.architecture``,
``data.synthetic``, ``data.dataset``, ``reward``, ``warm_start``, ...) have no verl key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harness.config.safety.code_loading import is_code_loading_key, is_enabled
from harness.errors import LINE_BREAKING, HarnessError
from harness.verl.overrides import format_value, known_key

SECTIONS = ("data", "algorithm", "actor_rollout_ref", "trainer", "custom_reward_function")
ENGINE_BLOCK = "actor_rollout_ref.actor.veomni"
MODEL_PATH = "actor_rollout_ref.model.path"
DATA_FILES = {"data.train_files": "train", "data.val_files": "test"}
APPEND_PREFIXES = ("actor_rollout_ref.model.override_config.",)
SPECIAL: dict[str, dict[str, str]] = {
    f"{ENGINE_BLOCK}.param_offload": {"dp": "actor_rollout_ref.actor.fsdp_config.param_offload"},
    f"{ENGINE_BLOCK}.optimizer_offload": {"dp": "actor_rollout_ref.actor.fsdp_config.optimizer_offload"},
    f"{ENGINE_BLOCK}.fsdp_size": {"dp": "actor_rollout_ref.actor.fsdp_config.fsdp_size"},
    f"{ENGINE_BLOCK}.ulysses_parallel_size": {"dp": "actor_rollout_ref.actor.ulysses_sequence_parallel_size"},
    "actor_rollout_ref.ref.param_offload": {"dp": "actor_rollout_ref.ref.fsdp_config.param_offload",
                                            "veomni": "actor_rollout_ref.ref.veomni.param_offload"},
}
# Recipe fields never filled from verl's defaults (verl's point at files or a model that are not here).
NO_VERL_DEFAULT = ("data.train_files", "data.val_files")
# What would end or break a line of the exported launcher: control characters, and the line / paragraph separators
# some editors break lines at.


def recipe_leaves(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf; lists, nulls and empty objects are leaves."""
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from recipe_leaves(value, path)
        else:
            yield path, value


def engine_of(strategy: Any) -> str:
    return "veomni" if strategy == "veomni" else "dp"


def verl_key(recipe_key: str, engine: str) -> tuple[str, str] | None:
    """(verl key, Hydra prefix) for a recipe key under ``engine``; None when verl has no such key."""
    if recipe_key == "model.name":
        return MODEL_PATH, ""
    if recipe_key in SPECIAL:
        key = SPECIAL[recipe_key].get(engine, recipe_key if engine == "veomni" else "")
        return (key, "") if key and known_key(key, engine) else None
    if not recipe_key.startswith(tuple(s + "." for s in SECTIONS)):
        return None
    if recipe_key.startswith(APPEND_PREFIXES):
        return recipe_key, "+"
    return (recipe_key, "") if known_key(recipe_key, engine) else None


def mapped_keys(recipe: dict[str, Any], engine: str) -> dict[str, tuple[str, str]]:
    """recipe key -> (verl key, prefix) for every leaf of ``recipe`` verl has a key for."""
    out: dict[str, tuple[str, str]] = {"model.name": (MODEL_PATH, "")}
    for section in SECTIONS:
        for key, _ in recipe_leaves(recipe.get(section) or {}, section):
            found = verl_key(key, engine)
            if found is not None:
                out[key] = found
    return out


def dataset_default(dataset: str, split: str) -> str:
    """Where verl's data preprocessing scripts put a dataset's parquet files."""
    return f"$HOME/data/{dataset}/{split}.parquet"


def export_overrides(config: dict[str, Any]) -> list[tuple[str, Any]]:
    """(``[+]verl.key``, value) pairs a verl launcher needs to run ``config`` (a resolved recipe).

    Code-loading keys are never written (verl's defaults keep them off); a config that turns one on
    is refused. A null data file becomes the conventional ``$HOME/data/<dataset>/<split>.parquet``.
    """
    from harness.config.recipe import get_dotted

    on = [k for k, v in recipe_leaves(config) if is_code_loading_key(k) and is_enabled(v)]
    if on:
        raise HarnessError(f"the recipe turns on code-loading key(s) {', '.join(on)}", key_path=on[0],
                           fix="an exported launcher never carries code-loading keys; turn them off in the recipe")
    engine = engine_of(get_dotted(config, "actor_rollout_ref.actor.strategy"))
    out: list[tuple[str, Any]] = []
    if engine == "veomni":
        out.append(("model_engine", "veomni"))
    for rkey, (vkey, prefix) in mapped_keys(config, engine).items():
        if is_code_loading_key(vkey):
            continue
        value = get_dotted(config, rkey)
        _one_line(rkey, value)
        if rkey == "model.name":
            value = config["model"].get("path") or value
        elif rkey in DATA_FILES and value is None:
            value = dataset_default(config["data"]["dataset"], DATA_FILES[rkey])
        out.append((prefix + vkey, value))
    return out


def _one_line(key: str, value: Any) -> None:
    """Refuse a value holding a control character: an override (a Hydra value on a launcher line) never carries one,
    so no value can start a line of its own."""
    stack = [value]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            stack.extend([*cur.keys(), *cur.values()])
        elif isinstance(cur, list):
            stack.extend(cur)
        elif isinstance(cur, str) and (m := LINE_BREAKING.search(cur)):
            raise HarnessError(f"the value holds a control character (U+{ord(m.group()):04X}): an exported override is "
                               "one line", key_path=key, fix="remove it from the recipe")


def comment_text(text: str) -> str:
    """``text`` for a ``#`` comment line: a control character (or line separator) becomes its escape (``\\n``), so
    the comment stays one line whatever the text holds."""
    return LINE_BREAKING.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def override_lines(pairs: list[tuple[str, Any]]) -> list[str]:
    return [f"{key}={format_value(value)}" for key, value in pairs]


def _shell_word(text: str) -> str:
    """Quote ``text`` for bash; ``$HOME`` at the start stays expandable."""
    if text.replace("_", "").replace(".", "").replace("=", "").replace("-", "").replace("/", "").isalnum():
        return text
    return "'" + text.replace("'", "'\\''") + "'"


# verl's FileLogger: one {"step": N, "data": {metric: value}} line per step, to $VERL_FILE_LOGGER_PATH
FILE_LOGGER = ("trainer.logger", ["console", "file"])


def with_file_logger(pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``pairs`` with verl's console and file loggers on (the file is the log ``harness compare --log`` judges)."""
    return [p for p in pairs if p[0].lstrip("+") != FILE_LOGGER[0]] + [FILE_LOGGER]


def default_log_path(name: str, profile: str, scale: str) -> str:
    return f"$PWD/verl-{name}-{profile}-{scale}.jsonl"


def launcher_script(name: str, source: str, profile: str, scale: str, pairs: list[tuple[str, Any]],
                    log_path: str | None = None) -> str:
    """A complete bash launcher for verl: ``set -euo pipefail``, every override listed, no pass-through; with
    ``log_path`` it exports ``VERL_FILE_LOGGER_PATH`` (default ``log_path``) for verl's file logger. Text from
    the recipe is one line each: comments are escaped (:func:`comment_text`), a value with a control character
    is refused."""
    for key, value in pairs:
        _one_line(key, value)
    lines = [
        "#!/usr/bin/env bash",
        comment_text(f"# verl launcher for recipe {name} (profile {profile}, scale {scale}), written by "
                     "`harness export-verl`."),
        f"# source launcher: {comment_text(source)}",
        "# Every override is listed; the script takes no arguments and loads no code.",
        "set -euo pipefail",
        "",
    ]
    if log_path is not None:
        lines += [
            "# verl's file logger writes one JSON line per step here; judge the run with",
            f"#   harness compare --log verl:\"$VERL_FILE_LOGGER_PATH\" --recipe {name} --profile {profile} "
            f"--scale {scale} --out DIR",
            f'VERL_FILE_LOGGER_PATH="${{VERL_FILE_LOGGER_PATH:-{_dq_keep_vars(log_path)}}}"',
            "export VERL_FILE_LOGGER_PATH",
            "",
        ]
    body: list[str] = []
    for key, value in pairs:
        text = format_value(value)
        if key in DATA_FILES and isinstance(value, str) and value.startswith("$HOME/"):
            var = DATA_FILES[key].upper() + "_FILES"
            lines.append(f'{var}="${{{var}:-$HOME/{_dq(value[len("$HOME/"):])}}}"')
            body.append(f'{key}="${var}"')
            continue
        body.append(_shell_word(f"{key}={text}"))
    if lines[-1] != "":
        lines.append("")
    lines.append("python3 -m verl.trainer.main_ppo \\")
    lines.extend(f"    {word} \\" for word in body[:-1])
    if body:
        lines.append(f"    {body[-1]}")
    return "\n".join(lines) + "\n"


def _dq(text: str) -> str:
    return "".join("\\" + ch if ch in '"$`\\' else ch for ch in text)


def _dq_keep_vars(text: str) -> str:
    """``text`` inside double quotes, a leading ``$PWD`` / ``$HOME`` left to expand."""
    for var in ("$PWD/", "$HOME/"):
        if text.startswith(var):
            return var + _dq(text[len(var):])
    return _dq(text)
