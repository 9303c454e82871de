"""The Open Responses compliance suite against the Responses door, bridged (issue 43, item 1).

Open Responses (OpenAI's Responses API as an open specification) publishes a suite of seven cases
that post to `{base}/responses` and validate every response against its `ResponseResource` schema
and every streamed event against its event schema. Here each case runs as the suite runs it,
through a real proxy onto the simulated DeepSeek and Kimi with `X-Thinking-Level: standard`,
validated with `jsonschema` against the specification's own file (tests/fixtures/openresponses/,
source and license in its README; the validator is tests.helpers.OpenResponsesSchema). The
stored copy (`GET /v1/responses/{id}`) is validated too, and the request fields a response
repeats are checked against what was sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import OpenResponsesSchema, make_settings

SCHEMA = OpenResponsesSchema()
# The simulated upstream's path prefix → a model of that provider (both bridged: chat only).
UPSTREAMS = {"deepseek": "deepseek-v4-pro", "kimi": "kimi-k2.6"}
HEADERS = {"authorization": "Bearer sk-test", "x-thinking-level": "standard"}

# The suite's requests (src/lib/compliance-tests.ts), with the model filled in by the run.
GET_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}
        },
        "required": ["location"],
    },
}
WEATHER_QUESTION = [
    {"type": "message", "role": "user", "content": "What's the weather like in San Francisco?"}
]
# The suite's image: a red heart icon on a white background, 32x32 PNG.
HEART = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAIAAAD8GO2jAAABmklEQVR42tyWAaTyUBzFew/eG4AH"
    "z+MBSAHKBiJRGFKwIgQQJKLUIioBIhCAiCAAEizAQIAECaASqFFJq84nudjnaqvuPnxzgP9xfrq5938csPn7PwHTKSoViCIE"
    "AYEAMhmoKsU2mUCWEQqB5xEMIp/HaGQG2G6RSuH9HQ7H34rFrtPbdz4jl6PbwmEsl3QA1mt4vcRKk8dz9eg6IpF7tt9fzGY0"
    "gCgafFRFo5Blc5vLhf3eCOj1yNhM5GRMVK0aATxPZoz09YXjkQDmczJgquGQAPp9WwCNBgG027YACgUC6HRsAZRKBDAY2AJo"
    "Nv/ZnwzA6WScznG3p4UAymXGAEkyXrTFAh8fLAGqagQAyGaZpYsi7bHTNPz8MEj//LxuFPo+UBS8vb0KaLXubrRa7aX0RMLC"
    "ykwmn0z3+XA4WACcTpCkh9MFAZpmuVXo+mO/w+/HZvNgbblcUCxaSo/Hyck80Yu6XXDcvfVZr79cvMZjuN2U9O9vKAqjZrfb"
    "IZ0mV4TUi9Xqz6jddNy//7+e3n8Fhf/Llo2kxi8AQyGRoDkmAhAAAAAASUVORK5CYII="
)


@dataclass(frozen=True)
class Run:
    """One case's outcome: the response object (a stream's: from its terminal event) and, for a
    stream, its events."""

    response: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)


Check = Callable[[Run], list[str]]


def has_output(run: Run) -> list[str]:
    return [] if run.response.get("output") else ["Response has no output items"]


def completed(run: Run) -> list[str]:
    status = run.response.get("status")
    return [] if status == "completed" else [f'Expected status "completed" but got "{status}"']


def has_output_type(kind: str) -> Check:
    def check(run: Run) -> list[str]:
        found = any(item.get("type") == kind for item in run.response.get("output") or ())
        return [] if found else [f'Expected output item of type "{kind}" but none found']

    return check


def streamed(run: Run) -> list[str]:
    return [] if run.events else ["No streaming events received"]


def events_conform(run: Run) -> list[str]:
    return [error for event in run.events for error in SCHEMA.event_errors(event)]


def streamed_function_call(run: Run) -> list[str]:
    """tool-calling-streaming's own check: the call's item added and done, its arguments streamed."""
    types = [event["type"] for event in run.events]
    errors = []
    for moment in ("added", "done"):
        if not any(
            e["type"] == f"response.output_item.{moment}"
            and (e.get("item") or {}).get("type") == "function_call"
            for e in run.events
        ):
            errors.append(f"Missing response.output_item.{moment} event with function_call item")
    for kind in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
        if kind not in types:
            errors.append(f"Missing {kind} event")
    return errors


@dataclass(frozen=True)
class Case:
    input: list[dict[str, Any]]
    checks: tuple[Check, ...]
    stream: bool = False
    tools: tuple[dict[str, Any], ...] = ()


CASES = {
    "basic-response": Case(
        [{"type": "message", "role": "user", "content": "Say hello in exactly 3 words."}],
        (has_output, completed),
    ),
    "streaming-response": Case(
        [{"type": "message", "role": "user", "content": "Count from 1 to 5."}],
        (streamed, events_conform, completed),
        stream=True,
    ),
    "system-prompt": Case(
        [
            {
                "type": "message",
                "role": "system",
                "content": "You are a pirate. Always respond in pirate speak.",
            },
            {"type": "message", "role": "user", "content": "Say hello."},
        ],
        (has_output, completed),
    ),
    "tool-calling": Case(
        WEATHER_QUESTION, (has_output, has_output_type("function_call")), tools=(GET_WEATHER,)
    ),
    "tool-calling-streaming": Case(
        WEATHER_QUESTION,
        (streamed, events_conform, streamed_function_call),
        stream=True,
        tools=(GET_WEATHER,),
    ),
    "image-input": Case(
        [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
                    {"type": "input_image", "image_url": HEART},
                ],
            }
        ],
        (has_output, completed),
    ),
    "multi-turn": Case(
        [
            {"type": "message", "role": "user", "content": "My name is Alice."},
            {
                "type": "message",
                "role": "assistant",
                "content": "Hello Alice! Nice to meet you. How can I help you today?",
            },
            {"type": "message", "role": "user", "content": "What is my name?"},
        ],
        (has_output, completed),
    ),
}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


@pytest.fixture(scope="module")
def proxies(mock: BackgroundServer) -> Iterator[dict[str, BackgroundServer]]:
    """One proxy per simulated upstream, each with the state store on (its default)."""
    servers = {
        prefix: BackgroundServer(
            create_app(
                make_settings(upstream_base_url=f"{mock.url}/{prefix}/v1"), table=simulated_table(mock.port)
            )
        )
        for prefix in UPSTREAMS
    }
    for server in servers.values():
        server.__enter__()
    yield servers
    for server in servers.values():
        server.__exit__(None, None, None)


def sse(text: str) -> list[dict[str, Any]]:
    """The stream's events as the suite's parser reads them: `data:` lines, comments ignored."""
    events = []
    for block in text.split("\n\n"):
        data = [line[5:].strip() for line in block.splitlines() if line.startswith("data:")]
        if data and data[-1] != "[DONE]":
            events.append(json.loads(data[-1]))
    return events


def post(proxy: BackgroundServer, body: dict[str, Any]) -> httpx.Response:
    r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers=HEADERS, timeout=20)
    assert r.status_code == 200, r.text
    return r


def run_case(proxy: BackgroundServer, body: dict[str, Any]) -> Run:
    r = post(proxy, body)
    if not body.get("stream"):
        response: dict[str, Any] = r.json()
        return Run(response)
    events = sse(r.text)
    terminal = ("response.completed", "response.failed", "response.incomplete")
    finals = [e["response"] for e in events if e.get("type") in terminal]
    assert finals, f"no terminal event in {[e.get('type') for e in events]}"
    return Run(finals[-1], events)


def case_body(case: Case, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "input": case.input, "stream": case.stream}
    if case.tools:
        body["tools"] = list(case.tools)
    return body


@pytest.mark.parametrize("upstream", list(UPSTREAMS))
@pytest.mark.parametrize("name", list(CASES))
def test_compliance_case(proxies: dict[str, BackgroundServer], upstream: str, name: str) -> None:
    case = CASES[name]
    run = run_case(proxies[upstream], case_body(case, UPSTREAMS[upstream]))
    assert SCHEMA.errors(run.response, "ResponseResource") == []
    assert [error for check in case.checks for error in check(run)] == []


@pytest.mark.parametrize("upstream", list(UPSTREAMS))
def test_every_response_object_of_a_stream_conforms(
    proxies: dict[str, BackgroundServer], upstream: str
) -> None:
    """`response.created` and `response.in_progress` carry the whole object too, before any output."""
    run = run_case(proxies[upstream], case_body(CASES["streaming-response"], UPSTREAMS[upstream]))
    opening = run.events[:2]
    assert [e["type"] for e in opening] == ["response.created", "response.in_progress"]
    for event in opening:
        response = event["response"]
        assert SCHEMA.errors(response, "ResponseResource") == []
        assert response["status"] == "in_progress" and response["completed_at"] is None
        assert response["output"] == [] and response["usage"] is None
    assert run.response["completed_at"] >= run.response["created_at"] == opening[0]["response"]["created_at"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_stored_response_conforms_when_read_back(
    proxies: dict[str, BackgroundServer], stream: bool
) -> None:
    proxy = proxies["deepseek"]
    answered = run_case(proxy, case_body(CASES["tool-calling"], UPSTREAMS["deepseek"]) | {"stream": stream})
    r = httpx.get(f"{proxy.url}/v1/responses/{answered.response['id']}", headers=HEADERS, timeout=20)
    assert r.status_code == 200, r.text
    stored = r.json()
    assert SCHEMA.errors(stored, "ResponseResource") == []
    assert stored == answered.response


def test_the_response_repeats_what_the_request_set(proxies: dict[str, BackgroundServer]) -> None:
    proxy = proxies["deepseek"]
    first = run_case(proxy, case_body(CASES["basic-response"], UPSTREAMS["deepseek"])).response
    sent: dict[str, Any] = {
        "model": UPSTREAMS["deepseek"],
        "input": "What's the weather like in San Francisco?",
        "instructions": "Be brief.",
        "previous_response_id": first["id"],
        "tools": [GET_WEATHER],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "truncation": "auto",
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "reasoning": {"effort": "medium", "summary": "auto"},
        "temperature": 0.3,
        "top_p": 0.9,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "top_logprobs": 2,
        "max_output_tokens": 4096,
        "max_tool_calls": 3,
        "store": True,
        "metadata": {"ticket": "T-1"},
        "safety_identifier": "user-hash-1",
        "prompt_cache_key": "weather",
        "user": "alice",
    }
    for stream in (False, True):
        response = run_case(proxy, sent | {"stream": stream}).response
        assert SCHEMA.errors(response, "ResponseResource") == []
        echoed = {key: response[key] for key in sent if key not in ("model", "input", "tools")}
        assert echoed == {key: value for key, value in sent.items() if key not in ("model", "input", "tools")}
        (tool,) = response["tools"]
        assert tool == {**GET_WEATHER, "strict": None}  # as declared; strict was not sent


def test_penalties_go_upstream_as_on_chat(
    mock: BackgroundServer, proxies: dict[str, BackgroundServer]
) -> None:
    """Open Responses' presence_penalty and frequency_penalty mean what chat's do: kept."""
    body = {"model": UPSTREAMS["kimi"], "input": "Hi", "presence_penalty": 0.5, "frequency_penalty": 0.25}
    post(proxies["kimi"], body)
    sent = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    assert (sent["presence_penalty"], sent["frequency_penalty"]) == (0.5, 0.25)


def test_defaults_are_the_documented_ones(proxies: dict[str, BackgroundServer]) -> None:
    """A request that sets nothing gets the API's documented defaults (docs/responses.md)."""
    response = run_case(proxies["kimi"], {"model": UPSTREAMS["kimi"], "input": "Hi"}).response
    assert SCHEMA.errors(response, "ResponseResource") == []
    assert {
        key: response[key]
        for key in (
            "instructions",
            "previous_response_id",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "truncation",
            "text",
            "reasoning",
            "temperature",
            "top_p",
            "presence_penalty",
            "frequency_penalty",
            "top_logprobs",
            "max_output_tokens",
            "max_tool_calls",
            "store",
            "background",
            "service_tier",
            "metadata",
            "safety_identifier",
            "prompt_cache_key",
            "user",
        )
    } == {
        "instructions": None,
        "previous_response_id": None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "truncation": "disabled",
        "text": {"format": {"type": "text"}},
        "reasoning": None,
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "store": True,
        "background": False,
        "service_tier": "default",
        "metadata": {},
        "safety_identifier": None,
        "prompt_cache_key": None,
        "user": None,
    }
    assert isinstance(response["created_at"], int) and isinstance(response["completed_at"], int)
    usage = response["usage"]
    assert usage["input_tokens_details"]["cached_tokens"] == 0 and usage["total_tokens"] > 0


def test_store_says_false_when_the_state_store_is_off(mock: BackgroundServer) -> None:
    """Nothing is kept with THINKPROXY_STATE=off: the response does not claim it was stored."""
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", state="off")
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
        response = run_case(proxy, {"model": UPSTREAMS["deepseek"], "input": "Hi", "store": True}).response
    assert SCHEMA.errors(response, "ResponseResource") == []
    assert response["store"] is False
