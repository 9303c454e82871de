"""The Messages request mapping: fields, levels, tools and tool_choice, headers, the estimate."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.controls import Level
from proxy.core.errors import BadRequest
from proxy.core.protocols.messages.request import DEEP_BUDGET, bridge_messages, chat_headers, estimate_tokens

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
USER = [{"role": "user", "content": "Hi"}]


def bridge(**fields: Any) -> Any:
    return bridge_messages({"model": "m", "max_tokens": 100, "messages": USER, **fields})


def test_fields_map_to_chat() -> None:
    out = bridge(
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        stop_sequences=["END"],
        temperature=0.2,
        top_p=0.9,
        top_k=5,
        metadata={"user_id": "u-1"},
        stream=True,
    )
    assert out.body == {
        "model": "m",
        "temperature": 0.2,
        "top_p": 0.9,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 100,
        "stop": ["END"],
        "user": "u-1",
    }
    assert out.dropped == ("top_k",) and out.level is None and out.show_thinking


@pytest.mark.parametrize(
    ("thinking", "output_config", "level"),
    [
        (None, None, None),
        ({"type": "disabled"}, None, Level.OFF),
        ({"type": "enabled", "budget_tokens": 1024}, None, Level.STANDARD),
        ({"type": "enabled", "budget_tokens": DEEP_BUDGET - 1}, None, Level.STANDARD),
        ({"type": "enabled", "budget_tokens": DEEP_BUDGET}, None, Level.DEEP),
        ({"type": "enabled", "budget_tokens": 31999}, None, Level.DEEP),
        ({"type": "adaptive"}, None, Level.STANDARD),
        ({"type": "adaptive"}, {"effort": "low"}, Level.STANDARD),
        ({"type": "adaptive"}, {"effort": "medium"}, Level.STANDARD),
        ({"type": "adaptive"}, {"effort": "high"}, Level.DEEP),
        ({"type": "adaptive"}, {"effort": "xhigh"}, Level.DEEP),
        ({"type": "adaptive", "display": "omitted"}, {"effort": "max"}, Level.DEEP),
        # (thinking between tool calls: on, its depth by the effort, as adaptive)
        ({"type": "between_tools"}, None, Level.STANDARD),
        ({"type": "between_tools"}, {"effort": "low"}, Level.STANDARD),
        ({"type": "between_tools"}, {"effort": "high"}, Level.DEEP),
        (None, {"effort": "max"}, None),  # (effort alone: no thinking field, no level)
    ],
)
def test_thinking_picks_the_level(thinking: Any, output_config: Any, level: Level | None) -> None:
    assert bridge(thinking=thinking, output_config=output_config).level is level


def test_display_omitted_hides_the_thinking_text() -> None:
    assert bridge(thinking={"type": "adaptive", "display": "omitted"}).show_thinking is False


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"thinking": {"type": "sometimes"}}, "thinking.type"),
        ({"thinking": {"type": "enabled", "budget_tokens": "lots"}}, "thinking.budget_tokens"),
        ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER]}, "tool_choice.name"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
        ({"tools": [{"description": "no name"}]}, "tools[0].name"),
        ({"stream": "yes"}, "stream"),
    ],
)
def test_bad_fields_are_refused_naming_them(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        bridge(**fields)
    assert caught.value.param == param


def test_tools_become_functions_and_server_tools_are_omitted() -> None:
    out = bridge(
        tools=[
            WEATHER,
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"type": "bash_20250124", "name": "bash"},
            {"type": "custom", "name": "noop", "input_schema": {"type": "object"}},
        ]
    )
    assert out.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER["input_schema"],
                "description": WEATHER["description"],
            },
        },
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
    ]
    assert out.omitted_tools == ("web_search_20250305", "bash_20250124")


def test_deferred_tools_reach_the_upstream_once_a_tool_reference_loads_them() -> None:
    """`defer_loading: true` keeps a tool out of the model's context until a `tool_reference` block
    (what a client-side tool search such as Claude Code's ToolSearch returns) names it; Claude Code
    also sends a DeferredToolPlaceholder that must never be called."""
    search = {"name": "ToolSearch", "input_schema": {"type": "object"}}
    placeholder = {
        "name": "DeferredToolPlaceholder",
        "description": "never call this tool",
        "input_schema": {"type": "object", "properties": {}},
        "defer_loading": True,
    }
    grep = {"name": "Grep", "input_schema": {"type": "object"}, "defer_loading": True}
    tools = [search, placeholder, {**WEATHER, "defer_loading": True}, grep]

    first = bridge(tools=tools)
    assert [t["function"]["name"] for t in first.body["tools"]] == ["ToolSearch"]
    assert "tools deferred and not loaded: DeferredToolPlaceholder, get_weather, Grep" in first.dropped

    history = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "ToolSearch", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": [{"type": "tool_reference", "tool_name": "get_weather"}],
                }
            ],
        },
    ]
    loaded = bridge(tools=tools, messages=history)
    assert [t["function"]["name"] for t in loaded.body["tools"]] == ["ToolSearch", "get_weather"]
    assert "defer_loading" not in str(loaded.body["tools"])
    assert loaded.body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Tool loaded: get_weather",
    }


def test_server_tools_can_be_refused() -> None:
    with pytest.raises(BadRequest, match="web_search_20250305"):
        bridge_messages(
            {
                "model": "m",
                "messages": USER,
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            server_tools="refuse",
        )


@pytest.mark.parametrize(
    ("choice", "chat_choice", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        (
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
            None,
        ),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
        ({"type": "any", "disable_parallel_tool_use": False}, "required", None),
    ],
)
def test_tool_choice(choice: dict[str, Any], chat_choice: Any, parallel: bool | None) -> None:
    body = bridge(tools=[WEATHER], tool_choice=choice).body
    assert body["tool_choice"] == chat_choice
    assert body.get("parallel_tool_calls") is parallel


def test_tool_choice_without_tools_is_dropped() -> None:
    out = bridge(tool_choice={"type": "auto"}, tools=[{"type": "bash_20250124", "name": "bash"}])
    assert "tool_choice" not in out.body and "tools" not in out.body
    assert "tool_choice (no tools)" in out.dropped


def test_output_format_becomes_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    out = bridge(output_config={"format": {"type": "json_schema", "schema": schema}})
    assert out.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }


def test_unknown_fields_are_dropped_and_listed() -> None:
    out = bridge(service_tier="auto", container="c1", metadata={"user_id": "u", "other": 1})
    assert set(out.dropped) == {"service_tier", "container", "metadata.other"}


def test_chat_headers_send_the_anthropic_key_as_a_bearer_and_drop_anthropic_headers() -> None:
    headers = [
        ("x-api-key", "sk-1"),
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "x"),
        ("accept", "*/*"),
    ]
    assert chat_headers(headers) == [("authorization", "Bearer sk-1"), ("accept", "*/*")]
    both = [("authorization", "Bearer sk-2"), ("x-api-key", "sk-1")]
    assert chat_headers(both) == [("authorization", "Bearer sk-2")]


def test_the_estimate_grows_with_the_request() -> None:
    short = estimate_tokens(bridge().body)
    longer = estimate_tokens(bridge(messages=[{"role": "user", "content": "word " * 400}]).body)
    assert 0 < short < 20 and 450 < longer < 600
    assert estimate_tokens(bridge(tools=[WEATHER]).body) > short


@pytest.mark.parametrize(
    ("thinking", "budget"),
    [
        ({"type": "enabled", "budget_tokens": 5000}, 5000),
        ({"type": "enabled", "budget_tokens": DEEP_BUDGET}, DEEP_BUDGET),
        ({"type": "enabled"}, None),
        ({"type": "adaptive"}, None),
        ({"type": "disabled", "budget_tokens": 5000}, None),  # (off takes no budget)
        (None, None),
    ],
)
def test_a_numeric_budget_rides_beside_the_level(thinking: Any, budget: int | None) -> None:
    fields = {} if thinking is None else {"thinking": thinking}
    assert bridge(**fields).budget_tokens == budget
