"""gpt-oss on a llama.cpp server that leaves harmony raw in content (`reasoning_format: none`), end to
end over real sockets: the openai SDK → proxy → simulated llama.cpp. The client gets the analysis
as reasoning, only the answer as content, the function call as a tool call, streamed or not, and
its next turn is one the server's gpt-oss template accepts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.core.stream.harmony import MARKERS
from proxy.mock import MockOptions, create_mock_app
from proxy.mock.dialects.local import GPT_OSS
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
RAW = {"reasoning_format": "none"}  # (llama.cpp reads it per request)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[BackgroundServer, BackgroundServer]]:
    # Small chunks: every harmony marker arrives cut across several of them.
    with BackgroundServer(create_mock_app(MockOptions(chunk_chars=3))) as mock:
        settings = make_settings(upstream_base_url=f"{mock.url}/local/v1", trace="brief")
        with BackgroundServer(create_app(settings)) as proxy:
            yield mock, proxy


def sdk(server: BackgroundServer, path: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}{path}", api_key="sk-test", max_retries=0, timeout=20)


def no_marker(*texts: str) -> bool:
    return not any(m in t for t in texts for m in MARKERS)


def streamed(client: openai.OpenAI, **extra: Any) -> dict[str, Any]:
    """The stream as a client assembles it: reasoning, content, tool calls by index, finish."""
    stream = client.chat.completions.create(model=GPT_OSS, messages=ASK, stream=True, extra_body=RAW, **extra)
    reasoning, content, finish = "", "", None
    calls: dict[int, dict[str, str]] = {}
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            content += delta.content or ""
            for call in delta.tool_calls or []:
                whole = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                whole["id"] = call.id or whole["id"]
                if call.function is not None:
                    whole["name"] = call.function.name or whole["name"]
                    whole["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    return {
        "reasoning": reasoning,
        "content": content,
        "calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
    }


def completed(client: openai.OpenAI, **extra: Any) -> dict[str, Any]:
    answer = client.chat.completions.create(model=GPT_OSS, messages=ASK, extra_body=RAW, **extra)
    choice = answer.choices[0]
    calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in choice.message.tool_calls or []
        if c.type == "function"
    ]
    return {
        "reasoning": (choice.message.model_extra or {}).get("reasoning_content") or "",
        "content": choice.message.content or "",
        "calls": calls,
        "finish": choice.finish_reason,
    }


def test_the_upstream_really_sends_harmony_raw(servers: tuple[BackgroundServer, BackgroundServer]) -> None:
    mock, _ = servers
    raw = streamed(sdk(mock, "/local/v1"))
    assert raw["content"].startswith("<|channel|>analysis<|message|>") and raw["reasoning"] == ""


def test_an_answer_streamed_and_not(servers: tuple[BackgroundServer, BackgroundServer]) -> None:
    _, proxy = servers
    got = streamed(sdk(proxy))
    assert got["reasoning"].startswith("The user wrote:")
    assert got["content"].startswith("You said:") and got["finish"] == "stop" and got["calls"] == []
    assert no_marker(got["reasoning"], got["content"])
    assert completed(sdk(proxy)) == got


def test_a_function_call_becomes_a_tool_call_and_the_next_turn_is_accepted(
    servers: tuple[BackgroundServer, BackgroundServer],
) -> None:
    mock, proxy = servers
    client = sdk(proxy)
    got = streamed(client, tools=TOOLS)
    assert got["finish"] == "tool_calls" and got["content"] == ""
    assert no_marker(got["reasoning"]) and "get_weather" in got["reasoning"]
    [call] = got["calls"]
    assert call["name"] == "get_weather" and call["arguments"] == '{"city":"Paris"}'
    assert call["id"].startswith("call_")
    whole = completed(client, tools=TOOLS)
    assert {**whole, "calls": [{**c, "id": ""} for c in whole["calls"]]} == {
        **got,
        "calls": [{**call, "id": ""}],  # (ids are minted from each answer's own id)
    }

    # The next turn as the client sends it: the call, its result; the server's template accepts it.
    history: Any = [
        *ASK,
        {
            "role": "assistant",
            "content": got["content"] or None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": '{"temp_c": 18, "sky": "clear"}'},
    ]
    final = client.chat.completions.create(model=GPT_OSS, messages=history, tools=TOOLS, extra_body=RAW)
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content and no_marker(final.choices[0].message.content)

    # What the raw content would have met, sent back as it came:
    raw = streamed(sdk(mock, "/local/v1"), tools=TOOLS)["content"]
    refused = httpx.post(
        f"{mock.url}/local/v1/chat/completions",
        json={"model": GPT_OSS, "messages": [*ASK, {"role": "assistant", "content": raw}, *ASK]},
        timeout=20,
    )
    assert refused.status_code == 500


def test_the_trace_sees_the_tool_call(servers: tuple[BackgroundServer, BackgroundServer]) -> None:
    _, proxy = servers
    body = {"model": GPT_OSS, "messages": ASK, "tools": TOOLS, "stream": True, **RAW}
    with httpx.stream(
        "POST", f"{proxy.url}/v1/chat/completions", json=body, headers={"x-trace": "detailed"}, timeout=20
    ) as response:
        text = "".join(response.iter_text())
    assert '"type":"tool_call.start"' in text and '"name":"get_weather"' in text
