"""`GET /v1/models` with a routes file: every route's upstream asked at once, answers merged.

The I/O half of the merge (the pure half is `proxy.routes.merge_models`). Each distinct upstream is
asked once: in gateway mode with the key a chat request to it would carry, in BYOK mode without
the client's credentials (a client's key only ever goes where its request's model sends it). An
upstream that fails (status other than 2xx, no answer in time, not a model list, a body over the
size limit) is left out and named, never dropped silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import orjson

from proxy.errors import ProxyError, UpstreamUnreachable
from proxy.gateway import AUTH_HEADERS, GatewayAuth
from proxy.routes import Destination, Listing, RouteTable, listings, merge_models, model_ids
from proxy.upstream import filter_headers
from proxy.upstream_common import TRANSPORT_ERRORS, Upstream, UpstreamRequest

MISSING_HEADER = "x-thinking-models-missing"
# Whatever asking one upstream can raise; each means "this upstream is missing from the list".
_FAILURES: tuple[type[Exception], ...] = (ProxyError, *TRANSPORT_ERRORS)  # (these include TimeoutError)
# What the proxy itself sets on a models request; the client's other headers go along as sent.
_DROP = frozenset({"host", "content-length", "accept-encoding", "accept"})


async def merged_models(
    table: RouteTable,
    upstream: Upstream,
    gateway: GatewayAuth,
    client_headers: Iterable[tuple[str, str]],
    *,
    timeout: float,
    max_bytes: int,
) -> tuple[dict[str, Any], list[str]]:
    """The merged list and the names of the upstreams that are missing from it; a 502 when none
    answered (an empty list would read as "no models")."""
    # BYOK: a client's key goes only to the upstream its request's model picks. A model list is
    # asked of every upstream, so it goes without the client's credentials (gateway mode adds each
    # route's own key in `_list`).
    headers = filter_headers(client_headers, _DROP if gateway.enabled else _DROP | AUTH_HEADERS)
    wanted = listings(table)
    answers = await asyncio.gather(
        *(_list(upstream, gateway, headers, listing, timeout, max_bytes) for listing in wanted)
    )
    payload, missing = merge_models(table, list(zip(wanted, answers, strict=True)))
    if len(missing) == len(wanted):
        raise UpstreamUnreachable(
            f"No upstream answered the model list: {', '.join(missing)}.", code="upstream_unavailable"
        )
    return payload, missing


async def _list(
    upstream: Upstream,
    gateway: GatewayAuth,
    headers: list[tuple[str, str]],
    listing: Listing,
    timeout: float,
    max_bytes: int,
) -> list[dict[str, Any]] | None:
    destination = Destination(listing.upstream, listing.routes[0])
    sent = gateway.upstream_headers(headers, destination)
    sent += [("accept", "application/json"), ("accept-encoding", "identity")]
    request = UpstreamRequest("GET", f"{listing.upstream}/models", sent, b"")
    try:
        async with asyncio.timeout(timeout):
            response = await upstream.open(request)
            try:
                if not 200 <= response.status < 300:
                    return None
                body = bytearray()
                async for piece in response.reader(decoded=True):
                    body += piece
                    if len(body) > max_bytes:
                        return None
            finally:
                await response.aclose()
    except _FAILURES:
        return None
    try:
        return model_ids(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None
