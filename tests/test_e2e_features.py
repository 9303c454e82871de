"""Thinking levels, reasoning normalization, traces and prompted thinking, end to end:
the official openai SDK (and a generic SSE parser) → proxy (uvicorn) → simulated upstream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx_sse
import jsonschema
import openai
import orjson
import pytest

from proxy.core.config.providers import ProvidersTable
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

SCHEMA = orjson.loads((Path(__file__).parent.parent / "docs" / "trace-event.schema.json").read_bytes())
ASK = [{"role": "user", "content": "Why is the sky blue?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "kb_search",
            "description": "Search the knowledge base",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


class Stack:
    def __init__(self, mock: BackgroundServer, proxy: BackgroundServer) -> None:
        self.mock, self.proxy = mock, proxy

    def upstream(self, dialect: str) -> dict[str, str]:
        return {"X-Upstream-Base-URL": f"{self.mock.url}/{dialect}/v1"}

    def sdk(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.proxy.url}/v1", api_key="sk-test", max_retries=0, timeout=20)

    def last_upstream_body(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.mock.url}/_mock/requests/last").json()["body"]
        return body


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with BackgroundServer(create_mock_app(MockOptions())) as mock:
        settings = make_settings(
            upstream_base_url=f"{mock.url}/deepseek/v1",
            allowed_upstreams=[f"127.0.0.1:{mock.port}"],
            trace="brief",
        )
        with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
            yield Stack(mock, proxy)


def collect(stream: Any) -> tuple[str, str, list[Any]]:
    reasoning, content, chunks = [], [], []
    for chunk in stream:
        chunks.append(chunk)
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning.append(getattr(delta, "reasoning_content", None) or "")
        content.append(delta.content or "")
    return "".join(reasoning), "".join(content), chunks


# -- thinking levels (issue: levels) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("off", {"thinking": {"type": "disabled"}}),
        ("standard", {"thinking": {"type": "enabled"}}),
        ("deep", {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}),
    ],
)
def test_level_header_reaches_deepseek_as_its_dialect(
    stack: Stack, level: str, expected: dict[str, Any]
) -> None:
    raw = stack.sdk().chat.completions.with_raw_response.create(
        model="deepseek-v4", messages=ASK, extra_headers={"X-Thinking-Level": level}
    )
    sent = stack.last_upstream_body()
    assert {k: sent.get(k) for k in expected} == expected
    assert "x-thinking-level" not in {
        k.lower() for k in httpx.get(f"{stack.mock.url}/_mock/requests/last").json()["headers"]
    }
    assert raw.headers["x-thinking-level-applied"] == level
    assert raw.headers["x-thinking-provider"] == "deepseek"
    answer = raw.parse()
    has_reasoning = bool(getattr(answer.choices[0].message, "reasoning_content", None))
    assert has_reasoning is (level != "off")


def test_provider_400_for_a_mapped_param_comes_back_unchanged_with_level_headers(stack: Stack) -> None:
    # An unrecognized OpenAI-compatible host gets the catch-all's reasoning_effort "none" for off;
    # the simulated gpt-5 rejects that value, and its 400 must come back exactly as sent.
    body = {"model": "gpt-5", "messages": ASK}
    settings = make_settings(upstream_base_url=f"{stack.mock.url}/openai/v1")
    # (the simulated upstream is on loopback, which the shipped table reads as self-hosted)
    table = ProvidersTable.load().with_extra_patterns("fallback", [f"127.0.0.1:{stack.mock.port}/openai"])
    with BackgroundServer(create_app(settings, table=table)) as plain_proxy:
        for stream in (False, True):
            r = httpx.post(
                f"{plain_proxy.url}/v1/chat/completions",
                json={**body, "stream": stream},
                headers={"X-Thinking-Level": "off"},
            )
            direct = httpx.post(
                f"{stack.mock.url}/openai/v1/chat/completions",
                json={**body, "stream": stream, "reasoning_effort": "none"},
            )
            assert (r.status_code, r.content) == (400, direct.content)
            assert r.headers["content-type"] == direct.headers["content-type"]
            assert r.headers["x-thinking-level-applied"] == "off"
            assert r.headers["x-thinking-provider"] == "fallback"

    r = httpx.post(
        f"{stack.proxy.url}/v1/chat/completions",
        json={"model": "deepseek-v4", "messages": ASK},
        headers={"X-Thinking-Level": "deep", "X-Mock-Fault": "400"},
    )
    direct = httpx.post(
        f"{stack.mock.url}/deepseek/v1/chat/completions",
        json={"model": "deepseek-v4", "messages": ASK},
        headers={"X-Mock-Fault": "400"},
    )
    assert (r.status_code, r.content) == (400, direct.content)
    assert r.headers["x-thinking-level-applied"] == "deep"
    assert r.headers["x-thinking-provider"] == "deepseek"


def test_deepseek_tool_loop_replays_reasoning_on_the_tool_call_turn(stack: Stack) -> None:
    client = stack.sdk()
    headers = {"X-Thinking-Level": "standard"}
    reasoning, _, chunks = collect(
        client.chat.completions.create(
            model="deepseek-v4", messages=ASK, tools=TOOLS, stream=True, extra_headers=headers
        )
    )
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    call_id = calls[0][0].id
    args = "".join(tc[0].function.arguments or "" for tc in calls)
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": reasoning,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "kb_search", "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": '{"hits": 3}'},
    ]
    answer = client.chat.completions.create(
        model="deepseek-v4", messages=history, tools=TOOLS, extra_headers=headers
    )
    assert answer.choices[0].message.content
    sent = stack.last_upstream_body()["messages"][1]
    assert sent["reasoning_content"] == reasoning


# -- reasoning normalization ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "dialect", ["minimax", "minimax-split", "ollama", "openrouter", "mistral", "qwen", "kimi"]
)
def test_every_dialect_arrives_as_reasoning_content_and_clean_content(stack: Stack, dialect: str) -> None:
    model = "magistral-medium-latest" if dialect == "mistral" else "some-model"
    stream = stack.sdk().chat.completions.create(
        model=model,
        messages=ASK,
        stream=True,
        extra_headers={**stack.upstream(dialect), "X-Thinking-Level": "standard"},
    )
    reasoning, content, _ = collect(stream)
    assert reasoning, dialect
    assert content and "<think" not in content and "think>" not in content
    assert reasoning not in content


def test_hide_removes_reasoning(stack: Stack) -> None:
    for dialect in ("minimax", "openrouter"):
        stream = stack.sdk().chat.completions.create(
            model="m",
            messages=ASK,
            stream=True,
            extra_headers={**stack.upstream(dialect), "X-Reasoning": "hide"},
        )
        reasoning, content, chunks = collect(stream)
        assert reasoning == "" and content
        for c in chunks:
            dumped = c.model_dump_json()
            assert "reasoning.text" not in dumped or '"text"' not in dumped


# -- traces ---------------------------------------------------------------------------------------


def test_plain_sdk_loop_and_stream_helper_work_in_default_mode(stack: Stack) -> None:
    client = stack.sdk()
    text = ""
    for chunk in client.chat.completions.create(model="m", messages=ASK, stream=True):
        text += chunk.choices[0].delta.content or ""  # the loop every tutorial uses
    assert text
    with client.chat.completions.stream(model="m", messages=ASK) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == text


def test_event_format_reaches_a_generic_sse_parser_and_the_stream_helper_still_works(stack: Stack) -> None:
    headers = {"X-Trace": "detailed", "X-Trace-Format": "event", "authorization": "Bearer k"}
    body = {"model": "m", "messages": ASK, "tools": TOOLS, "stream": True}
    with (
        httpx.Client() as http,
        httpx_sse.connect_sse(
            http, "POST", f"{stack.proxy.url}/v1/chat/completions", json=body, headers=headers
        ) as source,
    ):
        events = list(source.iter_sse())
    traces = [orjson.loads(e.data)["trace"] for e in events if e.event == "trace"]
    types = [t["type"] for t in traces]
    assert (
        types[0] == "status"
        and "tool_call.start" in types
        and "tool_call.end" in types
        and types[-1] == "done"
    )
    for t in traces:
        jsonschema.validate(t, SCHEMA)
    with stack.sdk().chat.completions.stream(
        model="m", messages=ASK, extra_headers={"X-Trace": "detailed", "X-Trace-Format": "event"}
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content


def test_non_stream_trace_array_is_schema_valid(stack: Stack) -> None:
    r = httpx.post(
        f"{stack.proxy.url}/v1/chat/completions",
        json={"model": "m", "messages": ASK},
        headers={"X-Trace": "pro", "X-Thinking-Level": "standard"},
    )
    trace = r.json()["trace"]
    assert trace[-1]["type"] == "done" and trace[-1]["level"] == "standard"
    for event in trace:
        jsonschema.validate(event, SCHEMA)


def test_upstream_error_gets_no_trace(stack: Stack) -> None:
    r = httpx.post(
        f"{stack.proxy.url}/v1/chat/completions",
        json={"model": "m", "messages": ASK, "stream": True},
        headers={"X-Trace": "detailed", "X-Mock-Fault": "429"},
    )
    assert r.status_code == 429 and b"trace" not in r.content


# -- prompted thinking ----------------------------------------------------------------------------


def test_gpt4o_at_standard_gets_reasoning_by_prompt_and_never_sees_the_instruction(stack: Stack) -> None:
    raw = stack.sdk().chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=ASK,
        stream=True,
        extra_headers={**stack.upstream("prompted"), "X-Thinking-Level": "standard", "X-Trace": "detailed"},
    )
    assert raw.headers["x-thinking-method"] == "prompt"
    assert raw.headers["x-thinking-level-applied"] == "standard"
    sent = stack.last_upstream_body()["messages"]
    instruction = sent[0]["content"]
    assert sent[0]["role"] == "system" and "<think>" in instruction and sent[1:] == ASK
    reasoning, content, chunks = collect(raw.parse())
    assert reasoning and content and "<think" not in content
    everything = b"".join(c.model_dump_json().encode() for c in chunks) + str(raw.headers).encode()
    assert instruction[:40].encode() not in everything

    # the raw stream, trace comments included, never carries the instruction either
    r = httpx.post(
        f"{stack.proxy.url}/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": ASK, "stream": True},
        headers={**stack.upstream("prompted"), "X-Thinking-Level": "deep", "X-Trace": "detailed"},
    )
    deep_instruction = stack.last_upstream_body()["messages"][0]["content"]
    assert deep_instruction != instruction
    assert deep_instruction[:40].encode() not in r.content and b": trace " in r.content


def test_prompted_model_at_off_gets_no_instruction(stack: Stack) -> None:
    answer = stack.sdk().chat.completions.create(
        model="gpt-4o-mini",
        messages=ASK,
        extra_headers={**stack.upstream("prompted"), "X-Thinking-Level": "off"},
    )
    assert stack.last_upstream_body()["messages"] == ASK
    assert not getattr(answer.choices[0].message, "reasoning_content", None)
