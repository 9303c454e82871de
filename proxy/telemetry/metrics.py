"""Prometheus metrics: `GET /metrics`, on unless `THINKPROXY_METRICS=false`.

A listener (proxy.observe): per request it keeps the `done` trace event and whether the model
reasoned, and records everything once, when the request ends (in one process, applied to the
instruments in batches, and always before /metrics answers: see Metrics.count). Nothing runs per
streamed chunk; the only other moment is the first trace event of a stream (the relay has started
sending), which counts the stream as active until the request ends.

Names and labels are part of the interface (docs/observability.md):

| metric | labels |
|---|---|
| `thinkproxy_requests_total` | route, provider, level, method, status |
| `thinkproxy_time_to_first_token_seconds` | provider, level (streams) |
| `thinkproxy_reasoning_seconds` | provider, level (responses that reasoned) |
| `thinkproxy_reasoning_tokens` | provider |
| `thinkproxy_active_streams` | — |
| `thinkproxy_upstream_errors_total` | provider, kind |
| `thinkproxy_replay_total` | outcome |
| `gen_ai_client_operation_duration_seconds` | gen_ai_operation_name, gen_ai_provider_name, |
|   | gen_ai_request_model, error_type |
| `gen_ai_client_token_usage` | the same but error_type, plus gen_ai_token_type |

Label values are names the proxy chose (routes, providers.yaml entries, levels, error kinds) or
the request's model, which is bounded: the first `THINKPROXY_METRICS_MAX_MODELS` distinct models
a process sees keep their name, later ones are counted as `other`. Nothing else from a request
(no key, no header, no content) becomes a label.

Several worker processes (`--workers N`): prometheus-client's multiprocess mode, enabled when
`PROMETHEUS_MULTIPROC_DIR` is set before the workers start (`thinkproxy serve` prepares and
removes its own directory, see proxy.telemetry.multiprocess); every worker then answers
`/metrics` with the sum over all of them.

Replay outcomes are read from `record.notes["replay.outcome"]` (see proxy.telemetry.facts.note_replay).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, NamedTuple

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.requests import Request
from starlette.responses import Response

from proxy.access_log import AccessRecord
from proxy.observe import TraceEvents
from proxy.telemetry.facts import Usage, error_type, replay_counts, seconds, upstream_error_kind, usage_of

# The GenAI semantic conventions' boundaries (gen_ai.client.operation.duration, in seconds, and
# gen_ai.client.token.usage), so dashboards built for other GenAI gateways read these as well.
GENAI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GENAI_TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))  # 1, 4, 16, … 67108864
# Time to first token and thinking time: the same doubling series, carried on to ~22 min,
# because a model that thinks deeply can take minutes before its first token.
LONG_DURATION_BUCKETS = (*GENAI_DURATION_BUCKETS, 163.84, 327.68, 655.36, 1310.72)

# Finished requests applied at once in a single process (see Metrics.count): enough for warm
# caches, few enough that the batch is a few tens of KiB.
FLUSH_EVERY = 128

MAX_MODEL_CHARS = 128
OTHER_MODEL = "other"


class ModelLabels:
    """The model label: the first `limit` distinct models keep their name, the rest are `other`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, model: str) -> str:
        model = model[:MAX_MODEL_CHARS]
        if model in self._seen:
            return model
        if len(self._seen) < self._limit:
            self._seen.add(model)
            return model
        return OTHER_MODEL


class Children:
    """`metric.labels(*values)` remembered: prometheus-client validates and locks on every call,
    which was a third of a request's metrics cost. Label sets are bounded (see the module)."""

    __slots__ = ("_cache", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._cache.get(values)
        if child is None:
            child = self._cache[values] = self._metric.labels(*values)
        return child


class Metrics:
    """The instruments of one app. `multiprocess_dir` set = prometheus-client's multiprocess mode
    (values live in files there; the process must have been started with PROMETHEUS_MULTIPROC_DIR)."""

    def __init__(self, *, max_models: int, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        # In multiprocess mode the instruments are registered nowhere: /metrics reads the files.
        self.registry = CollectorRegistry() if multiprocess_dir is None else None
        self.model_label = ModelLabels(max_models)
        registry = self.registry
        self.requests = Counter(
            "thinkproxy_requests",
            "Requests answered, by route (chat, passthrough), providers.yaml entry, thinking level "
            "applied, how it was applied (params, prompt) and the HTTP status the client got.",
            ["route", "provider", "level", "method", "status"],
            registry=registry,
        )
        self.ttft = Histogram(
            "thinkproxy_time_to_first_token_seconds",
            "Streams: time from the request's arrival to the first reasoning, answer or tool-call token.",
            ["provider", "level"],
            buckets=LONG_DURATION_BUCKETS,
            registry=registry,
        )
        self.reasoning_seconds = Histogram(
            "thinkproxy_reasoning_seconds",
            "Time the model spent thinking, per response that showed reasoning.",
            ["provider", "level"],
            buckets=LONG_DURATION_BUCKETS,
            registry=registry,
        )
        self.reasoning_tokens = Histogram(
            "thinkproxy_reasoning_tokens",
            "Reasoning tokens per response (usage.completion_tokens_details.reasoning_tokens).",
            ["provider"],
            buckets=GENAI_TOKEN_BUCKETS,
            registry=registry,
        )
        self.active_streams = Gauge(
            "thinkproxy_active_streams",
            "Chat completion streams being relayed right now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.upstream_errors = Counter(
            "thinkproxy_upstream_errors",
            "Upstream failures by kind: 4xx/5xx (status class), timeout, connect, truncated, invalid.",
            ["provider", "kind"],
            registry=registry,
        )
        self.replay = Counter(
            "thinkproxy_replay",
            "Assistant messages whose reasoning the replay store handled, by outcome: restored, "
            "placeholder, missing.",
            ["outcome"],
            registry=registry,
        )
        self.operation_duration = Histogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration (OpenTelemetry gen_ai.client.operation.duration).",
            ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "error_type"],
            buckets=GENAI_DURATION_BUCKETS,
            registry=registry,
        )
        self.token_usage = Histogram(
            "gen_ai_client_token_usage",
            "Input and output tokens used (OpenTelemetry gen_ai.client.token.usage).",
            ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_token_type"],
            buckets=GENAI_TOKEN_BUCKETS,
            registry=registry,
        )

        self.requests_of = Children(self.requests)
        self.ttft_of = Children(self.ttft)
        self.reasoning_seconds_of = Children(self.reasoning_seconds)
        self.reasoning_tokens_of = Children(self.reasoning_tokens)
        self.upstream_errors_of = Children(self.upstream_errors)
        self.replay_of = Children(self.replay)
        self.operation_duration_of = Children(self.operation_duration)
        self.token_usage_of = Children(self.token_usage)
        self._pending: list[Ended] = []  # finished requests not applied yet (see count)

    def count(self, end: Ended) -> None:
        """Adds a finished request to the instruments.

        In one process, requests are applied in batches (FLUSH_EVERY, and whenever /metrics is
        read, so a scrape sees every finished request). Applied one at a time, between two
        requests' worth of other work, prometheus-client's objects (a lock per value, a value
        object per bucket) are out of the CPU caches: timed in a pinned server under load, the
        end of a request cost the metrics ~48 µs that way and ~32 µs batched (with Ended a
        tuple, not a frozen dataclass). With several workers every request is written at once:
        any worker may answer the next scrape, from the files, and must find the others'
        requests there.
        """
        if self.registry is None:
            self._apply(end)
            return
        pending = self._pending
        pending.append(end)
        if len(pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for end in pending:
            self._apply(end)

    def _apply(self, end: Ended) -> None:
        self.requests_of(end.route, end.provider, end.level, end.method, end.status).inc()
        if end.error_kind is not None:
            self.upstream_errors_of(end.provider, end.error_kind).inc()
        for outcome, count in end.replay:
            self.replay_of(outcome).inc(count)
        if not end.operation:
            return  # no GenAI operation took place
        provider = end.provider
        model = self.model_label(end.model)
        self.operation_duration_of("chat", provider, model, end.error_type).observe(end.duration_s)
        usage = end.usage
        if usage is None:
            return
        if usage.input is not None:
            self.token_usage_of("chat", provider, model, "input").observe(usage.input)
        if usage.output is not None:
            self.token_usage_of("chat", provider, model, "output").observe(usage.output)
        if usage.reasoning is not None:
            self.reasoning_tokens_of(provider).observe(usage.reasoning)
        if end.ttft_s is not None:
            self.ttft_of(provider, end.level).observe(end.ttft_s)
        if end.thought_s is not None:
            self.reasoning_seconds_of(provider, end.level).observe(end.thought_s)

    def exposition(self) -> bytes:
        if self.registry is not None:
            self.flush()
            return generate_latest(self.registry)
        assert self.multiprocess_dir is not None
        collected = CollectorRegistry()
        MultiProcessCollector(collected, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(collected)

    async def endpoint(self, request: Request) -> Response:
        return Response(self.exposition(), media_type=CONTENT_TYPE_LATEST)

    def close(self) -> None:
        """A worker that stops takes its share of the live gauge with it."""
        self.flush()
        if self.multiprocess_dir is not None:
            mark_process_dead(os.getpid(), self.multiprocess_dir)  # type: ignore[no-untyped-call]

    def listener(self) -> MetricsListener:
        return MetricsListener(self)


class MetricsListener:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> MetricsObserver:
        return MetricsObserver(self.metrics, record)


class MetricsObserver:
    __slots__ = ("_done", "_m", "_reasoned", "_record", "_streaming", "wants_trace")
    # Everything counted here is in the brief events (the `thinking` status, `done`).
    brief_trace = True

    def __init__(self, metrics: Metrics, record: AccessRecord) -> None:
        self._m = metrics
        self._record = record
        self.wants_trace = record.route == "chat"
        self._done: dict[str, Any] | None = None
        self._reasoned = False
        self._streaming = False

    def on_trace(self, events: TraceEvents) -> None:
        if not self._streaming and self._record.stream:
            # A stream's first trace events are made when the relay starts sending.
            self._streaming = True
            self._m.active_streams.inc()
        for event in events:
            kind = event["type"]
            if kind == "done":
                self._done = event
            elif kind == "status" and event.get("stage") == "thinking":
                self._reasoned = True

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        m = self._m
        if self._streaming:
            m.active_streams.dec()  # (now, not batched: the gauge is about this moment)
        m.count(ended(record, duration_ms, self._done, self._reasoned))


class Ended(NamedTuple):
    """What one finished request adds to the metrics: label values and numbers, nothing else of
    the request (a batch waiting to be applied must not hold records, messages or headers).
    (A tuple: made once per request, it must be cheap to make.)"""

    route: str
    provider: str
    level: str
    method: str
    status: str
    error_kind: str | None
    replay: list[tuple[str, int]]
    # A GenAI operation took place: a chat request that got as far as choosing an upstream.
    operation: bool
    model: str = ""
    error_type: str = ""
    duration_s: float = 0.0
    usage: Usage | None = None  # None: no `done` event (the answer never finished)
    ttft_s: float | None = None
    thought_s: float | None = None


def ended(record: AccessRecord, duration_ms: float, done: dict[str, Any] | None, reasoned: bool) -> Ended:
    provider = record.provider or "none"
    common = (
        record.route,
        provider,
        record.level or "none",
        record.thinking_method or "none",
        str(record.status),
        upstream_error_kind(record),
        replay_counts(record),
    )
    if record.route != "chat" or record.provider is None:
        return Ended(*common, operation=False)  # refused before an upstream was chosen
    return Ended(
        *common,
        operation=True,
        model=record.model or "",
        error_type=error_type(record) or "",
        duration_s=duration_ms / 1000.0,
        usage=usage_of(done) if done is not None else None,
        ttft_s=seconds(done.get("ttft_ms")) if done is not None and record.stream else None,
        thought_s=seconds(done.get("reasoning_ms")) if done is not None and reasoned else None,
    )
