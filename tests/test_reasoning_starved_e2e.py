"""The reasoning ate the answer, end to end on every front door: a thinking request whose output
limit the reasoning uses up (the simulated DeepSeek spends it reasoning first) ends with nothing
said — chat's finish_reason length, the Responses API's incomplete (max_output_tokens), the
Messages API's stop_reason max_tokens — and the proxy flags it once, in the pipeline every door
shares: the metric per client key and the console's summary; chat clients get the trace's
warning too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

KEY = "ck-alice-2f81"
ADMIN = "ak-ops-5c0d"
SAID = "Why is the sky blue?"
DEEP = {"x-thinking-level": "deep"}


@pytest.fixture(scope="module")
def proxy() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as mock:
        settings = make_settings(
            upstream_base_url=f"{mock.url}/deepseek/v1",
            upstream_api_key="sk-operator",
            client_keys=[f"alice:{KEY}"],
            admin_keys=[ADMIN],
            ui=True,
        )
        with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
            yield server


def starved_count(proxy: BackgroundServer) -> float:
    total = 0.0
    for line in httpx.get(f"{proxy.url}/metrics").text.splitlines():
        if line.startswith("thinkproxy_reasoning_starved_total{") and 'client="alice"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def newest(proxy: BackgroundServer) -> dict[str, Any]:
    listing = httpx.get(f"{proxy.url}/thinkproxy/requests", headers={"authorization": f"Bearer {ADMIN}"})
    entry: dict[str, Any] = listing.json()["data"][0]
    return entry


def flagged(proxy: BackgroundServer, before: float, route: str) -> None:
    assert starved_count(proxy) == before + 1
    entry = newest(proxy)
    assert entry["route"] == route and entry["reasoning_starved"] is True and entry["client"] == "alice"
    assert any(e["type"] == "warning" and e["code"] == "reasoning_starved" for e in entry["events"])


@pytest.mark.parametrize("stream", [False, True])
def test_chat(proxy: BackgroundServer, stream: bool) -> None:
    before = starved_count(proxy)
    headers = {**DEEP, "x-trace": "brief"}
    sdk = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=KEY, default_headers=headers)
    ask: dict[str, Any] = {"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": SAID}]}
    if stream:
        with httpx.stream(
            "POST",
            f"{proxy.url}/v1/chat/completions",
            json={**ask, "max_tokens": 8, "stream": True},
            headers={"authorization": f"Bearer {KEY}", **headers},
        ) as r:
            text = r.read().decode()
        traces = [orjson.loads(line[8:]) for line in text.splitlines() if line.startswith(": trace ")]
        chunks = [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
        [warning] = [e for e in traces if e["type"] == "warning"]
    else:
        raw = sdk.chat.completions.with_raw_response.create(**ask, max_tokens=8)
        completion = raw.parse()
        assert completion.choices[0].finish_reason == "length" and not completion.choices[0].message.content
        [warning] = [e for e in orjson.loads(raw.content)["trace"] if e["type"] == "warning"]
    assert warning["code"] == "reasoning_starved" and warning["max_tokens"] == 8
    flagged(proxy, before, "chat")


@pytest.mark.parametrize("stream", [False, True])
def test_responses(proxy: BackgroundServer, stream: bool) -> None:
    before = starved_count(proxy)
    sdk = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=KEY, default_headers=DEEP)
    ask: dict[str, Any] = {"model": "deepseek-v4-pro", "input": SAID, "max_output_tokens": 16}
    if stream:
        # (The SDK's stream helper wants response.completed; an incomplete answer ends otherwise.)
        events = list(sdk.responses.create(**ask, stream=True))
        assert events[-1].type == "response.incomplete"
        response = events[-1].response
    else:
        response = sdk.responses.create(**ask)
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert not response.output_text
    flagged(proxy, before, "responses")


@pytest.mark.parametrize("stream", [False, True])
def test_messages(proxy: BackgroundServer, stream: bool) -> None:
    before = starved_count(proxy)
    sdk = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, default_headers=DEEP)
    ask: dict[str, Any] = {
        "model": "deepseek-v4-pro",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": SAID}],
    }
    if stream:
        with sdk.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = sdk.messages.create(**ask)
    assert message.stop_reason == "max_tokens"
    assert not [block for block in message.content if block.type == "text" and block.text]
    flagged(proxy, before, "messages")
