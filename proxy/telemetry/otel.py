"""OpenTelemetry traces (the `thinkproxy[otel]` extra), configured only by the standard `OTEL_*`
environment: on when `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
`OTEL_TRACES_EXPORTER` is set (and `OTEL_SDK_DISABLED` is not true). Otherwise no tracer is built
and none of the SDK's tracing, exporters or propagation is even imported.

One CLIENT span per chat completion, named `chat {model}` after the GenAI semantic conventions,
with `gen_ai.*` attributes, the proxy's own `thinkproxy.*` ones, and one span event per trace
event (proxy.core.stream.trace) at the moment it happened. An incoming W3C `traceparent` is continued, and the
upstream request carries the span's own `traceparent` (`OTEL_PROPAGATORS` is honoured).

No message content is recorded unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is
true; then the request's messages go in `gen_ai.input.messages` and the answer (choice 0's text
and tool calls) in `gen_ai.output.messages` (the convention's JSON shapes), and tool argument /
result summaries in the span events. Keys and headers are never recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from proxy.core.events import MODEL_ROUTES, AccessRecord, RequestObserver, TraceEvents
from proxy.core.usage import account
from proxy.telemetry.facts import error_type

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

logger = logging.getLogger("thinkproxy.telemetry")

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_VALUES = frozenset({"true", "1", "span_only", "span_and_event"})
_ENABLING = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")
# Trace event fields copied to span events; the summaries are content, so only when opted in.
_EVENT_FIELDS = (
    "t_ms",
    "stage",
    "id",
    "name",
    "index",
    "status",
    "duration_ms",
    "code",
    "finish_reason",
    "ttft_ms",
    "reasoning_ms",
    "total_ms",
    "reasoning_tokens",
    "max_tokens",
)
_CONTENT_FIELDS = ("input_summary", "output_summary")


def tracing_wanted(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in _ENABLING)


def otel_listener(environ: Mapping[str, str]) -> OtelListener | None:
    """The tracing listener the environment asks for, or None (then nothing was imported)."""
    if not tracing_wanted(environ):
        return None
    try:
        provider = _provider(environ)
    except ImportError as exc:
        logger.warning(
            "OTEL_* tracing variables are set but OpenTelemetry is not installed (%s): "
            "install thinkproxy[otel] to export traces; continuing without them.",
            exc,
        )
        return None
    if provider is None:
        return None
    capture = environ.get(CAPTURE_ENV, "").strip().lower() in _CAPTURE_VALUES
    return OtelListener(provider, capture_content=capture)


def _provider(environ: Mapping[str, str]) -> TracerProvider | None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporter: SpanExporter
    kind = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind == "console":
        exporter = ConsoleSpanExporter()
    elif kind == "otlp":
        protocol = (
            environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        ).strip()
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        elif protocol == "grpc":
            # Not in the extra (it pulls in grpcio); used when installed alongside.
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter as GrpcSpanExporter,
            )

            exporter = GrpcSpanExporter()
        else:
            logger.warning(
                "OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported (http/protobuf, or grpc with "
                "opentelemetry-exporter-otlp-proto-grpc installed); continuing without traces.",
                protocol,
            )
            return None
    else:
        logger.warning("OTEL_TRACES_EXPORTER=%s is not supported (otlp, console); no traces.", kind)
        return None
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "thinkproxy"}))
    # Sampler (OTEL_TRACES_SAMPLER[_ARG]), exporter endpoint/headers/timeout and batching
    # (OTEL_BSP_*) all come from the environment, read by the SDK itself.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class OtelListener:
    def __init__(self, provider: TracerProvider, *, capture_content: bool) -> None:
        from opentelemetry import propagate, trace

        self._provider = provider
        self._tracer: Tracer = provider.get_tracer("thinkproxy")
        self._propagate = propagate
        self._trace = trace
        self.capture_content = capture_content

    def close(self) -> None:
        """Exports what is still buffered (at shutdown)."""
        self._provider.shutdown()

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> OtelObserver | None:
        if record.route not in MODEL_ROUTES:
            return None
        carrier = {name.lower(): value for name, value in headers}
        parent = self._propagate.extract(carrier)
        start_ns = time.time_ns()
        span = self._tracer.start_span(
            "chat", context=parent, kind=self._trace.SpanKind.CLIENT, start_time=start_ns
        )
        context = span.get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
        injected: dict[str, str] = {}
        self._propagate.inject(injected, context=self._trace.set_span_in_context(span))
        # The span is the upstream call's parent: replaces the client's traceparent/tracestate.
        record.forward_headers.extend(injected.items())
        if not span.is_recording():
            return None  # sampled out: the context travels on, nothing else to do
        return OtelObserver(span, start_ns, self.capture_content)


class OtelObserver(RequestObserver):
    __slots__ = ("_capture", "_done", "_output", "_span", "_start_ns", "wants_output", "wants_trace")

    def __init__(self, span: Span, start_ns: int, capture: bool) -> None:
        self._span = span
        self._start_ns = start_ns
        self._capture = capture
        self._done: dict[str, Any] | None = None
        self._output: list[dict[str, Any]] | None = None
        self.wants_trace = True
        self.wants_output = capture  # the answer (proxy.core.events), only when content is captured

    def on_output(self, messages: list[dict[str, Any]]) -> None:
        self._output = messages

    def on_trace(self, events: TraceEvents) -> None:
        fields = _EVENT_FIELDS + _CONTENT_FIELDS if self._capture else _EVENT_FIELDS
        for event in events:
            if event["type"] == "done":
                self._done = event
            attributes = {
                key: value
                for key in fields
                if isinstance(value := event.get(key), str | int | float) and not isinstance(value, bool)
            }
            t_ms = event.get("t_ms")
            stamp = self._start_ns + int(t_ms * 1_000_000) if isinstance(t_ms, int | float) else None
            self._span.add_event(event["type"], attributes, timestamp=stamp)

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        from opentelemetry.trace import Status, StatusCode

        span = self._span
        model = record.model
        if model:
            span.update_name(f"chat {model}")
        span.set_attributes(span_attributes(record, self._done))
        if self._capture and record.request_messages is not None:
            span.set_attribute("gen_ai.input.messages", input_messages(record.request_messages))
        if self._capture and self._output is not None:
            span.set_attribute("gen_ai.output.messages", orjson.dumps(self._output).decode())
        failure = error_type(record)
        if failure is not None:
            span.set_attribute("error.type", failure)
            span.set_status(Status(StatusCode.ERROR, failure))
        span.end(end_time=self._start_ns + int(duration_ms * 1_000_000))


def span_attributes(record: AccessRecord, done: dict[str, Any] | None) -> dict[str, Any]:
    """The span's attributes from the finished request (everything but error.type)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.stream": record.stream,
        "http.response.status_code": record.status,
        "thinkproxy.level.applied": record.level or "none",
        "thinkproxy.transport": record.transport,  # http, or websocket (a Responses WebSocket's turn)
    }
    optional = {
        "gen_ai.provider.name": record.provider,
        "gen_ai.request.model": record.model,
        "gen_ai.response.model": record.response_model or None,
        "gen_ai.response.id": record.response_id or None,
        "thinkproxy.level.requested": record.level_requested,
        "thinkproxy.method": record.thinking_method,
        "thinkproxy.request_id": record.request_id,
    }
    attributes.update((k, v) for k, v in optional.items() if v is not None)
    if record.upstream_base_url:
        where = urlsplit(record.upstream_base_url)
        if where.hostname:
            attributes["server.address"] = where.hostname
            attributes["server.port"] = where.port or (443 if where.scheme == "https" else 80)
    if done is not None and isinstance(reason := done.get("finish_reason"), str):
        attributes["gen_ai.response.finish_reasons"] = [reason]
    usage = record.usage if record.usage is not None else account(done and done.get("usage"))
    reasoning = usage.reasoning
    for key, value in (
        ("gen_ai.usage.input_tokens", usage.input),
        ("gen_ai.usage.output_tokens", usage.output),
        ("gen_ai.usage.cache_read.input_tokens", usage.cached_input),
        ("gen_ai.usage.reasoning.output_tokens", reasoning.value if reasoning else None),
        # (Not a convention: whether the count above is the upstream's or the proxy's estimate.)
        ("thinkproxy.usage.reasoning.source", reasoning.source if reasoning else None),
    ):
        if value is not None:
            attributes[key] = value
    return attributes


def input_messages(messages: Any) -> str:
    """The request's messages in the GenAI convention's input-messages shape, as a JSON string."""
    out = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        parts: list[dict[str, Any]] = []
        content = message.get("content")
        if isinstance(content, str) and content:
            parts.append({"type": "text", "content": content})
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    parts.append({"type": "text", "content": part.get("text")})
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                parts.append(
                    {
                        "type": "tool_call",
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments"),
                    }
                )
        if message.get("role") == "tool":
            parts = [{"type": "tool_call_response", "id": message.get("tool_call_id"), "result": content}]
        out.append({"role": message.get("role"), "parts": parts})
    return orjson.dumps(out).decode()
