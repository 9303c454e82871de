"""The upstream HTTP client: the only outbound I/O of the proxy.

One client per app, chosen by `THINKPROXY_HTTP_TRANSPORT`: `aiohttp` (default) drives an aiohttp
session directly (proxy.upstream_aiohttp); `httpx` sends through an httpx transport, which is also
how tests inject `httpx.MockTransport` / respx. Both hand the app the same `UpstreamResponse`
(proxy.upstream_common), where transport exceptions of either become the proxy's errors.

Requests skip every client-level extra: a proxy wants no cookie jar shared by all its users, no
redirect following, no default User-Agent or Accept-Encoding of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import httpx

from proxy.egress import CLIENT_CHOSEN, ConnectGuard, EgressProxy, EgressTransport
from proxy.settings import Settings
from proxy.upstream_aiohttp import AiohttpUpstream
from proxy.upstream_common import (
    TRANSPORT_ERRORS,
    Upstream,
    UpstreamRequest,
    UpstreamResponse,
    header_bytes,
    translate_error,
)

# RFC 9110 §7.6.1 hop-by-hop headers, plus the ones the proxy recomputes itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


def filter_headers(pairs: Iterable[tuple[str, str]], drop: frozenset[str]) -> list[tuple[str, str]]:
    """Headers minus hop-by-hop ones, any named in `Connection`, and `drop` (lower-case names).

    Every occurrence of a repeated header is kept, in order (two Set-Cookie stay two)."""
    pairs = list(pairs)
    named = {
        token.strip().lower()
        for name, value in pairs
        if name.lower() == "connection"
        for token in value.split(",")
    }
    return [
        (name, value)
        for name, value in pairs
        if (low := name.lower()) not in HOP_BY_HOP and low not in drop and low not in named
    ]


class HttpxResponse(UpstreamResponse):
    def __init__(self, response: httpx.Response, url: str) -> None:
        self._response = response
        self.url = url
        self.status = response.status_code
        # The raw bytes, latin-1: httpx's own str view guesses an encoding per value.
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]

    def raw_reader(self) -> AsyncIterator[bytes]:
        stream = self._response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        return stream.__aiter__()  # straight from the transport: no decoder or chunker layers

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxUpstream(Upstream):
    """Requests go straight to an httpx transport, not through `httpx.AsyncClient.send`."""

    def __init__(self, transport: httpx.AsyncBaseTransport, settings: Settings) -> None:
        super().__init__()
        self.transport = transport
        self._timeout = httpx.Timeout(
            connect=settings.connect_timeout,
            read=settings.read_timeout,
            write=settings.read_timeout,
            pool=settings.connect_timeout,
        ).as_dict()

    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        req = httpx.Request(
            request.method,
            request.url,
            # As bytes: httpx would encode str values as ASCII (or refuse non-ASCII ones).
            headers=[(header_bytes(k), header_bytes(v)) for k, v in request.headers],
            content=request.content,
            extensions={"timeout": self._timeout, CLIENT_CHOSEN: request.client_chosen},
        )
        try:
            response = await self.transport.handle_async_request(req)
        except TRANSPORT_ERRORS as exc:
            raise translate_error(exc, request.url) from exc
        response.request = req
        return HttpxResponse(response, request.url)

    async def aclose(self) -> None:
        await self.transport.aclose()


def build_upstream(
    settings: Settings, transport: httpx.AsyncBaseTransport | None = None, guard: ConnectGuard | None = None
) -> Upstream:
    """The upstream client the settings ask for; an injected httpx transport (tests) wins. `guard`
    resolves names and vets client-chosen hosts at connect time (proxy.egress)."""
    if guard is None:
        from proxy.upstream_policy import UpstreamPolicy

        policy = UpstreamPolicy.from_settings(settings)
        guard = ConnectGuard(policy, egress=EgressProxy.from_settings(settings))
    if transport is None and settings.http_transport == "aiohttp":
        return AiohttpUpstream(settings, guard)
    if transport is None:
        limits = httpx.Limits(
            max_connections=settings.max_upstream_connections,
            max_keepalive_connections=min(settings.max_upstream_connections, 200),
            keepalive_expiry=30.0,
        )
        transport = EgressTransport(guard, limits)
    return HttpxUpstream(transport, settings)
