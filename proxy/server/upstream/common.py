"""What both upstream clients share: the request and response types, body decoding, and the one
place transport exceptions become the proxy's errors.

The two clients (`httpx_client`, `aiohttp_client`) build on this module and never import each
other.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import aiohttp
import httpx

from proxy.core.config.url_patterns import scrub_urls
from proxy.core.errors import BadUpstreamResponse, ProxyError, UpstreamTimeout, UpstreamUnreachable
from proxy.core.plan.request import UpstreamRequest
from proxy.server.egress import refusal

# The most decoded bytes one decompression step may produce: a small compressed read can inflate
# to hundreds of megabytes, and memory must stay bounded by what the caller accepts.
DECODE_PIECE_BYTES = 256 * 1024


def header_bytes(value: str) -> bytes:
    """A header value's bytes: received values are latin-1 decoded (one char per byte); a value
    the proxy made itself may hold characters beyond latin-1, which are sent as UTF-8."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


class UpstreamResponse(ABC):
    """An upstream answer whose headers have arrived; the body is read with `reader`, and
    `aclose` must always be called (it returns or drops the connection).

    `headers` holds every field line in order (repeated names included), names and values decoded
    from the wire as latin-1 so that re-encoding them gives back the exact bytes.
    """

    status: int
    headers: list[tuple[str, str]]
    url: str

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    @abstractmethod
    def raw_reader(self) -> AsyncIterator[bytes]:
        """The body as it arrives, content-encoding kept; ends early only by raising."""

    def reader(self, *, decoded: bool) -> AsyncIterator[bytes]:
        """The body as it arrives; `decoded` undoes any content-encoding (the proxy must parse it),
        in pieces of at most DECODE_PIECE_BYTES."""
        encoding = (self.header("content-encoding") or "identity").strip().lower()
        if not decoded or encoding == "identity":
            return self.raw_reader()
        return decode_body(self.raw_reader(), encoding, self.url)

    @abstractmethod
    async def aclose(self) -> None: ...


class Upstream(ABC):
    """Sends requests to the upstream; one per app, closed on shutdown."""

    @abstractmethod
    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send the request; returns once the response headers arrived. Raises ProxyError."""

    @abstractmethod
    async def aclose(self) -> None: ...


# --- decoding ----------------------------------------------------------------------------------


class _Inflater:
    """gzip / deflate decoding with a bound on every step's output (sans-I/O)."""

    def __init__(self, encoding: str, url: str) -> None:
        if encoding not in ("gzip", "x-gzip", "deflate"):
            raise BadUpstreamResponse(
                f"Upstream {describe_upstream(url)} answered with content-encoding {encoding!r}, which "
                "the proxy cannot decode (it asks for identity on chat completions).",
                code="upstream_unsupported_encoding",
            )
        self._gzip = encoding != "deflate"
        self._new()

    def _new(self) -> None:
        self._d = zlib.decompressobj(wbits=(16 if self._gzip else 0) + zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        d = self._d
        while True:
            out = d.decompress(data, DECODE_PIECE_BYTES)
            if out:
                yield out
            data = d.unconsumed_tail
            if d.eof and d.unused_data and self._gzip:
                # gzip allows several members one after the other (RFC 1952 §2.2).
                data = d.unused_data
                self._new()
                d = self._d
            elif not data and len(out) < DECODE_PIECE_BYTES:
                return  # (a full piece may leave output pending: then decompress again)

    def end(self) -> bytes:
        if not self._d.eof:
            raise zlib.error("the body ends before its compressed data does")
        return self._d.flush()


async def decode_body(raw: AsyncIterator[bytes], encoding: str, url: str) -> AsyncIterator[bytes]:
    """`raw` with its gzip or deflate coding undone, in pieces of at most DECODE_PIECE_BYTES.

    A corrupt body, or one that ends inside its compressed data, raises BadUpstreamResponse: a cut
    compressed body must not read as a complete shorter one.
    """
    inflater = _Inflater(encoding, url)
    try:
        async for data in raw:
            for out in inflater.feed(data):
                yield out
        tail = inflater.end()
    except zlib.error as exc:
        raise BadUpstreamResponse(
            f"Upstream {describe_upstream(url)} sent a {encoding} body that cannot be decoded ({exc}).",
            code="upstream_bad_encoding",
        ) from None
    if tail:
        yield tail


# --- errors ------------------------------------------------------------------------------------


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


def total_timeout_error(url: str, total: float) -> UpstreamTimeout:
    return UpstreamTimeout(
        f"Upstream {describe_upstream(url)} did not finish within the total timeout of "
        f"{total:g} s (THINKPROXY_TOTAL_TIMEOUT)."
    )


def translate_error(exc: Exception, url: str) -> ProxyError:
    """The one place transport exceptions of either HTTP client become the proxy's errors (502 / 504)."""
    if isinstance(exc, ProxyError):
        return exc  # already the proxy's own (a body that cannot be decoded, say)
    refused = refusal(exc)  # proxy.server.egress refused the connection: a 403, not an upstream fault
    if refused is not None:
        return refused
    where = describe_upstream(url)
    timeout = _timeout_phase(exc)
    if timeout is not None:
        return UpstreamTimeout(f"Upstream {where} timed out while {timeout}.")
    if isinstance(exc, httpx.ConnectError | aiohttp.ClientConnectorError):
        detail = scrub_urls(str(getattr(exc, "os_error", None) or exc)) or type(exc).__name__
        return UpstreamUnreachable(f"Could not connect to upstream {where}: {detail}")
    if isinstance(exc, httpx.RemoteProtocolError) and not _closed_early(exc):
        return BadUpstreamResponse(f"Upstream {where} sent a malformed response: {_short(exc)}")
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
    if isinstance(exc, aiohttp.ClientResponseError | httpx.ProtocolError):
        # A response the HTTP client could not parse (bad status line, bad header, …).
        return BadUpstreamResponse(f"Upstream {where} sent a malformed response: {_short(exc)}")
    return UpstreamUnreachable(f"Upstream {where} failed: {_short(exc)}")


def _closed_early(exc: Exception) -> bool:
    # httpcore raises RemoteProtocolError both for a peer that hung up mid-message and for bytes
    # that are not HTTP; only its wording tells them apart.
    text = str(exc).lower()
    return any(word in text for word in ("closed", "disconnected", "incomplete", "without sending"))


def _short(exc: Exception) -> str:
    # aiohttp's messages may echo the request URL (its query too): keep the upstream's own words only.
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return scrub_urls(str(text).splitlines()[0])[:200]


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
