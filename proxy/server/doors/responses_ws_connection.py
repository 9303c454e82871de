"""A Responses WebSocket's state that its turns share (`Connection`: its responses, its running
turn, how its messages go out, whether its client is gone), and what the server edge tells a
served POST, told for a turn's HTTP scope (`TurnEdge`). (The socket's reader:
proxy.server.doors.responses_ws; one turn's writer: proxy.server.doors.responses_ws_turn.)"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from starlette.types import Send
from starlette.websockets import WebSocket, WebSocketState

from proxy.core.protocols.responses.socket import Create
from proxy.server.doors.responses_ws_state import SocketResponses
from proxy.server.edge import EdgeRequestHooks, OnDisconnect
from proxy.server.upstream.responses_socket import ResponsesSocketUpstream
from proxy.server.websocket_protocol import SEND_TEXTS

logger = logging.getLogger("thinkproxy.responses")


class Connection:
    """One socket's state: its responses, its running turn, whether the client is gone."""

    def __init__(
        self,
        websocket: WebSocket,
        responses: SocketResponses,
        send: Send | None = None,
        *,
        sends_texts: bool = False,
        write_texts: Callable[[Sequence[bytes]], bool] | None = None,
    ) -> None:
        self.websocket = websocket
        # The server's own send for text messages (the socket is accepted and stays so while
        # messages go out: Starlette's state checks have nothing to add per message).
        self.raw_send: Send = send if send is not None else websocket.send
        # `send` takes several messages in one write (the server's SEND_TEXTS extension, which
        # the scope advertises: a burst's events, one write instead of one each;
        # proxy.server.websocket_protocol).
        self.sends_texts = sends_texts and send is not None
        # Its synchronous form (the extension's `write`): a write's messages out with no coroutine
        # and no message, when the transport takes them at once (a paced stream's every event).
        self.write_texts = write_texts if self.sends_texts else None
        self.responses = responses
        self.gone = asyncio.Event()
        # Messages may go out: the socket is accepted, not closed by the proxy, its client not
        # gone (`leave`, `close`). A plain flag, read once per door write.
        self.sending = True
        self.turn: asyncio.Task[None] | None = None
        # The reader's deadline while a turn runs (responses_ws.ResponsesSocket._serve): the
        # turn's end moves it to now, so that the reader looks at the socket's state again.
        self.wake: asyncio.Timeout | None = None
        # The running turn's disconnect watch (its TurnEdge's `on_disconnect`), told by `leave`.
        self.on_gone: OnDisconnect | None = None
        # The running turn's answer is whole (its terminal event out): what is left is its
        # bookkeeping (the upstream closed, the access line), and a next turn waits for it.
        self.settling = False
        self.last_active = time.monotonic()
        # Its native turns' upstream WebSocket (opened at the first that needs it), when set.
        self.upstream: ResponsesSocketUpstream | None = None
        # The last turn's `response.create` and the terminal message it ended with (what a
        # `response.append` continues; read only then; the door's own events are UTF-8 bytes).
        self.last_create: Create | None = None
        self.last_terminal: str | bytes | None = None

    def turn_ended(self, turn: asyncio.Task[None]) -> None:
        """A turn's task is done: the reader, if it waits under a turn's deadline, wakes."""
        wake = self.wake
        if wake is not None and not wake.expired():
            wake.reschedule(asyncio.get_running_loop().time())

    def leave(self) -> None:
        """The client is gone (or the socket ends): its running turn ends, nothing more goes out."""
        self.sending = False
        self.gone.set()
        told, self.on_gone = self.on_gone, None
        if told is not None:  # (the running turn's watch: told on the loop's next turn, as a
            # watch task reading `receive` would have been, not inside a write that failed)
            asyncio.get_running_loop().call_soon(told)

    async def close(self, code: int, reason: str) -> None:
        """The proxy closes the socket (a running turn sends nothing more)."""
        self.sending = False
        websocket = self.websocket
        if websocket.application_state == WebSocketState.CONNECTED:
            try:
                await websocket.close(code, reason)
            except Exception:  # (the client left first)
                logger.debug("Closing a Responses WebSocket failed: the client had left.")

    @property
    def busy(self) -> bool:
        return self.turn is not None and not self.turn.done()

    async def send(self, text: str) -> None:
        """A message to the client; a client already gone is no error (its turn is cancelled by
        the disconnect watch)."""
        await self.send_all((text,))

    async def send_all(self, texts: Sequence[str] | Sequence[bytes]) -> None:
        """Messages to the client, in order, each a text (or its UTF-8: the door's own events,
        valid UTF-8 as orjson writes them, sent without a decode where the server takes them:
        SEND_TEXTS); as `send`."""
        if not self.sending or not texts:
            return
        send = self.raw_send
        try:
            if self.sends_texts:  # (all of them in one write)
                if isinstance(texts[0], str):
                    await send({"type": SEND_TEXTS, "texts": texts})
                    return
                write = self.write_texts
                if write is None or not write(texts):  # type: ignore[arg-type]  # (bytes: str is above)
                    await send({"type": SEND_TEXTS, "encoded": texts})
                return
            for text in texts:
                if not isinstance(text, str):
                    text = text.decode("utf-8", "replace")
                await send({"type": "websocket.send", "text": text})
        except Exception:  # (closed under us: the reader sees the disconnect)
            self.leave()


class TurnEdge:
    """What the server edge tells an HTTP request (proxy.server.edge, its `EDGE_REQUEST` hooks),
    for one turn's HTTP scope: its body, whole before the turn starts (`take_body`), and the
    socket's client gone (`Connection.leave`) as the disconnect (`on_disconnect`). So a turn, as a
    served POST, reads its body with no timer and watches for its client with no task of its own
    reading `receive` (bench/README.md, "The socket's turn: …")."""

    __slots__ = ("_body", "_connection", "_told")

    def __init__(self, connection: Connection, body: bytes) -> None:
        self._connection = connection
        self._body: bytes | None = body
        self._told: OnDisconnect | None = None

    def hooks(self) -> EdgeRequestHooks:
        return {"take_body": self.take_body, "on_disconnect": self.on_disconnect}

    def take_body(self) -> bytes | None:
        body, self._body = self._body, None
        return body

    def on_disconnect(self, callback: OnDisconnect | None) -> None:
        connection = self._connection
        if callback is None:  # (only its own: a next turn's watch is never dropped by this one's)
            if connection.on_gone is self._told:
                connection.on_gone = None
            self._told = None
            return
        self._told = callback
        if connection.gone.is_set():  # (gone already: told at once, as the edge tells it)
            callback()
        else:
            connection.on_gone = callback
