"""OpenTelemetry spans, exported over OTLP/HTTP to a receiver on loopback that decodes the protobuf:
one CLIENT span per chat request with the GenAI attributes, trace events as span events, the
client's traceparent continued and the proxy's span sent upstream, no content unless opted in."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.telemetry.otel import otel_listener
from tests.helpers import make_settings

SECRET = "sk-otel-SECRET-8086"
SAID = "What do the herons of Lake Quirinal eat"
ASK = {"model": "deepseek-v4", "messages": [{"role": "user", "content": SAID}]}
STREAM = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP trace receiver: keeps every export's raw bytes and decoded spans."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []
        self.spans: list[tuple[dict[str, Any], Span]] = []  # (resource attributes, span)
        self.app = Starlette(routes=[Route("/v1/traces", self.export, methods=["POST"])])

    async def export(self, request: Request) -> Response:
        body = await request.body()
        self.raw.append(body)
        decoded = ExportTraceServiceRequest()
        decoded.ParseFromString(body)
        for resource_spans in decoded.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                self.spans += [(resource, span) for span in scope.spans]
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")


def plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes(pairs: Iterable[Any]) -> dict[str, Any]:
    return {pair.key: plain(pair.value) for pair in pairs}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions()), graceful_s=0.1) as server:
        yield server


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    receiver = Receiver()
    with BackgroundServer(receiver.app, graceful_s=0.1) as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "thinkproxy-under-test")
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
        yield receiver


def proxy(mock: BackgroundServer, *, gateway: bool = True, **overrides: Any) -> BackgroundServer:
    """The proxy in-process; leaving its block shuts it down, which exports every span. Gateway
    mode (the proxy's own key, SECRET) unless `gateway` is false (then clients may choose an
    allow-listed upstream, which gateway mode refuses)."""
    keys: dict[str, Any] = {"upstream_api_key": SECRET, "client_keys": ["ck-otel-client"]} if gateway else {}
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        allowed_upstreams=[f"127.0.0.1:{mock.port}"],
        **keys,
        **overrides,
    )
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


def chat(server: BackgroundServer, body: dict[str, Any], **headers: str) -> httpx.Response:
    sent = {"authorization": "Bearer ck-otel-client", **headers}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=sent, timeout=20)


def only_span(receiver: Receiver) -> tuple[dict[str, Any], Span, dict[str, Any]]:
    [(resource, span)] = receiver.spans
    return resource, span, attributes(span.attributes)


def test_a_chat_stream_is_one_client_span_with_genai_attributes_continuing_the_client_trace(
    mock: BackgroundServer, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy.access")
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    with proxy(mock) as p:
        r = chat(p, STREAM, **{"x-thinking-level": "deep", "traceparent": traceparent})
        assert r.status_code == 200
        upstream = httpx.get(f"{mock.url}/_mock/requests/last").json()
    resource, span, attrs = only_span(receiver)
    assert resource["service.name"] == "thinkproxy-under-test"
    assert span.name == "chat deepseek-v4" and span.kind == Span.SPAN_KIND_CLIENT
    assert span.trace_id.hex() == CLIENT_TRACE and span.parent_span_id.hex() == CLIENT_SPAN
    # The upstream request's parent is the proxy's span, in the same trace.
    assert upstream["headers"]["traceparent"] == f"00-{CLIENT_TRACE}-{span.span_id.hex()}-01"
    answer = [orjson.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "deepseek"
    assert attrs["gen_ai.request.model"] == "deepseek-v4"
    assert attrs["gen_ai.response.model"] == answer[0]["model"]
    assert attrs["gen_ai.response.id"] == answer[0]["id"]
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    usage = answer[-1]["usage"]
    assert attrs["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert attrs["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert (
        attrs["gen_ai.usage.reasoning.output_tokens"]
        == usage["completion_tokens_details"]["reasoning_tokens"]
    )
    assert attrs["gen_ai.request.stream"] is True
    assert attrs["server.address"] == "127.0.0.1" and attrs["server.port"] == mock.port
    assert attrs["thinkproxy.level.requested"] == "deep"
    assert attrs["thinkproxy.level.applied"] == "deep"
    assert attrs["thinkproxy.method"] == "params"
    assert attrs["thinkproxy.request_id"] == r.headers["x-request-id"]
    assert "error.type" not in attrs and span.status.code != Status.STATUS_CODE_ERROR
    events = [event.name for event in span.events]
    assert events[0] == "status" and events[-1] == "done"
    assert {"reasoning.start", "reasoning.end"} <= set(events)
    done = attributes(span.events[-1].attributes)
    assert done["finish_reason"] == "stop" and done["reasoning_ms"] >= 0
    assert all(span.start_time_unix_nano <= e.time_unix_nano <= span.end_time_unix_nano for e in span.events)
    [line] = [rec.access for rec in caplog.records if rec.name == "thinkproxy.access"]  # type: ignore[attr-defined]
    assert line["trace_id"] == CLIENT_TRACE and line["request_id"] == r.headers["x-request-id"]


def test_without_a_client_traceparent_the_span_starts_a_trace(
    mock: BackgroundServer, receiver: Receiver
) -> None:
    with proxy(mock) as p:
        assert chat(p, ASK).status_code == 200
        sent = httpx.get(f"{mock.url}/_mock/requests/last").json()["headers"]["traceparent"]
    _, span, attrs = only_span(receiver)
    assert span.parent_span_id == b"" and attrs["gen_ai.request.stream"] is False
    assert sent.startswith(f"00-{span.trace_id.hex()}-{span.span_id.hex()}-")
    assert int(sent[-2:], 16) & 1  # sampled (the random-trace-id flag may be set too)


def test_upstream_429_sets_error_type_and_error_status(mock: BackgroundServer, receiver: Receiver) -> None:
    with proxy(mock) as p:
        assert chat(p, STREAM, **{"x-mock-fault": "429"}).status_code == 429
    _, span, attrs = only_span(receiver)
    assert attrs["error.type"] == "429" and attrs["http.response.status_code"] == 429
    assert span.status.code == Status.STATUS_CODE_ERROR


def test_mid_stream_failure_sets_error_type_and_an_error_event(
    mock: BackgroundServer, receiver: Receiver
) -> None:
    with proxy(mock) as p:
        r = chat(p, STREAM, **{"x-mock-fault": "disconnect"})
        assert r.status_code == 200 and '"error"' in r.text
    _, span, attrs = only_span(receiver)
    assert attrs["error.type"] == "upstream_protocol_error"
    assert span.status.code == Status.STATUS_CODE_ERROR
    assert "error" in [event.name for event in span.events]


def test_reasoning_that_ate_the_answer_is_a_warning_span_event(
    mock: BackgroundServer, receiver: Receiver
) -> None:
    with proxy(mock) as p:
        r = chat(p, {**STREAM, "max_tokens": 8}, **{"x-thinking-level": "deep"})
        assert r.status_code == 200
    _, span, attrs = only_span(receiver)
    assert attrs["gen_ai.response.finish_reasons"] == ["length"]
    [warning] = [attributes(e.attributes) for e in span.events if e.name == "warning"]
    assert warning["code"] == "reasoning_starved"
    assert (warning["reasoning_tokens"], warning["max_tokens"]) == (8, 8)


def test_a_prompted_level_is_recorded_with_method_prompt(mock: BackgroundServer, receiver: Receiver) -> None:
    with proxy(mock, gateway=False) as p:
        r = chat(
            p,
            {**STREAM, "model": "gpt-4o-mini"},
            **{"x-thinking-level": "standard", "x-upstream-base-url": f"{mock.url}/prompted/v1"},
        )
        assert r.status_code == 200
    _, span, attrs = only_span(receiver)
    assert span.name == "chat gpt-4o-mini"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert (attrs["thinkproxy.level.applied"], attrs["thinkproxy.method"]) == ("standard", "prompt")
    assert "reasoning.start" in [event.name for event in span.events]


def test_passthrough_requests_make_no_span(mock: BackgroundServer, receiver: Receiver) -> None:
    with proxy(mock) as p:
        assert (
            httpx.get(f"{p.url}/v1/models", headers={"authorization": "Bearer ck-otel-client"}).status_code
            == 200
        )
        assert chat(p, ASK).status_code == 200
    assert [span.name for _, span in receiver.spans] == ["chat deepseek-v4"]


TOOL_TURN = {
    "model": "deepseek-v4",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": SAID},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q":"herons"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "fish and frogs"},
    ],
}


def test_no_key_or_content_in_spans_by_default(mock: BackgroundServer, receiver: Receiver) -> None:
    with proxy(mock) as p:
        chat(p, STREAM, **{"x-thinking-level": "deep"})
        assert chat(p, TOOL_TURN, **{"x-trace": "detailed", "x-thinking-level": "off"}).status_code == 200
        chat(p, ASK, **{"x-mock-fault": "429"})
    assert len(receiver.spans) == 3
    exported = b"".join(receiver.raw)
    for needle in (SECRET, "ck-otel-client", "Quirinal", "herons", "fish and frogs", "terse", "Bearer"):
        assert needle.encode() not in exported
    for _, span in receiver.spans:
        assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & set(attributes(span.attributes))


def test_message_content_only_when_opted_in_in_the_conventions_shape(
    mock: BackgroundServer, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    with proxy(mock) as p:
        assert chat(p, TOOL_TURN, **{"x-thinking-level": "off"}).status_code == 200
    _, _, attrs = only_span(receiver)
    assert orjson.loads(attrs["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": "You are terse."}]},
        {"role": "user", "parts": [{"type": "text", "content": SAID}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_9", "name": "lookup", "arguments": '{"q":"herons"}'}],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "call_9", "result": "fish and frogs"}],
        },
    ]
    assert SECRET.encode() not in b"".join(receiver.raw)


def answer_text(r: httpx.Response, stream: bool) -> str:
    if not stream:
        return str(r.json()["choices"][0]["message"]["content"])
    chunks = [orjson.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


@pytest.mark.parametrize("stream", [True, False])
def test_the_answer_is_recorded_only_when_opted_in(
    mock: BackgroundServer, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    body = STREAM if stream else ASK
    with proxy(mock) as p:
        quiet = chat(p, body, **{"x-thinking-level": "deep"})
    assert "gen_ai.output.messages" not in only_span(receiver)[2]
    assert answer_text(quiet, stream)[:30].encode() not in b"".join(receiver.raw)
    receiver.spans.clear()
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    with proxy(mock) as p:
        r = chat(p, body, **{"x-thinking-level": "deep"})
    _, _, attrs = only_span(receiver)
    [message] = orjson.loads(attrs["gen_ai.output.messages"])
    assert message == {
        "role": "assistant",
        "parts": [{"type": "text", "content": answer_text(r, stream)}],
        "finish_reason": "stop",
    }
    assert "<think" not in attrs["gen_ai.output.messages"]


def test_sampled_out_requests_export_nothing_but_still_carry_the_context(
    mock: BackgroundServer, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    with proxy(mock) as p:
        assert chat(p, ASK).status_code == 200
        sent = httpx.get(f"{mock.url}/_mock/requests/last").json()["headers"]["traceparent"]
    assert receiver.spans == [] and not int(sent[-2:], 16) & 1  # passed on as not sampled


def test_tracing_is_off_without_the_environment() -> None:
    assert otel_listener({}) is None
    assert otel_listener({"OTEL_SERVICE_NAME": "x"}) is None  # naming a service alone exports nothing
    assert (
        otel_listener({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"})
        is None
    )
    assert otel_listener({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}) is None


def test_without_the_environment_no_tracing_sdk_or_exporter_is_even_imported() -> None:
    # (redis-py imports parts of the OpenTelemetry API for its own optional instrumentation when
    # they are installed; the proxy's tracing — the SDK's tracer, exporters, propagation — is not.)
    code = (
        "import os, sys\n"
        "for k in [k for k in os.environ if k.startswith('OTEL_')]: del os.environ[k]\n"
        "from proxy.server.app import create_app\n"
        "from tests.helpers import make_settings\n"
        "create_app(make_settings())\n"
        "print(sorted(m for m in sys.modules if m.startswith(\n"
        "    ('opentelemetry.sdk.trace', 'opentelemetry.exporter', 'opentelemetry.propagate'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
