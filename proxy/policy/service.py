"""The thinking policy at work: each request's level checked against its key's rule before anything
is sent, and each answer's reasoning tokens counted against its key's budget after it ends.

Before (`decide`, called by Proxy.run_chat for every front door):
- a budget that is spent: `on_exhausted: refuse` is a 429 (`reasoning_budget_exceeded`, naming the
  key and when the window has room again, with `Retry-After`); `off` sends the request with
  thinking off;
- a level above the key's `max_level` is sent at the ceiling (a request without a level only when
  the ceiling is off: the upstream's own default might think). The level is what the request
  would really send: the header's, or the one the body's own knobs ask where the level leaves
  them in place (each door reads them with proxy.core.policy.body_level). A body relayed as it came
  (`admit`) cannot be sent at the ceiling: knobs above it are refused (403
  `thinking_level_above_ceiling`);
- where the rule needs thinking off (`max_level: off`, or a spent budget with `on_exhausted: off`)
  and the request's upstream entry cannot turn it off (no `off` level in providers.yaml), the
  request is refused: 403 `thinking_off_unavailable`, or the spent budget's 429;
- either way `X-Thinking-Policy` names the rule, `X-Thinking-Level-Applied` says what was sent and
  a trace note says so. Never silent.

Admission (in `decide`, for a key with a budget, and `admit` for a route relayed as it came): the
request sets aside an estimate of its reasoning (proxy.core.policy.budgets: the largest of the key's
recent answers, the default and the request's own output cap) in the same atomic step that checks
the budget, so requests in flight together see each other; what is spent and set aside reaching
the limit refuses (or turns off) the next one, and past half the limit a worker admits a key's
request only when none of the key's is in flight in it.

After (the listener's `on_end`, for every request that was admitted or that a model answered):
the answer's one reasoning count (proxy.core.usage, reported or estimated; read from the answer
whatever the trace, the metrics and the console are set to) settles the reservation (actual -
reserved, in the bucket it was set aside in; a request with no answer gives it all back), and goes
to the usage book (/thinkproxy/usage). The overshoot of a budget is thus bounded: a worker has at
most `in_flight_bound(limit)` requests of a key in flight at once, and the spend passes the limit
by less than what the requests in flight at the last admission spend (docs/policy.md). A budget
store that fails is logged and counted, and lets the request through: an outage of Redis must not
turn into an outage of the gateway.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

from proxy.core.config.policy_file import Budget, KeyRule, Policy, above
from proxy.core.controls import Level
from proxy.core.events import MODEL_ROUTES, AccessRecord, RequestObserver
from proxy.core.gateway import ClientKey
from proxy.core.policy.budgets import Peaks, window_for
from proxy.policy.loader import load_policy
from proxy.policy.refusals import BudgetExceeded, LevelAboveCeiling, ThinkingOffUnavailable
from proxy.policy.store import BudgetStore, MemoryBudgets, RedisBudgets
from proxy.policy.usage_book import UsageBook
from proxy.settings import Settings
from proxy.state.base import StoreUnavailable

logger = logging.getLogger("thinkproxy.policy")
HEADER = "x-thinking-policy"
__all__ = [
    "HEADER",
    "BudgetExceeded",
    "Decision",
    "LevelAboveCeiling",
    "ThinkingOffUnavailable",
    "ThinkingPolicy",
]


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


# Where an admitted request's reservation waits on its record (`AccessRecord.notes`) for its end.
HOLD = "budget_hold"
# Retry-After for a request refused while the rest of the budget is only set aside by this worker's
# requests in flight: they may settle for less soon (the window's time would be an hour or a day).
IN_FLIGHT_RETRY_S = 10


@dataclass(frozen=True, slots=True)
class Hold:
    """What one admitted request set aside: `tokens` in `bucket` of `key`'s counts."""

    key: str
    budget: Budget
    bucket: int
    tokens: int


class ThinkingPolicy:
    """The loaded policy (replaced whole on reload), its budget store and usage book."""

    def __init__(self, policy: Policy, store: BudgetStore, *, clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.store = store
        self.clock = clock
        self.book = UsageBook()
        self.store_errors = 0
        self.peaks = Peaks()  # each key's recent answers: what its next request sets aside
        self._held: dict[str, int] = {}  # what this worker's requests in flight set aside, per key
        self._writes: set[asyncio.Task[None]] = set()
        self._observer = _Spend(self)  # (it keeps nothing of a request: one serves them all)

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
    async def decide(
        self,
        client: str | None,
        level: Level | None,
        *,
        can_turn_off: bool = True,
        record: AccessRecord | None = None,
        asks: int | None = None,
    ) -> Decision:
        """`level`: what the request would really send (a door reads the body's own knobs where
        the level leaves them: proxy.core.policy.body_level); `can_turn_off`: whether its upstream entry
        can send thinking off. Where the rule needs off and the entry cannot, the request is
        refused: any body sent would think. `record`: the request's, which an admission's
        reservation waits on until its end (without one the budget is only read); `asks`: the
        request's own output cap (proxy.core.policy.budgets.output_cap), set aside when it is larger."""
        rule = self.policy.rule_for(client)
        if client is not None and rule.reasoning_tokens is not None:
            exhausted = await self._exhausted(client, rule.reasoning_tokens, record, asks)
            if exhausted is not None:
                if rule.on_exhausted == "refuse" or (level is not Level.OFF and not can_turn_off):
                    raise self._refusal(
                        client, rule.reasoning_tokens, exhausted, off=rule.on_exhausted == "off"
                    )
                off = Decision(Level.OFF, f"{rule.reasoning_tokens.label()}; on_exhausted=off")
                return off if level is not Level.OFF else Decision(level)
        return _ceiling(client, rule, level, can_turn_off)

    async def admit(
        self,
        record: AccessRecord,
        asks: int | None = None,
        *,
        level: Level | None = None,
        can_turn_off: bool = True,
    ) -> None:
        """A route relayed as it came (`/v1/responses/compact` to a native upstream,
        `/v1/completions`, …): its body is not rewritten, so it cannot be sent at a lower level.
        `level`: what its own knobs ask; above the key's ceiling it is refused (403), as is a body
        without knobs under a ceiling of off when its model thinks unless told not to
        (`can_turn_off` False). A spent budget refuses it whatever `on_exhausted` says."""
        client = record.client
        rule = self.policy.rule_for(client)
        ceiling = rule.max_level
        # (a body without knobs under off, its model off unless told to think, goes as it came)
        if ceiling is not None and _ceiling(client, rule, level, can_turn_off).rule and level is not None:
            raise LevelAboveCeiling(
                f"The thinking policy of the client key {client!r} allows thinking up to "
                f"{ceiling.value} (max_level={ceiling.value}), and this request's own knobs ask "
                f"{level.value}. Its route is relayed as it came, so the proxy cannot lower them: send "
                "a lower level (or none), or ask the gateway's operator.",
                rule=f"max_level={ceiling.value}",
            )
        budget = rule.reasoning_tokens
        if client is None or budget is None:
            return
        exhausted = await self._exhausted(client, budget, record, asks)
        if exhausted is not None:
            raise self._refusal(client, budget, exhausted, off=rule.on_exhausted == "off")

    async def _exhausted(
        self, client: str, budget: Budget, record: AccessRecord | None = None, asks: int | None = None
    ) -> float | None:
        """When the key's spent budget has room again (None: it has room now, or the store could
        not say). With `record`, the check is an admission: the request's reservation is set
        aside in the same step, and kept on the record (HOLD) when it is admitted."""
        window = window_for(budget.seconds)
        key = budget_key(client, budget)
        now = self.clock()
        own = record.notes.get(HOLD) if record is not None else None
        if own is not None:
            record = None  # (admitted already: a second look only reads, its own reservation aside)
        tokens = self.peaks.reservation(key, budget.limit, asks) if record is not None else 0
        bucket = window.bucket(now)
        store = self.store
        try:
            if record is None:
                counts = await store.counts(key)
            elif type(store) is MemoryBudgets:  # (no I/O: the same step in place, no awaits)
                counts = store.reserve_now(key, bucket, tokens)
            else:
                counts = await store.reserve(key, bucket, tokens, window.ttl)
        except StoreUnavailable as exc:
            self._fault("read" if record is None else "reserve", exc)
            return None
        alone = record is None or self._held.get(key, 0) == 0  # (no other of the key in flight here)
        held = own.tokens if isinstance(own, Hold) and own.key == key else tokens
        if window.admits(counts, now, limit=budget.limit, reserved=held, alone=alone):
            if record is not None:
                record.notes[HOLD] = Hold(key, budget, bucket, tokens)
                self._held[key] = self._held.get(key, 0) + tokens
            return None
        if record is not None:  # refused: what it set aside goes back at once
            counts[bucket] -= tokens
            try:
                await self.store.add(key, bucket, -tokens, window.ttl, ())
            except StoreUnavailable as exc:
                self._fault("release", exc)
        reset_at = window.reset_at(counts, now, budget.limit)
        if record is not None and window.spent(counts, now) < budget.limit:
            return now + IN_FLIGHT_RETRY_S  # (past half the limit, one at a time: retry soon)
        if window.spent(counts, now) - self._held.get(key, 0) < budget.limit:
            # Only set aside, by this worker's requests in flight. (Other replicas' reservations
            # count as spent: the window's time is then an upper bound.)
            return min(reset_at, now + IN_FLIGHT_RETRY_S)
        return reset_at

    def _refusal(self, client: str, budget: Budget, reset_at: float, *, off: bool = False) -> BudgetExceeded:
        """The 429 of a spent budget; `off`: the rule would send thinking off, and this request's
        model cannot turn thinking off."""
        wait = max(1, math.ceil(reset_at - self.clock()))
        spent = (
            f"The reasoning-token budget of the client key {client!r} is spent ({budget.limit} reasoning "
            f"tokens per {budget.per}, rolling); it has room again at "
            f"{formatdate(reset_at, usegmt=True)} (in {wait} s)."
        )
        if off:
            return BudgetExceeded(
                f"{spent} The rule then sends thinking off, and this request's model cannot turn thinking "
                "off. Retry then, use a model that can turn thinking off, or ask the gateway's operator "
                "for a larger budget.",
                retry_after=wait,
                rule=f"{budget.label()}; on_exhausted=off",
            )
        return BudgetExceeded(
            f"{spent} Retry then, send X-Thinking-Level: off, or ask the gateway's operator for a larger "
            "budget.",
            retry_after=wait,
            rule=f"{budget.label()}; on_exhausted=refuse",
        )

    # -- after the answer -----------------------------------------------------------------------
    def spend(self, record: AccessRecord) -> None:
        """Count a finished request: its usage in the book (its cost on its record, for the
        console), its reasoning tokens in the budget (settling its reservation when it had one)."""
        usage = record.usage
        hold = record.notes.pop(HOLD, None)
        if record.route in MODEL_ROUTES or usage is not None:  # (a request no model answered: no row)
            self.book.add(record, record.cost_usd)  # (priced before: proxy.sessions.pricing)
        reasoning = usage.reasoning.value if usage is not None and usage.reasoning is not None else 0
        if isinstance(hold, Hold):
            held = self._held.get(hold.key, 0) - hold.tokens
            if held > 0:
                self._held[hold.key] = held
            else:
                self._held.pop(hold.key, None)
            if usage is not None and usage.reasoning is not None:
                self.peaks.add(hold.key, reasoning)
            if reasoning != hold.tokens:
                store = self.store
                if type(store) is MemoryBudgets:  # (no I/O: settled in place, no task)
                    found = self._settlement(hold, reasoning - hold.tokens, store.counts_now(hold.key))
                    if found is not None:
                        store.add_now(hold.key, *found)
                else:
                    self._write(self._settle(hold, reasoning - hold.tokens))
            return
        budget = self.policy.rule_for(record.client).reasoning_tokens
        if record.client is None or budget is None:
            return
        if usage is not None and usage.reasoning is not None:  # (the store failed at its admission)
            self.peaks.add(budget_key(record.client, budget), reasoning)
        if reasoning > 0:
            self._write(self._add(record.client, budget, reasoning))

    def _write(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(write)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _settle(self, hold: Hold, difference: int) -> None:
        """The difference between what a request spent and what it set aside, in the bucket it set
        it aside in (where the reservation left the window already, what it spent, now)."""
        try:
            found = self._settlement(hold, difference, await self.store.counts(hold.key))
            if found is not None:
                bucket, tokens, stale = found
                await self.store.add(hold.key, bucket, tokens, window_for(hold.budget.seconds).ttl, stale)
        except StoreUnavailable as exc:
            self._fault("write", exc)

    def _settlement(
        self, hold: Hold, difference: int, counts: dict[int, int]
    ) -> tuple[int, int, list[int]] | None:
        """What settling `hold` adds now (proxy.core.policy.budgets.Window.settlement)."""
        window = window_for(hold.budget.seconds)
        return window.settlement(counts, self.clock(), hold.bucket, hold.tokens, difference)

    async def _add(self, client: str, budget: Budget, tokens: int) -> None:
        window = window_for(budget.seconds)
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
        window = window_for(budget.seconds)
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
        return self._observer


class _Spend(RequestObserver):
    __slots__ = ("policy",)

    # The answer's usage is read whatever the client's X-Trace and whether metrics or the console
    # watch: without it a trace-less request would count only the estimate from visible text.
    wants_outcome = True

    def __init__(self, policy: ThinkingPolicy) -> None:
        self.policy = policy

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        if record.route in MODEL_ROUTES or HOLD in record.notes or record.usage is not None:
            self.policy.spend(record)


def _ceiling(client: str | None, rule: KeyRule, level: Level | None, can_turn_off: bool) -> Decision:
    ceiling = rule.max_level
    if ceiling is None:
        return Decision(level)
    # (a request without a level under a ceiling of off: the upstream's own default might think)
    if (level is not None and above(level, ceiling)) or (level is None and ceiling is Level.OFF):
        if ceiling is Level.OFF and not can_turn_off:
            raise ThinkingOffUnavailable(
                f"The thinking policy of the client key {client!r} allows no thinking (max_level=off), "
                "and this request's model cannot turn thinking off (its providers.yaml entry offers no "
                "off level). Use a model that can turn thinking off, or ask the gateway's operator.",
                rule="max_level=off",
            )
        return Decision(ceiling, f"max_level={ceiling.value}")
    return Decision(level)
