"""The stats behind the console's charts: buckets by level, percentiles, shares and costs, from
the requests this process finished."""

from __future__ import annotations

from typing import Any

from proxy.core.sessions.facts import RequestFacts
from proxy.core.usage import ReasoningTokens, TokenUsage
from proxy.sessions.stats import Stats, percentiles
from tests.helpers import session_facts

USAGE = TokenUsage(input=100, output=60, cached_input=50, reasoning=ReasoningTokens(30, "reported"))


def facts(at: int, **over: Any) -> RequestFacts:
    return session_facts(at, **{"model": "m", "usage": USAGE, "cost_usd": 0.01, "total_ms": 100.0, **over})


def test_a_request_at_the_end_of_the_window_is_in_its_last_bucket() -> None:
    stats = Stats(100)
    for at in (0, 59_999, 60_000, 120_000):
        stats.add(facts(at))
    report = stats.report(0, 120_000, 60)
    assert [(b["at"], sum(b["requests"].values())) for b in report["buckets"]] == [(0, 2), (60_000, 2)]
    assert report["requests"] == 4


def test_levels_shares_costs_and_percentiles() -> None:
    stats = Stats(100)
    stats.add(facts(1, level="off", usage=TokenUsage(input=10, output=5, cached_input=0), key="a"))
    stats.add(facts(2, ttft_ms=50.0, key="a", cost_usd=None))
    stats.add(facts(3, status=502, level=None, key="b"))
    report = stats.report(0, 10, 60)
    (bucket,) = report["buckets"]
    assert bucket["requests"] == {"off": 1, "standard": 0, "deep": 1, "default": 1}
    assert bucket["errors"] == 1 and bucket["cost_usd"] == 0.02
    shares = {(r["model"], r["level"]): r["share"] for r in report["reasoning_share"]}
    assert shares == {("m", "off"): 0.0, ("m", "deep"): 0.5, ("m", "default"): 0.5}
    assert report["latency"]["ttft_ms"] == {"count": 1, "p50": 50.0, "p95": 50.0, "p99": 50.0}
    by_key = {r["key"]: r["cost_usd"] for r in report["cost"]["by_key"]}
    assert by_key == {"a": 0.01, "b": 0.01}
    assert report["cache_hit_ratio"] == round(100 / 210, 3)


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentiles(values) == {"count": 100, "p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert percentiles([]) == {"count": 0, "p50": None, "p95": None, "p99": None}
