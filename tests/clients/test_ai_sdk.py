"""The AI SDK (`ai` + `@ai-sdk/openai`, pinned in tests/clients/node): `streamText` with
`openai(model)`, the Responses API, through the proxy to the simulated DeepSeek.

The SDK counts only `o*` / `gpt-5*` ids as reasoning models and reads reasoning only from
`response.reasoning_summary_*` events, so a DeepSeek model is asked for with `forceReasoning` and
`reasoningSummary` (what a user of this proxy would set)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.clients.conftest import API_KEY, MODEL, Proxy, Upstream, assert_reasoning_replayed, run_node

pytestmark = pytest.mark.spawns

REASONING = {"forceReasoning": True, "reasoningSummary": "auto"}


def stream_text(node: str, proxy: Proxy, *, tool: bool, prompt: str, **options: Any) -> dict[str, Any]:
    env = {
        "AI_BASE_URL": proxy.base,
        "AI_API_KEY": API_KEY,
        "AI_MODEL": MODEL,
        "AI_PROMPT": prompt,
        "AI_TOOL": "on" if tool else "off",
        "AI_PROVIDER_OPTIONS": json.dumps({**REASONING, **options}),
    }
    done = run_node(node, "ai_sdk_stream.mjs", env)
    assert done.returncode == 0, (
        f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    )
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def test_stream_text_yields_reasoning_then_text(node: str, proxy: Proxy, upstream: Upstream) -> None:
    summary = stream_text(node, proxy, tool=False, prompt="Why is the sky blue?")

    assert summary["errors"] == []
    assert summary["reasoning"].strip(), summary
    assert "Why is the sky blue?" in summary["text"], summary
    parts = summary["parts"]
    assert parts.index("reasoning-delta") < parts.index("text-delta"), parts
    assert summary["finishReason"] == "stop"
    assert summary["usage"]["outputTokens"] > 0
    assert summary["usage"]["outputTokenDetails"]["reasoningTokens"] > 0, summary["usage"]
    (chat,) = upstream.chat_requests()
    assert chat["stream"] is True


def test_stream_text_tool_loop_by_item_reference(node: str, proxy: Proxy, upstream: Upstream) -> None:
    """The SDK's default (`store` unset, so true): the second step sends the reasoning back as an
    `item_reference` to its id, which only the proxy's state store can resolve."""
    summary = stream_text(node, proxy, tool=True, prompt="What is the weather in Paris?")

    assert summary["errors"] == []
    assert summary["toolCalls"] == [
        {"id": summary["toolCalls"][0]["id"], "name": "get_weather", "input": {"city": "Paris"}}
    ]
    assert len(summary["toolResults"]) == 1
    assert summary["steps"] == 2 and summary["finishReason"] == "stop"
    assert "get_weather tool returned" in summary["text"] and "sunny" in summary["text"], summary
    assert summary["reasoning"].strip()
    assert_reasoning_replayed(upstream.chat_requests(), upstream.describe)


def test_stream_text_tool_loop_store_false_with_state_off(
    node: str, proxy_state_off: Proxy, upstream: Upstream
) -> None:
    """`store: false`: the SDK asks `include: ["reasoning.encrypted_content"]` itself and echoes the
    reasoning item with its `encrypted_content` (and an emptied summary): the sealed blob alone
    carries DeepSeek's reasoning back."""
    summary = stream_text(
        node, proxy_state_off, tool=True, prompt="What is the weather in Paris?", store=False
    )

    assert summary["errors"] == []
    assert [call["name"] for call in summary["toolCalls"]] == ["get_weather"]
    assert summary["steps"] == 2 and summary["finishReason"] == "stop"
    assert "get_weather tool returned" in summary["text"], summary
    assert_reasoning_replayed(upstream.chat_requests(), upstream.describe)
