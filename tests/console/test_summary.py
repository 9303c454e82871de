"""proxy.console.summary: the token counts a request's summary shows."""

from __future__ import annotations

from typing import Any

from proxy.console.summary import RecordFacts, summarize, usage_of
from proxy.core.events import AccessRecord
from proxy.core.stream.trace_outcome import TraceOutcome
from proxy.core.usage import ESTIMATED, ReasoningTokens, TokenUsage


def test_the_summary_shows_the_upstreams_counts_and_the_records_reading() -> None:
    done = {"usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150, "odd": "x"}}
    reading = TokenUsage(100, 50, 64, ReasoningTokens(31, ESTIMATED))
    assert usage_of(done, reading) == {
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "total_tokens": 150,
        "cached_tokens": 64,
        "reasoning_tokens": 31,
        "reasoning_tokens_source": "estimated",
    }


def test_in_flight_or_unknown_counts_are_left_out() -> None:
    assert usage_of(None) is None
    assert usage_of({"usage": {"prompt_tokens": 3}}, TokenUsage()) == {"prompt_tokens": 3}
    assert usage_of(None, TokenUsage(reasoning=ReasoningTokens(5, ESTIMATED))) == {
        "reasoning_tokens": 5,
        "reasoning_tokens_source": "estimated",
    }


def summary(of: AccessRecord | RecordFacts) -> dict[str, Any]:
    return summarize(
        of, request_id="r", replica="x", started_at_ms=0, events=[], events_dropped=0, tools=[], done=None,
        duration_ms=5.0 if isinstance(of, RecordFacts) else None,
    )  # fmt: skip


def test_a_finished_request_shows_its_cost_and_whether_the_reasoning_ate_its_answer() -> None:
    record = AccessRecord(method="POST", path="/v1/chat/completions", route="chat", status=200)
    in_flight = summary(record)
    assert in_flight["cost_usd"] is None and in_flight["reasoning_starved"] is False
    record.client, record.cost_usd = "alice", 0.000123
    record.outcome = TraceOutcome(None, None, 12.0, starved=True)
    finished = summary(RecordFacts.of(record))
    assert finished["cost_usd"] == 0.000123 and finished["reasoning_starved"] is True
    assert finished["client"] == "alice"
    plain = summary(RecordFacts.of(AccessRecord(method="GET", path="/v1/models")))
    assert plain["cost_usd"] is None and plain["reasoning_starved"] is False and plain["client"] is None


def test_a_finished_request_shows_how_many_thinking_blocks_the_upstream_dropped() -> None:
    record = AccessRecord(method="POST", path="/v1/messages", route="messages", status=200)
    assert summary(record)["thinking_dropped"] == 0
    assert summary(RecordFacts.of(record))["thinking_dropped"] == 0
    record.notes["thinking_dropped"] = 2
    assert summary(RecordFacts.of(record))["thinking_dropped"] == 2
