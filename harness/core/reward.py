"""Rule-based rewards, selected by name.

``geo3k`` follows verl's geo3k scorer: ``0.9 * accuracy + 0.1 * format`` where format is a DOTALL
full match of ``<think>.*</think>.*\\boxed\\{.*\\}.*`` and accuracy compares the content of the LAST
``\\boxed{...}`` (brace-balanced) with the ground truth after normalisation (whitespace removed,
letters case-insensitive, numbers compared by value so "3" equals "3.0").
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

from harness.registry import Registry

FORMAT_PATTERN = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)
BOXED = "\\boxed{"
FORMAT_WEIGHT = 0.1


@dataclasses.dataclass(frozen=True)
class RewardResult:
    score: float
    acc: float
    format: float


RewardFn = Callable[[str, str], RewardResult]
_REWARDS: Registry[RewardFn] = Registry("reward", key_path="reward.name")


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator registering ``fn(response, ground_truth) -> RewardResult`` under ``name``."""
    return _REWARDS.register(name)


def reward_names() -> list[str]:
    return list(_REWARDS.names())


def get_reward(name: str) -> RewardFn:
    return _REWARDS.lookup(name)


def compute_reward(name: str, response: str, ground_truth: str) -> RewardResult:
    return get_reward(name)(response, ground_truth)


# --------------------------------------------------------------------------- pieces
def extract_last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces, or None (also when unclosed)."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    i = start + len(BOXED)
    depth = 1
    for j in range(i, len(text)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def normalize_answer(text: str) -> str:
    """Whitespace removed, lower case, surrounding ``$`` and one trailing period dropped."""
    s = "".join(text.split()).strip("$").lower()
    return s[:-1] if s.endswith(".") and len(s) > 1 else s


def answers_match(predicted: str | None, ground_truth: str) -> bool:
    if predicted is None:
        return False
    a, b = normalize_answer(predicted), normalize_answer(str(ground_truth))
    if a == b:
        return True
    x, y = _number(a), _number(b)
    return x is not None and y is not None and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def format_score(response: str) -> float:
    return 1.0 if FORMAT_PATTERN.fullmatch(response) else 0.0


def accuracy_score(response: str, ground_truth: str) -> float:
    return 1.0 if answers_match(extract_last_boxed(response), ground_truth) else 0.0


# --------------------------------------------------------------------------- registered rewards
@register_reward("geo3k")
def geo3k(response: str, ground_truth: str) -> RewardResult:
    acc, fmt = accuracy_score(response, ground_truth), format_score(response)
    return RewardResult(score=(1.0 - FORMAT_WEIGHT) * acc + FORMAT_WEIGHT * fmt, acc=acc, format=fmt)


@register_reward("format_only")
def format_only(response: str, ground_truth: str) -> RewardResult:
    acc, fmt = accuracy_score(response, ground_truth), format_score(response)
    return RewardResult(score=fmt, acc=acc, format=fmt)


@register_reward("exact_boxed")
def exact_boxed(response: str, ground_truth: str) -> RewardResult:
    acc, fmt = accuracy_score(response, ground_truth), format_score(response)
    return RewardResult(score=acc, acc=acc, format=fmt)
