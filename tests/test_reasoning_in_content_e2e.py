"""Kimi K3 end to end through a real proxy and the simulated Kimi: the levels it takes (top-level
`reasoning_effort`, no `thinking`), `off` refused with the reason (header and trace note, never a
silent `none`), and an answer whose chain of thought came as its text (MoonshotAI/Kimi-K3#45,
the simulated upstream's `reasoning-in-content` fault) forwarded as it came and counted: the
trace's `reasoning_in_content` warning and `thinkproxy_reasoning_in_content_total`. Where the
text does carry a marker (`<think>`), it is split instead, and nothing is counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.core.config.providers import ProvidersTable
from proxy.core.controls import TraceMode
from proxy.core.stream.completion import process_completion
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

KEY = "ck-alice-2f81"
ASK = [{"role": "user", "content": "Is a tomato a fruit or a vegetable?"}]


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[BackgroundServer, BackgroundServer]]:
    with BackgroundServer(create_mock_app(MockOptions(chunk_chars=8))) as mock:
        settings = make_settings(
            upstream_base_url=f"{mock.url}/kimi/v1", client_keys=[f"alice:{KEY}"], trace="brief"
        )
        with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
            yield mock, proxy


def ask(proxy: BackgroundServer, level: str | None, stream: bool = False, **headers: str) -> httpx.Response:
    if level is not None:
        headers["X-Thinking-Level"] = level
    return httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "kimi-k3", "messages": ASK, "stream": stream, "thinking": {"type": "enabled"}},
        headers={"Authorization": f"Bearer {KEY}", **headers},
        timeout=20,
    )


def sent(mock: BackgroundServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    return body


def trace_of(response: httpx.Response, stream: bool) -> list[dict[str, Any]]:
    if not stream:
        events: list[dict[str, Any]] = response.json()["trace"]
        return events
    return [
        orjson.loads(line[len(": trace ") :])
        for line in response.text.splitlines()
        if line.startswith(": trace ")
    ]


def answer_of(response: httpx.Response, stream: bool) -> tuple[str, str]:
    if not stream:
        message = response.json()["choices"][0]["message"]
        return message.get("reasoning_content") or "", message.get("content") or ""
    reasoning = content = ""
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in orjson.loads(line[6:]).get("choices", []):
                reasoning += (choice.get("delta") or {}).get("reasoning_content") or ""
                content += (choice.get("delta") or {}).get("content") or ""
    return reasoning, content


def in_content_count(proxy: BackgroundServer) -> float:
    total = 0.0
    for line in httpx.get(f"{proxy.url}/metrics").text.splitlines():
        if (
            line.startswith("thinkproxy_reasoning_in_content_total{")
            and 'gen_ai_request_model="kimi-k3"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize(("level", "knobs"), [("standard", {}), ("deep", {"reasoning_effort": "max"})])
def test_k3_levels_send_top_level_effort_and_never_thinking(
    stack: tuple[BackgroundServer, BackgroundServer], level: str, knobs: dict[str, Any]
) -> None:
    mock, proxy = stack
    r = ask(proxy, level)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-applied"] == level and "x-thinking-level-reason" not in r.headers
    body = sent(mock)
    assert "thinking" not in body  # K3 takes none (the client's was removed)
    assert {k: body[k] for k in ("reasoning_effort",) if k in body} == knobs
    reasoning, content = answer_of(r, False)
    assert reasoning and content


@pytest.mark.parametrize("stream", [False, True])
def test_k3_off_is_not_applicable_and_says_why(
    stack: tuple[BackgroundServer, BackgroundServer], stream: bool
) -> None:
    mock, proxy = stack
    r = ask(proxy, "off", stream)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-applied"] == "none"
    reason = r.headers["x-thinking-level-reason"]
    assert reason.startswith("off is not applicable to this model: ") and "always reasons" in reason
    [note] = [e for e in trace_of(r, stream) if e["type"] == "note"]
    assert note["code"] == "level_not_applicable" and note["level"] == "off" and note["message"] == reason
    assert sent(mock)["thinking"] == {"type": "enabled"}  # no level applied: the body as the client sent it


@pytest.mark.parametrize("stream", [False, True])
def test_k3_reasoning_written_as_the_answer_is_forwarded_and_counted(
    stack: tuple[BackgroundServer, BackgroundServer], stream: bool
) -> None:
    _, proxy = stack
    before = in_content_count(proxy)
    r = ask(proxy, "standard", stream, **{"X-Mock-Fault": "reasoning-in-content"})
    assert r.status_code == 200, r.text
    reasoning, content = answer_of(r, stream)
    assert reasoning == "" and "tomato" in content.lower()  # not guessed apart: as it came
    warnings = [e for e in trace_of(r, stream) if e["type"] == "warning"]
    assert [w["code"] for w in warnings] == ["reasoning_in_content"]
    assert in_content_count(proxy) == before + 1
    # the same request answered normally: nothing counted
    assert ask(proxy, "standard", stream).status_code == 200
    assert in_content_count(proxy) == before + 1


def test_k3_reasoning_inside_a_think_marker_is_split_and_not_counted() -> None:
    # The Kimi Code route wraps K3's reasoning in <think> in content: a marker, so it is split.
    dialect = ProvidersTable.load().match("https://api.moonshot.ai/v1", "kimi-k3")
    assert dialect.reasoning.always and dialect.reasoning.tags == ("think",)
    options = ReasoningOptions(tags=dialect.reasoning.tags, implicit_open=False)
    trace = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="standard", provider="kimi")
    trace.expect_reasoning()
    body = {
        "id": "c",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "<think>fruit, botanically</think>A fruit."},
            }
        ],
    }
    out = orjson.loads(
        process_completion(orjson.dumps(body), reasoning=options, trace=trace, request_body={}, now_ms=1.0)
    )
    message = out["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("fruit, botanically", "A fruit.")
    assert not [e for e in out["trace"] if e["type"] == "warning"]
    outcome = trace.outcome()
    assert outcome is not None and not outcome.reasoning_in_content
