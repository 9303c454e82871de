"""ASGI plumbing of the app layer: reading a request body within its limits, watching one
request for the client's disconnect, and relaying a streamed body to the client.

Plain asyncio rather than anyio task groups: this runs once per request, and on Python 3.11 a
task group plus cancel scopes cost more than the rest of a proxied JSON request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.errors import PayloadTooLarge
from proxy.limits import RequestTimeout

T = TypeVar("T")


# Answers given before the request body was read to its end: they close the connection, and the
# server edge (proxy.edge) reads and discards the rest first, so the client can read them.
BODY_LEFT_UNREAD = frozenset({408, 413})


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole request body: at most `limit` bytes (else 413), within `timeout` s (else 408)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"Request body of {int(declared)} bytes exceeds the limit of {limit} bytes "
            "(THINKPROXY_MAX_BODY_BYTES)."
        )
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise PayloadTooLarge(
                        f"Request body exceeds the limit of {limit} bytes (THINKPROXY_MAX_BODY_BYTES)."
                    )
                parts.append(part)
    except TimeoutError:
        raise RequestTimeout(
            f"Request body was not complete within {timeout:g} s (THINKPROXY_CLIENT_BODY_TIMEOUT): "
            f"{size} bytes arrived. Send the body without pauses."
        ) from None
    return b"".join(parts)


class DeadlineExceeded(Exception):
    """`ClientWatch.run`'s own time limit ran out (not a timeout raised by the work itself)."""


class UpstreamStalled(Exception):
    """Nothing came from the upstream for longer than the read timeout."""


class ClientWatch:
    """Watches one request: for the client's disconnect (one task reading `receive`), and for an
    upstream that goes silent for longer than `read_timeout`.

    `run(work)` awaits `work` in the calling task and cancels it the moment the client leaves
    (returning None) or the upstream stalls (raising UpstreamStalled). Code reading the upstream
    inside `run` sets `last_read = time.perf_counter()` after every read. The stall timer is lazy:
    it fires once per `read_timeout` and re-arms for the time left, instead of being rescheduled
    on every read (per-read rescheduling measured ≈5 µs per streamed chunk). A reader that must
    finish in its own way on a stall catches the CancelledError, checks `stalled` and calls
    `absorb_stall()`. `close()` must be called once the response is done.
    """

    __slots__ = ("_read_timeout", "_task", "_timer", "_victim", "gone", "last_read", "stalled")

    def __init__(self, receive: Receive, read_timeout: float | None = None) -> None:
        self.gone = False
        self.stalled = False
        self._victim: asyncio.Task[Any] | None = None
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._watch(receive))
        self.last_read = time.perf_counter()
        self._read_timeout = read_timeout
        self._timer = None if read_timeout is None else loop.call_later(read_timeout, self._check_stall)

    def _check_stall(self) -> None:
        assert self._read_timeout is not None
        idle = time.perf_counter() - self.last_read
        if idle < self._read_timeout:
            self._timer = asyncio.get_running_loop().call_later(self._read_timeout - idle, self._check_stall)
            return
        self._timer = None
        self.stalled = True
        if self._victim is not None:
            self._victim.cancel()

    def absorb_stall(self) -> None:
        """Called by a reader that caught the stall's cancellation and finishes on its own."""
        task = asyncio.current_task()
        assert task is not None
        task.uncancel()

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        if self._victim is not None:
            self._victim.cancel()

    async def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T | None:
        """`work`'s result; None if the client left first. Exceeding `timeout` raises DeadlineExceeded."""
        if self.gone:
            work.close()
            return None
        task = asyncio.current_task()
        assert task is not None
        self._victim = task
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await work
        except TimeoutError:
            if deadline.expired():
                raise DeadlineExceeded from None
            raise  # the work's own timeout (a read timeout, say): the caller translates it
        except asyncio.CancelledError:
            if (self.gone or self.stalled) and task.uncancel() == 0:
                if self.gone:
                    return None
                raise UpstreamStalled from None
            raise
        finally:
            self._victim = None

    def close(self) -> None:
        self._task.cancel()
        if self._timer is not None:
            self._timer.cancel()


# Writes a response body: calls `send(body_piece(piece))` for each piece, in order. A coroutine
# function rather than an async iterator: one less generator hop per chunk on the hot path.
BodyProducer = Callable[[Send], Awaitable[None]]


def body_piece(piece: bytes) -> dict[str, Any]:
    return {"type": "http.response.body", "body": piece, "more_body": True}


class RelayResponse(Response):
    """Streams a body to the client as `produce` writes it, one ASGI send per piece.

    While streaming, `watch` cancels the producer the moment the client disconnects (even while it
    waits on a stalled upstream); `on_close(completed)` then always runs, so the upstream response
    is always closed and the request logged.
    """

    def __init__(
        self,
        produce: BodyProducer,
        *,
        status_code: int,
        headers: Sequence[tuple[str, str]],
        watch: ClientWatch,
        on_close: Callable[[bool], Awaitable[None]],
    ) -> None:
        self.produce = produce
        self.status_code = status_code
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        self.watch = watch
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        completed = False
        try:
            completed = bool(await self.watch.run(self._pump(send)))
        except OSError:
            pass  # the client went away while we were writing
        except UpstreamStalled:
            pass  # a relayed body cut short: the response is left incomplete, as the upstream's was
        finally:
            self.watch.close()
            await self.on_close(completed)

    async def _pump(self, send: Send) -> bool:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await self.produce(send)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True
