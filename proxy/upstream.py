"""The upstream HTTP client: the only outbound I/O of the proxy.

One shared httpx transport per app: the aiohttp one from httpx-aiohttp by default (same httpx
API, several times less CPU per request and per chunk than httpx's own transport here), or
httpx's own. Requests go straight to the transport, not through `httpx.AsyncClient.send`: a
proxy wants none of the client's extras (a cookie jar shared by every user of the proxy,
redirect following, default User-Agent and Accept-Encoding headers, auth flows), and skipping
them halves the per-request cost. Transport exceptions are translated to the proxy's error
model in exactly one place, `translate_error`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import map_aiohttp_exceptions

from proxy.errors import ProxyError, UpstreamTimeout, UpstreamUnreachable
from proxy.settings import Settings
from proxy.upstream_policy import host_is_sensitive

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


def build_transport(settings: Settings) -> httpx.AsyncBaseTransport:
    limits = httpx.Limits(
        max_connections=settings.max_upstream_connections,
        max_keepalive_connections=min(settings.max_upstream_connections, 200),
        keepalive_expiry=30.0,
    )
    if settings.http_transport == "aiohttp":
        return AiohttpTransport(limits=limits)
    return httpx.AsyncHTTPTransport(limits=limits)


def build_timeout(settings: Settings) -> dict[str, float]:
    """The per-request timeouts in the form httpx transports read from request extensions."""
    return httpx.Timeout(
        connect=settings.connect_timeout,
        read=settings.read_timeout,
        write=settings.read_timeout,
        pool=settings.connect_timeout,
    ).as_dict()  # type: ignore[return-value]


def filter_headers(pairs: Iterable[tuple[str, str]], drop: frozenset[str]) -> list[tuple[str, str]]:
    """Headers minus hop-by-hop ones, any named in `Connection`, and `drop` (lower-case names)."""
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


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    url: str
    headers: list[tuple[str, str]]
    content: bytes


def describe_upstream(url: str) -> str:
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.host}{port}"


def translate_error(exc: Exception, url: str) -> ProxyError:
    """The one place transport exceptions become the proxy's errors (502 / 504)."""
    where = describe_upstream(url)
    if type(exc).__module__.startswith("aiohttp"):
        exc = _as_httpx_error(exc)
    if isinstance(exc, httpx.TimeoutException) and not _really_timed_out(exc):
        # httpx-aiohttp maps every aiohttp connection error (refused, DNS failure) to
        # ConnectTimeout; the underlying cause says whether time actually ran out.
        exc = httpx.ConnectError(str(exc.__cause__ or exc))
    if isinstance(exc, httpx.TimeoutException):
        what = {
            # aiohttp counts the wait for a pooled connection as part of connecting
            httpx.ConnectTimeout: "connecting (or waiting for a free connection; "
            "THINKPROXY_MAX_UPSTREAM_CONNECTIONS caps them)",
            httpx.ReadTimeout: "waiting for data (THINKPROXY_READ_TIMEOUT)",
            httpx.WriteTimeout: "sending the request",
            httpx.PoolTimeout: "waiting for a free upstream connection (all "
            "THINKPROXY_MAX_UPSTREAM_CONNECTIONS are busy)",
        }.get(type(exc), "waiting")
        return UpstreamTimeout(f"Upstream {where} timed out while {what}.")
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return UpstreamUnreachable(f"Could not connect to upstream {where}: {detail}")
    if isinstance(exc, httpx.RemoteProtocolError):
        return UpstreamUnreachable(
            f"Upstream {where} closed the connection or broke the protocol: {detail}",
            code="upstream_protocol_error",
        )
    if isinstance(exc, httpx.ReadError):
        # aiohttp's wording here ("TransferEncodingError: 400, …") reads like an HTTP status; it is not.
        return UpstreamUnreachable(
            f"Upstream {where} closed the connection before the response was complete.",
            code="upstream_protocol_error",
        )
    return UpstreamUnreachable(f"Upstream {where} failed: {detail}")


def _as_httpx_error(exc: Exception) -> Exception:
    """An aiohttp exception (raised while reading a body from aiohttp directly) as the httpx
    exception httpx-aiohttp would have raised for it."""
    try:
        with map_aiohttp_exceptions():
            raise exc
    except httpx.HTTPError as mapped:
        return mapped
    except Exception:
        return exc


def _really_timed_out(exc: httpx.TimeoutException) -> bool:
    cause = exc.__cause__
    from_aiohttp = type(cause).__module__.startswith("aiohttp")
    return not from_aiohttp or isinstance(cause, TimeoutError)


# What reading from an upstream can raise: httpx's errors, aiohttp's (bodies read from aiohttp
# directly), timeouts and socket errors.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, aiohttp.ClientError, TimeoutError, OSError)


class Upstream:
    """Sends one request upstream and exposes its response as headers + an async byte iterator."""

    DNS_VERDICT_TTL_S = 60.0

    def __init__(self, transport: httpx.AsyncBaseTransport, timeout: dict[str, float]) -> None:
        self.transport = transport
        self._timeout = timeout
        self._dns_verdicts: dict[str, tuple[float, bool]] = {}

    async def resolves_to_sensitive(self, host: str) -> bool:
        """Whether `host` resolves to a loopback, link-local or metadata address (cached briefly).

        A name that does not resolve is left to the connection attempt (which then gives 502)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        cached = self._dns_verdicts.get(host)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            return False
        verdict = any(host_is_sensitive(str(info[4][0])) for info in infos)
        if len(self._dns_verdicts) > 1024:
            self._dns_verdicts.clear()
        self._dns_verdicts[host] = (now + self.DNS_VERDICT_TTL_S, verdict)
        return verdict

    async def open(self, request: UpstreamRequest) -> httpx.Response:
        """Send the request; returns as soon as the response headers arrived. Raises ProxyError."""
        req = httpx.Request(
            request.method,
            request.url,
            headers=request.headers,
            content=request.content,
            extensions={"timeout": self._timeout},
        )
        try:
            response = await self.transport.handle_async_request(req)
        except TRANSPORT_ERRORS as exc:
            raise translate_error(exc, request.url) from exc
        response.request = req
        return response

    @staticmethod
    def reader(response: httpx.Response, *, decoded: bool) -> AsyncIterator[bytes]:
        """The body as it arrives; `decoded` undoes any content-encoding (the proxy must parse it).

        Unencoded bodies are read straight from the transport, without httpx's decoder and chunker
        layers. On the aiohttp transport that means aiohttp's own `iter_any()`: each read yields
        everything received so far (httpx-aiohttp's 16 KiB re-chunking copies bytes and adds a
        read per 16 KiB). Its exceptions are aiohttp's; `translate_error` knows them.
        """
        if decoded and "content-encoding" in response.headers:
            return response.aiter_bytes()
        stream = response.stream
        native = getattr(stream, "_aiohttp_response", None)
        if isinstance(native, aiohttp.ClientResponse):
            return native.content.iter_any()
        assert isinstance(stream, httpx.AsyncByteStream)
        return stream.__aiter__()

    async def aclose(self) -> None:
        await self.transport.aclose()
