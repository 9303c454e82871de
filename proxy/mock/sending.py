"""Sending a scripted answer: `faults.Step`s written as they come (bytes sent, pauses waited,
ending early if the client leaves), a requested disconnect raised and kept out of the server's
error log.

I/O of the simulated upstream (proxy.mock.app routes to it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.mock.faults import Abort, Sleep, Step


class MockDisconnect(Exception):
    """Raised inside a response to cut the connection mid-body (`X-Mock-Fault: disconnect`).

    An ASGI server closes the connection when the app raises after the response started, so the
    client sees a body that ends without its terminating chunk (and no `[DONE]`).
    """


class StepResponse(Response):
    """A response sent as `faults.Step`s: bytes are sent, pauses waited (ending early if the
    client leaves), an abort raises `MockDisconnect`."""

    def __init__(
        self,
        steps: Iterable[Step],
        *,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
        media_type: str | None = None,
    ) -> None:
        self.steps = steps
        self.status_code = status_code
        if media_type is not None:
            self.media_type = media_type
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            for step in self.steps:
                if isinstance(step, bytes):
                    await send({"type": "http.response.body", "body": step, "more_body": True})
                elif isinstance(step, Sleep):
                    if await client_left_within(receive, step.seconds):
                        return
                elif isinstance(step, Abort):
                    raise MockDisconnect("connection cut by X-Mock-Fault: disconnect")
        except OSError:
            return  # the client went away; nothing left to tell it
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def client_left_within(receive: Receive, seconds: float) -> bool:
    """Wait `seconds`, or less if the client disconnects first (then True): a stalled answer
    must not keep a server busy for 30 s after its client gave up."""
    with anyio.move_on_after(seconds):
        message = await receive()
        if message["type"] == "http.disconnect":
            return True
        await anyio.sleep(seconds)  # unexpected message: just sit out the rest of the pause
    return False


class _HideMockDisconnect(logging.Filter):
    """The server logs an app exception with a traceback; a requested disconnect is not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], MockDisconnect))


def install_log_filter() -> None:
    server_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _HideMockDisconnect) for f in server_log.filters):
        server_log.addFilter(_HideMockDisconnect())
