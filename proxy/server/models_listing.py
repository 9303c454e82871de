"""`GET /v1/models` with a routes file: every route's upstream asked at once, answers merged.

The I/O half of the merge (the pure half is `proxy.core.routing.merge_models`). Each distinct upstream is
asked once: in gateway mode with the key a chat request to it would carry, in BYOK mode without
the client's credentials (a client's key only ever goes where its request's model sends it). An
upstream that fails (status other than 2xx, no answer within LISTING_TIMEOUT_S, not a model list,
a body over MAX_LIST_BYTES) is left out and named, never dropped silently.

The merged list is kept for CACHE_TTL_S (PARTIAL_TTL_S when an upstream was missing from it), so
a client polling `/v1/models` does not make the proxy ask every upstream every time. It is kept
per *what the listing sends upstream*: a hash of the client's headers that go along (never a
credential: proxy.core.gateway.CREDENTIAL_HEADERS are not sent with a listing in either mode; gateway
mode sends the route's key). Clients whose listings send the same thing share one entry (so do
gateway tenants, asked with the gateway's keys); a client whose request carries something else
that may change the answer (an `OpenAI-Organization` or `OpenAI-Project` header, say) has its
own, so one client's list is never served to another. Big lists are parsed and merged in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.errors import ProxyError, UpstreamUnreachable
from proxy.core.gateway import CREDENTIAL_HEADERS, GatewayAuth
from proxy.core.routing import Destination, Listing, RouteTable, listings, merge_models, model_ids
from proxy.server.upstream.common import TRANSPORT_ERRORS, Upstream, UpstreamRequest
from proxy.server.upstream.headers import filter_headers
from proxy.settings import Settings

logger = logging.getLogger("thinkproxy.models")

MISSING_HEADER = "x-thinking-models-missing"
LISTING_TIMEOUT_S = 10.0  # one upstream's whole answer (connect to last byte); less if the read timeout is
MAX_LIST_BYTES = 8 << 20  # one upstream's list (decoded); the largest public lists are ~1-2 MB
CACHE_TTL_S = 30.0
PARTIAL_TTL_S = 5.0  # a list with an upstream missing: asked again sooner
CACHE_ENTRIES = 64  # distinct merged lists kept (BYOK clients sending different headers)
CACHE_BYTES = 64 << 20  # and their bytes; the oldest go first
PARSE_INLINE_BYTES = 256 << 10  # lists up to this (in all) are parsed on the event loop; more, in a thread
WARN_EVERY_S = 60.0
# Whatever asking one upstream can raise; each means "this upstream is missing from the list".
_FAILURES: tuple[type[Exception], ...] = (ProxyError, *TRANSPORT_ERRORS)  # (these include TimeoutError)
# What the proxy itself sets on a models request; the client's other headers go along as sent.
_DROP = frozenset({"host", "content-length", "accept-encoding", "accept"})
# Sent along but per request, and no reason for a different list: not part of the cache key.
_PER_REQUEST = frozenset({"x-request-id", "traceparent", "tracestate", "baggage"})


@dataclass(frozen=True, slots=True)
class MergedModels:
    body: bytes  # the merged list, as JSON
    missing: tuple[str, ...]  # the listings left out (X-Thinking-Models-Missing)


@dataclass(frozen=True, slots=True)
class _Kept:
    value: MergedModels
    expires: float


class ModelsListing:
    """The merged model list of one app's routes table (see the module)."""

    def __init__(
        self,
        table: RouteTable,
        upstream: Upstream,
        gateway: GatewayAuth,
        *,
        timeout: float = LISTING_TIMEOUT_S,
        max_bytes: int = MAX_LIST_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = table
        self.upstream = upstream
        self.gateway = gateway
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._clock = clock
        self._wanted = listings(table)
        self._kept: OrderedDict[bytes, _Kept] = OrderedDict()
        self._kept_bytes = 0
        self._asking: dict[bytes, asyncio.Task[MergedModels]] = {}
        self._warned: dict[str, float] = {}

    @classmethod
    def from_settings(
        cls, settings: Settings, table: RouteTable, upstream: Upstream, gateway: GatewayAuth
    ) -> ModelsListing:
        return cls(table, upstream, gateway, timeout=min(settings.read_timeout, LISTING_TIMEOUT_S))

    def __len__(self) -> int:
        return len(self._kept)

    async def get(self, client_headers: Iterable[tuple[str, str]]) -> MergedModels:
        """The merged list; UpstreamUnreachable (502) when no upstream answered (an empty list
        would read as "no models"; not kept, so the next call asks again)."""
        # BYOK: a client's key (in any of its forms) goes only to the upstream its request's model
        # picks; a model list is asked of every upstream, so it goes without the client's
        # credentials. Gateway mode sends each route's own key instead (in `_list`).
        sent = filter_headers(client_headers, _DROP | CREDENTIAL_HEADERS)
        key = _key(sent)
        kept = self._kept.get(key)
        if kept is not None:
            if kept.expires > self._clock():
                return kept.value
            self._forget(key)
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.get_running_loop().create_task(self._ask(key, sent))
            self._asking[key] = asking
            asking.add_done_callback(lambda task: self._asked(key, task))
        # Shielded: one caller going away does not cancel what the others wait for too.
        return await asyncio.shield(asking)

    def _asked(self, key: bytes, task: asyncio.Task[MergedModels]) -> None:
        if self._asking.get(key) is task:
            del self._asking[key]
        if not task.cancelled():
            task.exception()  # (retrieved: when every caller left, nobody else will)

    async def _ask(self, key: bytes, sent: list[tuple[str, str]]) -> MergedModels:
        wanted = self._wanted
        bodies = await asyncio.gather(*(self._list(sent, listing) for listing in wanted))
        size = sum(len(body) for body in bodies if body is not None)
        if size > PARSE_INLINE_BYTES:
            # Merging is Python code, which lets the loop in at every switch interval; orjson holds
            # the GIL for a whole parse or dump, so those still pause it (~20 ms for 6 MB), which
            # is why a list's size is capped and the result kept (bench/models_listing.py).
            body, missing = await asyncio.to_thread(merged_body, self.table, wanted, bodies)
        else:
            body, missing = merged_body(self.table, wanted, bodies)
        for name in missing:
            self._warn(name, "it failed, answered too late, or sent no model list or one too large")
        if len(missing) == len(wanted):
            raise UpstreamUnreachable(
                f"No upstream answered the model list: {', '.join(missing)}.", code="upstream_unavailable"
            )
        value = MergedModels(body, tuple(missing))
        self._keep(key, value, PARTIAL_TTL_S if missing else CACHE_TTL_S)
        return value

    async def _list(self, headers: list[tuple[str, str]], listing: Listing) -> bytes | None:
        destination = Destination(listing.upstream, listing.routes[0])
        sent = self.gateway.upstream_headers(headers, destination)
        sent += [("accept", "application/json"), ("accept-encoding", "identity")]
        request = UpstreamRequest("GET", f"{listing.upstream}/models", sent, b"")
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.upstream.open(request)
                try:
                    if not 200 <= response.status < 300:
                        return None
                    declared = response.header("content-length")
                    if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
                        return None
                    body = bytearray()
                    async for piece in response.reader(decoded=True):
                        body += piece
                        if len(body) > self.max_bytes:
                            return None
                finally:
                    await response.aclose()
        except _FAILURES:
            return None
        return bytes(body)

    def _keep(self, key: bytes, value: MergedModels, ttl: float) -> None:
        self._forget(key)
        if len(value.body) > CACHE_BYTES:
            return
        kept = self._kept
        while kept and (len(kept) >= CACHE_ENTRIES or self._kept_bytes + len(value.body) > CACHE_BYTES):
            self._forget(next(iter(kept)))
        kept[key] = _Kept(value, self._clock() + ttl)
        self._kept_bytes += len(value.body)

    def _forget(self, key: bytes) -> None:
        gone = self._kept.pop(key, None)
        if gone is not None:
            self._kept_bytes -= len(gone.value.body)

    def _warn(self, name: str, why: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(name, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[name] = now
            logger.warning(
                "GET /v1/models: %s is left out of the merged list (%s; at most %d bytes within %.0f s)",
                name,
                why,
                self.max_bytes,
                self.timeout,
            )


def merged_body(
    table: RouteTable, wanted: list[Listing], bodies: list[bytes | None]
) -> tuple[bytes, list[str]]:
    """The merged list as JSON and the listings missing from it (pure: runs in a worker thread for
    big lists)."""
    answers: list[tuple[Listing, list[dict[str, Any]] | None]] = []
    for listing, body in zip(wanted, bodies, strict=True):
        items = None
        if body is not None:
            try:
                items = model_ids(orjson.loads(body))
            except orjson.JSONDecodeError:
                items = None
        answers.append((listing, items))
    payload, missing = merge_models(table, answers)
    return orjson.dumps(payload), missing


def _key(sent: list[tuple[str, str]]) -> bytes:
    """What identifies a listing: the client's headers that go upstream with it, in any order."""
    pairs = sorted((name.lower(), value) for name, value in sent if name.lower() not in _PER_REQUEST)
    return hashlib.sha256(orjson.dumps(pairs)).digest()
