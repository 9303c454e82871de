"""The thinking policy at work: each request's level checked against its key's rule before anything
is sent, and each answer's reasoning tokens counted against its key's budget after it ends.

Before (`decide`, called by Proxy.run_chat for every front door):
- a budget that is spent: `on_exhausted: refuse` is a 429 (`reasoning_budget_exceeded`, naming the
  key and when the window has room again, with `Retry-After`); `off` sends the request with
  thinking off;
- a level above the key's `max_level` is sent at the ceiling (a request without a level only when
  the ceiling is off: the upstream's own default might think);
- either way `X-Thinking-Policy` names the rule, `X-Thinking-Level-Applied` says what was sent and
  a trace note says so. Never silent.

After (the listener's `on_end`): the answer's one reasoning count (proxy.core.usage, reported or
estimated) is added to the key's current bucket, and to the usage book (/thinkproxy/usage). A
budget store that fails is logged and counted, and lets the request through: an outage of Redis
must not turn into an outage of the gateway.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

from proxy.core.budgets import Window
from proxy.core.controls import Level
from proxy.core.errors import ProxyError
from proxy.core.events import MODEL_ROUTES, AccessRecord, RequestObserver
from proxy.core.gateway import ClientKey
from proxy.core.policy_file import Budget, KeyRule, Policy, above
from proxy.policy.loader import load_policy
from proxy.policy.store import BudgetStore, MemoryBudgets, RedisBudgets
from proxy.policy.usage_book import UsageBook
from proxy.settings import Settings
from proxy.state.base import StoreUnavailable

logger = logging.getLogger("thinkproxy.policy")
HEADER = "x-thinking-policy"


class BudgetExceeded(ProxyError):
    status = 429
    type = "reasoning_budget_exceeded"
    code = "reasoning_budget_exceeded"

    def __init__(self, message: str, *, retry_after: int, rule: str) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds, for the Retry-After header
        self.rule = rule  # for X-Thinking-Policy


@dataclass(frozen=True, slots=True)
class Decision:
    """The level to send, and (when the policy changed it) the rule that did, as the header names it."""

    level: Level | None
    rule: str | None = None

    def note(self, asked: Level | None) -> tuple[str, str]:
        """The trace note (English, Chinese) that says what the policy did."""
        was = asked.value if asked is not None else "no level"
        sent = self.level.value if self.level is not None else "no level"
        return (
            f"Thinking policy {self.rule}: asked {was}, sent {sent}",
            f"思考策略 {self.rule}：请求 {was}，实际发送 {sent}",
        )


def budget_key(client: str, budget: Budget) -> str:
    return f"{client}:{budget.per}"


class ThinkingPolicy:
    """The loaded policy (replaced whole on reload), its budget store and usage book."""

    def __init__(self, policy: Policy, store: BudgetStore, *, clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.store = store
        self.clock = clock
        self.book = UsageBook()
        self.store_errors = 0
        self._writes: set[asyncio.Task[None]] = set()

    @classmethod
    def from_settings(cls, settings: Settings, client_keys: Sequence[ClientKey]) -> ThinkingPolicy | None:
        """None without THINKPROXY_POLICY_FILE; budgets in Redis when THINKPROXY_STATE_URL names
        one (the replay store's Redis: replicas then share them), else in the process."""
        if settings.policy_file is None:
            return None
        policy = load_policy(settings.policy_file, client_keys)
        url = settings.state_url.get_secret_value() if settings.state_url is not None else None
        store: BudgetStore = RedisBudgets(url) if url else MemoryBudgets()
        return cls(policy, store)

    # -- before the request ---------------------------------------------------------------------
    async def decide(self, client: str | None, level: Level | None) -> Decision:
        rule = self.policy.rule_for(client)
        if client is not None and rule.reasoning_tokens is not None:
            exhausted = await self._exhausted(client, rule.reasoning_tokens)
            if exhausted is not None:
                if rule.on_exhausted == "refuse":
                    raise self._refusal(client, rule.reasoning_tokens, exhausted)
                off = Decision(Level.OFF, f"{rule.reasoning_tokens.label()}; on_exhausted=off")
                return off if level is not Level.OFF else Decision(level)
        return _ceiling(rule, level)

    async def _exhausted(self, client: str, budget: Budget) -> float | None:
        """When the key's spent budget has room again (None: it has room now, or the store could
        not say)."""
        window = Window(budget.seconds)
        try:
            counts = await self.store.counts(budget_key(client, budget))
        except StoreUnavailable as exc:
            self._fault("read", exc)
            return None
        now = self.clock()
        if window.spent(counts, now) < budget.limit:
            return None
        return window.reset_at(counts, now, budget.limit)

    def _refusal(self, client: str, budget: Budget, reset_at: float) -> BudgetExceeded:
        wait = max(1, math.ceil(reset_at - self.clock()))
        return BudgetExceeded(
            f"The reasoning-token budget of the client key {client!r} is spent ({budget.limit} reasoning "
            f"tokens per {budget.per}, rolling); it has room again at "
            f"{formatdate(reset_at, usegmt=True)} (in {wait} s). Retry then, send X-Thinking-Level: off, "
            "or ask the gateway's operator for a larger budget.",
            retry_after=wait,
            rule=f"{budget.label()}; on_exhausted=refuse",
        )

    # -- after the answer -----------------------------------------------------------------------
    def spend(self, record: AccessRecord) -> None:
        """Count a finished request: its usage in the book (its cost on its record, for the
        console), its reasoning tokens in the budget."""
        usage = record.usage
        record.cost_usd = self.book.add(record, self.policy.price_for(record.response_model or record.model))
        reasoning = usage.reasoning.value if usage is not None and usage.reasoning is not None else 0
        budget = self.policy.rule_for(record.client).reasoning_tokens
        if record.client is None or budget is None or reasoning <= 0:
            return
        task = asyncio.get_running_loop().create_task(self._add(record.client, budget, reasoning))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _add(self, client: str, budget: Budget, tokens: int) -> None:
        window = Window(budget.seconds)
        now = self.clock()
        key = budget_key(client, budget)
        try:
            stale = window.stale(await self.store.counts(key), now)
            await self.store.add(key, window.bucket(now), tokens, window.ttl, stale)
        except StoreUnavailable as exc:
            self._fault("write", exc)

    async def left(self, client: str) -> dict[str, Any] | None:
        """What a key's budget has left, for /thinkproxy/usage (None: no budget)."""
        budget = self.policy.rule_for(client).reasoning_tokens
        if budget is None:
            return None
        window = Window(budget.seconds)
        try:
            counts = await self.store.counts(budget_key(client, budget))
        except StoreUnavailable as exc:
            self._fault("read", exc)
            return {"limit": budget.limit, "per": budget.per, "spent": None, "left": None}
        spent = window.spent(counts, self.clock())
        return {
            "limit": budget.limit,
            "per": budget.per,
            "spent": spent,
            "left": max(0, budget.limit - spent),
        }

    def _fault(self, what: str, exc: Exception) -> None:
        self.store_errors += 1
        logger.warning(
            "The budget store (%s) failed to %s: %s; the request was let through", self.store.name, what, exc
        )

    async def drain(self) -> None:
        """Wait for the budget writes under way (tests, and shutdown)."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def aclose(self) -> None:
        await self.drain()
        await self.store.aclose()

    # -- the listener ---------------------------------------------------------------------------
    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> RequestObserver | None:
        return _Spend(self)


class _Spend(RequestObserver):
    __slots__ = ("policy",)

    def __init__(self, policy: ThinkingPolicy) -> None:
        self.policy = policy

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        if record.route in MODEL_ROUTES:
            self.policy.spend(record)


def _ceiling(rule: KeyRule, level: Level | None) -> Decision:
    ceiling = rule.max_level
    if ceiling is None:
        return Decision(level)
    if level is not None and above(level, ceiling):
        return Decision(ceiling, f"max_level={ceiling.value}")
    if level is None and ceiling is Level.OFF:
        return Decision(Level.OFF, "max_level=off")
    return Decision(level)
