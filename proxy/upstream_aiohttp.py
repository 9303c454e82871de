"""The aiohttp upstream client (`THINKPROXY_HTTP_TRANSPORT=aiohttp`, the default).

aiohttp driven directly: measured on this kind of machine, going through httpx's Request and
Headers objects on top of the same aiohttp session (httpx-aiohttp) doubled the CPU per proxied
request (≈300 µs against ≈150 µs). Part of the upstream client: outbound I/O lives here and in
proxy.upstream only.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
import yarl

from proxy.egress import ConnectGuard, GuardedAiohttpResolver
from proxy.errors import UpstreamUnreachable
from proxy.settings import Settings
from proxy.upstream import (
    TRANSPORT_ERRORS,
    Upstream,
    UpstreamRequest,
    UpstreamResponse,
    describe_upstream,
    translate_error,
)

# aiohttp would add these on its own; the proxy sends exactly the client's headers.
_NO_AUTO_HEADERS = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})


class AiohttpResponse(UpstreamResponse):
    def __init__(self, response: aiohttp.ClientResponse, url: str) -> None:
        self._response = response
        self._url = url
        self.status = response.status
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]

    def reader(self, *, decoded: bool) -> AsyncIterator[bytes]:
        encoding = (self.header("content-encoding") or "identity").strip().lower()
        if decoded and encoding != "identity":
            return self._decoded(encoding)
        # Each read yields everything received so far: one client write per upstream read.
        return self._response.content.iter_any()

    async def _decoded(self, encoding: str) -> AsyncIterator[bytes]:
        decompressor = _decompressor(encoding, self._url)
        async for piece in self._response.content.iter_any():
            out = decompressor.decompress(piece)
            if out:
                yield out
        tail = decompressor.flush()
        if tail:
            yield tail

    async def aread(self) -> bytes:
        return b"".join([piece async for piece in self.reader(decoded=True)])

    async def aclose(self) -> None:
        # A fully read body hands the connection back to the pool; anything else drops it, so an
        # abandoned stream never leaves the upstream sending into a reused connection.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


def _decompressor(encoding: str, url: str) -> zlib._Decompress:
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj(wbits=zlib.MAX_WBITS)
    raise UpstreamUnreachable(
        f"Upstream {describe_upstream(url)} answered with content-encoding {encoding!r}, which the proxy "
        "cannot decode (it asks for identity on chat completions).",
        code="upstream_unsupported_encoding",
    )


class AiohttpUpstream(Upstream):
    """One aiohttp session (created on first use, inside the running loop) with a bounded pool."""

    def __init__(self, settings: Settings, guard: ConnectGuard) -> None:
        super().__init__()
        self._settings = settings
        self._guard = guard
        # Client-chosen upstreams get a pool of their own, every connection vetted (proxy.egress).
        self._sessions: dict[bool, aiohttp.ClientSession] = {}
        # No sock_read: aiohttp would reschedule a timer on every read. The app's ClientWatch
        # enforces THINKPROXY_READ_TIMEOUT with one lazy timer per request instead.
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=settings.connect_timeout,  # includes waiting for a free pooled connection
            sock_connect=settings.connect_timeout,
            sock_read=None,
        )

    def _new_session(self, client_chosen: bool) -> aiohttp.ClientSession:
        proxies = (urlsplit(p).hostname or "" for p in self._guard.egress.proxies.values())
        connector = aiohttp.TCPConnector(
            limit=self._settings.max_upstream_connections,
            limit_per_host=0,
            keepalive_timeout=30.0,
            resolver=GuardedAiohttpResolver(self._guard, client_chosen=client_chosen, exempt=proxies),
        )
        return aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # relayed bodies keep their encoding; chat bodies are decoded here
            cookie_jar=aiohttp.DummyCookieJar(),  # never share one user's cookies with another
            trust_env=False,
        )

    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        session = self._sessions.get(request.client_chosen)
        if session is None:
            session = self._sessions[request.client_chosen] = self._new_session(request.client_chosen)
        try:
            response = await session.request(
                request.method,
                yarl.URL(request.url, encoded=True),  # built by proxy.paths: as the client sent it
                headers=request.headers,
                data=request.content or None,
                allow_redirects=False,
                timeout=self._timeout,
                skip_auto_headers=_NO_AUTO_HEADERS,
                proxy=self._guard.egress.for_url(request.url),
            )
        except TRANSPORT_ERRORS as exc:
            raise translate_error(exc, request.url) from exc
        return AiohttpResponse(response, request.url)

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
