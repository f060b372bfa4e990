"""Rule-based rewards: verl's geo3k scoring and the registry."""

from __future__ import annotations

import pytest

from harness.core import reward as rw
from harness.errors import HarnessError


@pytest.mark.parametrize(
    ("response", "truth", "score", "acc", "fmt"),
    [
        ("<think>mostly red</think>\\boxed{A}", "A", 1.0, 1.0, 1.0),  # correct + format
        ("The answer is \\boxed{A}", "A", 0.9, 1.0, 0.0),  # correct, no think block
        ("<think>hmm</think> so \\boxed{B}.", "A", 0.1, 0.0, 1.0),  # format, wrong answer
        ("I do not know", "A", 0.0, 0.0, 0.0),  # nothing
        ("", "3", 0.0, 0.0, 0.0),
        ("<think>a</think>\\boxed{3.0}", "3", 1.0, 1.0, 1.0),  # numeric equality
        ("<think>a</think>\\boxed{ c }", "C", 1.0, 1.0, 1.0),  # spaces + case
        ("<think>a</think>\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0, 1.0, 1.0),  # nested braces
        ("<think>a</think>\\boxed{A} then \\boxed{B}", "B", 1.0, 1.0, 1.0),  # last boxed wins
        ("<think>a</think>\\boxed{A} then \\boxed{B}", "A", 0.1, 0.0, 1.0),
        (" <think>a</think>\\boxed{A}", "A", 0.9, 1.0, 0.0),  # full match: no leading text
        ("<think>a</think>", "A", 0.0, 0.0, 0.0),
        ("<think>a</think>\\boxed{A", "A", 0.0, 0.0, 0.0),  # unclosed box
        ("<think>multi\nline</think>\n\\boxed{7}\n", "7", 1.0, 1.0, 1.0),  # DOTALL
    ],
)
def test_geo3k_hand_cases(response, truth, score, acc, fmt):
    r = rw.compute_reward("geo3k", response, truth)
    assert r.score == pytest.approx(score)
    assert (r.acc, r.format) == (acc, fmt)


def test_other_registered_rewards():
    good_format_wrong = "<think>x</think>\\boxed{B}"
    assert rw.compute_reward("format_only", good_format_wrong, "A").score == 1.0
    assert rw.compute_reward("exact_boxed", good_format_wrong, "A").score == 0.0
    assert rw.compute_reward("exact_boxed", "\\boxed{A}", "A").score == 1.0
    assert rw.compute_reward("format_only", "\\boxed{A}", "A") == rw.RewardResult(0.0, 1.0, 0.0)


def test_extract_last_boxed():
    assert rw.extract_last_boxed("\\boxed{a{b}c} x \\boxed{{d}}") == "{d}"
    assert rw.extract_last_boxed("no box") is None
    assert rw.extract_last_boxed("\\boxed{}") == ""


def test_numbers_and_letters_normalisation():
    assert rw.answers_match("1,000", "1000")
    assert rw.answers_match("$12$", "12.00")
    assert not rw.answers_match("12", "13")
    assert not rw.answers_match("A", "B")
    assert not rw.answers_match(None, "A")


def test_registry_errors():
    with pytest.raises(ValueError, match="already registered"):
        rw.register_reward("geo3k")(lambda r, g: rw.RewardResult(0.0, 0.0, 0.0))
    with pytest.raises(HarnessError, match="exact_boxed, format_only, geo3k"):
        rw.get_reward("nope")
    assert {"geo3k", "format_only", "exact_boxed"} <= set(rw.reward_names())


def test_result_is_frozen():
    r = rw.RewardResult(1.0, 1.0, 1.0)
    with pytest.raises(AttributeError):
        r.score = 0.0  # type: ignore[misc]
