"""The OpenAI Agents SDK (openai-agents, Python) through the proxy: an agent with the SDK's default
model (no model named) and one function tool, run to a final output over the Responses API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.clients.conftest import API_KEY, Proxy, Upstream, assert_reasoning_replayed, require_module

pytestmark = pytest.mark.spawns


@pytest.fixture(autouse=True)
def _agents_installed() -> None:
    require_module("agents")


def run_config(proxy: Proxy) -> Any:
    """The SDK's own OpenAI provider (Responses API, HTTP) pointed at the proxy; no tracing export
    (it would go to OpenAI)."""
    from agents import OpenAIProvider, RunConfig
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=proxy.base, api_key=API_KEY, max_retries=0, timeout=60)
    return RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)


def weather_agent(calls: list[str], **settings: Any) -> Any:
    from agents import Agent, ModelSettings, function_tool

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return json.dumps({"city": city, "forecast": "sunny", "celsius": 21})

    extra = {"model_settings": ModelSettings(**settings)} if settings else {}
    return Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], **extra)


async def test_default_model_runs_a_function_tool_to_a_final_output(proxy: Proxy, upstream: Upstream) -> None:
    from agents import Runner
    from agents.models import get_default_model

    calls: list[str] = []
    result = await Runner.run(
        weather_agent(calls), "What is the weather in Paris?", run_config=run_config(proxy)
    )

    assert calls == ["Paris"]
    assert "get_weather tool returned" in result.final_output and "sunny" in result.final_output
    chats = upstream.chat_requests()
    assert len(chats) == 2, upstream.describe()
    assert chats[0]["model"] == get_default_model()  # no model named: the SDK's default went through
    assert chats[1]["messages"][-1]["role"] == "tool"
    assert "sunny" in chats[1]["messages"][-1]["content"]


async def test_streamed_thinking_tool_loop_with_state_off(proxy_state_off: Proxy, upstream: Upstream) -> None:
    """With the state store off, DeepSeek's reasoning reaches the second upstream request only
    through the reasoning item's `encrypted_content`, which the SDK echoes back (it asks
    `include: []`, and echoes whatever the reasoning item carried)."""
    from agents import Runner
    from openai.types.shared import Reasoning

    calls: list[str] = []
    agent = weather_agent(calls, reasoning=Reasoning(effort="high"))
    result = Runner.run_streamed(
        agent, "What is the weather in Paris?", run_config=run_config(proxy_state_off)
    )
    kinds = [event.type async for event in result.stream_events()]

    assert calls == ["Paris"]
    assert "raw_response_event" in kinds
    assert isinstance(result.final_output, str) and "get_weather tool returned" in result.final_output
    assert_reasoning_replayed(upstream.chat_requests(), upstream.describe)
