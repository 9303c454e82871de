"""The simulated OpenAI chat endpoint's rule on function tools and reasoning_effort (GPT-5.4 and later)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.mock import MockOptions, create_mock_app
from proxy.mock.dialects.openai import gpt_version, tools_refuse_effort

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockOptions(chunk_chars=4))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        yield c


async def chat(client: httpx.AsyncClient, **extra: Any) -> httpx.Response:
    return await client.post("/openai/v1/chat/completions", json={"messages": ASK, **extra})


# --- the model-version parsing ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "version"),
    [
        ("gpt-5", (5, 0)),
        ("gpt-5-mini", (5, 0)),
        ("gpt-5.1-chat-latest", (5, 1)),
        ("gpt-5.3", (5, 3)),
        ("gpt-5.4", (5, 4)),
        ("gpt-5.4-mini", (5, 4)),
        ("gpt-5.5-2026-04-23", (5, 5)),
        ("gpt-5.6-luna", (5, 6)),
        ("gpt-5.10", (5, 10)),
        ("gpt-6-astra", (6, 0)),
        ("gpt-4.1-mini", (4, 1)),
        ("gpt-4o", None),
        ("chatgpt-4o-latest", None),
        ("o3", None),
        ("o4-mini", None),
        ("", None),
    ],
)
def test_gpt_version_reads_major_and_minor(model: str, version: tuple[int, int] | None) -> None:
    assert gpt_version(model) == version


@pytest.mark.parametrize(
    ("model", "effort", "refused"),
    [
        # before GPT-5.4: tools take any effort
        ("gpt-5", "high", False),
        ("gpt-5.1", "medium", False),
        ("gpt-5.2", "xhigh", False),
        ("gpt-5.3", "low", False),
        ("gpt-4o", "low", False),
        ("o3", "high", False),
        # GPT-5.4 and 5.5: refused with an effort, not without one
        ("gpt-5.4", "low", True),
        ("gpt-5.4-mini", "medium", True),
        ("gpt-5.5-2026-04-23", "high", True),
        ("gpt-5.4", None, False),
        ("gpt-5.5", None, False),
        # 5.10 is later than 5.4 (and than 5.6): compared as numbers, not as text
        ("gpt-5.10", "low", True),
        ("gpt-5.10", None, True),
        # GPT-5.6 and later: the default effort applies when none is sent
        ("gpt-5.6", None, True),
        ("gpt-5.6-luna", None, True),
        ("gpt-5.6-terra", "medium", True),
        ("gpt-6-astra", None, True),
        # an explicit "none" always passes
        ("gpt-5.4", "none", False),
        ("gpt-5.6-luna", "none", False),
        ("gpt-5.10", "none", False),
    ],
)
def test_tools_refuse_effort_boundaries(model: str, effort: str | None, refused: bool) -> None:
    assert tools_refuse_effort(model, effort) is refused


# --- on the wire ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("gpt-5.4", {"reasoning_effort": "low"}),
        ("gpt-5.5-2026-04-23", {"reasoning_effort": "high"}),
        ("gpt-5.10", {"reasoning_effort": "medium"}),
        ("gpt-5.6-luna", {}),
        ("gpt-5.6-luna", {"reasoning_effort": "xhigh", "stream": True}),
    ],
)
async def test_function_tools_with_effort_are_refused_as_openai_does(
    client: httpx.AsyncClient, model: str, extra: dict[str, Any]
) -> None:
    response = await chat(client, model=model, tools=[TOOL], **extra)
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": f"Function tools with reasoning_effort are not supported for {model} in "
            "/v1/chat/completions. To use function tools, use /v1/responses or set "
            "reasoning_effort to 'none'.",
            "type": "invalid_request_error",
            "param": "reasoning_effort",
            "code": None,
        }
    }


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("gpt-5.3", {"reasoning_effort": "high", "tools": [TOOL]}),  # before GPT-5.4
        ("gpt-5.1", {"reasoning_effort": "high", "tools": [TOOL]}),
        ("gpt-5.4", {"tools": [TOOL]}),  # no effort sent, and 5.4 has no default one here
        ("gpt-5.4", {"reasoning_effort": "none", "tools": [TOOL]}),
        ("gpt-5.6-luna", {"reasoning_effort": "none", "tools": [TOOL]}),
        ("gpt-5.6-luna", {"reasoning_effort": "high"}),  # no tools
        ("gpt-5.6-luna", {"reasoning_effort": "high", "tools": []}),
        ("gpt-5.6-luna", {"reasoning_effort": "high", "tools": [{"type": "custom", "custom": {}}]}),
    ],
)
async def test_what_passes_the_rule(client: httpx.AsyncClient, model: str, extra: dict[str, Any]) -> None:
    response = await chat(client, model=model, **extra)
    assert response.status_code == 200, response.text


async def test_tools_with_none_still_get_a_tool_call(client: httpx.AsyncClient) -> None:
    response = await chat(client, model="gpt-5.6-luna", tools=[TOOL], reasoning_effort="none")
    message = response.json()["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_an_invalid_effort_is_named_before_the_tools_rule(client: httpx.AsyncClient) -> None:
    response = await chat(client, model="gpt-5.4", tools=[TOOL], reasoning_effort="max")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_value"


async def test_the_responses_api_takes_tools_with_effort(client: httpx.AsyncClient) -> None:
    body = {
        "model": "gpt-5.6-luna",
        "input": "Weather in Paris?",
        "tools": [{"type": "function", **TOOL["function"]}],
        "reasoning": {"effort": "high"},
    }
    response = await client.post("/openai/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert any(item["type"] == "function_call" for item in response.json()["output"])
