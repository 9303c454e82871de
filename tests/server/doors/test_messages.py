"""The Anthropic Messages front door end to end: a real proxy in front of the simulated DeepSeek
(which enforces its reasoning-replay rule), driven by raw HTTP and the Anthropic Python SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
MODEL = "deepseek-v4-pro"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = "What's the weather in Paris? Use get_weather."


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def proxy_for(mock: BackgroundServer, **overrides: Any) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", **overrides)
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


@pytest.fixture(scope="module")
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:
    with proxy_for(mock, state="off") as server:
        yield server


def client(proxy: BackgroundServer, key: str = "sk-test") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0, timeout=20)


def upstream_requests(mock: BackgroundServer) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = httpx.get(f"{mock.url}/_mock/requests").json()
    return log


def last_upstream(mock: BackgroundServer) -> dict[str, Any]:
    record: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()
    return record


def sse_events(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    events, comments = [], []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        comments += [line for line in lines if line.startswith(":")]
        names = [line[7:] for line in lines if line.startswith("event: ")]
        data = [line[6:] for line in lines if line.startswith("data: ")]
        if data:
            event = json.loads("\n".join(data))
            assert names == [event["type"]], (names, event["type"])
            events.append(event)
    return events, comments


def test_a_stream_is_anthropic_events_with_the_trace_as_comments(mock: BackgroundServer) -> None:
    with proxy_for(mock, trace="detailed") as proxy:
        body = {
            "model": MODEL,
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": ASK}],
            "tools": [WEATHER],
            "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 20000},
        }
        headers = {"x-api-key": "sk-k", "anthropic-version": "2023-06-01"}
        r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-thinking-level-applied"] == "deep" and r.headers["x-thinking-provider"] == "deepseek"
    events, comments = sse_events(r.text)
    for event in events:
        if event["type"] not in ("ping", "error"):
            EVENT.validate_python(event)
    types = [e["type"] for e in events]
    assert types[:2] == ["message_start", "ping"] and types[-2:] == ["message_delta", "message_stop"]
    assert comments and all(c.startswith(": trace {") for c in comments)
    assert "[DONE]" not in r.text
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "tool_use"]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    sent = last_upstream(mock)
    # The SDK's key reached the chat upstream as a bearer token; Anthropic's headers did not.
    assert sent["headers"].get("authorization", "").startswith("Bearer ")  # (the mock masks the key)
    assert "anthropic-version" not in sent["headers"] and "x-api-key" not in sent["headers"]
    assert sent["body"]["thinking"] == {"type": "enabled"} and sent["body"]["reasoning_effort"] == "max"


def test_the_sdk_streams_thinking_and_text(proxy: BackgroundServer) -> None:
    with client(proxy).messages.stream(
        model=MODEL,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Think about 2+2."}],
        thinking={"type": "adaptive"},
    ) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert "thinking" in kinds and "text" in kinds and "signature" in kinds
    assert [b.type for b in message.content] == ["thinking", "text"]
    thinking = message.content[0]
    assert thinking.type == "thinking" and thinking.thinking and thinking.signature.startswith("tp1.")
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0


def test_non_stream_is_one_message(proxy: BackgroundServer, mock: BackgroundServer) -> None:
    message = client(proxy).messages.create(
        model=MODEL,
        max_tokens=512,
        system="Be brief.",
        messages=[{"role": "user", "content": ASK}],
        tools=[WEATHER],
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    assert isinstance(message, Message) and message.id.startswith("msg_")
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.stop_reason == "tool_use"
    sent = last_upstream(mock)["body"]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["thinking"] == {"type": "enabled"} and "reasoning_effort" not in sent  # standard


def tool_loop(proxy: BackgroundServer, mock: BackgroundServer, edit: Any = None) -> Any:
    """A two-turn tool loop through the SDK; `edit` changes the first answer's blocks before
    they are sent back. Returns the second turn's answer (or raises the SDK's error)."""
    sdk = client(proxy)
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 1024,
        "tools": [WEATHER],
        "thinking": {"type": "enabled", "budget_tokens": 4096},
    }
    first = sdk.messages.create(messages=[{"role": "user", "content": ASK}], **kwargs)
    call = next(b for b in first.content if b.type == "tool_use")
    blocks = [b.model_dump(exclude_none=True) for b in first.content]
    if edit is not None:
        blocks = edit(blocks)
    history = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": blocks},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}],
        },
    ]
    return sdk.messages.create(messages=history, **kwargs)


def test_a_tool_loop_works_because_the_signed_thinking_carried_the_reasoning(
    proxy: BackgroundServer, mock: BackgroundServer
) -> None:
    """The state store is off: only the thinking block's signature can carry DeepSeek's
    reasoning_content to the second turn, which DeepSeek refuses without it."""
    second = tool_loop(proxy, mock)
    assert second.stop_reason == "end_turn" and any(b.type == "text" for b in second.content)
    turn = next(m for m in last_upstream(mock)["body"]["messages"] if m.get("tool_calls"))
    assert turn["reasoning_content"]


@pytest.mark.parametrize("how", ["dropped", "tampered", "anthropic"])
def test_without_a_verified_signature_deepseek_refuses_and_its_error_passes_back(
    proxy: BackgroundServer, mock: BackgroundServer, how: str
) -> None:
    def edit(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if how == "dropped":
            return [b for b in blocks if b["type"] != "thinking"]
        for b in blocks:
            if b["type"] == "thinking":
                b["signature"] = b["signature"][:-4] + "AAAA" if how == "tampered" else "EqQBCkgIARAB"
        return blocks

    with pytest.raises(anthropic.BadRequestError) as caught:
        tool_loop(proxy, mock, edit)
    # DeepSeek's own 400, unchanged (OpenAI-shaped: it is the upstream's body).
    assert "reasoning_content" in json.dumps(caught.value.body)
    sent = json.dumps(last_upstream(mock)["body"])
    assert "tp1." not in sent and "EqQB" not in sent


REDACT_THINKING = "redact-thinking-2026-02-12"


@pytest.mark.parametrize("stream", [False, True])
def test_claude_code_s_redact_thinking_beta_gets_no_thinking_text(
    proxy: BackgroundServer, stream: bool
) -> None:
    """Claude Code sends the beta `redact-thinking-2026-02-12`: Anthropic then returns thinking
    blocks with empty text, even with `display: summarized`. Bridged, the same: signed blocks
    (the reasoning still carried to the next turn), no text to that client."""
    body = {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Think about 2+2."}],
        "thinking": {"type": "adaptive", "display": "summarized"},
        "stream": stream,
    }
    betas = f"claude-code-20250219, {REDACT_THINKING}, interleaved-thinking-2025-05-14"
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={"anthropic-beta": betas})
    assert r.status_code == 200, r.text
    if stream:
        events, _ = sse_events(r.text)
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
        assert [d for d in deltas if d["type"] == "thinking_delta" and d["thinking"]] == []
        assert any(d["type"] == "signature_delta" and d["signature"].startswith("tp1.") for d in deltas)
    else:
        thinking = r.json()["content"][0]
        assert thinking["type"] == "thinking" and thinking["thinking"] == ""
        assert thinking["signature"].startswith("tp1.")
    # Without the beta the summarized text is shown.
    r = httpx.post(f"{proxy.url}/v1/messages", json={**body, "stream": False})
    assert r.json()["content"][0]["thinking"]


def test_between_tools_thinking_is_a_level(proxy: BackgroundServer, mock: BackgroundServer) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hi"}],
        "thinking": {"type": "between_tools"},
        "output_config": {"effort": "high"},
    }
    r = httpx.post(f"{proxy.url}/v1/messages", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-applied"] == "deep"
    assert last_upstream(mock)["body"]["reasoning_effort"] == "max"


def test_claude_code_s_sub_agent_request_is_off_bridged(
    proxy: BackgroundServer, mock: BackgroundServer
) -> None:
    """Claude Code >= 2.1.166's sub-agents: `thinking: {type: disabled}` beside the session's effort.
    Bridged to DeepSeek's chat API the level is off, one knob: no effort goes with it."""
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hi"}],
        "thinking": {"type": "disabled"},
        "output_config": {"effort": "max"},
    }
    r = httpx.post(f"{proxy.url}/v1/messages", json=body)
    assert r.status_code == 200 and r.headers["x-thinking-level-applied"] == "off"
    sent = last_upstream(mock)["body"]
    assert sent["thinking"] == {"type": "disabled"} and "reasoning_effort" not in sent


def test_thinking_disabled_is_level_off(proxy: BackgroundServer, mock: BackgroundServer) -> None:
    r = httpx.post(
        f"{proxy.url}/v1/messages",
        json={
            "model": MODEL,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Hi"}],
            "thinking": {"type": "disabled"},
        },
    )
    assert r.status_code == 200 and r.headers["x-thinking-level-applied"] == "off"
    assert [b["type"] for b in r.json()["content"]] == ["text"]
    assert last_upstream(mock)["body"]["thinking"] == {"type": "disabled"}


def test_the_level_header_wins(proxy: BackgroundServer, mock: BackgroundServer) -> None:
    r = httpx.post(
        f"{proxy.url}/v1/messages",
        json={
            "model": MODEL,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Hi"}],
            "thinking": {"type": "disabled"},
        },
        headers={"x-thinking-level": "deep"},
    )
    assert r.headers["x-thinking-level-applied"] == "deep"
    assert last_upstream(mock)["body"]["reasoning_effort"] == "max"


def test_server_tools_are_omitted_and_said(proxy: BackgroundServer, mock: BackgroundServer) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
    }
    r = httpx.post(f"{proxy.url}/v1/messages", json=body)
    assert r.status_code == 200 and r.headers["x-thinking-omitted-tools"] == "web_search_20250305"
    assert [t["function"]["name"] for t in last_upstream(mock)["body"]["tools"]] == ["get_weather"]


def test_the_anthropic_query_string_stays_at_the_door(
    proxy: BackgroundServer, mock: BackgroundServer
) -> None:
    """Claude Code and the Anthropic SDKs' beta calls post to `/v1/messages?beta=true`: Anthropic's
    flag, nothing a chat upstream should read."""
    body = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}
    r = httpx.post(f"{proxy.url}/v1/messages?beta=true", json=body, headers={"anthropic-beta": "x-2025"})
    assert r.status_code == 200, r.text
    sent = last_upstream(mock)
    assert sent["path"] == "/deepseek/v1/chat/completions" and sent["query"] == ""
    assert "anthropic-beta" not in sent["headers"]


def test_the_proxys_own_errors_are_anthropic_shaped(proxy: BackgroundServer) -> None:
    r = httpx.post(f"{proxy.url}/v1/messages", json={"model": MODEL, "messages": []})
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages must be a non-empty list of messages.",
        },
    }
    with pytest.raises(anthropic.BadRequestError, match=r"thinking\.type"):
        client(proxy).messages.create(
            model=MODEL,
            max_tokens=8,
            messages=[{"role": "user", "content": "x"}],
            thinking={"type": "x"},  # type: ignore[typeddict-item]
        )


def test_gateway_keys_are_read_from_x_api_key(mock: BackgroundServer) -> None:
    with proxy_for(mock, client_keys=["ck-1"], upstream_api_key="sk-upstream") as proxy:
        unknown = httpx.post(f"{proxy.url}/v1/messages", json={}, headers={"x-api-key": "nope"})
        assert unknown.status_code == 401 and unknown.json()["error"]["type"] == "authentication_error"
        message = client(proxy, key="ck-1").messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
        )
    assert message.content
    assert last_upstream(mock)["headers"]["authorization"].startswith("Bearer ")


def test_count_tokens_is_an_estimate(proxy: BackgroundServer) -> None:
    sdk = client(proxy)
    short = sdk.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    long = sdk.messages.count_tokens(
        model=MODEL,
        messages=[{"role": "user", "content": "word " * 400}],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert 0 < short.input_tokens < long.input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_passes_back_unchanged(
    proxy: BackgroundServer, mock: BackgroundServer, stream: bool
) -> None:
    headers = {"authorization": "Bearer k", "x-mock-fault": "429"}
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "stream": stream}
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers)
    direct = httpx.post(
        f"{mock.url}/deepseek/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        headers=headers,
    )
    assert r.status_code == direct.status_code == 429
    assert r.json() == direct.json()


def test_a_stream_cut_upstream_ends_with_an_error_event(proxy: BackgroundServer) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "A long story."}],
        "stream": True,
    }
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={"x-mock-fault": "disconnect"})
    events, _ = sse_events(r.text)
    assert events[-1]["type"] == "error" and events[-1]["error"]["type"] in ("api_error", "timeout_error")
    assert "message_stop" not in [e["type"] for e in events]
    with (
        pytest.raises(anthropic.APIStatusError),
        client(proxy).messages.stream(
            model=MODEL,
            max_tokens=512,
            messages=[{"role": "user", "content": "A long story."}],
            extra_headers={"x-mock-fault": "disconnect"},
        ) as stream,
    ):
        for _ in stream:
            pass


SLOW = {"x-mock-pace-ms": "250", "x-mock-chunk-chars": "24"}


def test_a_silent_upstream_gets_pings_between_events(mock: BackgroundServer) -> None:
    """Anthropic sends `ping` events while nothing else is said; the door does so after the
    keep-alive interval of silence (THINKPROXY_REVIEW_KEEPALIVE, here 10 ms against an upstream
    that pauses 250 ms between chunks), always between whole events."""
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "thinking": {"type": "disabled"},
    }
    with proxy_for(mock, state="off", review_keepalive=0.01) as proxy:
        r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=SLOW)
    assert r.status_code == 200, r.text
    events, _ = sse_events(r.text)
    for event in events:
        if event["type"] != "ping":
            EVENT.validate_python(event)
    types = [e["type"] for e in events]
    first_delta, last_delta = (
        types.index("content_block_delta"),
        len(types) - 1 - types[::-1].index("content_block_delta"),
    )
    assert "ping" in types[first_delta:last_delta], types  # while the upstream paused mid-answer
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"], types
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text.startswith('You said: "Hi".'), text


def test_no_pings_while_the_upstream_keeps_talking(proxy: BackgroundServer) -> None:
    """With the default interval (10 s) a brisk stream has only the ping after message_start."""
    body = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    r = httpx.post(f"{proxy.url}/v1/messages", json=body)
    events, _ = sse_events(r.text)
    assert [e["type"] for e in events].count("ping") == 1


def vllm_stopped_at_end() -> Starlette:
    """A vLLM-like upstream whose answer ended at the stop string `END`, which it names."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **choice: Any) -> bytes:
        body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, **choice}]
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    async def chat(request: Request) -> Response:
        if (await request.json()).get("stream"):
            frames = chunk({"role": "assistant", "content": "Hi"}) + chunk({}, "stop", stop_reason="END")
            return Response(frames + b"data: [DONE]\n\n", media_type="text/event-stream")
        choice = {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
        body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
        body["choices"][0]["stop_reason"] = "END"
        return Response(json.dumps(body), media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.parametrize("stream", [True, False])
def test_a_stop_sequence_the_upstream_names_is_the_stop_reason(stream: bool) -> None:
    body = {
        "model": "m",
        "max_tokens": 9,
        "stop_sequences": ["END"],
        "messages": [{"role": "user", "content": "x"}],
    }
    with (
        BackgroundServer(vllm_stopped_at_end()) as upstream,
        BackgroundServer(create_app(make_settings(upstream_base_url=f"{upstream.url}/v1"))) as proxy,
        client(proxy) as anthropic_client,  # (closed: its pooled socket too)
    ):
        if stream:
            with anthropic_client.messages.stream(**body) as events:  # type: ignore[arg-type]
                message = events.get_final_message()
        else:
            message = anthropic_client.messages.create(**body)  # type: ignore[arg-type]
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "END"
    assert [b.type for b in message.content] == ["text"]


def answering_200(body: dict[str, Any]) -> Starlette:
    """An upstream whose non-stream answer is a 2xx that failed (as OpenRouter reports errors)."""

    async def chat(request: Request) -> Response:
        return Response(json.dumps(body), media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.parametrize(
    ("answer", "status", "kind"),
    [
        ({"error": {"message": "Rate limit exceeded", "code": 429}}, 429, "rate_limit_error"),
        ({"error": {"message": "busy", "code": "overloaded"}}, 529, "overloaded_error"),
        ({"error": "upstream broke"}, 502, "api_error"),
        ({"id": "c", "object": "chat.completion", "choices": []}, 502, "api_error"),
    ],
)
def test_a_failed_non_stream_answer_has_its_errors_status(
    answer: dict[str, Any], status: int, kind: str
) -> None:
    """Not a 200 with an error body: the status the error names, else 502 (the upstream's answer
    could not be used); the body is Anthropic's error shape, which the SDK raises on."""
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]}
    with (
        BackgroundServer(answering_200(answer)) as upstream,
        BackgroundServer(create_app(make_settings(upstream_base_url=f"{upstream.url}/v1"))) as proxy,
    ):
        r = httpx.post(f"{proxy.url}/v1/messages", json=body)
        assert r.status_code == status, r.text
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == kind
        with pytest.raises(anthropic.APIStatusError) as raised:
            client(proxy).messages.create(**body)  # type: ignore[arg-type]
        assert raised.value.status_code == status


def test_a_tool_result_without_its_call_is_refused_as_anthropic_does(
    proxy: BackgroundServer, mock: BackgroundServer
) -> None:
    """The rule the Responses door keeps (proxy.core.protocols.tool_pairing): nothing is forwarded."""
    before = len(upstream_requests(mock))
    orphan = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}
    unanswered = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}],
    }
    for messages in (
        [{"role": "user", "content": "hi"}, orphan],
        [{"role": "user", "content": "hi"}, unanswered],
    ):
        r = httpx.post(
            f"{proxy.url}/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": messages}
        )
        assert r.status_code == 400
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
        assert "tool_result" in r.json()["error"]["message"]
    assert len(upstream_requests(mock)) == before
