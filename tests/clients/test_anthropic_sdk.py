"""The Anthropic Python SDK as a real client of a real `thinkproxy serve` in front of the simulated
DeepSeek: a stream with thinking, a non-stream message, `thinking: disabled`, and a tool loop with
the state store off, whose second turn works only because the proxy-signed thinking block carried
DeepSeek's reasoning back (the simulated DeepSeek refuses a tool-call turn without it)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.clients.conftest import API_KEY, MODEL, Proxy, Upstream, assert_reasoning_replayed, require_module

pytestmark = pytest.mark.spawns

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(autouse=True)
def _anthropic_installed() -> None:
    require_module("anthropic")


def client(proxy: Proxy) -> Any:
    import anthropic

    # The SDK adds /v1/messages itself: the base URL is the proxy's origin.
    return anthropic.Anthropic(base_url=proxy.url, api_key=API_KEY, max_retries=0, timeout=60)


def test_a_stream_with_thinking(proxy_state_off: Proxy, upstream: Upstream) -> None:
    with client(proxy_state_off).messages.stream(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 2048},
        messages=[{"role": "user", "content": "Why is the sky blue?"}],
    ) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text and [b.type for b in message.content] == ["thinking", "text"]
    thinking = message.content[0]
    assert thinking.thinking and thinking.signature.startswith("tp1.")
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    (sent,) = upstream.chat_requests()
    assert sent["thinking"] == {"type": "enabled"} and sent["stream"] is True


def test_non_stream(proxy_state_off: Proxy, upstream: Upstream) -> None:
    message = client(proxy_state_off).messages.create(
        model=MODEL,
        max_tokens=1024,
        system="Be brief.",
        messages=[{"role": "user", "content": "Hello"}],
        thinking={"type": "adaptive"},
        output_config={"effort": "high"},
    )
    assert message.type == "message" and message.id.startswith("msg_")
    assert [b.type for b in message.content] == ["thinking", "text"]
    (sent,) = upstream.chat_requests()
    assert sent["reasoning_effort"] == "max"  # adaptive with effort high: the deep level


def test_thinking_disabled(proxy_state_off: Proxy, upstream: Upstream) -> None:
    message = client(proxy_state_off).messages.create(
        model=MODEL,
        max_tokens=256,
        messages=[{"role": "user", "content": "Hi"}],
        thinking={"type": "disabled"},
    )
    assert [b.type for b in message.content] == ["text"]
    (sent,) = upstream.chat_requests()
    assert sent["thinking"] == {"type": "disabled"}


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_loop_keeps_deepseeks_reasoning_through_the_signature(
    proxy_state_off: Proxy, upstream: Upstream, stream: bool
) -> None:
    sdk = client(proxy_state_off)
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 2048,
        "tools": [WEATHER],
        "thinking": {"type": "adaptive", "display": "omitted"},  # as Claude Code asks
    }
    history: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]

    def turn() -> Any:
        if not stream:
            return sdk.messages.create(messages=history, **kwargs)
        with sdk.messages.stream(messages=history, **kwargs) as events:
            return events.get_final_message()

    first = turn()
    assert first.stop_reason == "tool_use"
    thinking = next(b for b in first.content if b.type == "thinking")
    assert thinking.thinking == "" and thinking.signature.startswith("tp1.")  # display: omitted
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.input.get("city")
    history += [
        first.to_param(),
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}],
        },
    ]
    second = turn()
    assert second.stop_reason == "end_turn" and any(b.type == "text" and b.text for b in second.content)
    assert_reasoning_replayed(upstream.chat_requests(), upstream.describe)
