"""One Responses WebSocket turn's writer (proxy.server.doors.responses_ws): the ASGI `send` that
turns the door's answer into the socket's messages (`TurnWriter`: one message per event; a turn
always ends with a terminal event, an `error` event when its stream was cut short; an answer
that is not a stream is one `error` event). (The HTTP scope a `response.create` runs under:
proxy.server.doors.responses_turn; the socket's state a turn shares:
proxy.server.doors.responses_ws_connection.)

A bridged turn's door writes its events in the socket's own form (SocketTurn.answer: each
event's JSON and a newline, proxy.core.protocols.responses.output.message_frames), which the writer
sends as they are, a write's messages cut with one decode and a `find` per newline (`lines_of`); a
native turn relayed over the upstream's WebSocket writes each upstream message alone, framed as SSE
for the relay's usage reader, and the writer sends the frame's JSON as it is (SocketTurn.relayed);
any other SSE (a native upstream over HTTP) is split into events by `EventSplitter`. (Encoding the
bridged events as SSE only to split them again cost a socket turn more than the HTTP door's whole
write per event: bench/README.md, "The Responses WebSocket mode, counted".)"""

from __future__ import annotations

from starlette.types import Message

from proxy.core import jsonio
from proxy.core.errors import BadUpstreamResponse
from proxy.core.protocols.responses.socket import error_event, error_from_answer
from proxy.core.protocols.responses.socket_events import (
    TERMINAL_TYPES,
    EventSplitter,
    MessagesTooLarge,
    leading_type,
)
from proxy.server.doors.responses_turn import Answer, SocketTurn
from proxy.server.doors.responses_ws_connection import Connection
from proxy.server.upstream.responses_socket import SocketAnswer

# Past this many events in one write (a burst's: short ones), the rest is split at once.
_FOUND_LINES = 8


def lines_of(data: bytes, end: int) -> list[bytes]:
    """The lines of `data` that a newline ends, without it (`end`: where the first newline is,
    -1 for none). The first _FOUND_LINES found with `find` (a `memchr`, where `split` walks every
    byte: the events that end a turn each carry the whole output, ~48 KB a turn in all, and
    splitting them cost ~300k instructions a turn; bench/README.md, "The Responses WebSocket
    mode, counted"), the rest, when a write holds more (a burst of short events), with one
    `split`, cheaper than a `find` each for short events. (Bytes, not text: decoding a burst's
    write and encoding each message again cost more than framing them; the same README.)"""
    lines: list[bytes] = []
    start = 0
    while end >= 0:
        lines.append(data[start:end])
        start = end + 1
        if len(lines) == _FOUND_LINES:  # (short events so far: all of them split at once)
            lines = data.split(b"\n")
            lines.pop()  # (what follows the last newline)
            break
        end = data.find(b"\n", start)
    return lines


# A non-stream answer (an error body, the proxy's or the upstream's) is kept up to this many bytes:
# its `error` event quotes at most 2000 characters of a body that is not an OpenAI error object.
_ANSWER_KEPT_BYTES = 64 * 1024


class TurnWriter:
    """The ASGI `send` of one turn (`send`): the door's answer → one message per event; an answer that
    is not a stream (an error: the proxy's or the upstream's) → one `error` event. A stream that
    ends without a terminal event (the upstream cut it, a read timeout, an event past
    THINKPROXY_MAX_RESPONSE_BYTES) ends with an `error` event: the client never waits for one."""

    __slots__ = (
        "answer",
        "body",
        "connection",
        "direct",
        "kept",
        "limit",
        "pending",
        "prefix",
        "relayed",
        "splitter",
        "status",
        "stream_id",
        "streaming",
        "too_large",
        "turn",
    )

    def __init__(
        self,
        connection: Connection,
        stream_id: str | None,
        max_event_bytes: int,
        turn: SocketTurn | None = None,
    ) -> None:
        self.connection = connection
        self.stream_id = stream_id
        self.turn = turn
        # (one event holds at most a whole response: `response.completed` carries its output)
        self.splitter = EventSplitter(stream_id, max_event_bytes)
        self.limit = self.splitter.limit
        # The door's transcoder when it writes the socket's form (SocketTurn.answer), read at the
        # answer's start: its `final` says the terminal event is written.
        self.answer: Answer | None = None
        self.pending = b""  # (the socket's form: a write's tail after its last newline)
        # A native turn's answer read from the upstream socket (SocketTurn.relayed), read at the
        # answer's start: its messages come one a write (which one ends the turn, each frame says).
        self.relayed: SocketAnswer | None = None
        # `send`'s hot path applies: the door writes the socket's form (or a relayed answer's
        # messages come one a write), nothing is pending, no event was past the limit, the
        # terminal event is not out yet.
        self.direct = False
        # (the stream id spliced in after each message's opening brace: no message parsed again)
        self.prefix = b"" if stream_id is None else b'{"stream_id":' + jsonio.dumps(stream_id) + b","
        self.status = 0
        self.streaming = False
        self.body: list[bytes] = []
        self.kept = 0
        self.too_large: MessagesTooLarge | None = None

    async def send(self, message: Message) -> None:
        """The turn's ASGI `send` (a bound method: called as a function, where an instance's
        `__call__` goes through the type's call slot and an argument tuple each time)."""
        # The hot path, once per door write (a paced stream: once per event): a whole write, none
        # pending, no terminal yet, more to come: of the door's events in the socket's form (any
        # number), or one native upstream message as SocketAnswer frames it (`data: {json}`, a
        # blank line). Inline, with no coroutine of its own (each layer of `await` cost ~3k
        # instructions a write), and as few steps as the checks allow (bench/README.md, "The
        # Responses WebSocket mode, counted").
        data = message.get("body")
        if self.direct and data and message.get("more_body") and len(data) <= self.limit:
            answer = self.answer
            if answer is not None:
                if data[-1] == 10:  # (the door writes whole events: each ends with a newline)
                    end = data.find(b"\n")  # (one event: the newline that ends it, the only one)
                    if end == len(data) - 1 and not self.prefix and answer.final is None:
                        connection = self.connection  # (one event, not the last: most writes)
                        event = (data[:-1],)
                        write = connection.write_texts
                        if write is not None and connection.sending:
                            try:  # (at once where the transport takes it: no coroutine, no message)
                                if write(event):
                                    return
                            except Exception:  # (closed under us: the reader sees the disconnect)
                                connection.leave()
                                return
                        await connection.send_all(event)  # (the message, or a server without the write)
                        return
                    events = [data[:-1]] if end == len(data) - 1 else lines_of(data, end)
                    if self.prefix:
                        prefix = self.prefix
                        events = [prefix + event[1:] for event in events]
                    await self._send_all(events, answer.final is not None)
                    return
            elif data.startswith(b"data: {") and data.find(b"\n") == len(data) - 2 and data[-1] == 10:
                # (one frame, one message: its data line's JSON; whether it ends the turn, read from
                # the frame itself: `framed` writes a bare `data: {` only for a message that opens
                # with its type or has none, so this is the splitter's own reading)
                payload = data[6:-2]
                text = payload.decode("utf-8", "replace")
                if leading_type(payload) in TERMINAL_TYPES:
                    await self._send_all([text], True)
                    return
                connection = self.connection
                if connection.sending:
                    try:
                        await connection.raw_send({"type": "websocket.send", "text": text})
                    except Exception:  # (closed under us: the reader sees the disconnect)
                        connection.leave()
                return
        await self._write(message, data)

    async def _send_all(self, texts: list[str] | list[bytes], terminal: bool) -> None:
        """A hot-path write's messages to the client (`terminal`: its last is the terminal event)."""
        if terminal:  # (the terminal event, the last: all out)
            self.splitter.terminal, self.direct = True, False
        connection = self.connection
        await connection.send_all(texts)
        if terminal:  # (a next create may follow now: the rest is bookkeeping)
            connection.settling = True
            if texts:
                connection.last_terminal = texts[-1]

    __call__ = send

    async def _write(self, message: Message, data: bytes | None) -> None:
        """Every other message: the answer's start, its last write, a write cut mid-event or past
        the limit, anything after the terminal event, an answer that is not a stream or is SSE."""
        if data is None:
            if message["type"] == "http.response.start":
                self._start(message)
                return
            data = b""  # (a body message may leave its body out: an empty one)
        if not message.get("more_body", False):
            self.connection.settling = True
        if not data:
            return
        if not self.streaming:
            if self.kept < _ANSWER_KEPT_BYTES:
                kept = data[: _ANSWER_KEPT_BYTES - self.kept]
                self.body.append(kept)
                self.kept += len(kept)
            return
        splitter = self.splitter
        if splitter.terminal or self.too_large is not None:
            return  # (the answer is whole, or already failed: the rest is not the client's)
        answer = self.answer
        texts: list[str] | list[bytes]
        if answer is not None:  # the door's events in the socket's form
            texts = self._messages(data)
            if answer.final is not None and not self.pending and self.too_large is None:
                splitter.terminal = True  # (the door wrote its terminal event, the last: all out)
            self.direct = not self.pending and self.too_large is None and not splitter.terminal
        else:
            try:
                texts = splitter.feed(data)
            except MessagesTooLarge as exc:
                self.too_large = exc
                texts = exc.messages
            self.direct = (
                self.relayed is not None
                and not self.prefix
                and splitter.idle
                and self.too_large is None
                and not splitter.terminal
            )
        connection = self.connection
        if texts:
            await connection.send_all(texts)
        if splitter.terminal:  # (a next create may follow now: the rest is bookkeeping)
            connection.settling = True
            if texts:
                connection.last_terminal = texts[-1]

    def _start(self, message: Message) -> None:
        self.status = message["status"]
        content_type = b""
        for name, value in message.get("headers", ()):
            if name.lower() == b"content-type":
                content_type = value
        self.streaming = 200 <= self.status < 300 and content_type.startswith(b"text/event-stream")
        turn = self.turn if self.streaming else None
        self.answer = turn.answer if turn is not None else None
        relayed = turn.relayed if turn is not None and self.answer is None else None
        # (a native turn's answer from the upstream socket; None when it went over HTTP: SSE)
        self.relayed = relayed.answer if relayed is not None else None
        # `send`'s hot path: the door's socket form; a relayed answer's messages, one a write
        # (with a stream id to splice in, the splitter's: it handles an empty object, a non-object)
        self.direct = self.answer is not None or (self.relayed is not None and not self.prefix)

    def _messages(self, data: bytes) -> list[bytes]:
        """The messages of one write in the socket's form, in general: the events it ends, as
        they are (the stream id spliced in); a tail cut mid-event waits for its rest. An event
        past the limit: the messages before it, `too_large` set."""
        if self.pending:
            data, self.pending = self.pending + data, b""
        if not data.endswith(b"\n"):  # (the door writes whole events; a cut one waits for its rest)
            cut = data.rfind(b"\n") + 1
            data, self.pending = data[:cut], data[cut:]
        limit = self.limit
        if len(data) > limit or len(self.pending) > limit:  # (rare: only then is each measured)
            data = self._within_limit(data)
        events = lines_of(data, data.find(b"\n"))
        prefix = self.prefix
        return [prefix + event[1:] for event in events] if prefix else events

    def _within_limit(self, data: bytes) -> bytes:
        """The events of `data` before the first past the limit (then `too_large` is set and
        nothing more goes out)."""
        lines = data.split(b"\n")[:-1]
        fitting = 0
        for line in lines:
            if len(line) + 1 > self.limit:
                break
            fitting += 1
        if fitting < len(lines) or len(self.pending) > self.limit:
            self.too_large, self.pending = MessagesTooLarge(self.limit, []), b""
        return b"".join([line + b"\n" for line in lines[:fitting]])

    async def end(self) -> None:
        if self.answer is not None:
            if not self.splitter.terminal:  # (a tail cut mid-event is dropped, as the splitter's)
                await self.connection.send(error_event(self._cut_short(), self.stream_id))
        elif self.streaming:
            tail = self.splitter.flush()
            await self.connection.send_all(tail)
            if tail:
                self.connection.last_terminal = tail[-1]
            if not self.splitter.terminal:
                await self.connection.send(error_event(self._cut_short(), self.stream_id))
        elif self.status:
            await self.connection.send(self._not_streamed())

    def _cut_short(self) -> BadUpstreamResponse:
        if self.too_large is not None:
            return BadUpstreamResponse(
                f"One event of this response exceeded {self.too_large.limit} bytes "
                "(THINKPROXY_MAX_RESPONSE_BYTES); the response ends here.",
                code="response_too_large",
            )
        return BadUpstreamResponse(
            "The response stream ended before its terminal event (the upstream closed the connection, "
            "or sent nothing for longer than the read timeout); the response ends here.",
            code="stream_interrupted",
        )

    def _not_streamed(self) -> str:
        if 200 <= self.status < 300:  # (an upstream that answered a stream request whole)
            whole = BadUpstreamResponse(
                "The upstream answered this turn with one body, not a stream; WebSocket mode relays "
                "streamed answers only.",
                code="upstream_not_streamed",
            )
            return error_event(whole, self.stream_id)
        return error_from_answer(self.status, b"".join(self.body), self.stream_id)
