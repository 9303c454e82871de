"""The simulated upstream's routes: chat in every dialect, tool turns, replay checks, the request
log, models and embeddings."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.mock import DIALECTS, MockOptions, create_mock_app

REQUIRED_DIALECTS = {
    "deepseek",
    "qwen",
    "kimi",
    "minimax",
    "minimax-split",
    "ollama",
    "openrouter",
    "mistral",
    "local",
    "prompted",
    "openai",
    "vllm",
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["city", "unit"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockOptions())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        yield c


def sse_data(text: str) -> list[str]:
    """The data payloads of an SSE body, in order ([DONE] included)."""
    return [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]


def chunks_of(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(d) for d in sse_data(text) if d != "[DONE]"]


def tool_calls_of(chunks: list[dict[str, Any]]) -> dict[int, dict[str, str]]:
    """Tool calls reassembled from stream deltas, by index."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            for item in choice["delta"].get("tool_calls") or []:
                call = calls.setdefault(item["index"], {"id": "", "name": "", "arguments": ""})
                call["id"] += item.get("id", "")
                call["name"] += item.get("function", {}).get("name", "")
                call["arguments"] += item.get("function", {}).get("arguments", "")
    return calls


def finish_reasons(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["finish_reason"] for ch in chunks for c in ch["choices"] if c.get("finish_reason")]


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def test_dialect_names_cover_the_required_providers() -> None:
    assert set(DIALECTS) >= REQUIRED_DIALECTS


def test_unknown_default_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dialect"):
        create_mock_app(MockOptions(default_dialect="nope"))


# --- the common stream contract, every dialect -------------------------------------------------


@pytest.mark.parametrize("dialect", sorted(REQUIRED_DIALECTS))
@pytest.mark.parametrize("include_usage", [True, False])
async def test_stream_follows_the_chunk_contract(
    client: httpx.AsyncClient, dialect: str, include_usage: bool
) -> None:
    body = user("Tell me about rivers", model="my-model", stream=True)
    body["stream_options"] = {"include_usage": include_usage}
    response = await client.post(f"/{dialect}/v1/chat/completions", json=body)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-request-id"]
    data = sse_data(response.text)
    assert data[-1] == "[DONE]"
    assert data.count("[DONE]") == 1
    chunks = chunks_of(response.text)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert {c["model"] for c in chunks} == {"my-model"}
    assert all(isinstance(c["created"], int) for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert finish_reasons(chunks) == ["stop"]
    usage_chunks = [c for c in chunks if c["choices"] == []]
    if dialect == "mistral":  # Mistral always reports usage on its final chunk, never separately
        assert usage_chunks == []
        assert chunks[-1]["usage"]["total_tokens"] > 0
    elif include_usage:
        assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1]
        usage = usage_chunks[0]["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    else:
        assert usage_chunks == []


@pytest.mark.parametrize("dialect", sorted(REQUIRED_DIALECTS))
async def test_non_stream_is_a_chat_completion_with_usage(client: httpx.AsyncClient, dialect: str) -> None:
    response = await client.post(f"/{dialect}/v1/chat/completions", json=user("Tell me about rivers"))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"]
    completion = response.json()
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["choices"][0]["message"]["role"] == "assistant"
    assert completion["usage"]["total_tokens"] > 0


async def test_default_dialect_serves_the_unprefixed_routes() -> None:
    app = create_mock_app(MockOptions(default_dialect="ollama"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        chat = (await c.post("/v1/chat/completions", json=user("hi"))).json()
        short = (await c.post("/chat/completions", json=user("hi"))).json()
        models = (await c.get("/v1/models")).json()
    assert chat["system_fingerprint"] == "fp_ollama"
    assert short["system_fingerprint"] == "fp_ollama"
    assert models["data"][0]["owned_by"] == "library"


async def test_answer_quotes_the_last_user_message_deterministically(client: httpx.AsyncClient) -> None:
    body = user("Which river is the longest in Europe today?")
    first = (await client.post("/openai/v1/chat/completions", json=body)).json()
    second = (await client.post("/openai/v1/chat/completions", json=body)).json()
    content = first["choices"][0]["message"]["content"]
    assert "Which river is the longest in Europe today?" in content
    assert content == second["choices"][0]["message"]["content"]


async def test_unknown_dialect_prefix_is_404(client: httpx.AsyncClient) -> None:
    response = await client.post("/nope/v1/chat/completions", json=user("hi"))
    assert response.status_code == 404
    assert "deepseek" in response.json()["error"]["message"]


async def test_bad_bodies_get_the_dialect_error_shape(client: httpx.AsyncClient) -> None:
    broken = await client.post("/deepseek/v1/chat/completions", content=b"{not json")
    empty = await client.post("/mistral/v1/chat/completions", json={"messages": []})
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_request_error"
    assert empty.status_code == 400 and empty.json()["object"] == "error"


async def test_request_body_never_reaches_response_headers(client: httpx.AsyncClient) -> None:
    marker = "zq-secret-marker-93"
    body = {
        "messages": [
            {"role": "system", "content": f"{marker} think in <think> tags"},
            {"role": "user", "content": "hi"},
        ],
        "stream": True,
    }
    for dialect in sorted(REQUIRED_DIALECTS):
        response = await client.post(f"/{dialect}/v1/chat/completions", json=body)
        assert marker not in str(response.headers)
        # a system prompt is never quoted back either (the proxy injects its own there)
        assert marker not in response.text


# --- tool calls --------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", sorted(REQUIRED_DIALECTS))
async def test_tool_call_turn_streams_a_call_built_from_the_schema(
    client: httpx.AsyncClient, dialect: str
) -> None:
    body = user("What is the weather like?", tools=[WEATHER_TOOL], stream=True)
    chunks = chunks_of((await client.post(f"/{dialect}/v1/chat/completions", json=body)).text)

    calls = tool_calls_of(chunks)
    assert list(calls) == [0]
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["name"] == "get_weather"
    arguments = orjson.loads(calls[0]["arguments"])
    assert set(arguments) == {"city", "unit"}
    assert arguments["unit"] == "celsius"
    argument_deltas = [
        item["function"]["arguments"]
        for ch in chunks
        for c in ch["choices"]
        for item in c["delta"].get("tool_calls") or []
        if item["function"].get("arguments")
    ]
    assert len(argument_deltas) >= 3
    assert finish_reasons(chunks) == ["tool_calls"]


async def test_parallel_calls_when_several_tools_and_two_asks(client: httpx.AsyncClient) -> None:
    body = user(
        "Weather in Paris and the latest rugby scores", tools=[WEATHER_TOOL, SEARCH_TOOL], stream=True
    )
    chunks = chunks_of((await client.post("/openai/v1/chat/completions", json=body)).text)

    calls = tool_calls_of(chunks)
    assert [calls[0]["name"], calls[1]["name"]] == ["get_weather", "web_search"]
    assert orjson.loads(calls[1]["arguments"]) == {"query": "the latest rugby scores"}
    assert calls[0]["id"] != calls[1]["id"]


async def test_tool_choice_none_gives_a_plain_answer(client: httpx.AsyncClient) -> None:
    body = user("Weather?", tools=[WEATHER_TOOL], tool_choice="none")
    message = (await client.post("/openai/v1/chat/completions", json=body)).json()["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"]


async def test_tool_result_turn_answers_with_the_result(client: httpx.AsyncClient) -> None:
    first = (
        await client.post(
            "/deepseek/v1/chat/completions", json=user("Weather in Paris?", tools=[WEATHER_TOOL])
        )
    ).json()
    assistant = first["choices"][0]["message"]
    call = assistant["tool_calls"][0]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        assistant,
        {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 degrees, light wind"},
    ]
    body = {"messages": messages, "tools": [WEATHER_TOOL], "stream": True}
    chunks = chunks_of((await client.post("/deepseek/v1/chat/completions", json=body)).text)

    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert "get_weather" in content
    assert "Sunny, 21 degrees, light wind" in content
    assert finish_reasons(chunks) == ["stop"]
    assert tool_calls_of(chunks) == {}


# --- reasoning replay checks -------------------------------------------------------------------


def replay_body(with_reasoning: bool, **extra: Any) -> dict[str, Any]:
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ],
    }
    if with_reasoning:
        assistant["reasoning_content"] = "I should call the tool."
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Weather?"},
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    ]
    return {"messages": messages, "tools": [WEATHER_TOOL], **extra}


async def test_deepseek_refuses_a_tool_turn_without_its_reasoning(client: httpx.AsyncClient) -> None:
    response = await client.post("/deepseek/v1/chat/completions", json=replay_body(False))
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {
            "message": "The reasoning_content in the thinking mode must be passed back to the API.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }


async def test_deepseek_replay_passes_with_reasoning_or_thinking_off(client: httpx.AsyncClient) -> None:
    kept = await client.post("/deepseek/v1/chat/completions", json=replay_body(True))
    off = await client.post(
        "/deepseek/v1/chat/completions", json=replay_body(False, thinking={"type": "disabled"})
    )
    assert kept.status_code == 200
    assert off.status_code == 200


async def test_kimi_names_the_message_index(client: httpx.AsyncClient) -> None:
    response = await client.post("/kimi/v1/chat/completions", json=replay_body(False))
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "thinking is enabled but reasoning_content is missing in assistant tool call "
            "message at index 2",
            "type": "invalid_request_error",
        }
    }


async def test_deepseek_accepts_an_empty_string_and_ignores_earlier_rounds(
    client: httpx.AsyncClient,
) -> None:
    empty = replay_body(False)
    empty["messages"][2]["reasoning_content"] = ""
    assert (await client.post("/deepseek/v1/chat/completions", json=empty)).status_code == 200
    earlier = replay_body(False)
    earlier["messages"].append({"role": "user", "content": "And tomorrow?"})
    assert (await client.post("/deepseek/v1/chat/completions", json=earlier)).status_code == 200
    null = replay_body(False)
    null["messages"][2]["reasoning_content"] = None
    assert (await client.post("/deepseek/v1/chat/completions", json=null)).status_code == 400


async def test_kimi_checks_every_round_and_accepts_an_empty_string(client: httpx.AsyncClient) -> None:
    earlier = replay_body(False)
    earlier["messages"].append({"role": "user", "content": "And tomorrow?"})
    assert (await client.post("/kimi/v1/chat/completions", json=earlier)).status_code == 400
    empty = replay_body(False)
    empty["messages"][2]["reasoning_content"] = ""
    assert (await client.post("/kimi/v1/chat/completions", json=empty)).status_code == 200


async def test_gemini_signs_the_first_call_and_wants_the_signature_back(client: httpx.AsyncClient) -> None:
    first = await client.post(
        "/gemini/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER_TOOL]},
    )
    message = first.json()["choices"][0]["message"]
    signature = message["tool_calls"][0]["extra_content"]["google"]["thought_signature"]
    assert signature
    body = replay_body(False)
    refused = await client.post("/gemini/v1/chat/completions", json=body)
    assert refused.status_code == 400
    error = refused.json()[0]["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith("Function call is missing a thought_signature in functionCall parts.")
    assert "`default_api:get_weather` , position 3." in error["message"]
    body["messages"][2]["tool_calls"][0]["extra_content"] = {"google": {"thought_signature": signature}}
    assert (await client.post("/gemini/v1/chat/completions", json=body)).status_code == 200


# --- request log -------------------------------------------------------------------------------


async def test_request_log_records_body_and_fingerprints_the_key(client: httpx.AsyncClient) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "extra": {"nested": [1, 2.5, None]},
    }
    await client.post(
        "/qwen/v1/chat/completions",
        json=body,
        headers={"Authorization": "Bearer sk-live-0123456789abcd", "X-Custom": "kept"},
    )
    last = (await client.get("/_mock/requests/last")).json()
    assert last["path"] == "/qwen/v1/chat/completions"
    assert last["method"] == "POST"
    assert last["dialect"] == "qwen"
    assert last["body"] == body
    assert last["headers"]["authorization"] == "Bearer sk-…abcd"
    assert last["headers"]["x-custom"] == "kept"
    assert "0123456789" not in str(await client.get("/_mock/requests"))


async def test_request_log_keeps_the_last_hundred_and_clears(client: httpx.AsyncClient) -> None:
    for i in range(105):
        await client.post("/v1/embeddings", json={"input": f"text {i}"})
    log = (await client.get("/_mock/requests")).json()
    assert len(log) == 100
    assert log[0]["body"]["input"] == "text 5"
    assert log[-1]["body"]["input"] == "text 104"

    cleared = await client.delete("/_mock/requests")
    assert cleared.json() == {"cleared": 100}
    assert (await client.get("/_mock/requests")).json() == []
    assert (await client.get("/_mock/requests/last")).status_code == 404


async def test_each_app_has_its_own_log() -> None:
    first, second = create_mock_app(), create_mock_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=first), base_url="http://a") as c:
        await c.get("/v1/models")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=second), base_url="http://b") as c:
        assert (await c.get("/_mock/requests")).json() == []


# --- models and embeddings ---------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/models", "/kimi/v1/models"])
async def test_models_list(client: httpx.AsyncClient, path: str) -> None:
    payload = (await client.get(path)).json()
    assert payload["object"] == "list"
    assert payload["data"] and all(m["object"] == "model" and m["id"] for m in payload["data"])


async def test_embeddings_are_deterministic_unit_vectors(client: httpx.AsyncClient) -> None:
    body = {"model": "text-embedding-3-small", "input": ["alpha", "beta", "alpha"], "dimensions": 8}
    payload = (await client.post("/v1/embeddings", json=body)).json()
    vectors = [d["embedding"] for d in payload["data"]]
    assert [d["index"] for d in payload["data"]] == [0, 1, 2]
    assert all(len(v) == 8 for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    assert math.isclose(sum(x * x for x in vectors[0]), 1.0, rel_tol=1e-4)
    assert payload["usage"]["prompt_tokens"] > 0


async def test_embeddings_in_base64_decode_to_the_same_vector(client: httpx.AsyncClient) -> None:
    plain = (await client.post("/ollama/v1/embeddings", json={"input": "alpha"})).json()
    packed = (
        await client.post("/v1/embeddings", json={"input": "alpha", "encoding_format": "base64"})
    ).json()
    raw = base64.b64decode(packed["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert [round(x, 5) for x in decoded] == [round(x, 5) for x in plain["data"][0]["embedding"]]


async def test_embeddings_without_input_is_400(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/embeddings", json={"model": "x"})).status_code == 400
