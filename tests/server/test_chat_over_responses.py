"""Chat completions over OpenAI's Responses API (issue 29), end to end: the OpenAI SDK's chat client
→ the proxy → the simulated OpenAI, whose chat completions refuses function tools with a level on
GPT-5.4+ and whose Responses API refuses a replayed function_call without its reasoning item."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.core.config.providers import ProvidersTable, default_providers_path
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

MODEL = "gpt-5.4"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris? Use get_weather."}]


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="openai"))) as server:
        yield server


def proxy_for(mock: BackgroundServer, table: Any = None, **overrides: Any) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{mock.url}/openai/v1", trace="brief", **overrides)
    return BackgroundServer(create_app(settings, table=table or simulated_table(mock.port)))


def sdk(proxy: BackgroundServer, level: str | None = "standard") -> openai.OpenAI:
    headers = {"x-thinking-level": level} if level else {}
    return openai.OpenAI(
        base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0, timeout=20, default_headers=headers
    )


def upstream_log(mock: BackgroundServer) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = httpx.get(f"{mock.url}/_mock/requests").json()
    return log


def last_upstream(mock: BackgroundServer) -> dict[str, Any]:
    record: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()
    return record


def test_tools_with_a_level_go_over_responses_and_come_back_as_chat(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        raw = sdk(proxy).chat.completions.with_raw_response.create(model=MODEL, messages=ASK, tools=[WEATHER])
    answer = raw.parse()
    assert raw.headers["x-thinking-upstream-api"] == "responses"
    assert raw.headers["x-thinking-level-applied"] == "standard"
    sent = last_upstream(mock)
    assert sent["path"] == "/openai/v1/responses"
    body = sent["body"]
    assert body["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert body["tools"][0]["name"] == "get_weather" and "messages" not in body
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)
    extra = choice.message.model_extra or {}
    assert extra.get("reasoning_content")
    assert extra["reasoning_details"][0]["type"] == "reasoning.encrypted"


def test_the_stream_carries_tool_call_deltas_reasoning_and_usage(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        chunks = list(
            sdk(proxy).chat.completions.create(
                model=MODEL,
                messages=ASK,
                tools=[WEATHER],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
    )
    calls = [f for c in chunks if c.choices for f in c.choices[0].delta.tool_calls or []]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasoning and calls and calls[0].id and calls[0].function.name == "get_weather"
    assert finish == ["tool_calls"]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details.reasoning_tokens > 0


@pytest.mark.parametrize("state", ["on", "off"])
def test_the_next_turn_works_when_the_client_keeps_or_drops_the_reasoning(
    mock: BackgroundServer, state: str
) -> None:
    """State on: the client drops everything but the calls and the replay store puts the encrypted
    reasoning back. State off: the client keeps what it got (the SDK's message, extra fields and
    all) and the reasoning goes back from there."""
    with proxy_for(mock, state=state) as proxy:
        client = sdk(proxy)
        first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER])
        message = first.choices[0].message
        call = message.tool_calls[0]
        assistant = (
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]}
            if state == "on"
            else message.model_dump(exclude_none=True)
        )
        history = [*ASK, assistant, {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
        second = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content
    items = last_upstream(mock)["body"]["input"]
    kinds = [i.get("type", "message") for i in items]
    assert kinds.index("reasoning") < kinds.index("function_call")  # the reasoning went back first


def test_a_dropped_reasoning_with_no_state_is_openais_own_400(mock: BackgroundServer) -> None:
    with proxy_for(mock, state="off") as proxy:
        client = sdk(proxy)
        first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER])
        call = first.choices[0].message.tool_calls[0]
        history = [
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ]
        with pytest.raises(openai.BadRequestError, match="required 'reasoning' item"):
            client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])


def test_off_no_level_and_other_models_stay_on_chat_completions(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        sdk(proxy, level="off").chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER])
        sent = last_upstream(mock)
        assert sent["path"] == "/openai/v1/chat/completions" and sent["body"]["reasoning_effort"] == "none"
        sdk(proxy, level=None).chat.completions.create(model=MODEL, messages=ASK)
        assert last_upstream(mock)["path"] == "/openai/v1/chat/completions"
        sdk(proxy).chat.completions.create(model="gpt-5.2", messages=ASK, tools=[WEATHER])
        assert last_upstream(mock)["path"] == "/openai/v1/chat/completions"
        sdk(proxy).chat.completions.create(model=MODEL, messages=ASK)  # no tools: chat as ever
        assert last_upstream(mock)["path"] == "/openai/v1/chat/completions"


def test_an_error_on_the_responses_hop_passes_back_unchanged(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": MODEL, "messages": ASK, "tools": [WEATHER]},
            headers={"authorization": "Bearer k", "x-thinking-level": "deep", "x-mock-fault": "429"},
        )
    assert r.status_code == 429 and last_upstream(mock)["path"] == "/openai/v1/responses"
    assert "error" in r.json()


def test_the_trace_says_so_and_hide_hides_the_summary(mock: BackgroundServer) -> None:
    body = {"model": MODEL, "messages": ASK, "tools": [WEATHER], "stream": True}
    headers = {"authorization": "Bearer k", "x-thinking-level": "standard"}
    with proxy_for(mock) as proxy:
        shown = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers).text
        hidden = httpx.post(
            f"{proxy.url}/v1/chat/completions", json=body, headers={**headers, "x-reasoning": "hide"}
        ).text
    notes = [json.loads(line[len(": trace ") :]) for line in shown.splitlines() if '"type":"note"' in line]
    assert notes and notes[0]["code"] == "upstream_responses_api"
    assert '"reasoning_content":"' in shown
    assert '"reasoning_content":"' not in hidden and '"tool_calls"' in hidden


def test_chat_tools_with_reasoning_chat_forwards_and_openais_400_comes_back(mock: BackgroundServer) -> None:
    text = (
        default_providers_path()
        .read_text()
        .replace("chat_tools_with_reasoning: responses", "chat_tools_with_reasoning: chat")
    )
    table = simulated_table(mock.port, ProvidersTable.from_text(text))
    with proxy_for(mock, table=table) as proxy:
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": MODEL, "messages": ASK, "tools": [WEATHER]},
            headers={"authorization": "Bearer k", "x-thinking-level": "standard"},
        )
    assert last_upstream(mock)["path"] == "/openai/v1/chat/completions"
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort"
    assert "use /v1/responses" in r.json()["error"]["message"]


def visible_table(mock: BackgroundServer) -> Any:
    """The shipped table with OpenAI's gpt-5.4+ entry asking `reasoning_visible: responses`."""
    text = (
        default_providers_path()
        .read_text()
        .replace(
            "chat_tools_with_reasoning: responses",
            "chat_tools_with_reasoning: responses\n        reasoning_visible: responses",
        )
    )
    return simulated_table(mock.port, ProvidersTable.from_text(text))


def test_reasoning_visible_sends_every_leveled_request_over_responses(mock: BackgroundServer) -> None:
    with proxy_for(mock, table=visible_table(mock)) as proxy:
        answer = sdk(proxy).chat.completions.with_raw_response.create(model=MODEL, messages=ASK)
        sent = last_upstream(mock)
        assert sent["path"] == "/openai/v1/responses" and sent["body"]["reasoning"]["effort"] == "medium"
        assert answer.headers["x-thinking-upstream-api"] == "responses"
        message = answer.parse().choices[0].message
        assert message.content and message.model_extra and message.model_extra["reasoning_content"]
        chunks = list(
            sdk(proxy, level="deep").chat.completions.create(model=MODEL, messages=ASK, stream=True)
        )
        assert last_upstream(mock)["body"]["reasoning"]["effort"] == "high"
        assert "".join(
            (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
        )
        # Off and no level stay on chat completions, as without the setting.
        sdk(proxy, level="off").chat.completions.create(model=MODEL, messages=ASK)
        assert last_upstream(mock)["path"] == "/openai/v1/chat/completions"
        sdk(proxy, level=None).chat.completions.create(model=MODEL, messages=ASK)
        assert last_upstream(mock)["path"] == "/openai/v1/chat/completions"


def test_reasoning_visible_says_why_in_the_trace(mock: BackgroundServer) -> None:
    body = {"model": MODEL, "messages": ASK, "stream": True}
    headers = {"authorization": "Bearer k", "x-thinking-level": "standard"}
    with proxy_for(mock, table=visible_table(mock)) as proxy:
        shown = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers).text
    notes = [json.loads(line[len(": trace ") :]) for line in shown.splitlines() if '"type":"note"' in line]
    assert notes and notes[0]["code"] == "upstream_responses_api"
    assert "does not return the reasoning" in notes[0]["message"]
