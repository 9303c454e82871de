"""Token accounting in the metrics and the span: cached input tokens, and reasoning tokens with
their source, read from the request's one reading (AccessRecord.usage, proxy.core.usage)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from proxy.core.events import AccessRecord
from proxy.core.stream.trace_outcome import TraceOutcome
from proxy.core.usage import ESTIMATED, REPORTED, ReasoningTokens, TokenUsage, account
from proxy.telemetry.metrics import Metrics
from proxy.telemetry.otel import span_attributes


def finished(usage: TokenUsage | None, upstream_usage: dict[str, Any] | None = None) -> AccessRecord:
    record = AccessRecord(
        method="POST", path="/v1/chat/completions", route="chat", provider="deepseek", model="deepseek-flash",
        status=200, upstream_status=200,
    )  # fmt: skip
    record.outcome = TraceOutcome(upstream_usage, None, None)
    record.usage = usage
    return record


def series(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_cached_input_tokens_are_counted_by_provider_and_model() -> None:
    metrics = Metrics(max_models=10)
    metrics.count(finished(TokenUsage(100, 20, 64, None)), 5.0)
    metrics.count(finished(TokenUsage(100, 20, 36, None)), 5.0)
    metrics.count(finished(TokenUsage(100, 20, 0, None)), 5.0)  # a miss adds nothing
    labels = (("gen_ai_provider_name", "deepseek"), ("gen_ai_request_model", "deepseek-flash"))
    assert series(metrics)[("thinkproxy_cached_input_tokens_total", labels)] == 100


def test_reasoning_tokens_carry_their_source() -> None:
    metrics = Metrics(max_models=10)
    metrics.count(finished(TokenUsage(10, 50, None, ReasoningTokens(40, REPORTED))), 5.0)
    metrics.count(finished(TokenUsage(10, 50, None, ReasoningTokens(31, ESTIMATED))), 5.0)
    metrics.count(finished(TokenUsage(10, 50, None, None)), 5.0)  # unknown: not observed
    got = series(metrics)
    for source, total in ((REPORTED, 40), (ESTIMATED, 31)):
        labels = (("provider", "deepseek"), ("source", source))
        assert got[("thinkproxy_reasoning_tokens_count", labels)] == 1
        assert got[("thinkproxy_reasoning_tokens_sum", labels)] == total


def test_a_record_without_the_reading_falls_back_to_the_outcomes_usage() -> None:
    metrics = Metrics(max_models=10)
    upstream = {"prompt_tokens": 10, "completion_tokens_details": {"reasoning_tokens": 7}}
    metrics.count(finished(None, upstream), 5.0)
    labels = (("provider", "deepseek"), ("source", REPORTED))
    assert series(metrics)[("thinkproxy_reasoning_tokens_sum", labels)] == 7


def test_the_span_reads_the_same_reading() -> None:
    usage = account(
        {"prompt_tokens": 100, "completion_tokens": 50, "prompt_cache_hit_tokens": 64}, estimate=31
    )
    attributes = span_attributes(finished(usage), {"finish_reason": "stop", "usage": {"prompt_tokens": 1}})
    assert attributes["gen_ai.usage.input_tokens"] == 100  # the record's reading, not the event's
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 64
    assert attributes["gen_ai.usage.reasoning.output_tokens"] == 31
    assert attributes["thinkproxy.usage.reasoning.source"] == ESTIMATED
    bare = span_attributes(finished(TokenUsage()), None)
    assert not {key for key in bare if key.startswith(("gen_ai.usage", "thinkproxy.usage"))}
