"""The figures behind the console's charts (GET /thinkproxy/stats, docs/sessions.md): requests and
tokens over time by level, the share of output spent thinking per model and level, TTFT and
total-time percentiles, the prompt cache's hit ratio, cost by key and model — computed from the
last `history` requests this process finished (one small tuple each), when asked."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

from proxy.core.sessions.facts import LEVEL_KEYS, NO_LEVEL, RequestFacts, level_key
from proxy.policy.usage_book import ratio

LEVELS = (*LEVEL_KEYS, NO_LEVEL)


class Point(NamedTuple):
    at: int  # Unix ms
    level: str
    model: str
    key: str | None
    input: int
    cached: int
    reasoning: int
    output: int
    cost: float | None
    ttft_ms: float | None
    total_ms: float
    error: bool


def percentiles(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0, "p50": None, "p95": None, "p99": None}
    values.sort()
    last = len(values) - 1

    def at(q: float) -> float:  # nearest rank: the smallest value with q of them at or below it
        return round(values[min(last, max(0, math.ceil(q * len(values)) - 1))], 1)

    return {"count": len(values), "p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}


class Stats:
    def __init__(self, history: int) -> None:
        self.points: deque[Point] = deque(maxlen=history)

    def add(self, facts: RequestFacts) -> None:
        usage = facts.usage
        if usage is not None:
            reasoning = usage.reasoning
            counts = (
                usage.input or 0,
                usage.cached_input or 0,
                reasoning.value if reasoning is not None else 0,
                usage.output or 0,
            )
        else:
            counts = (0, 0, 0, 0)
        self.points.append(
            Point(
                facts.at,
                level_key(facts.level),
                facts.model or "(unknown)",
                facts.key,
                *counts,
                facts.cost_usd,
                facts.ttft_ms,
                facts.total_ms,
                facts.status >= 400,
            )
        )

    def report(self, since: int, until: int, bucket_s: int) -> dict[str, Any]:
        width = bucket_s * 1000
        buckets: dict[int, dict[str, Any]] = {}
        shares: dict[tuple[str, str], list[int]] = {}
        by_key: dict[str | None, list[float]] = {}
        by_model: dict[str | None, list[float]] = {}
        ttft: list[float] = []
        total: list[float] = []
        count = cached = inputs = 0
        for p in self.points:
            if not since <= p.at <= until:
                continue
            count += 1
            # (`until` itself falls in the last bucket, not in one of its own)
            start = since + min(p.at - since, max(until - since - 1, 0)) // width * width
            bucket = buckets.get(start)
            if bucket is None:
                bucket = buckets[start] = _bucket(start)
            bucket["requests"][p.level] += 1
            tokens = bucket["tokens"]
            tokens["input"] += p.input
            tokens["cached"] += p.cached
            tokens["reasoning"] += p.reasoning
            tokens["output"] += p.output
            bucket["reasoning_by_level"][p.level] += p.reasoning
            bucket["output_by_level"][p.level] += p.output
            bucket["errors"] += p.error
            if p.cost is not None:
                bucket["cost_usd"] = (bucket["cost_usd"] or 0.0) + p.cost
            share = shares.setdefault((p.model, p.level), [0, 0, 0])
            share[0] += 1
            share[1] += p.reasoning
            share[2] += p.output
            for table, name in ((by_key, p.key), (by_model, p.model)):
                row = table.setdefault(name, [0, 0.0, 0])
                row[0] += 1
                if p.cost is not None:
                    row[1] += p.cost
                    row[2] += 1
            if p.ttft_ms is not None:
                ttft.append(p.ttft_ms)
            total.append(p.total_ms)
            inputs += p.input
            cached += p.cached
        listed = [buckets[start] for start in sorted(buckets)]
        for bucket in listed:
            tokens = bucket["tokens"]
            bucket["cache_hit_ratio"] = ratio(tokens["cached"], tokens["input"])
            if bucket["cost_usd"] is not None:
                bucket["cost_usd"] = round(bucket["cost_usd"], 8)
        return {
            "since": since,
            "until": until,
            "bucket_s": bucket_s,
            "requests": count,
            "buckets": listed,
            "reasoning_share": [
                {
                    "model": model,
                    "level": level,
                    "requests": n,
                    "reasoning": r,
                    "output": o,
                    "share": ratio(r, o),
                }
                for (model, level), (n, r, o) in sorted(shares.items())
            ],
            "latency": {"ttft_ms": percentiles(ttft), "total_ms": percentiles(total)},
            "cache_hit_ratio": ratio(cached, inputs),
            "cost": {
                "by_key": _costs("key", by_key),
                "by_model": _costs("model", by_model),
            },
        }


def _bucket(start: int) -> dict[str, Any]:
    return {
        "at": start,
        "requests": dict.fromkeys(LEVELS, 0),
        "tokens": {"input": 0, "cached": 0, "reasoning": 0, "output": 0},
        "reasoning_by_level": dict.fromkeys(LEVELS, 0),
        "output_by_level": dict.fromkeys(LEVELS, 0),
        "cache_hit_ratio": None,
        "cost_usd": None,
        "errors": 0,
    }


def _costs(name: str, table: Mapping[Any, list[float]]) -> list[dict[str, Any]]:
    rows = [
        {name: label, "requests": int(row[0]), "cost_usd": round(row[1], 8) if row[2] else None}
        for label, row in table.items()
    ]
    rows.sort(key=lambda row: (-(row["cost_usd"] or 0.0), -row["requests"]))
    return rows
