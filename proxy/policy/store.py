"""Where reasoning-token budgets are counted: in the process, or in Redis so that replicas share
them (THINKPROXY_STATE_URL). A budget's counts are one hash per key and window length,
`tp:budget:<client>:<per>`, whose fields are bucket numbers (proxy.core.policy.budgets); an addition is
one HINCRBY, atomic however many replicas add at once, with the hash's expiry renewed and buckets
that left the window deleted in the same round trip.

A reservation (`reserve`, proxy.core.policy.budgets) adds a request's estimate and reads every count back
in one atomic step (in Redis one MULTI/EXEC: HINCRBY, EXPIRE, HGETALL), so of the requests that
reserve at once each sees the ones before it, whichever replica they are on.

Every Redis call is bounded in time, and a failure raises `StoreUnavailable` at once: the caller
lets the request through (a budget store that is down never refuses anyone) and counts the fault.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from redis import asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from proxy.state.base import StoreUnavailable

TIMEOUT_S = 0.25
PREFIX = "tp:budget:"


class BudgetStore(Protocol):
    name: str

    async def counts(self, key: str) -> dict[int, int]: ...

    async def add(self, key: str, bucket: int, tokens: int, ttl: int, stale: Sequence[int]) -> None: ...

    async def reserve(self, key: str, bucket: int, tokens: int, ttl: int) -> dict[int, int]:
        """Adds `tokens` to `bucket` and returns every count with it, in one atomic step."""
        ...

    async def aclose(self) -> None: ...


class MemoryBudgets:
    """One process's counts (a single replica, or a test). Every operation is a step on a dict, so
    each has a synchronous form too (`*_now`): the policy (proxy.policy.service) calls those in
    place of the awaits, and of a task per settled request, when its store is exactly this class;
    a subclass (a test's failing store) is always called through the async ones."""

    name = "memory"

    def __init__(self) -> None:
        self._counts: dict[str, dict[int, int]] = {}

    def counts_now(self, key: str) -> dict[int, int]:
        return dict(self._counts.get(key, {}))

    def add_now(self, key: str, bucket: int, tokens: int, stale: Sequence[int]) -> None:
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = {}
        counts[bucket] = counts.get(bucket, 0) + tokens
        for old in stale:
            counts.pop(old, None)

    def reserve_now(self, key: str, bucket: int, tokens: int) -> dict[int, int]:
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = {}
        counts[bucket] = counts.get(bucket, 0) + tokens
        return dict(counts)

    async def counts(self, key: str) -> dict[int, int]:
        return self.counts_now(key)

    async def add(self, key: str, bucket: int, tokens: int, ttl: int, stale: Sequence[int]) -> None:
        self.add_now(key, bucket, tokens, stale)

    async def reserve(self, key: str, bucket: int, tokens: int, ttl: int) -> dict[int, int]:
        # (no await between the two: one step for every request of this process; through the
        # async methods, which a subclass may override)
        await self.add(key, bucket, tokens, ttl, ())
        return await self.counts(key)

    async def aclose(self) -> None:
        return None


class RedisBudgets:
    """Counts shared by every replica that names the same Redis."""

    name = "redis"

    def __init__(self, url: str, *, timeout: float = TIMEOUT_S) -> None:
        self.timeout = timeout
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=32,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # a failed call is reported at once
        )
        self._client = aioredis.Redis(connection_pool=pool)

    async def counts(self, key: str) -> dict[int, int]:
        try:
            raw = await asyncio.wait_for(self._client.hgetall(PREFIX + key), self.timeout * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"redis: {type(exc).__name__}") from None
        return {int(bucket): int(tokens) for bucket, tokens in raw.items()}

    async def add(self, key: str, bucket: int, tokens: int, ttl: int, stale: Sequence[int]) -> None:
        name = PREFIX + key
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hincrby(name, str(bucket), tokens)
                if stale:
                    pipe.hdel(name, *(str(old) for old in stale))
                pipe.expire(name, ttl)
                await asyncio.wait_for(pipe.execute(), self.timeout * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"redis: {type(exc).__name__}") from None

    async def reserve(self, key: str, bucket: int, tokens: int, ttl: int) -> dict[int, int]:
        name = PREFIX + key
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hincrby(name, str(bucket), tokens)
                pipe.expire(name, ttl)
                pipe.hgetall(name)
                *_, raw = await asyncio.wait_for(pipe.execute(), self.timeout * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"redis: {type(exc).__name__}") from None
        return {int(b): int(tokens) for b, tokens in raw.items()}

    async def aclose(self) -> None:
        await self._client.aclose(close_connection_pool=True)
