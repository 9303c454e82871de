"""The server side of the Responses WebSocket mode's turns, pure: SSE that comes from outside the
door (a native upstream's answer, relayed) turned into the socket's messages (`EventSplitter`: one
message per event, comment lines — the trace, keep-alives — left out: a socket has none, and the
trace never reaches it; the console, metrics and OpenTelemetry still see it), the event types that
end a turn (TERMINAL_TYPES), and an upstream message's type read without a parse (`message_type`).
(A bridged turn's door writes its events in the socket's own form instead:
proxy.core.protocols.responses.output.message_frames. The client's messages:
proxy.core.protocols.responses.socket.)
"""

from __future__ import annotations

from proxy.core import jsonio
from proxy.core.stream.sse import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, SSEDecoder, SSEEvent

__all__ = ["TERMINAL_TYPES", "EventSplitter", "MessagesTooLarge", "leading_type", "message_type"]

# The events that end a turn: after one, the client may send its next `response.create`.
TERMINAL_TYPES = frozenset({b"response.completed", b"response.incomplete", b"response.failed", b"error"})
_TYPE_PREFIX = b'{"type":"'
_NO_KIND = b""  # (an event without an `event:` line: typed by its data)


class EventSplitter:
    """One turn's SSE bytes (as the door writes them, any split) → the socket's text messages:
    each event's data, `stream_id` added when the turn named one; events without data (comment
    lines: the trace, keep-alives) are left out. `terminal` is set once an event of a terminal
    type (TERMINAL_TYPES: its `event:` line, else the `type` its data opens with) was split
    out; nothing after it is sent (the turn's answer is whole).

    Two ways to split, the same messages either way. The events the proxy writes (and OpenAI's)
    have one shape: `event: <type>` then one `data:` line, or a lone `data:` line, or a lone
    comment line, each ended by a blank line, LF only. Those are split here on the blank lines
    (`_split_plain`: no event objects, no line-by-line parse; for a burst turn the general
    decoder's parse was the socket door's largest cost over the HTTP door, bench/README.md).
    The first event of any other shape (a CR anywhere, several `data:` lines, an `id:`, …) hands
    it and the rest of the stream to the general SSE decoder (proxy.core.stream.sse), for good."""

    __slots__ = ("_decoder", "_limit", "_pending", "_plain", "_prefix", "terminal")

    def __init__(self, stream_id: str | None = None, max_event_bytes: int = 0) -> None:
        self._limit = max_event_bytes if max_event_bytes > 0 else DEFAULT_MAX_EVENT_BYTES
        self._decoder = SSEDecoder(self._limit)
        # (the stream id spliced in after the opening brace: no event is parsed again for it)
        self._prefix = b"" if stream_id is None else b'{"stream_id":' + jsonio.dumps(stream_id) + b","
        self._plain = True  # every event so far had the plain shape
        self._pending = b""  # (plain: the bytes of an event not ended yet)
        self.terminal = False

    @property
    def limit(self) -> int:
        """The most bytes one event may take."""
        return self._limit

    @property
    def idle(self) -> bool:
        """Nothing held: every event fed so far was whole and of the plain shape (so the next
        whole event may be taken without the splitter, in order)."""
        return self._plain and not self._pending

    def feed(self, data: bytes) -> list[str]:
        """The messages of the events `data` completes; MessagesTooLarge for one past the limit
        (carrying the messages of the events before it)."""
        out: list[str] = []
        if self.terminal:  # (the turn's answer is whole: nothing after it is the client's)
            return out
        try:
            if self._plain:
                self._split_plain(data, out)
            else:
                out += self.messages(self._decoder.feed(data))
        except EventTooLarge as exc:
            self._pending = b""
            raise MessagesTooLarge(exc.limit, out + self.messages(exc.events)) from None
        return out

    def _split_plain(self, data: bytes, out: list[str]) -> None:
        """Split on the blank lines with one `split` per read, each event then read with
        `startswith`, `partition` and a one-argument `find` (a `find(sub, start, end)` per line
        cost more in argument parsing than in searching; `sub in data` more still: bytes'
        `__contains__` first tries `sub` as an integer and raises, ~2k instructions a test;
        bench/README.md)."""
        buf = self._pending + data if self._pending else data
        if data.find(b"\r") >= 0:  # (CR line ends: the general decoder's, from what is pending on)
            self._to_general(buf, out)
            return
        blocks = buf.split(b"\n\n")
        last = len(blocks) - 1
        limit = self._limit
        prefix = self._prefix
        append = out.append
        for index in range(last):
            block = blocks[index]
            if len(block) + 2 > limit:
                raise EventTooLarge(limit, [])
            if block.startswith(b"event: "):
                kind, _, rest = block[7:].partition(b"\n")
                if not kind or not rest.startswith(b"data: ") or rest.find(b"\n") >= 0:
                    self._to_general(b"\n\n".join(blocks[index:]), out)
                    return
                payload = rest[6:]
            elif block.startswith(b"data: ") and block.find(b"\n") < 0:
                kind, payload = _NO_KIND, block[6:]
            elif block.startswith(b":") and block.find(b"\n") < 0:
                continue  # a comment line (the trace, a keep-alive): left out
            else:
                self._to_general(b"\n\n".join(blocks[index:]), out)
                return
            if payload == b"[DONE]":
                continue
            terminal = (kind if kind else leading_type(payload)) in TERMINAL_TYPES
            if prefix and payload[:1] == b"{":
                payload = prefix + payload[1:] if payload[1:2] != b"}" else prefix[:-1] + b"}"
            append(payload.decode("utf-8", "replace"))
            if terminal:
                self.terminal = True
                self._pending = b""
                return
        rest = blocks[last]
        if len(rest) > limit:
            raise EventTooLarge(limit, [])
        self._pending = rest

    def _to_general(self, rest: bytes, out: list[str]) -> None:
        """The stream from `rest` on through the general decoder (an event of another shape)."""
        self._plain, self._pending = False, b""
        out += self.messages(self._decoder.feed(rest))

    def flush(self) -> list[str]:
        """The last event when the stream ended without its blank line: sent only when it is a
        terminal event whose data is whole JSON (a tail cut mid-event is dropped)."""
        if self.terminal:
            return []
        if self._plain and self._pending:
            self._plain, pending, self._pending = False, self._pending, b""
            self._decoder.feed(pending)  # (no blank line in it: nothing comes out)
        tail = [event for event in self._decoder.flush() if event.data is not None]
        if len(tail) != 1 or _event_type(tail[0]) not in TERMINAL_TYPES:
            return []
        try:
            jsonio.loads(tail[0].data or b"")
        except ValueError:
            return []
        return self.messages(tail)

    def messages(self, events: list[SSEEvent]) -> list[str]:
        """The messages of decoded `events` (EventTooLarge.events: those before the oversized one)."""
        out: list[str] = []
        for event in events:
            if self.terminal:
                break
            data = event.data
            if data is None or data == b"[DONE]":
                continue
            self._message(data, event.event, out)
        return out

    def _message(self, data: bytes, kind: bytes | None, out: list[str]) -> None:
        """One event's message appended to `out` (`kind`: its `event:` line, if any)."""
        if data == b"[DONE]":
            return
        terminal = (kind if kind is not None else leading_type(data)) in TERMINAL_TYPES
        prefix = self._prefix
        if prefix and data[:1] == b"{":
            data = prefix + data[1:] if data[1:2] != b"}" else prefix[:-1] + b"}"
        out.append(data.decode("utf-8", "replace"))
        if terminal:
            self.terminal = True


class MessagesTooLarge(Exception):
    """One event of a turn exceeded `limit` bytes; `messages` are those of the events before it
    (to send before the turn ends with an error)."""

    def __init__(self, limit: int, messages: list[str]) -> None:
        super().__init__(f"a server-sent event exceeded {limit} bytes")
        self.limit = limit
        self.messages = messages


def _event_type(event: SSEEvent) -> bytes | None:
    """An event's type: its `event:` line, else the `type` its data opens with (as both the
    proxy and OpenAI write it), else None."""
    if event.event is not None:
        return event.event
    data = event.data
    return None if data is None else leading_type(data)


def leading_type(data: bytes) -> bytes | None:
    """The `type` where the proxy and OpenAI write it, first (`{"type":"…"`), read without a parse."""
    if not data.startswith(_TYPE_PREFIX):
        return None
    end = data.find(b'"', len(_TYPE_PREFIX))
    return data[len(_TYPE_PREFIX) : end] if end > 0 else None


def message_type(data: bytes) -> bytes | None:
    """A server event's `type` (an upstream WebSocket's message): read where the proxy and OpenAI
    write it, else parsed from the JSON (another server's order or spacing); None when the
    message is not a JSON object with a string `type`."""
    leading = leading_type(data)
    if leading is not None:
        return leading
    try:
        parsed = jsonio.loads(data)
    except ValueError:
        return None
    kind = parsed.get("type") if isinstance(parsed, dict) else None
    return kind.encode() if isinstance(kind, str) else None
