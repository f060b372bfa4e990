"""verl keys that make the trainer import or execute user code.

A recipe may only turn these on with ``security.allow_code_loading: true`` and a pinned
``model.revision``; overrides can never turn them on (rule ``code-loading-key``).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

CODE_LOADING_PATTERNS: tuple[str, ...] = (
    "*trust_remote_code",
    "actor_rollout_ref.model.external_lib",
    "data.custom_cls.path",
    "custom_reward_function.path",
    "reward.custom_reward_function.path",
    "reward.reward_manager.module.path",
    "trainer.v1.sampler.custom_sampler.path",
    "actor_rollout_ref.rollout.multi_turn.function_tool_path",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path",
    "*agent_loop_config_path",
    "*custom_async_server.path",
)


def is_code_loading_key(dotted: str) -> bool:
    """True when ``dotted`` (a verl key, ``+``/``++`` prefixes stripped) loads code."""
    key = dotted.lstrip("+~")
    return any(fnmatchcase(key, pat) for pat in CODE_LOADING_PATTERNS)


def is_enabled(value: object) -> bool:
    """A code-loading key is on when it is true or a non-empty path."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "null", "none", "false", "~")
    return bool(value)
