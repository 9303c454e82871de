"""Prometheus metrics: `GET /metrics`, on unless `THINKPROXY_METRICS=false`.

A listener (proxy.core.events) that watches no trace events: it records everything once, when the
request ends, reading the answer's usage and timings from what the trace builder saw
(`record.outcome`, proxy.core.stream.trace.TraceOutcome). Nothing runs per streamed chunk; the only other
moment is the start of a stream's relay (`on_stream`), which counts the stream as active until
the request ends. In one process the instruments are the proxy's own (proxy.telemetry.instruments:
a float or a list of bucket counts per label set, a fraction of prometheus-client's cost per
update), exposed through prometheus-client.

Names and labels are part of the interface (docs/observability.md):

| metric | labels |
|---|---|
| `thinkproxy_requests_total` | route, provider, level, method, status, client, transport |
| `thinkproxy_time_to_first_token_seconds` | provider, level, transport (streams) |
| `thinkproxy_reasoning_seconds` | provider, level (responses that reasoned) |
| `thinkproxy_reasoning_tokens_total` | client, gen_ai_provider_name, gen_ai_request_model, level, |
|   | source (reported, estimated) |
| `thinkproxy_reasoning_starved_total` | client, gen_ai_provider_name, gen_ai_request_model |
| `thinkproxy_reasoning_in_content_total` | client, gen_ai_provider_name, gen_ai_request_model |
| `thinkproxy_cached_input_tokens_total` | gen_ai_provider_name, gen_ai_request_model |
| `thinkproxy_active_streams` | — |
| `thinkproxy_upstream_errors_total` | provider, kind |
| `thinkproxy_replay_total` | outcome |
| `thinkproxy_state_errors_total` | operation |
| `gen_ai_client_operation_duration_seconds` | gen_ai_operation_name, gen_ai_provider_name, |
|   | gen_ai_request_model, error_type |
| `gen_ai_client_token_usage` | the same but error_type, plus gen_ai_token_type |

Label values are names the proxy chose (routes, providers.yaml entries, levels, error kinds) or
the request's model, which is bounded (ModelLabels): a model the configuration names (routes file,
providers.yaml) is always its own label; any other keeps its name only once an upstream served it
(a 2xx), while fewer than `THINKPROXY_METRICS_MAX_MODELS` such names are kept, and is `other`
otherwise, from its first request. `client` is the name of the gateway client key the request
presented, bounded by the configured keys (`THINKPROXY_CLIENT_KEYS`; names are unique), never
by what a client sends: empty in bring-your-own-key mode, for an unnamed key and for a request
refused before its key was read. `transport` is `http` or `websocket` (a Responses WebSocket's
turn: `record.transport`, which only the proxy sets), on the two metrics that compare the
transports per request. Nothing else from a request (no key, no header, no content) becomes a
label.

Several worker processes (`--workers N`): prometheus-client's multiprocess mode, enabled when
`PROMETHEUS_MULTIPROC_DIR` is set before the workers start (`thinkproxy serve` prepares and
removes its own directory, see proxy.telemetry.multiprocess); every worker then answers
`/metrics` with the sum over all of them. The label names are in each worker's files: an
operator's own directory kept across an upgrade that changed them (`transport` was added) mixes
the old series with the new until it is cleared.

Replay outcomes are read from `record.notes["replay.outcome"]` (see proxy.telemetry.facts.note_replay).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import Counter as MultiprocessCounter
from prometheus_client import Gauge as MultiprocessGauge
from prometheus_client import Histogram as MultiprocessHistogram
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.requests import Request
from starlette.responses import Response

from proxy.core.events import MODEL_ROUTES, AccessRecord, RequestObserver, TraceEvents
from proxy.core.usage import account
from proxy.telemetry.facts import error_type, replay_counts, state_errors, upstream_error_kind
from proxy.telemetry.instruments import Instruments

# The GenAI semantic conventions' boundaries (gen_ai.client.operation.duration, in seconds, and
# gen_ai.client.token.usage), so dashboards built for other GenAI gateways read these as well.
GENAI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GENAI_TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))  # 1, 4, 16, … 67108864
# Time to first token and thinking time: the same doubling series, carried on to ~22 min,
# because a model that thinks deeply can take minutes before its first token.
LONG_DURATION_BUCKETS = (*GENAI_DURATION_BUCKETS, 163.84, 327.68, 655.36, 1310.72)

MAX_MODEL_CHARS = 128
OTHER_MODEL = "other"


class ModelLabels:
    """The model label. A model named in the configuration (`known`, any case) is its own label,
    always. Any other name is client-chosen: it takes one of `limit` labels only once an upstream
    served it, so made-up names (which no upstream serves) cannot take the labels real models
    need; until then, and once they are all taken, it is `other`."""

    def __init__(self, limit: int, known: Iterable[str] = ()) -> None:
        self._limit = limit
        self._known = {name.lower(): name[:MAX_MODEL_CHARS] for name in known}
        self._seen: dict[str, str] = {label: label for label in self._known.values()}
        self._taken = 0

    def __call__(self, model: str, served: bool) -> str:
        model = model[:MAX_MODEL_CHARS]
        label = self._seen.get(model)
        if label is not None:
            return label
        label = self._known.get(model.lower())
        if label is not None:
            return label
        if served and self._taken < self._limit:
            self._taken += 1
            self._seen[model] = model
            return model
        return OTHER_MODEL


class Children:
    """`metric.labels(*values)` remembered: prometheus-client validates and locks on every call
    (multiprocess mode). Label sets are bounded (see the module)."""

    __slots__ = ("_cache", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._cache.get(values)
        if child is None:
            child = self._cache[values] = self._metric.labels(*values)
        return child


class _Factory:
    """Makes the instruments: this process's own (proxy.telemetry.instruments, one process) or
    prometheus-client's backed by files (multiprocess mode, registered nowhere: /metrics reads
    the files)."""

    def __init__(self, store: Instruments | None) -> None:
        self._store = store

    def counter(self, name: str, documentation: str, labels: Sequence[str]) -> Callable[..., Any]:
        if self._store is not None:
            return self._store.counter(name, documentation, labels).labels
        return Children(MultiprocessCounter(name, documentation, labels, registry=None))

    def histogram(
        self, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> Callable[..., Any]:
        if self._store is not None:
            return self._store.histogram(name, documentation, labels, buckets=buckets).labels
        return Children(MultiprocessHistogram(name, documentation, labels, buckets=buckets, registry=None))

    def gauge(self, name: str, documentation: str) -> Any:
        if self._store is not None:
            return self._store.gauge(name, documentation)
        return MultiprocessGauge(name, documentation, registry=None, multiprocess_mode="livesum")


class Metrics:
    """The instruments of one app. `multiprocess_dir` set = prometheus-client's multiprocess mode
    (values live in files there; the process must have been started with PROMETHEUS_MULTIPROC_DIR).

    Everything a request adds is added when it ends (`count`), from the event loop's thread."""

    def __init__(
        self, *, max_models: int, multiprocess_dir: str | None = None, known_models: Iterable[str] = ()
    ) -> None:
        self.multiprocess_dir = multiprocess_dir
        store = Instruments() if multiprocess_dir is None else None
        self.registry: CollectorRegistry | None = None
        if store is not None:
            self.registry = CollectorRegistry()
            self.registry.register(store)
        self.model_label = ModelLabels(max_models, known_models)
        make = _Factory(store)
        # Each `*_of(label values…)` is the child to update.
        self.requests_of = make.counter(
            "thinkproxy_requests",
            "Requests answered, by route (chat, responses, messages, passthrough), providers.yaml entry, "
            "thinking level applied, how it was applied (params, prompt), the HTTP status the client "
            "got, the gateway client key's name (empty: none, or unnamed) and the transport (http, or "
            "websocket: a Responses WebSocket's turn).",
            ["route", "provider", "level", "method", "status", "client", "transport"],
        )
        self.ttft_of = make.histogram(
            "thinkproxy_time_to_first_token_seconds",
            "Streams: time from the request's arrival to the first reasoning, answer or tool-call token "
            "(transport websocket: a Responses WebSocket turn's response.create).",
            ["provider", "level", "transport"],
            LONG_DURATION_BUCKETS,
        )
        self.reasoning_seconds_of = make.histogram(
            "thinkproxy_reasoning_seconds",
            "Time the model spent thinking, per response that showed reasoning.",
            ["provider", "level"],
            LONG_DURATION_BUCKETS,
        )
        # Each answer's one count (proxy.core.usage) added up, by who spent it (the client key),
        # on what (provider, model, level applied) and where the count came from: the upstream's
        # usage, or the proxy's estimate from the reasoning text when the upstream reports none
        # (a label, not a second metric: the sum over both is every answer's). Provider and model
        # are labelled like gen_ai_client_token_usage, so the reasoning share of output tokens is
        # one division.
        self.reasoning_tokens_of = make.counter(
            "thinkproxy_reasoning_tokens",
            "Reasoning tokens, as the upstream reported them (source=reported) or estimated from the "
            "reasoning text when it reports none (source=estimated), by gateway client key, provider, "
            "model and thinking level applied.",
            ["client", "gen_ai_provider_name", "gen_ai_request_model", "level", "source"],
        )
        self.reasoning_starved_of = make.counter(
            "thinkproxy_reasoning_starved",
            "Answers the reasoning ate: ended at the output limit (finish_reason length) after "
            "reasoning, with no text and no tool call (trace warning reasoning_starved).",
            ["client", "gen_ai_provider_name", "gen_ai_request_model"],
        )
        self.reasoning_in_content_of = make.counter(
            "thinkproxy_reasoning_in_content",
            "Answers of a model that always reasons that came with text and no reasoning: the "
            "reasoning is likely in the text, forwarded as it came (trace warning reasoning_in_content).",
            ["client", "gen_ai_provider_name", "gen_ai_request_model"],
        )
        # Labelled like gen_ai_client_token_usage, so the cache-hit share of input tokens is one
        # division of two series with the same labels.
        self.cached_input_tokens_of = make.counter(
            "thinkproxy_cached_input_tokens",
            "Input tokens the upstream served from its prompt cache (usually billed at a fraction); "
            "part of gen_ai_client_token_usage's input tokens.",
            ["gen_ai_provider_name", "gen_ai_request_model"],
        )
        self.active_streams = make.gauge(
            "thinkproxy_active_streams", "Chat completion streams being relayed right now."
        )
        self.upstream_errors_of = make.counter(
            "thinkproxy_upstream_errors",
            "Upstream failures by kind: 4xx/5xx (status class), timeout, connect, truncated, invalid.",
            ["provider", "kind"],
        )
        self.replay_of = make.counter(
            "thinkproxy_replay",
            "Assistant messages whose reasoning the replay store handled, by outcome: restored, "
            "placeholder, missing.",
            ["outcome"],
        )
        self.state_errors_of = make.counter(
            "thinkproxy_state_errors",
            "Replay store operations that failed (store down, slow or refusing), by operation: "
            "read (a request's lookup, then a miss) or write (a captured turn not stored).",
            ["operation"],
        )
        self.operation_duration_of = make.histogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration (OpenTelemetry gen_ai.client.operation.duration).",
            ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "error_type"],
            GENAI_DURATION_BUCKETS,
        )
        self.token_usage_of = make.histogram(
            "gen_ai_client_token_usage",
            "Input and output tokens used (OpenTelemetry gen_ai.client.token.usage).",
            ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_token_type"],
            GENAI_TOKEN_BUCKETS,
        )

    def count(self, record: AccessRecord, duration_ms: float) -> None:
        """Adds a finished request. Chat answers are read from `record.outcome` (what the trace
        builder saw: proxy.core.stream.trace.TraceOutcome), never from the answer itself."""
        provider = record.provider or "none"
        level = record.level or "none"
        client = record.client or ""
        transport = record.transport
        self.requests_of(
            record.route,
            provider,
            level,
            record.thinking_method or "none",
            str(record.status),
            client,
            transport,
        ).inc()
        kind = upstream_error_kind(record)
        if kind is not None:
            self.upstream_errors_of(provider, kind).inc()
        if record.notes:
            for outcome, n in replay_counts(record):
                self.replay_of(outcome).inc(n)
            for operation, n in state_errors(record):
                self.state_errors_of(operation).inc(n)
        if record.route not in MODEL_ROUTES or record.provider is None:
            return  # no GenAI operation took place: refused before an upstream was chosen
        served = record.upstream_status is not None and 200 <= record.upstream_status < 300
        model = self.model_label(record.model or "", served)
        self.operation_duration_of("chat", provider, model, error_type(record) or "").observe(
            duration_ms / 1000.0
        )
        answer = record.outcome
        if answer is None:
            return  # the answer never finished
        usage = record.usage if record.usage is not None else account(answer.usage)
        if usage.input is not None:
            self.token_usage_of("chat", provider, model, "input").observe(usage.input)
        if usage.output is not None:
            self.token_usage_of("chat", provider, model, "output").observe(usage.output)
        if usage.cached_input:
            self.cached_input_tokens_of(provider, model).inc(usage.cached_input)
        if usage.reasoning is not None and usage.reasoning.value:
            reasoning = usage.reasoning
            self.reasoning_tokens_of(client, provider, model, level, reasoning.source).inc(reasoning.value)
        if answer.starved:
            self.reasoning_starved_of(client, provider, model).inc()
        if answer.reasoning_in_content:
            self.reasoning_in_content_of(client, provider, model).inc()
        if record.stream and answer.ttft_ms is not None:
            self.ttft_of(provider, level, transport).observe(answer.ttft_ms / 1000.0)
        if answer.reasoning_ms is not None:
            self.reasoning_seconds_of(provider, level).observe(answer.reasoning_ms / 1000.0)

    def exposition(self) -> bytes:
        if self.registry is not None:
            return generate_latest(self.registry)
        assert self.multiprocess_dir is not None
        collected = CollectorRegistry()
        MultiProcessCollector(collected, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(collected)

    async def endpoint(self, request: Request) -> Response:
        return Response(self.exposition(), media_type=CONTENT_TYPE_LATEST)

    def close(self) -> None:
        """A worker that stops takes its share of the live gauge with it."""
        if self.multiprocess_dir is not None:
            mark_process_dead(os.getpid(), self.multiprocess_dir)  # type: ignore[no-untyped-call]

    def listener(self) -> MetricsListener:
        return MetricsListener(self)


class MetricsListener:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> MetricsObserver:
        return MetricsObserver(self.metrics)


class MetricsObserver(RequestObserver):
    """Watches no trace events: what it counts of an answer is the builder's outcome, read once
    at the end (proxy.core.events: `wants_outcome`), and the start of a stream (`on_stream`)."""

    __slots__ = ("_m", "_streaming")
    wants_trace = False
    wants_outcome = True

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics
        self._streaming = False

    def on_trace(self, events: TraceEvents) -> None:  # never asked: wants_trace is False
        pass

    def on_stream(self) -> None:
        self._streaming = True
        self._m.active_streams.inc()

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        m = self._m
        if self._streaming:
            m.active_streams.dec()
        m.count(record, duration_ms)
