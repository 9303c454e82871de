"""The per-request record and its listeners: one plug for metrics, tracing, the console and the
replay store.

Each capability that wants to watch requests registers a `Listener` with the app. Per request the
app asks every listener to `start`; a listener not interested returns None and costs nothing more.
The `RequestObserver`s a request gets are told what they asked for, through one base class whose
hooks do nothing and whose flags say "not interested" by default:

- `on_trace(events)` (with `wants_trace`): the *detailed* trace events of a chat response as they
  happen (the dicts the trace builder makes, never reasoning text or raw payloads), whatever trace
  mode the client asked for; with `brief_trace` as well, the brief events suffice, and when every
  watching observer says so the trace is built brief.
- `record.outcome` (with `wants_outcome`): what the trace builder saw of the answer (usage and
  times), read once at the end; a chat request it watches keeps a builder even with `X-Trace: off`.
  `record.usage` is the answer's token counts read once for everyone (proxy.core.usage: cached
  input, one reasoning count reported or estimated); read it, not the usage in the outcome.
- `on_stream()`: the relay starts sending a streamed answer.
- `on_output(messages)` (with `wants_output`; content, so only for an opted-in capture such as
  OpenTelemetry's): choice 0's text and tool calls once the answer is complete.
- `on_end(record, duration_ms)`: exactly once, when the request's access-log line is written (every
  path writes exactly one), with the final `AccessRecord`.

`start` runs before anything is forwarded, so an observer may add headers to the upstream request
(`record.forward_headers`, e.g. a W3C `traceparent`, replacing a client header of the same name) or
to the response (`record.response_headers`, kept on every response: success, upstream error or the
proxy's own error).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from proxy.core.stream.trace_outcome import TraceOutcome
    from proxy.core.usage import TokenUsage

TraceEvents = Sequence[dict[str, Any]]
OutputSink = Callable[[list[dict[str, Any]]], None]


# The routes on which a model answers through the proxy's core (a GenAI operation, for metrics
# and spans): chat completions and the Responses front door.
MODEL_ROUTES = frozenset({"chat", "responses", "messages"})


@dataclass(slots=True)
class AccessRecord:
    method: str
    path: str
    status: int = 0
    upstream_status: int | None = None
    provider: str | None = None
    level: str | None = None
    bytes_out: int = 0
    error: str | None = None
    client: str | None = None  # the name of the gateway client key presented (never the key)
    upstream_route: str | None = None  # the name of the routes-file route the request took
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    # What listeners (proxy.core.events) read at the end of a request; the access line shows only some.
    route: str = "passthrough"  # "chat", "responses", "messages" (MODEL_ROUTES) or "passthrough"
    model: str | None = None  # the request's model, as the client sent it (a level suffix stripped)
    level_requested: str | None = None
    # Where the level asked came from (issue 45): "header" (X-Thinking-Level), "suffix" (the
    # model's `(level)` suffix), "client" (the body's own knob), "default" (the key's
    # default_level), or None (nothing named one: the upstream's default).
    level_source: str | None = None
    # When the level asked was `auto`: which auto rule chose it (a short description).
    level_rule: str | None = None
    # The `(level)` suffix as the client wrote it on the model (`model` holds the stripped name).
    model_suffix: str | None = None
    thinking_method: str | None = None  # "params" or "prompt" when a level was applied
    stream: bool = False
    # How the request came: "http", or "websocket" (a Responses WebSocket's turns and its connection,
    # proxy.server.doors.responses_ws). Two values: a label of the request metrics.
    transport: str = "http"
    # Extra headers for the upstream request (e.g. an observer's traceparent).
    forward_headers: list[tuple[str, str]] = field(default_factory=list)
    observers: list[RequestObserver] = field(default_factory=list)
    # Free-form facts a capability records for its own observers (never logged).
    notes: dict[str, Any] = field(default_factory=dict)
    # X-Request-Id (the client's, or generated), and the trace id when tracing is on.
    request_id: str | None = None
    trace_id: str | None = None
    upstream_request_id: str | None = None  # the upstream's own x-request-id, when it sent one
    upstream_base_url: str | None = None  # where the request went (listeners take host and port)
    # The chat request's messages (content: read only by an opted-in OpenTelemetry capture).
    request_messages: Any = None
    # The answer's `id` and `model` (chat completions, when a trace builder saw them).
    response_id: str | None = None
    response_model: str | None = None
    # What the trace builder saw of a finished chat answer (usage, times), for listeners.
    outcome: TraceOutcome | None = None
    # The answer's token counts, the one reading every listener uses (proxy.core.usage.account):
    # cached input tokens, and one reasoning count, reported or estimated. None when the proxy
    # did not read an answer.
    usage: TokenUsage | None = None
    # The answer's cost in USD: the thinking policy's price table, else genai-prices (None, never
    # 0: no price for the model, or no token counts). Set once at the end by the cost listener
    # (proxy.sessions.pricing), which proxy.server.app registers before every reader of it.
    cost_usd: float | None = None


class RequestObserver:
    """What one capability watches of one request. Every hook has a default that does nothing and
    every flag defaults to "not interested", so an observer overrides only what it uses and the
    proxy asks each one directly (no optional attributes looked up per request)."""

    __slots__ = ()  # (subclasses keep theirs: no instance dict per observer)

    # Set (class- or instance-level) to receive `on_trace`; `brief_trace` when the brief events do.
    wants_trace: bool = False
    brief_trace: bool = False
    # Read `record.outcome` at the end (so a trace builder exists even with `X-Trace: off`).
    wants_outcome: bool = False
    # Receive `on_output` (the answer's text and tool calls: content, so only for opted-in capture).
    wants_output: bool = False

    def on_trace(self, events: TraceEvents) -> None:
        """Detailed trace events as they happen; shared between observers: never mutate them."""

    def on_stream(self) -> None:
        """The relay starts sending a streamed answer (once per streamed response)."""

    def on_output(self, messages: list[dict[str, Any]]) -> None:
        """Choice 0's answer, once complete, in the GenAI conventions' output-messages shape."""

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        """Exactly once, when the request's access-log line is written, with the final record."""


class Listener(Protocol):
    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> RequestObserver | None:
        """Called when a request arrives (record has method, path, request id); None = not watching."""
        ...


def start_observers(
    listeners: Sequence[Listener], record: AccessRecord, headers: Iterable[tuple[str, str]]
) -> list[RequestObserver]:
    if not listeners:
        return []
    pairs = list(headers)
    observers = []
    for listener in listeners:
        observer = listener.start(record, pairs)
        if observer is None:
            continue
        if not isinstance(observer, RequestObserver):  # its hooks are called without a default
            raise TypeError(
                f"{type(listener).__name__}.start returned a {type(observer).__name__}, not a "
                "proxy.core.events.RequestObserver: subclass it (its hooks default to doing nothing)"
            )
        observers.append(observer)
    return observers


def notify_stream(record: AccessRecord) -> None:
    """The relay starts sending a streamed answer: tell the observers."""
    for observer in record.observers:
        observer.on_stream()


def with_forward_headers(headers: list[tuple[str, str]], record: AccessRecord) -> list[tuple[str, str]]:
    """The upstream request's headers with the observers' added; a name they set (traceparent,
    tracestate) replaces the client's own."""
    if not record.forward_headers:
        return headers
    replaced = {name.lower() for name, _ in record.forward_headers}
    return [pair for pair in headers if pair[0].lower() not in replaced] + record.forward_headers


def notify_end(record: AccessRecord, duration_ms: float) -> list[tuple[RequestObserver, Exception]]:
    """Every observer's `on_end`; returns the ones that raised (the edge logs them): one
    capability's bug must not cost the others their end, nor the request."""
    observers, record.observers = record.observers, []
    # (Let go of them: an observer that keeps its record would otherwise leave a reference cycle
    # per request for the cyclic collector.)
    failed: list[tuple[RequestObserver, Exception]] = []
    for observer in observers:
        try:
            observer.on_end(record, duration_ms)
        except Exception as exc:
            failed.append((observer, exc))
    return failed
