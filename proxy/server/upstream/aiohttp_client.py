"""The aiohttp upstream client (`THINKPROXY_HTTP_TRANSPORT=aiohttp`, the default).

aiohttp driven directly: measured on this kind of machine, going through httpx's Request and
Headers objects on top of the same aiohttp session (httpx-aiohttp) doubled the CPU per proxied
request (≈300 µs against ≈150 µs). Part of the upstream client: outbound I/O lives here and in
proxy.server.upstream.httpx_client only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
import yarl

from proxy.core.errors import BadRequest
from proxy.core.plan.request import UpstreamRequest
from proxy.server.egress import ConnectGuard, GuardedAiohttpResolver
from proxy.server.upstream.common import (
    TRANSPORT_ERRORS,
    Upstream,
    UpstreamResponse,
    header_bytes,
    translate_error,
)
from proxy.settings import Settings

# aiohttp would add these on its own; the proxy sends exactly the client's headers.
_NO_AUTO_HEADERS = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})


class AiohttpResponse(UpstreamResponse):
    def __init__(self, response: aiohttp.ClientResponse, url: str) -> None:
        self._response = response
        self.url = url
        self.status = response.status
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]

    def raw_reader(self) -> AsyncIterator[bytes]:
        content = self._response.content
        connection = self._response.connection
        if connection is not None and connection.protocol is not None and not content.is_eof():
            # aiohttp (3.14) leaves the body reader waiting forever when the framing breaks after
            # the head (a bad chunk size): the connection closes, but only its message queue is
            # told. A connection lost before the body's end is a cut body, whatever the cause.
            def lost(_: object) -> None:
                if not content.is_eof() and content.exception() is None:
                    content.set_exception(aiohttp.ClientPayloadError("Response payload is not completed"))

            connection.protocol.closed.add_done_callback(lost)  # type: ignore[union-attr]
        # Each read yields everything received so far: one client write per upstream read.
        return content.iter_any()

    async def aclose(self) -> None:
        # A fully read body hands the connection back to the pool; anything else drops it, so an
        # abandoned stream never leaves the upstream sending into a reused connection.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


def wire_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Header values as aiohttp must get them to write the client's exact bytes.

    Values arrive latin-1 decoded (one char per byte); aiohttp encodes what it sends as UTF-8, so
    a non-ASCII value is turned back into its bytes and read as UTF-8 — otherwise `é` sent as
    UTF-8 would go upstream double-encoded."""
    out = []
    for name, value in headers:
        if not value.isascii():
            try:
                value = header_bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(
                    f"Header {name!r} is neither ASCII nor UTF-8; the upstream client sends header "
                    "values as UTF-8 and would change its bytes.",
                    code="invalid_header",
                    param=name,
                ) from None
        out.append((name, value))
    return out


class AiohttpUpstream(Upstream):
    """One aiohttp session (created on first use, inside the running loop) with a bounded pool."""

    def __init__(self, settings: Settings, guard: ConnectGuard) -> None:
        super().__init__()
        self._settings = settings
        self._guard = guard
        # Client-chosen upstreams get a pool of their own, every connection vetted (proxy.server.egress).
        self._sessions: dict[bool, aiohttp.ClientSession] = {}
        # No sock_read: aiohttp would reschedule a timer on every read. The relay's ClientWatch
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
            auto_decompress=False,  # relayed bodies keep their encoding; chat bodies are decoded by the relay
            cookie_jar=aiohttp.DummyCookieJar(),  # never share one user's cookies with another
            trust_env=False,
        )

    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        session = self._sessions.get(request.client_chosen)
        if session is None:
            session = self._sessions[request.client_chosen] = self._new_session(request.client_chosen)
        headers = wire_headers(request.headers)
        try:
            response = await session.request(
                request.method,
                yarl.URL(request.url, encoded=True),  # built by proxy.core.paths: as the client sent it
                headers=headers,
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
