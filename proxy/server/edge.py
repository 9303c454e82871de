"""The HTTP/1.1 connection layer: uvicorn's httptools protocol, with the limits a public edge needs.

uvicorn's httptools protocol (the fast one) bounds nothing about a request head: httptools
buffers a header of any size (by repeated concatenation), takes any number of lines, and waits
for them forever; a connection that never sends a byte is never timed out; and a connection with
`Connection: close` is closed the moment the answer is written, even while the client is still
sending its body, so a client that sends a body over the limit often reads a connection reset
instead of the 413. `EdgeProtocol` adds, per connection:

- a bound on the request head: bytes (counted as they arrive, before httptools buffers them) and
  header lines; beyond either, a 431;
- a header timeout, from the connection's first byte (or its opening) to the end of the head: a
  408 when part of a head has arrived, a quiet close when nothing has;
- a cap on concurrent connections: over it, a 503 and the connection is closed;
- a lingering close: when the connection is to be closed while the request is still arriving, the
  server half-closes (FIN after the answer) and reads and discards what the client still sends
  until the body has arrived (its end found by the parser: Content-Length or the last chunk), up
  to `drain_bytes` and the header timeout, and only then closes, so that a client that writes its
  whole body before it reads (most do) reads the answer instead of a broken pipe;
- the same bound on discarding the rest of a body after an early answer on a kept-alive
  connection (uvicorn would read it forever, re-arming nothing).

The answers it writes itself are OpenAI-shaped like every error of the proxy (proxy.server.limits). The
per-chunk path (a response being written, a body being read) is untouched: writes go straight to
the transport's own `write`.

It also tells the app, per request, two things only the server knows, through an ASGI extension:

    hooks = scope["extensions"]["thinkproxy.http.edge_request"]
    body = hooks["take_body"]()          # bytes, or None
    hooks["on_disconnect"](callback)     # or None, to stop watching

`take_body()` is the whole request body when all of it has arrived: it is for the body's first
reader, before anything of it is read through `receive` (proxy.server.asgi.read_body asks it
first), and it is taken as `receive` would give it, and `receive` then goes on as after the
body's last message. A body sent in the write that carries its head arrives before the app runs; one
a client writes apart (http.client and httpx do) when the server reads after both are in, as a busy
one does. None otherwise (a body still arriving, a client gone, an `Expect: 100-continue` not answered
yet): read it from `receive`, as without the extension. `on_disconnect(callback)` calls `callback()`
once, when the client's connection is lost while the request's answer is still incomplete (at once if
the connection is lost already); `on_disconnect(None)` forgets it (the one callback a request has:
its relay's watch, proxy.server.asgi.ClientWatch). Without
them the app reads the body under a timer and keeps a task per request reading `receive` for the
disconnect while the upstream is awaited (proxy.server.asgi: `read_body`, `ClientWatch`); with them,
neither (bench/README.md, "The watch and the body timer, from the server"). A server that does not
offer the extension (an in-process test client, another ASGI server) leaves the app on `receive`.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from asyncio import TimerHandle
from collections.abc import Callable
from typing import Any, TypedDict

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from proxy.core.errors import ProxyError
from proxy.core.events import AccessRecord
from proxy.server.access_log import log_access
from proxy.server.limits import EdgeLimits, head_size, raw_answer

_LOGGED_URL_BYTES = 256  # of a refused request's target, in its access line
HEAD_REFUSAL_DRAIN_BYTES = 1024 * 1024  # read and discarded after a refused head, at most


# The extension's name in a request's scope (see the module docstring).
EDGE_REQUEST = "thinkproxy.http.edge_request"

OnDisconnect = Callable[[], None]


class EdgeRequestHooks(TypedDict):
    """The extension's value: what the edge knows of one request (see the module docstring)."""

    take_body: Callable[[], bytes | None]
    on_disconnect: Callable[[OnDisconnect | None], None]


class EdgeRequest:
    """One request as the edge knows it, behind its `EdgeRequestHooks`. It holds its uvicorn cycle
    weakly: the cycle holds the scope, the scope the hooks, the hooks this; held strongly, every
    request would be a reference cycle for the cyclic collector."""

    __slots__ = ("_cycle", "_on_lost")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = weakref.ref(cycle)
        self._on_lost: OnDisconnect | None = None

    def hooks(self) -> EdgeRequestHooks:
        return {"take_body": self.take_body, "on_disconnect": self.on_disconnect}

    def take_body(self) -> bytes | None:
        cycle = self._cycle()
        if (
            cycle is None
            or cycle.more_body
            or cycle.disconnected
            or cycle.response_complete
            or cycle.waiting_for_100_continue  # (`receive` writes the 100 Continue: left to it)
        ):
            return None
        # What uvicorn's `receive` does with a body that is all in: reading resumes (it pauses
        # past its high-water mark), the body is handed over and the event that told of it reset.
        body = bytes(cycle.body)
        cycle.body = bytearray()
        cycle.message_event.clear()
        cycle.flow.resume_reading()
        return body

    def on_disconnect(self, callback: OnDisconnect | None) -> None:
        self._on_lost = callback
        if callback is not None:
            cycle = self._cycle()
            if cycle is None or cycle.disconnected:
                self.lost()

    def lost(self) -> None:
        """The connection is lost with this request's answer incomplete."""
        callback = self._on_lost
        if callback is not None:
            self._on_lost = None
            callback()


class _Refused(Exception):
    """Raised from a parser callback to stop httptools; the protocol then writes its answer."""


class _BodyEnded(Exception):
    """Raised from the parser's callback when a lingering connection's body has all arrived: it
    stops httptools before anything after it (a pipelined request) is parsed."""


class LingeringTransport:
    """The connection's transport as uvicorn sees it: `close()` while the request is still
    arriving becomes a lingering close (see the module docstring); everything else is the real
    transport's own method."""

    def __init__(self, transport: asyncio.Transport, protocol: EdgeProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closing = False
        # The hot path: uvicorn writes every response piece through these, so they are the real
        # transport's bound methods, not wrappers.
        self.write = transport.write
        self.get_extra_info = transport.get_extra_info
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._transport.is_closing() or not self._protocol.receiving:
            self._transport.close()
        else:
            self._protocol.linger()

    def abort(self) -> None:
        self._closing = True
        self._transport.abort()

    @property
    def real(self) -> asyncio.Transport:
        return self._transport


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits in `EdgeLimits` (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: EdgeLimits,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.receiving = False  # a request has begun and not fully arrived (its body included)
        self._in_head = True  # what arrives next belongs to a request head
        self._head_bytes = 0
        self._refusal: ProxyError | None = None
        self._head_timer: TimerHandle | None = None
        self._drain_timer: TimerHandle | None = None
        self._drain_left = 0
        self._lingering = False
        self._parse_rest = False  # lingering: the rest of a body is fed to the parser, to find its end
        self._edge: LingeringTransport | None = None
        self._request: EdgeRequest | None = None  # the latest request's, as uvicorn's `cycle` is

    @classmethod
    def factory(cls, limits: EdgeLimits) -> Any:
        """What to give uvicorn as `http=`: picklable, so `--workers N` processes get it too."""
        return functools.partial(cls, limits=limits)

    # -- connection ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._edge = LingeringTransport(transport, self)
        super().connection_made(self._edge)  # type: ignore[arg-type]
        if len(self.connections) > self.limits.max_connections:
            self._answer(self.limits.too_many_connections())
            return
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._on_head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)
        request, self._request = self._request, None
        if request is not None and self.cycle is not None and self.cycle.disconnected:
            # (the request uvicorn tells of its disconnect, through `receive`: the latest one)
            request.lost()

    def eof_received(self) -> None:
        if self._lingering:
            self._close_now()  # the client read the answer and left

    def shutdown(self) -> None:
        if self.cycle is None or self.cycle.response_complete:
            self._close_now()  # idle, half-sent head or lingering: nothing to wait for
            return
        super().shutdown()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._drain_left -= len(data)
            if self._drain_left < 0:
                self._close_now()
            elif self._parse_rest:
                try:
                    self.parser.feed_data(data)
                except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                    # The body's end (_BodyEnded): the client has sent all it meant to, and nothing
                    # unread is left. (Or what follows is not HTTP, or an upgrade: closed as well.)
                    self._close_now()
            return
        if self._drain_timer is not None:  # the rest of a body after an early answer
            self._drain_left -= len(data)
            if self._drain_left < 0:
                self._close_now()
                return
        if self._in_head:
            # Bytes of reads that begin inside a head: an upper bound of the head's size, except
            # that a head beginning in the middle of a read (pipelining) is counted from the next
            # read on, so the bound can be passed by one read (≤ 256 KiB).
            self._head_bytes += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            if self._refusal is not None:
                self._answer(self._refusal)
                return
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        if self._in_head and self._head_bytes:
            # A head still unfinished after this read (the common request arrives whole in one
            # read and never gets here): httptools would keep buffering it, and wait forever.
            if self._head_bytes > self.limits.max_header_bytes:
                self._answer(self.limits.headers_too_large(self._head_bytes))
            elif self.receiving and len(self.headers) > self.limits.max_header_count:
                self._answer(self.limits.too_many_headers())
            elif self._head_timer is None:
                self._head_timer = self.loop.call_later(self.limits.header_timeout, self._on_head_timeout)

    # -- parser callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.receiving = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        # The exact checks, once per request (cheap: a request has a handful of headers).
        if len(self.headers) > self.limits.max_header_count:
            self._refusal = self.limits.too_many_headers()
            raise _Refused
        if self._head_bytes > self.limits.max_header_bytes and (
            head_size(self.url, self.headers) > self.limits.max_header_bytes
        ):
            self._refusal = self.limits.headers_too_large()
            raise _Refused
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        previous = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not previous and cycle is not None:  # (not an upgrade: a request to answer)
            self._request = request = EdgeRequest(cycle)
            # (uvicorn types an extension's value as a plain dict; `cast` would be a call a request)
            self.scope.setdefault("extensions", {})[EDGE_REQUEST] = request.hooks()  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        if self._lingering:
            raise _BodyEnded
        self.receiving = False
        self._in_head = True
        self._head_bytes = 0
        if self._drain_timer is not None:
            # The discarded rest of a body is in: the connection is idle again, and uvicorn's
            # keep-alive timer (cancelled by every read) is armed once more.
            self._drain_timer.cancel()
            self._drain_timer = None
            if not self.transport.is_closing():
                self._unset_keepalive_if_required()
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler
                )
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if (
            self.receiving
            and not self._in_head
            and not self.transport.is_closing()
            and self._drain_timer is None
        ):
            # Answered before the body was read (401, 403, …): what is left of it is discarded by
            # the parser, but no longer than this.
            self._drain_left = self.limits.drain_bytes
            self._drain_timer = self.loop.call_later(self.limits.body_timeout, self._close_now)

    # -- the edge's own answers and closes -----------------------------------------------------

    def linger(self) -> None:
        """Close while the client is still sending: answer stays readable (see module docstring)."""
        assert self._edge is not None
        real = self._edge.real
        self._cancel_timers()
        self._lingering = True
        if self._in_head:
            # A refused head (431, 408, 503): what may follow is the body the client meant to send
            # with it. Enough is read for a common client to finish and read the answer; a flood
            # is cut off soon.
            self._drain_left = HEAD_REFUSAL_DRAIN_BYTES
            self._drain_timer = self.loop.call_later(self.limits.header_timeout, self._close_now)
        else:
            # An answer before the body was read (413, 408): the rest of the body, within the
            # header timeout (a body timeout here would let a trickling client stay twice as long).
            # The parser goes on reading it, so the connection is closed as soon as it has all
            # arrived: a close with bytes still unread would reset the connection, and a client
            # still writing its body would never read the answer. (Once the answer is complete,
            # uvicorn's on_body drops what it is given; a close in the middle of an answer, an
            # app's failure, is not parsed on: nothing of it would be kept.)
            self._parse_rest = self.cycle is not None and self.cycle.response_complete
            self._drain_left = self.limits.drain_bytes
            self._drain_timer = self.loop.call_later(self.limits.header_timeout, self._close_now)
        if real.can_write_eof():
            real.write_eof()  # FIN once the answer is out; reading goes on
        self.flow.resume_reading()

    def _answer(self, error: ProxyError) -> None:
        """Write the edge's own answer, then close lingeringly (the client may still be sending)."""
        assert self._edge is not None
        if self.cycle is not None and not self.cycle.response_complete:
            # A (pipelined) request went wrong while an answer to the previous one is still being
            # written: an answer now would land inside that one. The connection is cut instead.
            self._close_now()
            return
        self._edge.write(raw_answer(error, self.server_state.default_headers))
        # The app never saw this request: its access line is written here.
        scope = self.scope or {}
        url = getattr(self, "url", b"") or b"-"
        record = AccessRecord(
            method=str(scope.get("method") or "-"),
            path=url[:_LOGGED_URL_BYTES].decode("latin-1"),
            status=error.status,
            error=error.code,
        )
        log_access(record, time.perf_counter())
        self.receiving = True  # so the close lingers: whatever the client still sends is discarded
        self._edge.close()

    def _close_now(self) -> None:
        self._cancel_timers()
        if self._edge is not None:
            self._edge.real.close()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._drain_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._drain_timer = None

    def _on_head_timeout(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A response is still being written; the next (pipelined) head is judged after it.
            self._head_timer = self.loop.call_later(self.limits.header_timeout, self._on_head_timeout)
            return
        if not self.receiving:
            self._close_now()  # nothing of a request arrived: an idle connection, closed quietly
            return
        self._answer(self.limits.head_timed_out())
