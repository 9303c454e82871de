"""GET /thinkproxy/usage (admin keys only): per client key and model, what was spent since this
process started (requests, tokens by kind, reasoning tokens reported and estimated, cost by the
policy's price table), and each key's budget with what it has left (from the budget store, shared
by replicas)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.console.routes import AdminAccess
from proxy.core.errors import ProxyError
from proxy.policy.service import ThinkingPolicy
from proxy.policy.usage_book import ratio

PATH = "/thinkproxy/usage"


class UsageAPI:
    def __init__(self, thinking: ThinkingPolicy, admin: AdminAccess, client_names: list[str]) -> None:
        self.thinking = thinking
        self.admin = admin
        self.client_names = client_names

    def routes(self) -> list[Route]:
        return [Route(PATH, self.usage, methods=["GET"])]

    async def usage(self, request: Request) -> Response:
        try:
            self.admin.check(request.headers.items())
        except ProxyError as exc:
            return Response(exc.body(), status_code=exc.status, media_type="application/json")
        return Response(orjson.dumps(await self.report()), media_type="application/json")

    async def report(self) -> dict[str, Any]:
        thinking = self.thinking
        rows = thinking.book.rows()
        clients: dict[str, dict[str, Any]] = {}
        for name in self.client_names:
            rule = thinking.policy.rule_for(name)
            clients[name] = {
                "max_level": rule.max_level.value if rule.max_level is not None else None,
                "on_exhausted": rule.on_exhausted if rule.reasoning_tokens is not None else None,
                "budget": await thinking.left(name),
                **_totals([row for row in rows if row["client"] == name]),
            }
        return {
            "clients": clients,
            "by_model": rows,
            "budget_store": {"name": thinking.store.name, "errors": thinking.store_errors},
            "since": thinking.book.started,
        }


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("requests", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens")
    out: dict[str, Any] = {key: sum(row[key] for row in rows) for key in keys}
    out["reasoning_tokens_estimated"] = sum(row["reasoning_tokens_estimated"] for row in rows)
    costs = [row["cost_usd"] for row in rows]
    priced = [c for c in costs if c is not None]
    out["cost_usd"] = round(sum(priced), 6) if priced else None
    out["cache_hit_ratio"] = ratio(out["cached_input_tokens"], out["input_tokens"])
    return out
