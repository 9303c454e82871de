"""The simulated llama.cpp server with gpt-oss (proxy/mock/dialects/local.py): harmony split by its
own parser by default, left raw in content with the reasoning format `none`, and refused back in an
assistant message as gpt-oss's chat template refuses it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.mock import MockOptions, create_mock_app
from proxy.mock.dialects.local import GPT_OSS, HARMONY_REFUSAL
from tests.mock.test_dialects import chunks_of, content_text, deltas, field_text

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockOptions(chunk_chars=4))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        yield c


async def post(client: httpx.AsyncClient, **extra: Any) -> httpx.Response:
    return await client.post("/local/v1/chat/completions", json={"model": GPT_OSS, "messages": ASK, **extra})


async def test_gpt_oss_is_served(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/local/v1/models")).json()["data"]
    assert GPT_OSS in [m["id"] for m in listed]


async def test_by_default_the_server_splits_harmony(client: httpx.AsyncClient) -> None:
    chunks = chunks_of((await post(client, stream=True, tools=TOOLS)).text)
    assert field_text(chunks, "reasoning_content")
    assert "<|" not in content_text(chunks)
    assert any(d.get("tool_calls") for d in deltas(chunks))
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_reasoning_format_none_leaves_harmony_raw_in_content(client: httpx.AsyncClient) -> None:
    chunks = chunks_of((await post(client, stream=True, reasoning_format="none")).text)
    text = content_text(chunks)
    assert text.startswith("<|channel|>analysis<|message|>")
    assert "<|end|><|start|>assistant<|channel|>final<|message|>" in text
    assert text.endswith("<|return|>")
    assert field_text(chunks, "reasoning_content") == ""
    # cut anywhere: some chunk ends inside a marker
    pieces = [d["content"] for d in deltas(chunks) if d.get("content")]
    assert any("<|" in p and not p.endswith("|>") and "|>" not in p[p.rindex("<|") :] for p in pieces)
    completion = (await post(client, reasoning_format="none")).json()
    assert completion["choices"][0]["message"]["content"] == text


async def test_raw_tool_calls_are_commentary_messages_and_the_server_says_stop(
    client: httpx.AsyncClient,
) -> None:
    chunks = chunks_of((await post(client, stream=True, tools=TOOLS, reasoning_format="none")).text)
    text = content_text(chunks)
    assert (
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"'
        in text
    )
    assert text.endswith("<|call|>")
    assert not any(d.get("tool_calls") for d in deltas(chunks))
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    choice = (await post(client, tools=TOOLS, reasoning_format="none")).json()["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]


async def test_harmony_text_back_in_an_assistant_message_is_refused(client: httpx.AsyncClient) -> None:
    raw = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi."
    history = [*ASK, {"role": "assistant", "content": raw}, {"role": "user", "content": "And tomorrow?"}]
    response = await client.post("/local/v1/chat/completions", json={"model": GPT_OSS, "messages": history})
    assert response.status_code == 500
    assert response.json()["error"]["message"] == HARMONY_REFUSAL
    clean = [*ASK, {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "And tomorrow?"}]
    ok = await client.post("/local/v1/chat/completions", json={"model": GPT_OSS, "messages": clean})
    assert ok.status_code == 200
    # (another model's template has no such rule)
    other = await client.post("/local/v1/chat/completions", json={"messages": history})
    assert other.status_code == 200
