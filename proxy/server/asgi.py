"""ASGI plumbing of the app and the relay: reading a request body within its limits, watching
one request for the client's disconnect and for the upstream's and the client's time limits, and
writing a streamed body to the client.

Plain asyncio rather than anyio task groups: this runs once per request, and on Python 3.11 a
task group plus cancel scopes cost more than the rest of a proxied JSON request. Where the server
is the proxy's own edge (proxy.server.edge: `thinkproxy serve`, the test servers), it tells a
request's body already complete and the client's disconnect itself (its `EDGE_REQUEST`
extension): the body is then taken with no timer and no `receive`, and the watch runs no task.
Under any other server (the in-process test clients, an app embedding the proxy) both go through
`receive`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.core.errors import PayloadTooLarge
from proxy.server.edge import EDGE_REQUEST, EdgeRequestHooks, OnDisconnect
from proxy.server.header_view import headers_of
from proxy.server.limits import RequestTimeout

T = TypeVar("T")

logger = logging.getLogger("thinkproxy.relay")

# Answers given before the request body was read to its end: they close the connection, and the
# server edge (proxy.server.edge) reads and discards the rest first, so the client can read them.
BODY_LEFT_UNREAD = frozenset({408, 413})


def edge_hooks(scope: Scope) -> EdgeRequestHooks | None:
    """The server edge's hooks for this request (proxy.server.edge), or None under another server."""
    extensions = scope.get("extensions")
    return None if extensions is None else extensions.get(EDGE_REQUEST)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"Request body exceeds the limit of {limit} bytes (THINKPROXY_MAX_BODY_BYTES).")


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole request body: at most `limit` bytes (else 413), within `timeout` s (else 408); a
    client gone before its end is ClientDisconnect. Read from `receive` as Starlette's
    `Request.stream()` reads it, without its async generator between each piece and the reader,
    and the length from the request's shared header view (no second `Headers` of the request):
    the body's one reader (bench/README.md, "Layers off the chat path, second cut"). A body the
    server edge already has whole is taken from it, with no timer and no `receive` (its
    `take_body`: "The watch and the body timer, from the server")."""
    declared = headers_of(request.scope).get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"Request body of {int(declared)} bytes exceeds the limit of {limit} bytes "
            "(THINKPROXY_MAX_BODY_BYTES)."
        )
    hooks = edge_hooks(request.scope)
    if hooks is not None:
        body = hooks["take_body"]()
        if body is not None:
            if len(body) > limit:
                raise _too_large(limit)
            return body
    receive = request.receive
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "http.request":
                    part = message.get("body", b"")
                    if part:
                        size += len(part)
                        if size > limit:
                            raise _too_large(limit)
                        parts.append(part)
                    if not message.get("more_body", False):
                        break
                elif kind == "http.disconnect":
                    raise ClientDisconnect()
    except TimeoutError:
        raise RequestTimeout(
            f"Request body was not complete within {timeout:g} s (THINKPROXY_CLIENT_BODY_TIMEOUT): "
            f"{size} bytes arrived. Send the body without pauses."
        ) from None
    return b"".join(parts)


class WatchFired(Exception):
    """One of the watch's limits ran out; `code` is what the access log records."""

    code = "upstream_timeout"


class DeadlineExceeded(WatchFired):
    """The whole exchange exceeded the total timeout."""


class UpstreamStalled(WatchFired):
    """Nothing came from the upstream for longer than the read timeout."""


class ClientTooSlow(WatchFired):
    """The client read nothing of what the proxy was writing for longer than the write timeout."""

    code = "client_write_timeout"


class RelayAborted(Exception):
    """The body cannot be completed (the upstream's was cut short): the client must see an
    incomplete response, so the connection is dropped without ending the body."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class ClientWatch:
    """Watches one request: for the client's disconnect (told by the server edge's `on_disconnect`
    where the server offers it, else one task reading `receive`), for an upstream
    silent longer than `read_timeout`, for the whole exchange passing `deadline` (a
    `time.perf_counter()` value), and for a client that reads nothing for `write_timeout`.

    `run(work)` awaits `work` in the calling task and cancels it when the client leaves (returning
    None) or a limit runs out (raising that WatchFired). Code reading the upstream inside `run`
    sets `last_read = time.perf_counter()` after every read; code writing to the client sets
    `writing` around the write (time blocked on a slow client is not upstream silence) and
    `last_read` again after it. The timer is lazy: it fires once per limit and re-arms for the
    time left, instead of being rescheduled on every read (per-read rescheduling measured ≈5 µs per
    streamed chunk). A reader that must finish in its own way catches the CancelledError and calls
    `take_cancel()`, which tells the watch's own cancellation from an outside one. `close()` must be
    called once the response is done.
    """

    __slots__ = (
        "_cancels",
        "_deadline",
        "_read_timeout",
        "_task",
        "_timer",
        "_unwatch",
        "_victim",
        "_write_timeout",
        "fired",
        "gone",
        "last_read",
        "writing",
    )

    def __init__(
        self,
        receive: Receive,
        *,
        read_timeout: float | None,
        deadline: float | None = None,
        write_timeout: float | None = None,
        on_disconnect: Callable[[OnDisconnect | None], None] | None = None,
    ) -> None:
        """`on_disconnect`: the server edge's hook (`edge_hooks(scope)["on_disconnect"]`), which
        tells the client's disconnect without a task reading `receive`."""
        self.gone = False
        self.writing = False
        self.fired: type[WatchFired] | None = None
        self._victim: asyncio.Task[Any] | None = None
        self._cancels = 0  # cancellations of the victim requested by the watch, not yet absorbed
        self._task: asyncio.Task[None] | None = None
        self._unwatch = on_disconnect
        if on_disconnect is None:
            self._task = asyncio.get_running_loop().create_task(self._watch(receive))
        else:
            on_disconnect(self._client_gone)
        self.last_read = time.perf_counter()
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._deadline = deadline
        self._timer: asyncio.TimerHandle | None = None
        self._arm(self.last_read)

    def _arm(self, now: float) -> None:
        delays = []
        if self._deadline is not None:
            delays.append(self._deadline - now)
        idle = now - self.last_read
        if self.writing:
            if self._write_timeout is not None:
                delays.append(self._write_timeout - idle)
            elif self._read_timeout is not None:
                delays.append(self._read_timeout)  # no write limit: look again once writing is over
        else:
            if self._read_timeout is not None:
                delays.append(self._read_timeout - idle)
            if self._write_timeout is not None:
                # A write may start at any moment without telling the timer (that would cost a
                # reschedule per chunk): look every half write timeout, so a blocked write is
                # caught within 1.5 write timeouts.
                delays.append(self._write_timeout / 2)
        if delays:
            self._timer = asyncio.get_running_loop().call_later(max(min(delays), 0.0), self._check)
        else:
            self._timer = None

    def _check(self) -> None:
        now = time.perf_counter()
        idle = now - self.last_read
        fired: type[WatchFired] | None = None
        if self._deadline is not None and now >= self._deadline:
            fired = DeadlineExceeded
        elif self.writing:
            if self._write_timeout is not None and idle >= self._write_timeout:
                fired = ClientTooSlow
        elif self._read_timeout is not None and idle >= self._read_timeout:
            fired = UpstreamStalled
        if fired is not None:
            if self._victim is None:  # between two runs (microseconds): tell the next one
                self._timer = asyncio.get_running_loop().call_later(0.01, self._check)
                return
            if fired is DeadlineExceeded:
                self._deadline = None  # told once; what follows (an error event) may still be written
            self.fired = fired
            self._cancel_victim()
            self.last_read = now  # the next limit counts from here
        self._arm(now)

    def _cancel_victim(self) -> None:
        if self._victim is not None and self._victim.cancel():
            self._cancels += 1

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._client_gone()

    def _client_gone(self) -> None:
        self.gone = True
        self._cancel_victim()

    def touch(self) -> None:
        """The exchange is alive though the upstream is quiet (a held call waiting for a reviewer)."""
        self.last_read = time.perf_counter()

    def take_cancel(self) -> type[WatchFired] | None:
        """In a reader that caught CancelledError: if the cancellation was the watch's own and the
        only one, absorb it and return the limit that ran out; else None (re-raise it)."""
        task = asyncio.current_task()
        assert task is not None
        if self.gone or self.fired is None or not self._absorb(task):
            return None
        self.last_read = time.perf_counter()
        return self.fired

    def _absorb(self, task: asyncio.Task[Any]) -> bool:
        # An outside cancellation (server shutdown, say) shows as more cancellations than the
        # watch requested: it must propagate, never be swallowed as one of ours.
        # (Two cancel() calls before the task runs again arrive as one CancelledError: all of the
        # watch's own are absorbed together.)
        if self._cancels == 0 or task.cancelling() > self._cancels:
            return False
        while self._cancels:
            task.uncancel()
            self._cancels -= 1
        return True

    async def run(self, work: Coroutine[Any, Any, T]) -> T | None:
        """`work`'s result; None if the client left first; raises the WatchFired that ran out."""
        if self.gone:
            work.close()
            return None
        task = asyncio.current_task()
        assert task is not None
        self._victim = task
        try:
            return await work
        except asyncio.CancelledError:
            if self._absorb(task):
                if self.gone:
                    return None
                assert self.fired is not None
                raise self.fired from None
            raise
        finally:
            self._victim = None

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # The cancelled task keeps its CancelledError, whose traceback holds the frame that
            # holds this watch: without letting go of the task here, every request would leave a
            # reference cycle (task, error, frames, watch, the server's request objects) for the
            # cyclic collector, whose full passes then stalled every stream in flight.
            self._task = None
        if self._unwatch is not None:
            self._unwatch(None)  # (the edge lets go of this watch: no cycle through its callback)
            self._unwatch = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# Writes a response body: calls `send(body_piece(piece))` for each piece, in order. A coroutine
# function rather than an async iterator: one less generator hop per chunk on the hot path.
BodyProducer = Callable[[Send], Awaitable[None]]


def body_piece(piece: bytes) -> dict[str, Any]:
    return {"type": "http.response.body", "body": piece, "more_body": True}


class RelayResponse(Response):
    """Writes a body to the client as `produce` makes it, one ASGI send per piece.

    While it runs, `watch` cancels the producer the moment the client disconnects or a limit runs
    out. The body is ended cleanly only when the producer returns; otherwise (RelayAborted, a
    limit, any unexpected error) the response is left incomplete and the server drops the
    connection, so a cut body never reads as a complete shorter one. `on_close(error)` always
    runs (error None: completed), so the upstream response is always closed and the request logged.
    """

    def __init__(
        self,
        produce: BodyProducer,
        *,
        status_code: int,
        headers: Sequence[tuple[str, str]],
        watch: ClientWatch,
        on_close: Callable[[str | None], Awaitable[None]],
    ) -> None:
        self.produce = produce
        self.status_code = status_code
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        self.watch = watch
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        error: str | None = "internal_error"
        try:
            completed = await self.watch.run(self._pump(send))
            error = None if completed else "client_disconnected"
        except (WatchFired, RelayAborted) as exc:
            error = exc.code
        except OSError:
            error = "client_disconnected"  # gone while we were writing
        except Exception:
            logger.exception("Unexpected error while relaying a response body; the connection is dropped.")
        except asyncio.CancelledError:
            error = "cancelled"  # from outside (the server shutting down): logged, then propagated
            raise
        finally:
            self.watch.close()
            await self.on_close(error)

    async def _pump(self, send: Send) -> bool:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await self.produce(send)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True
