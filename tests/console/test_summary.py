"""proxy.console.summary: the token counts a request's summary shows."""

from __future__ import annotations

from proxy.console.summary import usage_of
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
