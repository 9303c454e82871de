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


def finished(
    usage: TokenUsage | None,
    upstream_usage: dict[str, Any] | None = None,
    *,
    client: str | None = None,
    starved: bool = False,
    in_content: bool = False,
) -> AccessRecord:
    record = AccessRecord(
        method="POST", path="/v1/chat/completions", route="chat", provider="deepseek", model="deepseek-flash",
        status=200, upstream_status=200, level="deep", client=client,
    )  # fmt: skip
    record.outcome = TraceOutcome(upstream_usage, None, None, starved, in_content)
    record.usage = usage
    return record


GENAI = (("gen_ai_provider_name", "deepseek"), ("gen_ai_request_model", "deepseek-flash"))


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


def test_reasoning_tokens_are_counted_per_client_model_level_and_source() -> None:
    metrics = Metrics(max_models=10)
    metrics.count(finished(TokenUsage(10, 50, None, ReasoningTokens(40, REPORTED)), client="alice"), 5.0)
    metrics.count(finished(TokenUsage(10, 50, None, ReasoningTokens(2, REPORTED)), client="alice"), 5.0)
    metrics.count(finished(TokenUsage(10, 50, None, ReasoningTokens(31, ESTIMATED)), client="bob"), 5.0)
    metrics.count(finished(TokenUsage(10, 50, None, ReasoningTokens(5, ESTIMATED))), 5.0)  # BYOK
    metrics.count(finished(TokenUsage(10, 50, None, None), client="alice"), 5.0)  # unknown: nothing
    got = {k: v for k, v in series(metrics).items() if k[0] == "thinkproxy_reasoning_tokens_total"}
    assert got == {
        ("thinkproxy_reasoning_tokens_total", tuple(sorted((*GENAI, ("client", client), ("level", "deep"),
                                                              ("source", source))))): total
        for client, source, total in (("alice", REPORTED, 42), ("bob", ESTIMATED, 31), ("", ESTIMATED, 5))
    }  # fmt: skip


def test_requests_are_counted_per_client() -> None:
    metrics = Metrics(max_models=10)
    for client in ("alice", "alice", None):
        metrics.count(finished(TokenUsage(), client=client), 5.0)
    requests = {
        dict(labels)["client"]: v
        for (name, labels), v in series(metrics).items()
        if name == "thinkproxy_requests_total"
    }
    assert requests == {"alice": 2, "": 1}


def test_answers_the_reasoning_starved_are_counted() -> None:
    metrics = Metrics(max_models=10)
    metrics.count(
        finished(TokenUsage(10, 64, None, ReasoningTokens(64, REPORTED)), client="alice", starved=True), 5.0
    )
    metrics.count(finished(TokenUsage(10, 64, None, ReasoningTokens(9, REPORTED)), client="alice"), 5.0)
    got = series(metrics)
    assert got[("thinkproxy_reasoning_starved_total", tuple(sorted((*GENAI, ("client", "alice")))))] == 1
    assert sum(v for (name, _), v in got.items() if name == "thinkproxy_reasoning_starved_total") == 1


def test_answers_whose_reasoning_came_as_the_text_are_counted() -> None:
    # Kimi K3 (MoonshotAI/Kimi-K3#45): a model that always reasons answered with none; the trace
    # warned of it (reasoning_in_content) and operators see how often it happens.
    metrics = Metrics(max_models=10)
    metrics.count(finished(TokenUsage(10, 64, None, None), client="alice", in_content=True), 5.0)
    metrics.count(finished(TokenUsage(10, 64, None, ReasoningTokens(9, REPORTED)), client="alice"), 5.0)
    got = series(metrics)
    assert got[("thinkproxy_reasoning_in_content_total", tuple(sorted((*GENAI, ("client", "alice")))))] == 1
    assert sum(v for (name, _), v in got.items() if name == "thinkproxy_reasoning_in_content_total") == 1


def test_a_record_without_the_reading_falls_back_to_the_outcomes_usage() -> None:
    metrics = Metrics(max_models=10)
    upstream = {"prompt_tokens": 10, "completion_tokens_details": {"reasoning_tokens": 7}}
    metrics.count(finished(None, upstream), 5.0)
    labels = tuple(sorted((*GENAI, ("client", ""), ("level", "deep"), ("source", REPORTED))))
    assert series(metrics)[("thinkproxy_reasoning_tokens_total", labels)] == 7


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
