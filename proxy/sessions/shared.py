"""Sessions across replicas, through the Redis state store (THINKPROXY_STATE_URL=redis://…).

Each replica writes, at the end of every request it counted: its own part of the session's sums (a
hash per session, one field per replica), the request's detail (a list per session, trimmed to the
newest `per_session`), and the session's last activity (a sorted set, trimmed to the newest
`max_sessions`: a session it drops loses its sums and details at once). Every key expires after
`ttl_s` without activity. The API reads the index, merges the replicas' parts, and reads a session's
details from its list; when Redis is down or slow it answers from this replica's own store (and says
so: `shared: false`). Writes are queued and sent by one task, so a request never waits on Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from proxy.core.sessions.facts import LEVEL_KEYS, NO_LEVEL
from proxy.policy.usage_book import ratio
from proxy.sessions.store import MAX_MODELS
from proxy.state.backoff import RedisBackoff

logger = logging.getLogger("thinkproxy.sessions")

INDEX_KEY = "thinkproxy:sessions:index"
SUMS_KEY = "thinkproxy:sessions:sums:"
DETAILS_KEY = "thinkproxy:sessions:details:"
TIMEOUT_S = 0.5
PENDING = 1000  # requests waiting to be written; beyond that they stay in this replica's store only
MAX_PART_BYTES = 64 << 10  # a replica's part of a session larger than this version writes is skipped
SUMMED = ("requests", "errors", "tool_calls", "details_dropped")
# Trims the index to its newest ARGV[1] sessions and deletes the sums and details of those it
# drops, in one step: trimmed alone, every invented session id's keys stayed for the TTL (a day).
TRIM_SCRIPT = """
local dropped = redis.call('ZRANGE', KEYS[1], 0, -tonumber(ARGV[1]) - 1)
for _, id in ipairs(dropped) do
    redis.call('DEL', ARGV[2] .. id, ARGV[3] .. id)
end
if #dropped > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #dropped - 1)
end
return #dropped
"""


class SharedSessions:
    def __init__(self, url: str, *, max_sessions: int, per_session: int, ttl_s: float) -> None:
        self.max_sessions = max_sessions
        self.per_session = per_session
        self.ttl_s = max(int(ttl_s), 1)
        self.replica = os.urandom(4).hex()
        self._redis = Redis.from_url(
            url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S, retry=Retry(NoBackoff(), 0)
        )
        self._pending: asyncio.Queue[tuple[dict[str, Any], bytes]] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._health = RedisBackoff(
            logger, "sessions", "each replica answers for its own sessions until it answers again"
        )

    @property
    def available(self) -> bool:
        return self._health.available

    def _failed(self, what: str, exc: BaseException) -> None:
        self._health.failed(what, exc)

    # -- writing ------------------------------------------------------------------------------------

    def publish(self, summary: dict[str, Any], detail: bytes) -> None:
        """Queue this replica's part of a session and one request's detail (never blocks)."""
        if self._pending is None:
            self._pending = asyncio.Queue(PENDING)
            self._writer = asyncio.get_running_loop().create_task(self._write())
        with contextlib.suppress(asyncio.QueueFull):
            self._pending.put_nowait((summary, detail))

    async def _write(self) -> None:
        assert self._pending is not None
        pending = self._pending
        while True:
            batch = [await pending.get()]
            while not pending.empty() and len(batch) < 100:
                batch.append(pending.get_nowait())
            if not self.available:
                continue
            try:
                await self._write_batch(batch)
            except (RedisError, OSError) as exc:
                self._failed("store a session", exc)

    async def _write_batch(self, batch: list[tuple[dict[str, Any], bytes]]) -> None:
        # A session's latest part per batch is enough: it holds the earlier ones' counts.
        latest: dict[str, dict[str, Any]] = {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for summary, detail in batch:
                session_id = summary["id"]
                latest[session_id] = summary
                pipe.rpush(DETAILS_KEY + session_id, detail)
            for session_id, summary in latest.items():
                details = DETAILS_KEY + session_id
                sums = SUMS_KEY + session_id
                pipe.ltrim(details, -self.per_session, -1)
                pipe.hset(sums, self.replica, orjson.dumps(summary))
                pipe.zadd(INDEX_KEY, {session_id: summary["last_at"]})
                pipe.expire(details, self.ttl_s)
                pipe.expire(sums, self.ttl_s)
            pipe.eval(TRIM_SCRIPT, 1, INDEX_KEY, self.max_sessions, SUMS_KEY, DETAILS_KEY)
            await pipe.execute()

    # -- reading ------------------------------------------------------------------------------------

    async def summaries(self) -> list[dict[str, Any]] | None:
        """Every kept session (merged over the replicas), newest first; None when Redis did not answer."""
        if not self.available:
            return None
        try:
            ids: Any = await self._redis.zrevrange(INDEX_KEY, 0, self.max_sessions - 1)
            async with self._redis.pipeline(transaction=False) as pipe:
                for raw in ids:
                    pipe.hgetall(SUMS_KEY + raw.decode())
                    pipe.llen(DETAILS_KEY + raw.decode())
                found: list[Any] = await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed("read the sessions", exc)
            return None
        out = []
        for i in range(0, len(found), 2):
            merged = merge(_parts(found[i]))
            if merged is not None:
                merged["details_kept"] = int(found[i + 1])
                out.append(merged)
        return out

    async def session(self, session_id: str) -> tuple[dict[str, Any], list[bytes]] | None:
        """One session (merged) and its kept details, oldest first; None when unknown or Redis is down."""
        if not self.available:
            return None
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(SUMS_KEY + session_id)
                pipe.lrange(DETAILS_KEY + session_id, 0, -1)
                parts, details = await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed("read a session", exc)
            return None
        merged = merge(_parts(parts))
        if merged is None:
            return None
        kept = [bytes(d) for d in details if isinstance(d, bytes) and d.startswith(b"{")]
        merged["details_kept"] = len(kept)
        return merged, kept

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
        await self._redis.aclose()


def _parts(raw: Any) -> list[dict[str, Any]]:
    parts = []
    for value in (raw or {}).values():
        if not isinstance(value, bytes) or len(value) > MAX_PART_BYTES:
            continue
        try:
            part = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(part, dict) and isinstance(part.get("id"), str):
            parts.append(part)
    return parts


def merge(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """One session's summary from the replicas' parts (each a Session.summary of its own counts)."""
    parts = list(parts)
    if not parts:
        return None
    try:
        first = parts[0]
        out: dict[str, Any] = {
            "id": first["id"],
            "source": next((p["source"] for p in parts if p["source"] != "request"), first["source"]),
            "client": first["client"],
            "key": first["key"],
            "doors": _union(p["doors"] for p in parts),
            "first_at": min(p["first_at"] for p in parts),
            "last_at": max(p["last_at"] for p in parts),
            "models": _union(p["models"] for p in parts)[:MAX_MODELS],
            "levels": {k: sum(int(p["levels"].get(k, 0)) for p in parts) for k in (*LEVEL_KEYS, NO_LEVEL)},
        }
        for name in SUMMED:
            out[name] = sum(int(p[name]) for p in parts)
        tokens = {
            k: sum(int(p["tokens"][k]) for p in parts) for k in ("input", "cached", "reasoning", "output")
        }
        costs = [p["cost_usd"] for p in parts if p["cost_usd"] is not None]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # a part this version did not write
    out["tokens"] = tokens
    out["cache_hit_ratio"] = ratio(tokens["cached"], tokens["input"])
    out["cost_usd"] = round(sum(costs), 8) if costs else None
    out["cost_complete"] = all(p.get("cost_complete") is True for p in parts)
    out["details_kept"] = 0
    return dict(sorted(out.items(), key=lambda item: _ORDER.get(item[0], 99)))


def _union(lists: Iterable[list[str]]) -> list[str]:
    seen: list[str] = []
    for names in lists:
        for name in names:
            if name not in seen:
                seen.append(name)
    return seen


_ORDER = {
    name: i
    for i, name in enumerate(
        (
            "id", "source", "client", "key", "doors", "requests", "first_at", "last_at", "models",
            "levels", "tokens", "cache_hit_ratio", "cost_usd", "cost_complete", "errors", "tool_calls",
            "details_kept", "details_dropped",
        )
    )
}  # fmt: skip
