"""proxy.core.body_splice: a changed body re-encoded with every value left alone kept byte for byte."""

from __future__ import annotations

import json
from typing import Any

import orjson

from proxy.core.body_splice import splice

# A body as a client writes it: its own spacing, escapes, number spelling and field order.
RAW = (
    b'{ "model" : "claude-fable-5-1",\n  "system": [{"text": "Caf\\u00e9 rules", "type": "text"}],\n'
    b'  "tools": [{"name": "w", "input_schema": {"type": "object"}, "x": 1.0}],\n'
    b'  "messages": [\n    {"role": "user", "content": "hi \\u2014 there"},\n'
    b'    {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "tp1.x"},'
    b' {"type": "thinking", "thinking": "u", "signature": "s2"}, {"type": "text", "text": "ok"}]}\n  ],\n'
    b'  "thinking": {"type": "disabled"}, "output_config": {"effort": "max", "format": null},\n'
    b'  "max_tokens": 1e3 }'
)


def parsed() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(RAW)
    return body


def test_a_body_left_alone_is_its_own_bytes() -> None:
    before = parsed()
    assert splice(RAW, before, before) is RAW


def test_a_changed_field_leaves_every_other_member_s_bytes_and_order() -> None:
    before = parsed()
    after = {k: v for k, v in before.items() if k != "thinking"}
    after["output_config"] = {"format": None}
    after["thinking"] = {"type": "adaptive"}
    out = splice(RAW, before, after)
    assert json.loads(out) == after
    text = out.decode()
    # The members kept, each as it came, in the order it came; the changed ones in their place.
    for member in (
        '"model" : "claude-fable-5-1"',
        '"system": [{"text": "Caf\\u00e9 rules", "type": "text"}]',
        '"x": 1.0',
        '"content": "hi \\u2014 there"',
        '"max_tokens": 1e3',
    ):
        assert member in text
    assert text.index('"model"') < text.index('"system"') < text.index('"tools"') < text.index('"messages"')
    assert '"thinking": {"type": "adaptive"}, "output_config": {"format": null},' in text
    # (the separators between kept members as they came, the spaces inside the braces too)
    assert text.startswith('{ "model" : ') and text.endswith('"max_tokens": 1e3 }')


def test_a_new_member_is_appended() -> None:
    before = parsed()
    after = {**before, "metadata": {"user_id": "u"}}
    out = splice(RAW, before, after).decode()
    assert out.startswith('{ "model" : "claude-fable-5-1",')
    assert out.endswith('"max_tokens": 1e3,"metadata":{"user_id":"u"} }')


def test_elements_left_out_of_an_array_leave_the_others_bytes() -> None:
    before = parsed()
    message = before["messages"][1]
    kept = [b for b in message["content"] if b.get("signature") != "tp1.x"]
    after = {**before, "messages": [before["messages"][0], {**message, "content": kept}]}
    out = splice(RAW, before, after)
    assert json.loads(out) == after
    assert b'{"type": "thinking", "thinking": "u", "signature": "s2"}, {"type": "text", "text": "ok"}' in out
    assert b'"content": "hi \\u2014 there"' in out


def test_a_key_sent_twice_is_encoded_anew() -> None:
    raw = b'{"a": 1, "a": 2, "b": [1,2]}'
    before = json.loads(raw)
    after = {**before, "b": [1]}
    out = splice(raw, before, after)
    assert out.count(b'"a"') == 1  # (the bytes: a parse would keep the last key either way)
    assert orjson.loads(out) == {"a": 2, "b": [1]}


def test_a_value_of_another_kind_is_encoded_anew() -> None:
    raw = b'{"a": [1, 2], "b": {"c": 1}}'
    before = json.loads(raw)
    after = {"a": {"x": 1}, "b": [3, 4, 5]}
    assert json.loads(splice(raw, before, after)) == after
