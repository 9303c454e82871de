"""The upstream HTTP client: the only outbound I/O of the proxy.

One client per app, chosen by `THINKPROXY_HTTP_TRANSPORT`: `aiohttp` (default) drives an aiohttp
session directly (proxy.upstream_aiohttp); `httpx` sends through an httpx transport, which is also
how tests inject `httpx.MockTransport` / respx. Both hand the app the same `UpstreamResponse`, and
transport exceptions of either become the proxy's errors in exactly one place, `translate_error`.

Requests skip every client-level extra: a proxy wants no cookie jar shared by all its users, no
redirect following, no default User-Agent or Accept-Encoding of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import httpx

from proxy.egress import CLIENT_CHOSEN, ConnectGuard, EgressTransport, refusal
from proxy.errors import ProxyError, UpstreamTimeout, UpstreamUnreachable
from proxy.settings import Settings
from proxy.url_patterns import scrub_urls

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
    client_chosen: bool = False  # X-Upstream-Base-URL: connect through the vetted pool (proxy.egress)


class UpstreamResponse(ABC):
    """An upstream answer whose headers have arrived; the body is read with `reader` or `aread`,
    and `aclose` must always be called (it returns or drops the connection)."""

    status: int
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    @abstractmethod
    def reader(self, *, decoded: bool) -> AsyncIterator[bytes]:
        """The body as it arrives; `decoded` undoes any content-encoding (the proxy must parse it)."""

    @abstractmethod
    async def aread(self) -> bytes:
        """The whole body, decoded."""

    @abstractmethod
    async def aclose(self) -> None: ...


class Upstream(ABC):
    """Sends requests to the upstream; one per app, closed on shutdown."""

    @abstractmethod
    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send the request; returns once the response headers arrived. Raises ProxyError."""

    @abstractmethod
    async def aclose(self) -> None: ...


class HttpxResponse(UpstreamResponse):
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = response.headers.multi_items()

    def reader(self, *, decoded: bool) -> AsyncIterator[bytes]:
        if decoded and self.header("content-encoding") is not None:
            return self._response.aiter_bytes()
        stream = self._response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        return stream.__aiter__()  # straight from the transport: no decoder or chunker layers

    async def aread(self) -> bytes:
        return await self._response.aread()

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
            headers=request.headers,
            content=request.content,
            extensions={"timeout": self._timeout, CLIENT_CHOSEN: request.client_chosen},
        )
        try:
            response = await self.transport.handle_async_request(req)
        except TRANSPORT_ERRORS as exc:
            raise translate_error(exc, request.url) from exc
        response.request = req
        return HttpxResponse(response)

    async def aclose(self) -> None:
        await self.transport.aclose()


def build_upstream(
    settings: Settings, transport: httpx.AsyncBaseTransport | None = None, guard: ConnectGuard | None = None
) -> Upstream:
    """The upstream client the settings ask for; an injected httpx transport (tests) wins. `guard`
    resolves names and vets client-chosen hosts at connect time (proxy.egress)."""
    if guard is None:
        from proxy.egress import EgressProxy
        from proxy.upstream_policy import UpstreamPolicy

        guard = ConnectGuard(
            UpstreamPolicy.from_settings(settings), egress=EgressProxy.from_settings(settings)
        )
    if transport is None and settings.http_transport == "aiohttp":
        from proxy.upstream_aiohttp import AiohttpUpstream

        return AiohttpUpstream(settings, guard)
    if transport is None:
        limits = httpx.Limits(
            max_connections=settings.max_upstream_connections,
            max_keepalive_connections=min(settings.max_upstream_connections, 200),
            keepalive_expiry=30.0,
        )
        transport = EgressTransport(guard, limits)
    return HttpxUpstream(transport, settings)


def describe_upstream(url: str) -> str:
    """scheme://host[:port] of a URL: enough to say which upstream, never its path or credentials."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        host = parts.hostname or ""
        return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}{port}"
    except ValueError:
        return "(invalid URL)"


# What talking to an upstream can raise: httpx's errors, aiohttp's, timeouts and socket errors.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, aiohttp.ClientError, TimeoutError, OSError)

_CONNECTING = "connecting (or waiting for a free connection; THINKPROXY_MAX_UPSTREAM_CONNECTIONS caps them)"
_WAITING_FOR_DATA = "waiting for data (THINKPROXY_READ_TIMEOUT)"


def read_timeout_error(url: str) -> UpstreamTimeout:
    return UpstreamTimeout(f"Upstream {describe_upstream(url)} timed out while {_WAITING_FOR_DATA}.")


def translate_error(exc: Exception, url: str) -> ProxyError:
    """The one place transport exceptions become the proxy's errors (502 / 504)."""
    refused = refusal(exc)  # proxy.egress refused the connection: a 403, not an upstream fault
    if refused is not None:
        return refused
    where = describe_upstream(url)
    timeout = _timeout_phase(exc)
    if timeout is not None:
        return UpstreamTimeout(f"Upstream {where} timed out while {timeout}.")
    if isinstance(exc, httpx.ConnectError | aiohttp.ClientConnectorError):
        detail = scrub_urls(str(getattr(exc, "os_error", None) or exc)) or type(exc).__name__
        return UpstreamUnreachable(f"Could not connect to upstream {where}: {detail}")
    if isinstance(
        exc,
        httpx.RemoteProtocolError
        | httpx.ReadError
        | aiohttp.ClientPayloadError
        | aiohttp.ServerDisconnectedError
        | aiohttp.ClientOSError
        | ConnectionError,
    ):
        # (aiohttp's own wording here, "TransferEncodingError: 400, …", reads like an HTTP status.)
        return UpstreamUnreachable(
            f"Upstream {where} closed the connection before the response was complete.",
            code="upstream_protocol_error",
        )
    detail = scrub_urls(str(exc)) or type(exc).__name__  # (aiohttp's messages may quote URLs)
    return UpstreamUnreachable(f"Upstream {where} failed: {detail}")


def _timeout_phase(exc: Exception) -> str | None:
    """What the proxy was waiting for when time ran out, or None if this is not a timeout."""
    if isinstance(exc, httpx.TimeoutException):
        return {
            httpx.ConnectTimeout: _CONNECTING,
            httpx.ReadTimeout: _WAITING_FOR_DATA,
            httpx.WriteTimeout: "sending the request",
            httpx.PoolTimeout: "waiting for a free upstream connection (all "
            "THINKPROXY_MAX_UPSTREAM_CONNECTIONS are busy)",
        }.get(type(exc), "waiting")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return _CONNECTING
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return _WAITING_FOR_DATA
    if isinstance(exc, TimeoutError):
        return "waiting"
    return None
