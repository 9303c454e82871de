"""A request's facts as the sessions list them: the door, the level applied, TTFT and thinking time
null (not 0) when the answer was not streamed, and only names and counts from the trace."""

from __future__ import annotations

from proxy.core.events import AccessRecord
from proxy.core.sessions.facts import door_of, request_facts
from proxy.core.stream.trace_outcome import TraceOutcome
from proxy.core.usage import ReasoningTokens, TokenUsage


def record(**fields: object) -> AccessRecord:
    r = AccessRecord(method="POST", path="/v1/chat/completions", route="chat", request_id="r1", status=200)
    for name, value in fields.items():
        setattr(r, name, value)
    return r


def facts(r: AccessRecord) -> dict[str, object]:
    return request_facts(r, at_ms=1, total_ms=12.34, client="curl", changes=None).as_dict()


def test_door_is_the_route_or_the_websocket() -> None:
    assert door_of(record(route="messages")) == "messages"
    assert door_of(record(route="responses", transport="websocket")) == "websocket"


def test_times_are_null_not_zero_when_the_answer_was_not_streamed() -> None:
    outcome = TraceOutcome(usage=None, ttft_ms=5.0, reasoning_ms=3.0)
    assert facts(record(stream=False, outcome=outcome))["thinking_ms"] is None
    assert facts(record(stream=False, outcome=outcome))["ttft_ms"] is None
    streamed = facts(record(stream=True, outcome=outcome))
    assert (streamed["ttft_ms"], streamed["thinking_ms"]) == (5.0, 3.0)


def test_tokens_level_and_the_trace_outcome_names_only() -> None:
    usage = TokenUsage(input=100, output=40, cached_input=60, reasoning=ReasoningTokens(30, "reported"))
    outcome = TraceOutcome(None, None, None, finish_reason="tool_calls", tools=("shell", "shell", "edit"))
    r = record(usage=usage, level="deep", level_source="suffix", model_suffix="deep", outcome=outcome)
    out = facts(r)
    tokens = {"input": 100, "cached": 60, "reasoning": 30, "reasoning_source": "reported", "output": 40}
    assert out["tokens"] == tokens
    assert (out["level"], out["level_source"], out["model_suffix"]) == ("deep", "suffix", "deep")
    assert (out["tool_calls"], out["tools"], out["finish_reason"]) == (3, ["shell", "edit"], "tool_calls")
    assert out["reasoning_starved"] is False
    assert facts(record(level="none"))["level"] is None
