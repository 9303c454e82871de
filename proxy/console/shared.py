"""The console feed across replicas: request summaries published to a capped Redis stream.

Each replica XADDs the summary of every request it finished (`MAXLEN ~ history`, so Redis holds a
bounded ring too) and reads the stream back for `/thinkproxy/requests`; while someone watches
`/thinkproxy/events` on a replica, it follows the stream (XREAD BLOCK) and passes on the other
replicas' requests. Short timeouts everywhere: when Redis is down or slow, each replica's console
keeps working with its own requests, and a warning says so (at most once a minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import orjson
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from proxy.state.backoff import RedisBackoff

if TYPE_CHECKING:
    from proxy.console.feed import Feed

logger = logging.getLogger("thinkproxy.console")

STREAM_KEY = "thinkproxy:console:requests"
TIMEOUT_S = 0.5  # connect and command timeout: the console never waits long on Redis
BLOCK_MS = 1000  # how long one XREAD waits for news (the follower re-checks for watchers in between)
PENDING = 1000  # summaries waiting to be written; beyond that they are dropped (the local ring keeps them)
# A summary read back larger than this version ever writes (its strings and lists are bounded:
# proxy.console.summary) is skipped: an older replica, or anyone who can write to Redis, could
# otherwise make every listing and every watcher carry it.
# (The largest this version makes, every string at its cap in 4-byte characters, is ~1.5 MB.)
MAX_ENTRY_BYTES = 2 << 20
READ_PAGE = 50  # summaries read back per XREVRANGE (a listing stops once it has its bytes)


class SharedFeed:
    def __init__(self, url: str, *, history: int, replica: str) -> None:
        self.history = history
        self.replica = replica
        options: dict[str, Any] = {
            "socket_connect_timeout": TIMEOUT_S,
            "retry": Retry(NoBackoff(), 0),
        }
        self._redis = Redis.from_url(url, socket_timeout=TIMEOUT_S, **options)
        # The follower's XREAD blocks longer than a command may take, so it has its own connection.
        self._blocking = Redis.from_url(url, socket_timeout=BLOCK_MS / 1000 + TIMEOUT_S, **options)
        self._pending: asyncio.Queue[bytes] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._health = RedisBackoff(
            logger, "console", "each replica's console shows only its own requests until it answers again"
        )

    # -- health -------------------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        return self._health.available

    def _failed(self, what: str, exc: BaseException) -> None:
        self._health.failed(what, exc)

    # -- writing ------------------------------------------------------------------------------------

    def publish(self, entry: dict[str, Any]) -> None:
        """Queue one finished request for the stream (called from the request's end, never blocks)."""
        if self._pending is None:
            self._pending = asyncio.Queue(PENDING)
            self._writer = asyncio.get_running_loop().create_task(self._write())
        with contextlib.suppress(asyncio.QueueFull):
            self._pending.put_nowait(orjson.dumps(entry))

    async def _write(self) -> None:
        assert self._pending is not None
        pending = self._pending
        while True:
            batch = [await pending.get()]
            while not pending.empty() and len(batch) < 100:
                batch.append(pending.get_nowait())
            if not self.available:
                continue  # Redis failed a moment ago: these stay in the local ring only
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for data in batch:
                        pipe.xadd(STREAM_KEY, {"e": data}, maxlen=self.history, approximate=True)
                    await pipe.execute()
            except (RedisError, OSError) as exc:
                self._failed("store a request", exc)

    # -- reading ----------------------------------------------------------------------------------

    async def recent(self, count: int, max_bytes: int) -> tuple[list[dict[str, Any]], int] | None:
        """The newest `count` requests of every replica, newest first, read until they make
        `max_bytes` (the first that would pass it, and the older ones, are not read), and how many
        of the newest `count` were left out for that; None when Redis did not answer.

        Read a page at a time, so that a listing holds about `max_bytes` of the stream, not
        `count` × MAX_ENTRY_BYTES (THINKPROXY_UI_HISTORY may be 10,000)."""
        if not self.available:
            return None
        entries: list[dict[str, Any]] = []
        size = 0
        read = 0  # rows of the stream looked at, skipped ones too
        top = "+"
        try:
            while read < count:
                # From `top` down, `top` included (an exclusive bound needs Redis 6.2): the row
                # already read is skipped.
                want = min(READ_PAGE, count - read) + (top != "+")
                rows: Any = await self._redis.xrevrange(STREAM_KEY, max=top, count=want)
                if top != "+" and rows and _row_id(rows[0][0]) == top:
                    rows = rows[1:]
                if not rows:
                    break
                for _, fields in rows:
                    raw = fields.get(b"e") if isinstance(fields, dict) else None
                    fits = raw is None or len(raw) > MAX_ENTRY_BYTES or size + len(raw) <= max_bytes
                    if not fits:
                        total = min(count, await self._redis.xlen(STREAM_KEY))
                        return entries, max(total - read, 0)
                    read += 1
                    entry = _decode(fields)  # (None for what is skipped: not counted either)
                    if entry is not None and raw is not None:
                        entries.append(entry)
                        size += len(raw)
                top = _row_id(rows[-1][0])
        except (RedisError, OSError) as exc:
            self._failed("read recent requests", exc)
            return None
        return entries, 0

    async def follow(self, feed: Feed) -> None:
        """Make sure the stream is being followed for `feed`'s watchers (one follower per replica).

        Returns once the follower knows where the stream ends (or Redis failed to say), so what
        is added after a watcher's snapshot reaches it."""
        if self._follower is None or self._follower.done():
            ready = asyncio.Event()
            self._follower = asyncio.get_running_loop().create_task(self._follow(feed, ready))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), TIMEOUT_S * 2)

    async def _last_id(self) -> str:
        rows: Any = await self._redis.xrevrange(STREAM_KEY, count=1)
        return _row_id(rows[0][0]) if rows else "0-0"

    async def _follow(self, feed: Feed, ready: asyncio.Event) -> None:
        last: str | None = None
        while feed.watched:
            if not self.available:
                ready.set()
                await asyncio.sleep(1.0)
                continue
            try:
                if last is None:
                    last = await self._last_id()
                    ready.set()
                found: Any = await self._blocking.xread({STREAM_KEY: last}, count=100, block=BLOCK_MS)
            except (RedisError, OSError) as exc:
                self._failed("follow the request stream", exc)
                continue
            for _, rows in found or ():
                for row_id, fields in rows:
                    last = _row_id(row_id)
                    entry = _decode(fields)
                    if entry is not None and entry.get("replica") != self.replica:
                        feed.broadcast("request", entry)  # this replica's own were sent directly
        ready.set()

    async def aclose(self) -> None:
        for task in (self._writer, self._follower):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self._redis.aclose()
        await self._blocking.aclose()


def _row_id(row_id: Any) -> str:
    return row_id.decode() if isinstance(row_id, bytes) else str(row_id)


def _decode(fields: Any) -> dict[str, Any] | None:
    raw = fields.get(b"e") if isinstance(fields, dict) else None
    if raw is None or len(raw) > MAX_ENTRY_BYTES:
        return None
    try:
        entry = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) else None
