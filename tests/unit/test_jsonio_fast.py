"""The strict JSON reader's fast path (``json.loads`` with hooks) and its strict parser agree.

Every text is read both ways: the fast path must return exactly the strict parser's value (same types, same key
order) or decline, and whatever it declines must be what the strict parser refuses or accepts with the same value.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.jsonio import _fast_loads, _NotStrict, _strict_loads, loads_strict

LIMITS = dict(max_object_keys=8, max_values=10_000)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=10),
    max_leaves=40)


def both(text: str) -> tuple[Any, Any]:
    """(("value", fast value) or ("declined",), ("value", strict value) or ("error", its one line))."""
    try:
        fast: Any = ("value", _fast_loads(text, LIMITS["max_object_keys"]))
    except _NotStrict:
        fast = ("declined",)
    try:
        strict: Any = ("value", _strict_loads(text, "t.json", LIMITS["max_object_keys"], LIMITS["max_values"]))
    except HarnessError as err:
        strict = ("error", err.one_line())
    return fast, strict


def typed(value: Any) -> Any:
    """The value with every scalar's type kept (``1`` and ``1.0`` and ``True`` differ) and key order kept."""
    if isinstance(value, dict):
        return ["dict", [(k, typed(v)) for k, v in value.items()]]
    if isinstance(value, list):
        return ["list", [typed(v) for v in value]]
    return [type(value).__name__, value]


def assert_agree(text: str) -> None:
    fast, strict = both(text)
    if fast[0] == "value":  # what the fast path accepts, the strict parser accepts with the same value
        assert strict[0] == "value" and typed(fast[1]) == typed(strict[1]), (text, strict)
    # and the public reader gives the strict parser's value or its error
    try:
        public: Any = ("value", loads_strict(text, "t.json", **LIMITS))
    except HarnessError as err:
        public = ("error", err.one_line())
    assert public[0] == strict[0] and (public[1] == strict[1] if public[0] == "error"
                                       else typed(public[1]) == typed(strict[1]))


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from([None, 0, 2]))
def test_documents_read_the_same_both_ways(value: Any, indent: int | None) -> None:
    assert_agree(json.dumps(value, indent=indent))


@settings(max_examples=400, deadline=None)
@given(json_values, st.data())
def test_mutated_documents_read_the_same_both_ways(value: Any, data: st.DataObject) -> None:
    text = json.dumps(value)
    pos = data.draw(st.integers(0, len(text)))
    piece = data.draw(st.sampled_from(['"', ",", "}", "]", "{", "[", ":", "NaN", "-Infinity", "1e999", "\x01",
                                       '"a":1,"a":2', " ", "", "01", "tru", "\ufeff"]))
    cut = data.draw(st.integers(0, 3))
    assert_agree(text[:pos] + piece + text[pos + cut:])


@pytest.mark.parametrize("text,declined", [
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ('{"x": [1, NaN]}', "NaN is not valid JSON"),
    ('{"x": 1e999}', "overflows to infinity"),
    ('{"x": -Infinity}', "-Infinity is not valid JSON"),
    ('{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9}', "more than 8 keys"),
    ("[" * 100_000 + "]" * 100_000, "nesting too deep"),
    ('{"x": 1} 2', "extra data"),
])
def test_what_the_fast_path_declines_the_strict_parser_names(text: str, declined: str) -> None:
    fast, strict = both(text)
    assert fast == ("declined",) and strict[0] == "error" and declined in strict[1]
    with pytest.raises(HarnessError, match=declined.replace("(", r"\(").replace("[", r"\[")):
        loads_strict(text, "t.json", **LIMITS)


def test_a_text_that_could_hold_more_values_than_the_limit_takes_the_strict_parser() -> None:
    text = "[" + ",".join("0" * 10_001) + "]"  # 10,001 values over the limit of 10,000
    assert len(text) >= 2 * LIMITS["max_values"]
    with pytest.raises(HarnessError, match="more than 10,000 keys and array items"):
        loads_strict(text, "t.json", **LIMITS)
