"""What the simulated model says: deterministic scripts and plausible tool arguments."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.mock.scenarios import Depth, answer, arguments_for, quote_of


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"messages": list(messages), **extra}


def test_quote_keeps_the_first_words() -> None:
    assert quote_of("  one two\n three  ") == "one two three"
    assert quote_of("a b c d e f g h i j") == "a b c d e f g h…"


def test_plain_answer_is_deterministic_and_depth_shapes_reasoning() -> None:
    request = body({"role": "user", "content": [{"type": "text", "text": "Why is the sky blue?"}]})
    none, standard, deep = (answer(request, d) for d in Depth)
    assert none.reasoning == "" and standard.reasoning and len(deep.reasoning) > 2 * len(standard.reasoning)
    assert none.content == standard.content == deep.content
    assert '"Why is the sky blue?"' in standard.content
    assert answer(request, Depth.STANDARD) == standard
    assert standard.finish_reason == "stop"


def test_no_user_text_still_answers() -> None:
    script = answer(body({"role": "system", "content": "secret instruction"}), Depth.STANDARD)
    assert script.content and "secret" not in script.content + script.reasoning


def test_only_the_last_user_message_is_quoted() -> None:
    script = answer(
        body(
            {"role": "system", "content": "hidden system words"},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
        ),
        Depth.STANDARD,
    )
    assert "second question" in script.content
    assert "first question" not in script.content and "hidden" not in script.content + script.reasoning


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (
            {
                "type": "object",
                "properties": {"searchQuery": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["searchQuery"],
            },
            {"searchQuery": "find cheap flights"},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                    "days": {"type": "integer", "minimum": 2},
                    "detailed": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "when": {"type": ["string", "null"], "format": "date"},
                },
                "required": ["location", "units", "days", "detailed", "tags"],
            },
            {
                "location": "Paris",
                "units": "metric",
                "days": 2,
                "detailed": True,
                "tags": ["find cheap flights"],
            },
        ),
        (
            {"type": "object", "properties": {"file_path": {"type": "string"}, "mode": {"default": "r"}}},
            {"file_path": "README.md"},
        ),
        ({"type": "object", "properties": {}}, {}),
        (None, {}),
        (
            {
                "type": "object",
                "properties": {
                    "filter": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
                },
                "required": ["filter"],
            },
            {"filter": {"q": "find cheap flights"}},
        ),
    ],
)
def test_arguments_follow_the_schema(schema: Any, expected: dict[str, Any]) -> None:
    assert arguments_for(schema, "find cheap flights") == expected


def test_tool_call_then_result() -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    first = answer(body({"role": "user", "content": "look it up"}, tools=[tool]), Depth.STANDARD)
    assert first.finish_reason == "tool_calls" and first.content == ""
    (call,) = first.tool_calls
    assert call.name == "lookup" and call.id.startswith("call_") and orjson.loads(call.arguments) == {}
    assert "lookup" in first.reasoning

    followed = body(
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call.id, "function": {"name": "lookup"}}],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "forty-two"},
        tools=[tool],
    )
    final = answer(followed, Depth.NONE)
    assert final.reasoning == "" and final.tool_calls == ()
    assert 'The lookup tool returned: "forty-two".' in final.content


def test_forced_tool_choice_picks_the_named_tool() -> None:
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {}}},
        {"type": "function", "function": {"name": "b", "parameters": {}}},
    ]
    forced = {"type": "function", "function": {"name": "b"}}
    script = answer(body({"role": "user", "content": "x and y"}, tools=tools, tool_choice=forced), Depth.NONE)
    assert [c.name for c in script.tool_calls] == ["b"]


def test_parallel_calls_can_be_switched_off() -> None:
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {}}},
        {"type": "function", "function": {"name": "b", "parameters": {}}},
    ]
    request = body({"role": "user", "content": "x and y"}, tools=tools)
    assert len(answer(request, Depth.NONE).tool_calls) == 2
    assert len(answer({**request, "parallel_tool_calls": False}, Depth.NONE).tool_calls) == 1
