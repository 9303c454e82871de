"""What the simulated providers do with reasoning in the history they are sent: Groq refuses any
reasoning field with its real 400, vLLM reads only `reasoning` (a `reasoning_content` is lost)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.mock import MockOptions, create_mock_app

ASK = {"role": "user", "content": "What is the weather in Paris?"}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"}
REASONING = "The user wants the weather; I should call the tool with Paris as the city. " * 8


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockOptions(chunk_chars=16))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        yield c


def history(**reasoning: Any) -> list[dict[str, Any]]:
    return [ASK, {"role": "assistant", "content": None, **reasoning, "tool_calls": [CALL]}, RESULT]


async def ask(client: httpx.AsyncClient, dialect: str, messages: list[Any], **extra: Any) -> httpx.Response:
    body = {"model": extra.pop("model", None) or "x", "messages": messages, **extra}
    return await client.post(f"/{dialect}/v1/chat/completions", json=body)


# --- Groq ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (
            "reasoning_content",
            "'messages.1' : for 'role:assistant' the following must be satisfied"
            "[('messages.1' : property 'reasoning_content' is unsupported)]",
        ),
        (
            "reasoning",
            "'messages.1' : for 'role:assistant' the following must be satisfied"
            "[('messages.1' : property 'reasoning' is unsupported, did you mean 'role'?)]",
        ),
    ],
)
async def test_groq_refuses_reasoning_in_history_with_its_real_body(
    client: httpx.AsyncClient, field: str, message: str
) -> None:
    for stream in (False, True):
        r = await ask(
            client, "groq", history(**{field: REASONING}), model="openai/gpt-oss-120b", stream=stream
        )
        assert r.status_code == 400
        assert r.content == orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})


async def test_groq_answers_a_clean_history_with_reasoning_in_its_own_field(
    client: httpx.AsyncClient,
) -> None:
    r = await ask(client, "groq", history(), model="openai/gpt-oss-120b")
    assert r.status_code == 200
    message = r.json()["choices"][0]["message"]
    assert message["reasoning"] and "reasoning_content" not in message


# --- vLLM ----------------------------------------------------------------------------------------


async def prompt_tokens(client: httpx.AsyncClient, messages: list[Any], *, stream: bool) -> int:
    extra: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    r = await ask(client, "vllm", messages, model="Qwen/Qwen3-8B", **extra)
    assert r.status_code == 200, r.text
    if not stream:
        count: int = r.json()["usage"]["prompt_tokens"]
        return count
    frames = [e.removeprefix("data: ") for e in r.text.split("\n\n") if e.startswith("data: {")]
    usage = [orjson.loads(f)["usage"] for f in frames if orjson.loads(f).get("usage")]
    return int(usage[-1]["prompt_tokens"])


@pytest.mark.parametrize("stream", [False, True])
async def test_vllm_renders_reasoning_and_loses_reasoning_content(
    client: httpx.AsyncClient, stream: bool
) -> None:
    without = await prompt_tokens(client, history(), stream=stream)
    read = await prompt_tokens(client, history(reasoning=REASONING), stream=stream)
    lost = await prompt_tokens(client, history(reasoning_content=REASONING), stream=stream)
    assert read > without  # the template rendered the earlier turn's reasoning
    assert lost == without  # vLLM dropped it (vllm#38488): nothing of it reached the prompt
