"""`GET /v1/models` with a routes file: every route's upstream asked at once, answers merged.

The I/O half of the merge (the pure half is `proxy.core.config.routing.merge_models`). Each
distinct upstream is asked once: in gateway mode with the key a chat request to it would carry,
in BYOK mode without the client's credentials (a client's key only ever goes where its request's
model sends it). An upstream that fails (status other than 2xx, no answer within
LISTING_TIMEOUT_S, not a model list, a body over MAX_LIST_BYTES) is left out and named, never
dropped silently.

The merged list is kept for CACHE_TTL_S (PARTIAL_TTL_S when an upstream was missing from it), so
a client polling `/v1/models` does not make the proxy ask every upstream every time. A listing
carries none of the client's headers but LISTING_HEADERS, the few that select whose models an
upstream lists, and only in BYOK mode; the merged list is kept per exactly those (their values,
hashed). Any other header cannot change a listing, so it is not sent and cannot make a call miss
the cache: before, every forwarded header was part of the key, and 100 calls with a different
`X-Junk` each (or an SDK's `X-Stainless-Retry-Count`) made 200 upstream listings and churned
every entry. In gateway mode no client header goes along: each upstream is asked with its route's
key, for what the operator's account sees, so every tenant shares one entry (a tenant's
`OpenAI-Organization` would otherwise pick an organization with the operator's key). Big lists
are parsed and merged in a worker thread.
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

from proxy.core.config.routing import Destination, Listing, RouteTable, listings, merge_models, model_ids
from proxy.core.errors import ProxyError, UpstreamUnreachable
from proxy.core.gateway import GatewayAuth
from proxy.core.plan.model_suffix import with_level_forms
from proxy.core.plan.request import UpstreamRequest
from proxy.server.upstream.common import TRANSPORT_ERRORS, Upstream
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
# The client headers a BYOK listing sends along (lower-case): account selectors, which decide whose
# models an upstream lists (OpenAI's organization and project, whose fine-tunes and allowed models
# differ; the Google Cloud project that Gemini's OpenAI-compatible API bills and lists for). Not
# credentials (proxy.core.gateway.CREDENTIAL_HEADERS never go with a listing), nor what only
# describes the call (User-Agent, X-Stainless-*, request ids, trace context): those cannot change
# the list, and one merged list answers many calls.
LISTING_HEADERS = frozenset({"openai-organization", "openai-project", "x-goog-user-project"})


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
        levels: bool = False,
    ) -> None:
        self.table = table
        self.levels = levels  # each model followed by its `(level)` forms (THINKPROXY_MODELS_WITH_LEVELS)
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
        timeout = min(settings.read_timeout, LISTING_TIMEOUT_S)
        return cls(table, upstream, gateway, timeout=timeout, levels=settings.models_with_levels)

    def __len__(self) -> int:
        return len(self._kept)

    async def get(self, client_headers: Iterable[tuple[str, str]]) -> MergedModels:
        """The merged list; UpstreamUnreachable (502) when no upstream answered (an empty list
        would read as "no models"; not kept, so the next call asks again)."""
        sent = self.forwarded(client_headers)
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

    def forwarded(self, client_headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The client headers a listing sends upstream: in BYOK mode its account selectors
        (LISTING_HEADERS), in gateway mode none (each route's own key goes instead, in `_list`).
        Never a credential: a client's key goes only to the upstream its request's model picks,
        and a listing asks every upstream."""
        if self.gateway.enabled:
            return []
        return [(name.lower(), value) for name, value in client_headers if name.lower() in LISTING_HEADERS]

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
            body, missing = await asyncio.to_thread(merged_body, self.table, wanted, bodies, self.levels)
        else:
            body, missing = merged_body(self.table, wanted, bodies, self.levels)
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
    table: RouteTable, wanted: list[Listing], bodies: list[bytes | None], levels: bool = False
) -> tuple[bytes, list[str]]:
    """The merged list as JSON and the listings missing from it (pure: runs in a worker thread for
    big lists); `levels`: each model followed by its suffixed forms (THINKPROXY_MODELS_WITH_LEVELS)."""
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
    if levels:
        payload["data"] = with_level_forms(payload["data"])
    return orjson.dumps(payload), missing


async def listed_with_levels(
    upstream: Upstream, request: UpstreamRequest, max_bytes: int
) -> tuple[int, bytes]:
    """`GET /v1/models` of a proxy without a routes file, with THINKPROXY_MODELS_WITH_LEVELS: the
    upstream's answer read whole (at most `max_bytes`), its list followed by each model's suffixed
    forms; an answer that is not a model list (an error, say) goes back as it came, with its status."""
    try:
        async with asyncio.timeout(LISTING_TIMEOUT_S):
            response = await upstream.open(request)
            try:
                body = bytearray()
                async for piece in response.reader(decoded=True):
                    body += piece
                    if len(body) > max_bytes:
                        raise UpstreamUnreachable(
                            f"The upstream's model list is larger than {max_bytes} bytes.",
                            code="upstream_error",
                        )
                status = response.status
            finally:
                await response.aclose()
    except _FAILURES as exc:
        if isinstance(exc, ProxyError):
            raise
        raise UpstreamUnreachable(
            "The upstream did not answer the model list.", code="upstream_unavailable"
        ) from None
    if not 200 <= status < 300:
        return status, bytes(body)
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return status, bytes(body)
    items = model_ids(payload)
    if items is None:
        return status, bytes(body)
    return status, orjson.dumps({**payload, "data": with_level_forms(items)})


def _key(sent: list[tuple[str, str]]) -> bytes:
    """What identifies a listing: exactly the client headers that go upstream with it, in any order
    of names (a repeated header's values keep theirs: the sort is stable)."""
    pairs = sorted(sent, key=lambda pair: pair[0])
    return hashlib.sha256(orjson.dumps(pairs)).digest()
