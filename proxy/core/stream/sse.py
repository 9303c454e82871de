"""Incremental Server-Sent Events decoder and encoder (sans-I/O).

`SSEDecoder.feed(bytes)` returns the events completed by that chunk; `flush()` returns the
unterminated tail at end of stream. Every byte received belongs to exactly one event's `raw`, so
forwarding `raw` of the events the proxy does not change reproduces the upstream stream byte for
byte — including lines this decoder does not understand.

Line ends are LF, CRLF or CR (per the SSE spec); an event ends at a blank line. A CR at the end of
a chunk is never taken as a complete line end: it may be the first half of a CRLF, so the decoder
waits for the next byte. That keeps the events identical however the stream is split.

Events of nothing but line ends (blank lines carry nothing) are returned as one event per run
within a read, not one per pair: a stream of megabytes of bare line ends costs one event per read
instead of one per two bytes. Only the grouping of such runs depends on how the stream is split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024

# A line end followed directly by another one: the end of an event. The first line end is a CRLF
# when it can be (a CR followed by LF is never two line ends), hence the lookahead.
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
_LINE_END = re.compile(rb"\r\n|\r|\n")
# Pairs of line ends with nothing else: blank-line-only events, taken as one run. A lone CR counts
# only when a byte follows that is not LF (at the end of the data it may be half of a CRLF).
_BLANK_PAIRS = re.compile(rb"(?:(?:\r\n|\r(?=[^\n])|\n)(?:\r\n|\r(?=[^\n])|\n))+")
_LF_PAIRS = re.compile(rb"(?:\n\n)+")


@dataclass(slots=True)
class SSEEvent:
    """One event as received.

    `raw` is the exact bytes of the event, including the blank line that ended it (absent only for
    a tail returned by `flush()`). An event may consist only of blank lines or comments; it then
    has no data (`data is None`) and is forwarded as `raw` like any other.
    """

    raw: bytes
    data: bytes | None = None
    event: bytes | None = None
    id: bytes | None = None
    retry: int | None = None


class EventTooLarge(Exception):
    """One event exceeded the decoder's `max_event_bytes`.

    `events` holds the complete events decoded from the same `feed()` call before the oversized
    one, so the caller can still forward them before ending the stream with an error.
    """

    def __init__(self, limit: int, events: list[SSEEvent]) -> None:
        super().__init__(f"a server-sent event exceeded {limit} bytes")
        self.limit = limit
        self.events = events


class SSEDecoder:
    """Splits a byte stream into `SSEEvent`s, one `feed()` per received chunk.

    Contract: the concatenated `raw` of all events returned by `feed()` and `flush()` equals the
    input bytes exactly, for any input and any split of it, and the events are the same for every
    split (except how adjacent blank-line-only events are grouped). At most `max_event_bytes` are
    held pending; an event longer than that raises `EventTooLarge` (after which the decoder is
    empty and the stream should be ended).
    """

    __slots__ = ("_has_cr", "_max", "_pending", "_scan_from")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._pending = bytearray()
        # Where the next search for an event end may start: bytes before it were already searched.
        self._scan_from = 0
        # Whether the pending bytes may contain a CR; without one the plain LF search is exact.
        self._has_cr = False

    @property
    def idle(self) -> bool:
        """Nothing pending and no CR held: a read that is one whole LF-ended event would come out
        of `feed` as that one event, leaving the decoder as it was."""
        return not self._pending and not self._has_cr

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The read appended to what is pending, and every event it completes taken off the front.

        One path for every read. A second one for LF-only reads with nothing pending, which worked
        on the read itself instead of the buffer, bought 0.6-1.0% of the instructions of a burst
        stream (the pipeline takes runs of same-shaped chunks without this decoder) and was removed
        for clarity: bench/README.md, "The fast paths: what each buys"."""
        buf = self._pending
        buf += chunk
        scan = self._scan_from
        has_cr = self._has_cr or chunk.find(b"\r") >= 0
        events: list[SSEEvent] = []
        start = 0
        size = len(buf)
        limit = self._max
        if has_cr:
            search = _EVENT_END.search
            while True:
                match = search(buf, scan)
                if match is None:
                    next_scan = max(start, size - 3)
                    break
                if match.start() == start:
                    run = _BLANK_PAIRS.match(buf, start)
                    if run is not None:  # a run of blank lines: one event, however long
                        events.append(SSEEvent(bytes(buf[start : run.end()])))
                        start = scan = run.end()
                        continue
                end = match.end()
                if end == size and buf[-1] == 0x0D:
                    # A trailing CR may be half of a CRLF: wait for the next byte.
                    next_scan = match.start()
                    break
                if end - start > limit:
                    self._reset()
                    raise EventTooLarge(limit, events)
                events.append(_event(bytes(buf[start:end])))
                start = scan = end
        else:
            find = buf.find
            while (end := find(b"\n\n", scan)) >= 0:
                if end == start:  # a run of blank lines: one event, however long
                    end = _lf_run_end(buf, start)
                    events.append(SSEEvent(bytes(buf[start:end])))
                    start = scan = end
                    continue
                end += 2
                if end - start > limit:
                    self._reset()
                    raise EventTooLarge(limit, events)
                events.append(_event(bytes(buf[start:end])))
                start = scan = end
            next_scan = max(start, size - 1)
        if start:
            del buf[:start]
        if len(buf) > limit:
            self._reset()
            raise EventTooLarge(limit, events)
        self._scan_from = next_scan - start
        self._has_cr = has_cr and buf.find(b"\r") >= 0
        return events

    def flush(self) -> list[SSEEvent]:
        if not self._pending:
            return []
        raw = bytes(self._pending)
        self._reset()
        return [_parse(raw)]

    def _reset(self) -> None:
        self._pending = bytearray()
        self._scan_from = 0
        self._has_cr = False


def _lf_run_end(data: bytes | bytearray, start: int) -> int:
    """The end of the run of `\n\n` pairs at `start` (the caller saw at least one there)."""
    run = _LF_PAIRS.match(data, start)
    return run.end() if run is not None else start + 2


def _event(raw: bytes) -> SSEEvent:
    """`_parse`, with a shortcut for the usual single `data:` line ended by LF or CRLF."""
    if raw.startswith(b"data: "):
        n = len(raw)
        lf = raw.find(b"\n")
        cr = raw.find(b"\r")
        if lf == n - 2 and cr < 0:
            return SSEEvent(raw, raw[6:-2])
        if cr == n - 4 and lf == n - 3 and raw[-2:] == b"\r\n":
            return SSEEvent(raw, raw[6:-4])
    return _parse(raw)


def _parse(raw: bytes) -> SSEEvent:
    """The fields of one event, per the SSE spec's line interpretation."""
    event = SSEEvent(raw)
    data: list[bytes] = []
    for line in raw.splitlines():  # bytes.splitlines splits on exactly CR, LF and CRLF
        if not line or line[0] == 0x3A:  # blank line, or a `:` comment
            continue
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event.event = value
        elif name == b"id" and b"\0" not in value:
            event.id = value
        elif name == b"retry" and value.isdigit():
            event.retry = int(value)
        # Any other field is ignored here and survives in `raw`.
    if data:
        event.data = data[0] if len(data) == 1 else b"\n".join(data)
    return event


def encode_event(event: SSEEvent, data: bytes) -> bytes:
    """`event` re-emitted with new data.

    Every line other than its data lines (event/id/retry fields, comments, unknown fields) is kept
    in order; the new data is written where the first data line was (at the end if there was
    none), one `data:` line per line of `data`. Line ends become LF; the event ends with a blank
    line. Used only for events the proxy changed; the others are forwarded as `raw`.
    """
    raw = event.raw
    single = raw.startswith(b"data:") and raw.find(b"\n") == len(raw) - 2 and raw.find(b"\r") < 0
    if single and data.find(b"\n") < 0 and data.find(b"\r") < 0:
        return b"data: " + data + b"\n\n"  # the usual single-line event: nothing else to keep
    data_lines = [b"data: " + part for part in _LINE_END.split(data)]
    lines: list[bytes] = []
    placed = False
    for line in raw.splitlines():
        if not line:
            continue
        if line.partition(b":")[0] == b"data":
            if not placed:
                lines.extend(data_lines)
                placed = True
            continue
        lines.append(line)
    if not placed:
        lines.extend(data_lines)
    return b"\n".join(lines) + b"\n\n"


def data_frame(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


def comment_frame(text: bytes) -> bytes:
    return b": " + text + b"\n\n"
