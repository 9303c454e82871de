"""JSON where orjson and JSON disagree: depth, integers above 64 bits, lone surrogates."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import BadRequest
from proxy.core.jsonio import (
    MAX_DEPTH,
    deeper_than,
    dumps,
    loads,
    loads_lenient,
    may_hold_big_integer,
    parse_chat_body,
    string_insides,
)


def nest(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def chat_nested(depth: int) -> bytes:
    """A chat body whose deepest value is `depth` levels down (the body itself is level 1)."""
    return (
        orjson.dumps({"model": "m", "messages": [], "extra": nest(depth - 1)})
        if depth < 250
        else (b'{"model":"m","messages":[],"extra":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}")
    )


def test_max_depth_is_what_the_encoder_writes() -> None:
    assert orjson.dumps(nest(MAX_DEPTH))
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(nest(MAX_DEPTH + 1))


@pytest.mark.parametrize("depth", [0, 1, 2, 30, MAX_DEPTH, MAX_DEPTH + 1, 5000])
def test_deeper_than_counts_levels_without_recursion(depth: int) -> None:
    value = nest(depth)
    assert deeper_than(value, depth) is False
    assert deeper_than(value, depth - 1) is (depth > 0)


def test_chat_body_at_the_limit_is_accepted_and_can_be_written_back() -> None:
    parsed = parse_chat_body(chat_nested(MAX_DEPTH))
    assert dumps(parsed)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300, 1000, 1100, 5000])
def test_chat_body_nested_deeper_is_400(depth: int) -> None:
    with pytest.raises(BadRequest) as info:
        parse_chat_body(chat_nested(depth))
    assert info.value.status == 400
    assert info.value.code == "json_too_deep"
    assert str(MAX_DEPTH) in info.value.message


def test_brackets_inside_strings_are_not_nesting() -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "[{" * 2000}]})
    assert parse_chat_body(body)["messages"][0]["content"] == "[{" * 2000


BIG = [2**64, 2**70, -(2**63) - 1, 10**40, 18446744073709551616]


@pytest.mark.parametrize("number", BIG)
def test_integers_above_64_bits_stay_exact_through_loads_and_dumps(number: int) -> None:
    raw = b'{"model":"m","messages":[],"seed":' + str(number).encode() + b',"t":"\xc3\xa9"}'
    parsed = parse_chat_body(raw)
    assert parsed["seed"] == number and type(parsed["seed"]) is int
    assert dumps(parsed) == raw  # exact digits, UTF-8 kept as UTF-8


def test_only_bodies_with_19_digit_runs_are_read_twice() -> None:
    # -9223372036854775809, the first integer below 64 bits, has 19 digits; 18 never need it.
    assert not may_hold_big_integer(b'{"a":184467440737095516,"b":-922337203685477580}')
    assert may_hold_big_integer(b'{"a":-9223372036854775809}')
    assert loads(b'{"a":18446744073709551615}') == {"a": 2**64 - 1}


def test_long_digit_runs_in_strings_change_nothing() -> None:
    raw = b'{"phone":"12345678901234567890123","n":1.5}'
    assert loads(raw) == orjson.loads(raw)


def test_lone_surrogates_are_read_leniently_and_written_as_escapes() -> None:
    raw = b'{"content":"smile \\ud83d"}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    value = loads_lenient(raw)
    assert value == {"content": "smile \ud83d"}
    assert dumps(value) == b'{"content":"smile \\ud83d"}'
    assert loads_lenient(b"{not json") is None
    assert loads_lenient(b"[" * 5000 + b"]" * 5000) is None
    assert loads_lenient(b"[NaN]") is None


def test_dumps_raises_value_error_when_nothing_can_write() -> None:
    with pytest.raises(ValueError):
        dumps(nest(100_000))


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.one_of(
            st.integers(),
            st.text(),
            st.booleans(),
            st.none(),
            st.floats(allow_nan=False, allow_infinity=False),
        ),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_round_trip_is_exact(value: Any) -> None:
    encoded = dumps(value)
    assert json.loads(encoded) == value
    assert loads(encoded) == value


TRICKY_TEXTS = ['","', ",", '"', '",', ',"', 'a",', "\\", '\\"', "a\\", "", "\ud800", "é", "\u2028", "\x00"]


@pytest.mark.parametrize(
    "texts",
    [['a",', "b"], ['",', '"'], [",", ","], ["a\\", '",'], ['x"', ",", '"y'], ["", ",", ""]],
)
def test_strings_whose_escaped_quotes_sit_by_a_comma_are_cut_where_they_end(texts: list[str]) -> None:
    # (`a",` is written `"a\","`: a `","` that does not end the string. A CI run of the AI SDK
    # through the Responses door met it in a tool result's JSON.)
    assert string_insides(texts) == [dumps(text)[1:-1] for text in texts]


@settings(max_examples=500, deadline=None)
@given(
    texts=st.lists(
        st.text(max_size=6) | st.text('",\\a', max_size=5) | st.sampled_from(TRICKY_TEXTS), max_size=8
    )
)
def test_many_texts_json_strings_in_one_call_are_each_one_written_alone(texts: list[str]) -> None:
    # (One orjson call for a run of deltas: a "," among the texts, or a lone surrogate orjson
    # refuses, must not shift where one text's string ends.)
    assert string_insides(texts) == [dumps(text)[1:-1] for text in texts]
    assert string_insides(tuple(texts)) == string_insides(texts)
