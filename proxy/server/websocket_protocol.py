"""uvicorn's WebSocket protocol with one ASGI extension: several text messages in one write.

The Responses door's WebSocket mode sends each event as a message of its own (the protocol has no
other framing), so a burst of events the upstream sent in one read (a run of 199 deltas) became
199 `websocket.send` messages, each its own ASGI call, frame and `write` system call: served and
counted, a socket turn made ~213 writes where the HTTP door's same answer made ~7, and cost ~57%
more CPU per chunk (bench/README.md, "The Responses WebSocket mode, counted"). ASGI has no message
for several frames, and the transport is the server's, so the server has to offer it:

    scope["extensions"]["thinkproxy.websocket.send_texts"] == {}
    await send({"type": "thinkproxy.websocket.send_texts", "texts": ["{...}", "{...}"]})
    await send({"type": "thinkproxy.websocket.send_texts", "encoded": [b"{...}", b"{...}"]})

sends each text as one WebSocket text message, in order, in one write to the transport — on the
wire exactly what as many `websocket.send` messages would have sent. `encoded` gives the texts as
their UTF-8 (the door's own events, as orjson writes them: sent without a decode and an encode
again; the sender vouches for the encoding, as a text frame requires). Its rules are
`websocket.send`'s: only after the accept and before the close; a client gone raises uvicorn's
`ClientDisconnected`, as `websocket.send` does. A server that does not advertise the extension (an
in-process test client, another ASGI server) gets the plain messages one by one
(`SEND_TEXTS` callers check the scope: proxy.server.doors.responses_ws_connection.Connection).

The extension's dict also holds a synchronous form of the same send, for a writer that sends once
per event (a paced stream: ~200 a turn, each a coroutine and a message dict through ASGI's `send`
otherwise, most of what such a turn cost over the HTTP door's same answer; bench/README.md, "The
socket's turn: …"):

    write = scope["extensions"]["thinkproxy.websocket.send_texts"]["write"]
    if not write([b"{...}", b"{...}"]):          # the texts' UTF-8, as `encoded`
        await send({"type": "thinkproxy.websocket.send_texts", "encoded": [...]})

`write` sends the texts exactly as the message would, when it can at once: the socket open, its
client there, the transport's buffer not full, no extension (compression) negotiated, nothing
else of the library's queued. Otherwise it writes nothing and says False, and the message (with
`send`'s waiting for room and its errors) is the way.

`thinkproxy serve` and the test servers (proxy.server.serving.BackgroundServer) run it as
uvicorn's `ws` protocol; it subclasses uvicorn's sans-I/O websockets protocol (uvicorn's default
since 0.35, when the `websockets` package is installed, as `uvicorn[standard]` installs it),
written against uvicorn 0.55. Where that class is missing, `WS_PROTOCOL` is uvicorn's "auto" and
nothing is advertised."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

# The extension's name in the scope and its message's type.
SEND_TEXTS = "thinkproxy.websocket.send_texts"

try:
    from uvicorn.protocols.utils import ClientDisconnected
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
    from websockets.exceptions import InvalidState
    from websockets.protocol import OPEN
except ImportError:  # (an older uvicorn, or no `websockets`: uvicorn picks its own, no extension)
    WS_PROTOCOL = "auto"
else:
    # A server's text frame's head (final, text; unmasked) by the payload's length (RFC 6455 5.2):
    # made once for the lengths most events have (a table read is no call; `pack` is one).
    _HEAD_16 = struct.Struct("!BBH")
    _HEAD_64 = struct.Struct("!BBQ")
    _TABLED = 2048

    def _head(size: int) -> bytes:
        if size < 126:
            return bytes((0x81, size))
        return _HEAD_16.pack(0x81, 126, size) if size < 65536 else _HEAD_64.pack(0x81, 127, size)

    _HEADS = [_head(size) for size in range(_TABLED)]

    class _Heads(dict[int, bytes]):
        """The heads of texts by their size, made once for the sizes under the table's end; another
        is made when asked (`__missing__`, not kept). A dict, so that `map(heads.__getitem__,
        sizes)` frames a batch with no step in Python whatever its sizes (a turn's last write holds
        its longest texts, past the table, among its short deltas: a step per text for them all
        was most of what framing that write cost)."""

        __slots__ = ()

        def __missing__(self, size: int) -> bytes:
            return _head(size)

    _HEADS_BY_SIZE = _Heads(enumerate(_HEADS))

    def _framed(encoded: Sequence[bytes]) -> bytes:
        """Texts' UTF-8 as unmasked text frames, one each, in one piece. Framed here: the
        library's framing (a Frame, its checks, a BytesIO, ~10 calls a message) was most of what a
        socket turn cost over the HTTP door's same answer (bench/README.md, "The Responses
        WebSocket mode, counted"); tests hold these frames to the library's."""
        if not encoded:
            return b""
        if len(encoded) == 1:  # (a paced stream's every write)
            data = encoded[0]
            size = len(data)
            return (_HEADS[size] if size < _TABLED else _head(size)) + data
        parts: list[bytes] = [b""] * (2 * len(encoded))
        parts[1::2] = encoded
        parts[0::2] = map(_HEADS_BY_SIZE.__getitem__, map(len, encoded))
        return b"".join(parts)

    class BatchingWebSocketProtocol(WebSocketsSansIOProtocol):
        """uvicorn's sans-I/O WebSocket protocol, plus `SEND_TEXTS`; a text message (one or a
        batch's) framed here, where no extension is in use."""

        # The transport's buffer is past its high-water mark (`writable` cleared): a plain flag
        # beside the library's Event, read by the synchronous write once per write with no call.
        paused = False

        def pause_writing(self) -> None:
            super().pause_writing()
            self.paused = True

        def resume_writing(self) -> None:
            self.paused = False
            super().resume_writing()

        def handle_connect(self, event: Any) -> None:
            super().handle_connect(event)
            if not self.close_sent:  # (the upgrade is accepted: the scope is built, its app not run yet)
                self.scope["extensions"][SEND_TEXTS] = {"write": self.write_texts}

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            # (the scope holds the extension, the extension this protocol's bound `write`: let go
            # of it, or every closed socket is a reference cycle left to the collector)
            extensions = getattr(self, "scope", {}).get("extensions") or {}
            extensions.get(SEND_TEXTS, {}).pop("write", None)

        def write_texts(self, encoded: Sequence[bytes]) -> bool:
            """`encoded` (texts' UTF-8) sent as a `SEND_TEXTS` message would send them, when that
            needs no wait and no library framing (True); otherwise nothing written (False)."""
            if (
                self.disconnected
                or self.paused
                or not self.handshake_complete
                or self.close_sent
                or self.initial_response is not None
            ):
                return False
            conn = self.conn
            if conn.extensions or conn.writes or conn.state is not OPEN or conn.expect_continuation_frame:
                return False
            self.transport.write(_framed(encoded))
            return True

        async def send(self, message: Any) -> None:
            kind = message["type"]
            batch = kind == SEND_TEXTS
            if not batch and (
                kind != "websocket.send" or message.get("bytes") is not None or message.get("text") is None
            ):
                await super().send(message)
                return
            # (inline, one coroutine a message, a paced stream sends each event alone; its checks
            # in `websocket.send`'s order: the transport's room, the client gone, the socket's state)
            if not self.writable.is_set():  # (the transport's buffer is full: wait, as `websocket.send` does)
                await self.writable.wait()
            if self.disconnected:
                raise ClientDisconnected()
            if not (self.handshake_complete and not self.close_sent and self.initial_response is None):
                if batch:
                    raise RuntimeError(
                        f"'{SEND_TEXTS}' is for an accepted WebSocket that is not closed, "
                        "as 'websocket.send' is."
                    )
                await super().send(message)  # (uvicorn's own answer to a send out of turn)
                return
            if batch:
                texts = message.get("texts")
                encoded = message["encoded"] if texts is None else [text.encode() for text in texts]
            else:
                encoded = (message["text"].encode(),)
            conn = self.conn
            if conn.extensions or conn.state is not OPEN or conn.expect_continuation_frame:
                # (a compression extension negotiated, or the socket closing: the library frames
                # each message, or refuses it as it should)
                try:
                    for data in encoded:
                        conn.send_text(data)
                except InvalidState:
                    raise ClientDisconnected() from None
                self.transport.write(b"".join(conn.data_to_send()))
                return
            queued = conn.data_to_send()  # (whatever the library had queued goes first: none, as a rule)
            self.transport.write(b"".join(queued) + _framed(encoded) if queued else _framed(encoded))

    WS_PROTOCOL = "proxy.server.websocket_protocol:BatchingWebSocketProtocol"
