"""LangChain's `ChatOpenAI` (langchain-openai, pinned in the `test` extra) in a tool loop at level
standard, through a real proxy, to the simulated OpenAI with model gpt-5.4 (issue 29).

OpenAI's chat completions refuses function tools with a reasoning effort on GPT-5.4+, so the proxy
sends these chat requests over the upstream's Responses API. LangChain keeps nothing of an
assistant message but its text and tool calls, so the encrypted reasoning item the next turn needs
(the simulated OpenAI, like OpenAI, refuses a replayed function_call without it) comes back only
through the proxy's replay store (state on, the default); with state off the same loop gets
OpenAI's 400.

The proxy and the mock run in this process (BackgroundServer, as tests/server/test_chat_over_responses.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import reduce
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

MODEL = "gpt-5.4"
QUESTION = "What's the weather in Paris? Use get_weather."
RESPONSES_PATH = "/openai/v1/responses"


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 21 C in {city}."


@pytest.fixture(scope="module")
def openai_mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="openai"))) as server:
        yield server


def proxy_for(mock: BackgroundServer, **overrides: Any) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{mock.url}/openai/v1", trace="off", **overrides)
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


@pytest.fixture(scope="module")
def proxy(openai_mock: BackgroundServer) -> Iterator[BackgroundServer]:
    """The proxy with its defaults: the replay store on, in memory."""
    with proxy_for(openai_mock) as server:
        yield server


@pytest.fixture
def upstream(openai_mock: BackgroundServer) -> str:
    """The mock's URL, its request log emptied."""
    httpx.delete(f"{openai_mock.url}/_mock/requests", timeout=10).raise_for_status()
    return openai_mock.url


def upstream_log(mock_url: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{mock_url}/_mock/requests", timeout=10)
    answer.raise_for_status()
    log: list[dict[str, Any]] = answer.json()
    return [entry for entry in log if entry["method"] == "POST"]


def describe(log: list[dict[str, Any]]) -> str:
    return "\n".join(f"{e['path']} -> {json.dumps(e['body'])[:400]}" for e in log)


def model(proxy: BackgroundServer) -> Any:
    """LangChain's ChatOpenAI on chat completions (what it uses for gpt-5.4; said explicitly so a
    later default cannot move it to the Responses API), `get_weather` bound."""
    llm = ChatOpenAI(
        model=MODEL,
        base_url=f"{proxy.url}/v1",
        api_key="sk-test",  # type: ignore[arg-type]
        default_headers={"x-thinking-level": "standard"},
        include_response_headers=True,
        use_responses_api=False,
        max_retries=0,
        timeout=30,
    )
    return llm.bind_tools([get_weather])


def run_tools(message: AIMessage) -> list[ToolMessage]:
    return [get_weather.invoke(call) for call in message.tool_calls]


def assert_over_responses(message: AIMessage) -> None:
    headers = {k.lower(): v for k, v in message.response_metadata.get("headers", {}).items()}
    assert headers.get("x-thinking-upstream-api") == "responses", headers
    assert headers.get("x-thinking-level-applied") == "standard", headers


def assert_reasoning_replayed(log: list[dict[str, Any]]) -> None:
    """Both turns went to the Responses API, and the second sent back, before the function_call,
    the reasoning item the first answered with."""
    assert [e["path"] for e in log] == [RESPONSES_PATH, RESPONSES_PATH], describe(log)
    first, second = (e["body"] for e in log)
    assert first["reasoning"] == {"effort": "medium", "summary": "auto"} and first["store"] is False
    items = second["input"]
    kinds = [item.get("type", "message") for item in items]
    assert "reasoning" in kinds and "function_call" in kinds, describe(log)
    assert kinds.index("reasoning") < kinds.index("function_call"), kinds
    assert kinds[-1] == "function_call_output", kinds
    assert items[kinds.index("reasoning")]["encrypted_content"], items


def test_a_tool_loop_works_over_the_responses_api(proxy: BackgroundServer, upstream: str) -> None:
    llm = model(proxy)
    messages: list[BaseMessage] = [HumanMessage(QUESTION)]
    first = llm.invoke(messages)
    assert isinstance(first, AIMessage)
    assert_over_responses(first)
    assert [call["name"] for call in first.tool_calls] == ["get_weather"], first
    assert first.tool_calls[0]["args"].get("city")
    # What LangChain will send back: no trace of the encrypted reasoning on the message.
    assert "reasoning_details" not in first.additional_kwargs
    messages += [first, *run_tools(first)]

    final = llm.invoke(messages)
    assert isinstance(final, AIMessage) and not final.tool_calls
    assert final.text.strip(), final
    assert_over_responses(final)
    assert_reasoning_replayed(upstream_log(upstream))


def test_a_streamed_tool_loop_collects_tool_call_chunks(proxy: BackgroundServer, upstream: str) -> None:
    llm = model(proxy)
    messages: list[BaseMessage] = [HumanMessage(QUESTION)]
    chunks = list(llm.stream(messages))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    pieces = [piece for c in chunks for piece in c.tool_call_chunks]
    assert pieces and pieces[0]["name"] == "get_weather" and pieces[0]["id"], pieces
    assert len(pieces) > 1 and {p["index"] for p in pieces} == {0}, pieces  # arguments in deltas
    first = reduce(lambda a, b: a + b, chunks)
    assert_over_responses(first)
    assert [call["name"] for call in first.tool_calls] == ["get_weather"], first.tool_calls
    assert first.tool_calls[0]["args"].get("city"), first.tool_calls
    assert first.response_metadata.get("finish_reason") == "tool_calls", first.response_metadata
    messages += [first, *run_tools(first)]

    final = reduce(lambda a, b: a + b, llm.stream(messages))
    assert not final.tool_calls and final.text.strip(), final
    log = upstream_log(upstream)
    assert_reasoning_replayed(log)
    assert all(e["body"].get("stream") is True for e in log), describe(log)


def test_with_state_off_langchains_history_gets_openais_400(
    openai_mock: BackgroundServer, upstream: str
) -> None:
    """The control: without the replay store nothing puts the reasoning back."""
    with proxy_for(openai_mock, state="off") as bare:
        llm = model(bare)
        messages: list[BaseMessage] = [HumanMessage(QUESTION)]
        first = llm.invoke(messages)
        assert isinstance(first, AIMessage) and first.tool_calls
        messages += [first, *run_tools(first)]
        with pytest.raises(openai.BadRequestError, match="required 'reasoning' item"):
            llm.invoke(messages)
    log = upstream_log(upstream)
    assert [e["path"] for e in log] == [RESPONSES_PATH, RESPONSES_PATH], describe(log)
