"""What the server edge bounds for every client connection, and the answers it writes itself.

Pure: the limits as one value built from the settings, the errors they give (OpenAI-shaped, like
every error of the proxy), and the raw HTTP/1.1 bytes of an answer the connection layer
(proxy.server.edge) writes before, or instead of, the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.core.errors import ProxyError

if TYPE_CHECKING:
    from proxy.settings import Settings


class RequestTimeout(ProxyError):
    """The client did not send its request head, or its body, in time."""

    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class HeadersTooLarge(ProxyError):
    status = 431
    type = "invalid_request_error"
    code = "request_headers_too_large"


class TooManyConnections(ProxyError):
    status = 503
    type = "server_error"
    code = "too_many_connections"


# What is read and discarded after an early answer, at least: a body well over a small
# THINKPROXY_MAX_BODY_BYTES (an image or two over 256 KiB) still gets its 413 read.
MIN_DRAIN_BYTES = 64 * 1024 * 1024
# A WebSocket message past THINKPROXY_MAX_BODY_BYTES by up to this much still reaches the door, which
# answers it with its own error event before closing with 1009 (proxy.server.doors.responses_ws);
# past that the server closes with 1009 without reading it.
WS_MESSAGE_MARGIN = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """Per worker process. Sizes in bytes, times in seconds."""

    max_header_bytes: int = 64 * 1024
    max_header_count: int = 100
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    max_connections: int = 4096
    # After an early answer (413, 408, …) the rest of the request body is read and discarded, so
    # the client, still sending, can read the answer instead of a connection reset: this much at
    # most, within a time bound (proxy.server.edge), then the connection is closed.
    drain_bytes: int = MIN_DRAIN_BYTES
    # The largest WebSocket message the server reads (uvicorn's ws_max_size, 16 MiB by default,
    # which would cut a message the body limit allows).
    ws_message_bytes: int = 32 * 1024 * 1024 + WS_MESSAGE_MARGIN

    @classmethod
    def from_settings(cls, settings: Settings) -> EdgeLimits:
        return cls(
            max_header_bytes=settings.max_header_bytes,
            max_header_count=settings.max_header_count,
            header_timeout=settings.header_timeout,
            body_timeout=settings.client_body_timeout,
            max_connections=settings.max_client_connections,
            # (Twice the limit alone cut a body 3 MB over a small limit short: a broken pipe
            # instead of the 413.)
            drain_bytes=max(2 * settings.max_body_bytes, MIN_DRAIN_BYTES),
            ws_message_bytes=settings.max_body_bytes + WS_MESSAGE_MARGIN,
        )

    def headers_too_large(self, size: int | None = None) -> HeadersTooLarge:
        seen = f" ({size} bytes so far)" if size is not None else ""
        return HeadersTooLarge(
            f"Request headers exceed the limit of {self.max_header_bytes} bytes{seen} "
            "(THINKPROXY_MAX_HEADER_BYTES): send fewer or shorter headers.",
        )

    def too_many_headers(self) -> HeadersTooLarge:
        return HeadersTooLarge(
            f"Request has more than {self.max_header_count} header lines "
            "(THINKPROXY_MAX_HEADER_COUNT): send fewer headers.",
        )

    def head_timed_out(self) -> RequestTimeout:
        return RequestTimeout(
            f"Request headers were not complete within {self.header_timeout:g} s "
            "(THINKPROXY_HEADER_TIMEOUT): send the whole request head at once.",
        )

    def too_many_connections(self) -> TooManyConnections:
        return TooManyConnections(
            f"The server holds its limit of {self.max_connections} client connections "
            "(THINKPROXY_MAX_CLIENT_CONNECTIONS); retry shortly.",
        )


def head_size(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """Bytes of a request head as sent: request line (method and version approximated) and
    `name: value\\r\\n` lines."""
    return len(url) + 20 + sum(len(name) + len(value) + 4 for name, value in headers)


def raw_answer(error: ProxyError, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """A complete HTTP/1.1 response carrying `error`'s OpenAI-shaped body, closing the connection."""
    body = error.body()
    lines = [f"HTTP/1.1 {error.status} {_REASONS.get(error.status, '')}".encode("ascii")]
    lines += [name + b": " + value for name, value in default_headers]
    lines += [
        b"content-type: application/json",
        b"content-length: " + str(len(body)).encode("ascii"),
        b"connection: close",
    ]
    if error.status == 503:
        lines.append(b"retry-after: 1")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}
