"""The Redis backend (redis-py's asyncio client), shared by every replica that names the same URL.

Every call is bounded: socket connect and read timeouts, and an overall deadline around each
operation, so a Redis that is down or slow costs a request at most `timeout` seconds — and after a
failure the store stays "down" for `retry_after` seconds without trying, so an outage costs
nothing at all per request. Lookups are one MGET (one round trip for any number of keys); writes
one pipelined batch of SET … PX.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from redis import asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from proxy.state.base import StoreUnavailable

DEFAULT_TIMEOUT = 0.25
DEFAULT_RETRY_AFTER = 1.0
DEFAULT_MAX_CONNECTIONS = 64  # per process; lookups are one MGET and writes are batched


class RedisStore:
    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        ttl: float,
        timeout: float = DEFAULT_TIMEOUT,
        retry_after: float = DEFAULT_RETRY_AFTER,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.ttl_ms = max(1, int(ttl * 1000))
        self.timeout = timeout
        self.retry_after = retry_after
        self._down_until = 0.0
        # A blocking pool: under a burst a call waits (at most `timeout`) for a free connection
        # instead of failing at once with MaxConnectionsError.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            # No retries: a failed call is reported at once, the next request tries again.
            retry=Retry(NoBackoff(), 0),
        )
        self._client = aioredis.Redis(connection_pool=pool)

    def _check_up(self) -> None:
        if self._down_until and time.monotonic() < self._down_until:
            raise StoreUnavailable("redis: down (retrying shortly)")

    def _failed(self, exc: BaseException) -> StoreUnavailable:
        self._down_until = time.monotonic() + self.retry_after
        return StoreUnavailable(f"redis: {type(exc).__name__}")

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        self._check_up()
        try:
            values = await asyncio.wait_for(self._client.mget(list(keys)), self.timeout * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed(exc) from None
        self._down_until = 0.0
        return [v if isinstance(v, bytes) else None for v in values]

    async def put_many(self, items: Sequence[tuple[str, bytes]], *, tenant: str | None = None) -> None:
        # (no shares per tenant here: Redis's own maxmemory policy decides what goes; docs/responses.md)
        if not items:
            return
        self._check_up()
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key, value in items:
                    pipe.set(key, value, px=self.ttl_ms)
                await asyncio.wait_for(pipe.execute(), self.timeout * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed(exc) from None
        self._down_until = 0.0

    async def touch_many(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        self._check_up()
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.pexpire(key, self.ttl_ms)
                await asyncio.wait_for(pipe.execute(), self.timeout * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed(exc) from None
        self._down_until = 0.0

    async def delete_many(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        self._check_up()
        try:
            await asyncio.wait_for(self._client.delete(*keys), self.timeout * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed(exc) from None
        self._down_until = 0.0

    async def ping(self) -> None:
        # Health checks ask this: while "down" it answers at once without trying, so probes of an
        # outage cost nothing, and the first probe after `retry_after` notices the recovery.
        self._check_up()
        try:
            await asyncio.wait_for(self._client.ping(), self.timeout * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed(exc) from None
        self._down_until = 0.0

    async def aclose(self) -> None:
        await self._client.aclose(close_connection_pool=True)
