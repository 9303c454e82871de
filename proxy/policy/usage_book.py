"""What each gateway client spent, per model, since the process started: requests, tokens by kind,
reasoning tokens (reported and estimated apart), the prompt cache's share of the input and the
cost (proxy.sessions.pricing: the policy's price table, else genai-prices). Read
by GET /thinkproxy/usage and the console. One process's view: replicas each keep their own (the
budgets, which must agree across replicas, are in the budget store)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from proxy.core.config.policy_file import Price
from proxy.core.events import AccessRecord

# Clients and models are bounded (configured keys; models as the metrics bound them), but a
# gateway open for months sees many model ids: past this many rows the rest is one row.
MAX_ROWS = 2_000
OTHER = "(other)"
PER_MILLION = 1_000_000


@dataclass(slots=True)
class Row:
    requests: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    reasoning_tokens_estimated: int = 0
    cost_usd: float = 0.0
    priced: bool = False  # a price matched every counted request of this row


def cost(record: AccessRecord, price: Price | None) -> float | None:
    """The request's cost in USD by `price` (None without a price or token counts)."""
    usage = record.usage
    if price is None or usage is None or usage.input is None or usage.output is None:
        return None
    cached = usage.cached_input or 0
    cached_price = price.cached_input if price.cached_input is not None else price.input
    # Reasoning tokens are part of the output when reported; an estimate never was (and is not
    # billed by this table: the upstream's own count is what it bills).
    return (
        (usage.input - cached) * price.input + cached * cached_price + usage.output * price.output
    ) / PER_MILLION


def ratio(part: int, whole: int) -> float | None:
    """part / whole to 3 places; None when there is no whole (no input counted)."""
    return round(part / whole, 3) if whole > 0 else None


class UsageBook:
    def __init__(self, started: float | None = None) -> None:
        self._rows: dict[tuple[str, str], Row] = {}
        self.started = time.time() if started is None else started  # (Unix seconds)

    def add(self, record: AccessRecord, spent: float | None) -> None:
        """Count one finished model request and its cost (`record.cost_usd`, proxy.sessions.pricing:
        None when it has none)."""
        key = (record.client or "(unnamed)", record.response_model or record.model or "(unknown)")
        row = self._rows.get(key)
        if row is None:
            if len(self._rows) >= MAX_ROWS:
                key = (key[0], OTHER)
            row = self._rows.setdefault(key, Row(priced=True))
        row.requests += 1
        usage = record.usage
        if usage is not None:
            row.input_tokens += usage.input or 0
            row.cached_input_tokens += usage.cached_input or 0
            row.output_tokens += usage.output or 0
            if usage.reasoning is not None:
                if usage.reasoning.source == "estimated":
                    row.reasoning_tokens_estimated += usage.reasoning.value
                else:
                    row.reasoning_tokens += usage.reasoning.value
        if spent is None:
            row.priced = False
        else:
            row.cost_usd += spent

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for (client, model), row in sorted(self._rows.items()):
            item = asdict(row)
            item["cost_usd"] = round(row.cost_usd, 6) if row.cost_usd or row.priced else None
            item["cache_hit_ratio"] = ratio(row.cached_input_tokens, row.input_tokens)
            out.append({"client": client, "model": model, **item})
        return out
