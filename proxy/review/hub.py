"""Where held calls wait for a decision: in this process, or in Redis shared by every replica.

The stream holding a call waits on the replica that serves it; a reviewer may post the decision to
any replica. With Redis, the review and its decision are keys (`SET NX` makes the first decision
the only one) and a pub/sub message wakes the waiting replica. Every Redis call has a short
timeout; if Redis cannot be reached the review cannot happen, so the hub fails closed: the call
is refused ("the review service is unavailable"), never released unreviewed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import orjson

from proxy.core.review.rules import TIMED_OUT, Decision, HeldCall, Verdict

log = logging.getLogger("thinkproxy.review")

UNAVAILABLE = Decision(Verdict.REFUSED, comment="the review service is unavailable")
# A stored decision this version cannot read: the call is not released on a guess.
UNREADABLE = Decision(Verdict.REFUSED, comment="its review could not be read")


class StoreUnavailable(Exception):
    """The review store could not be reached or answered too slowly (the reviewers' API: a 503)."""


class Posted(Enum):
    OK = "ok"
    UNKNOWN = "unknown"  # no such review (never existed, expired, or its client left)
    ALREADY_DECIDED = "already_decided"


class ReviewHub(Protocol):
    async def wait(
        self, calls: Sequence[HeldCall], timeout: float, opened: asyncio.Event
    ) -> dict[str, Decision]:
        """Registers `calls` (then sets `opened`: reviewers can see them), waits until each is
        decided or `timeout` passes (then TIMED_OUT). Cancelling the wait withdraws the calls still
        pending (the client left)."""
        ...

    async def pending(self) -> list[HeldCall]: ...

    async def get(self, review_id: str) -> HeldCall | None: ...

    async def decide(self, review_id: str, decision: Decision) -> Posted: ...

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class _Entry:
    call: HeldCall
    decided: asyncio.Future[Decision]


@dataclass
class MemoryReviewHub:
    """One process. Decided reviews are remembered (bounded) so a second decision is a 409."""

    remember_decided: int = 10_000
    _pending: dict[str, _Entry] = field(default_factory=dict)
    _decided: OrderedDict[str, Decision] = field(default_factory=OrderedDict)

    async def wait(
        self, calls: Sequence[HeldCall], timeout: float, opened: asyncio.Event
    ) -> dict[str, Decision]:
        loop = asyncio.get_running_loop()
        entries = [_Entry(call, loop.create_future()) for call in calls]
        for entry in entries:
            self._pending[entry.call.review_id] = entry
        opened.set()
        try:
            await asyncio.wait([e.decided for e in entries], timeout=timeout)
        finally:
            for entry in entries:
                self._pending.pop(entry.call.review_id, None)
                if not entry.decided.done():
                    entry.decided.cancel()
        out = {}
        for entry in entries:
            if entry.decided.cancelled():
                self._remember(entry.call.review_id, TIMED_OUT)
                out[entry.call.review_id] = TIMED_OUT
            else:
                out[entry.call.review_id] = entry.decided.result()
        return out

    async def pending(self) -> list[HeldCall]:
        return [e.call for e in self._pending.values()]

    async def get(self, review_id: str) -> HeldCall | None:
        entry = self._pending.get(review_id)
        return entry.call if entry is not None else None

    async def decide(self, review_id: str, decision: Decision) -> Posted:
        if review_id in self._decided:
            return Posted.ALREADY_DECIDED
        entry = self._pending.get(review_id)
        if entry is None:
            return Posted.UNKNOWN
        self._remember(review_id, decision)
        if not entry.decided.done():
            entry.decided.set_result(decision)
        return Posted.OK

    def _remember(self, review_id: str, decision: Decision) -> None:
        self._decided[review_id] = decision
        while len(self._decided) > self.remember_decided:
            self._decided.popitem(last=False)

    async def aclose(self) -> None:
        return None


@contextlib.asynccontextmanager
async def _store_faults() -> AsyncIterator[None]:
    """Whatever Redis raises (refused, reset, timed out, an error reply) as StoreUnavailable."""
    try:
        yield
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("review hub: Redis unavailable for the reviewers' API (%s)", type(exc).__name__)
        raise StoreUnavailable(type(exc).__name__) from exc


def _held_call(review_id: str, value: bytes) -> HeldCall | None:
    try:
        return HeldCall.from_json(orjson.loads(value))
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        log.warning("review hub: stored review %r is unreadable and left out (%s)", review_id, exc)
        return None


def _decision(review_id: str, value: bytes) -> Decision:
    try:
        return Decision.from_json(orjson.loads(value))
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        log.warning("review hub: the decision on %r is unreadable; the call is refused (%s)", review_id, exc)
        return UNREADABLE


class RedisReviewHub:
    """Shared by replicas through one Redis. Keys (prefix `thinkproxy:review:`):
    `{id}` the held call (JSON), `{id}:decision` the decision (`SET NX`), the sorted set `pending`
    (id by expiry); channel `thinkproxy:review:decided` carries ids as they are decided."""

    PREFIX = "thinkproxy:review:"
    CHANNEL = "thinkproxy:review:decided"
    # Decisions and reviews outlive the wait by this much, so a late second decision is a 409.
    GRACE_S = 3600

    def __init__(self, url: str, *, op_timeout: float = 0.5) -> None:
        import redis.asyncio as redis  # a runtime dependency; imported here so the module loads cheaply

        self._redis: Any = redis.Redis.from_url(
            url, socket_timeout=op_timeout, socket_connect_timeout=op_timeout, decode_responses=False
        )
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    def _key(self, review_id: str, suffix: str = "") -> str:
        return f"{self.PREFIX}{review_id}{suffix}"

    async def _ensure_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._subscribed.clear()
            self._listener = asyncio.get_running_loop().create_task(self._listen())
        await asyncio.wait_for(self._subscribed.wait(), timeout=2.0)

    async def _listen(self) -> None:
        """One subscription per process wakes every local waiter whose review was decided."""
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self.CHANNEL)
                self._subscribed.set()
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is None:
                        continue
                    data = message.get("data")
                    review_id = data.decode() if isinstance(data, bytes) else str(data)
                    waiter = self._waiters.get(review_id)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: waits fall back to polling until it is back
                self._subscribed.clear()
                log.warning("review hub: Redis subscription lost (%s); retrying", type(exc).__name__)
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def wait(
        self, calls: Sequence[HeldCall], timeout: float, opened: asyncio.Event
    ) -> dict[str, Decision]:
        ids = [c.review_id for c in calls]
        loop = asyncio.get_running_loop()
        for review_id in ids:
            self._waiters[review_id] = loop.create_future()
        try:
            try:
                await self._ensure_listener()
                pipe = self._redis.pipeline(transaction=True)
                for call in calls:
                    ttl = int(timeout) + self.GRACE_S
                    pipe.set(self._key(call.review_id), orjson.dumps(call.to_json()), ex=ttl)
                    pipe.zadd(self._key("pending"), {call.review_id: call.expires})
                await pipe.execute()
            except asyncio.CancelledError:
                # The client left while its calls were being registered: withdraw what was written.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._withdraw(ids))
                raise
            except Exception as exc:
                log.warning("review hub: Redis unavailable (%s); held calls refused", type(exc).__name__)
                return dict.fromkeys(ids, UNAVAILABLE)
            finally:
                opened.set()
            decisions = await self._collect(ids, timeout)
        finally:
            for review_id in ids:
                self._waiters.pop(review_id, None)
        return decisions

    async def _collect(self, ids: list[str], timeout: float) -> dict[str, Decision]:
        deadline = time.monotonic() + timeout
        decisions: dict[str, Decision] = {}
        try:
            while True:
                decisions.update(await self._read_decisions([i for i in ids if i not in decisions]))
                left = deadline - time.monotonic()
                if len(decisions) == len(ids) or left <= 0:
                    break
                waiting = [self._waiters[i] for i in ids if i not in decisions]
                # A missed message (Redis reconnecting) costs at most a second: the loop re-reads.
                await asyncio.wait(waiting, timeout=min(left, 1.0))
                for i in ids:
                    if i not in decisions and self._waiters[i].done():
                        self._waiters[i] = asyncio.get_running_loop().create_future()
            for review_id in ids:
                if review_id not in decisions:
                    decisions[review_id] = await self._time_out(review_id)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._withdraw([i for i in ids if i not in decisions]))
            raise
        except Exception as exc:
            log.warning(
                "review hub: Redis unavailable while waiting (%s); held calls refused", type(exc).__name__
            )
            return {i: decisions.get(i, UNAVAILABLE) for i in ids}
        with contextlib.suppress(Exception):
            await self._redis.zrem(self._key("pending"), *ids)
        return decisions

    async def _read_decisions(self, ids: list[str]) -> dict[str, Decision]:
        if not ids:
            return {}
        values = await self._redis.mget([self._key(i, ":decision") for i in ids])
        return {i: _decision(i, v) for i, v in zip(ids, values, strict=True) if v is not None}

    async def _time_out(self, review_id: str) -> Decision:
        """Nobody decided in time: record the timeout unless a decision just won the race."""
        key = self._key(review_id, ":decision")
        if await self._redis.set(key, orjson.dumps(TIMED_OUT.to_json()), nx=True, ex=self.GRACE_S):
            return TIMED_OUT
        value = await self._redis.get(key)
        return _decision(review_id, value) if value is not None else TIMED_OUT

    async def _withdraw(self, ids: list[str]) -> None:
        if ids:
            await self._redis.delete(*(self._key(i) for i in ids))
            await self._redis.zrem(self._key("pending"), *ids)

    async def pending(self) -> list[HeldCall]:
        """The reviews awaiting a decision; one this version cannot read is left out (and logged),
        so one bad entry never hides the others."""
        async with _store_faults():
            ids = await self._redis.zrangebyscore(self._key("pending"), time.time(), "+inf")
            if not ids:
                return []
            names = [i.decode(errors="replace") for i in ids]
            calls = await self._redis.mget([self._key(i) for i in names])
            decided = await self._redis.mget([self._key(i, ":decision") for i in names])
        out = []
        for name, c, d in zip(names, calls, decided, strict=True):
            if c is not None and d is None and (call := _held_call(name, c)) is not None:
                out.append(call)
        return out

    async def get(self, review_id: str) -> HeldCall | None:
        async with _store_faults():
            value = await self._redis.get(self._key(review_id))
            if value is None or await self._redis.exists(self._key(review_id, ":decision")):
                return None
        return _held_call(review_id, value)

    async def decide(self, review_id: str, decision: Decision) -> Posted:
        async with _store_faults():
            if not await self._redis.exists(self._key(review_id)):
                return Posted.UNKNOWN
            stored = await self._redis.set(
                self._key(review_id, ":decision"), orjson.dumps(decision.to_json()), nx=True, ex=self.GRACE_S
            )
            if not stored:
                return Posted.ALREADY_DECIDED
            await self._redis.publish(self.CHANNEL, review_id)
        return Posted.OK

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(BaseException):
                await self._listener
        with contextlib.suppress(Exception):
            await self._redis.aclose()
