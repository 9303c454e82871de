"""One streamed chat answer's whole way from the upstream's bytes to the client's: pure.

`ResponseStream` composes, for one answer, the parts the plan chose (proxy.core.plan.finish):

    upstream read ─▶ [UpstreamDecoder] ─▶ StreamPipeline ─▶ [StreamGate] ─▶ front door ─▶ client bytes

- the upstream protocol's decoder, when the upstream does not answer in chat completions (its
  Responses API: proxy.core.protocols.responses.upstream_decode), whose runs of more of the same
  reach the pipeline with their texts;
- the StreamPipeline (proxy.core.stream.pipeline): normalization, trace, capture;
- the review gate (proxy.core.stream.gate), when a review policy is set: it is not a stage of the
  pipeline but this composition's, after it;
- the front door (proxy.core.plan.chat.FrontDoor): the client's protocol, last. Chat completions
  has none to speak of: `ChatDoor` is the identity, so that whoever runs the stream never asks
  which door it has. Without a gate between, a door reads the pipeline's runs by their texts
  (StreamPipeline.feed_runs, FrontDoor.feed_pieces); with one, the bytes the gate lets go.

Values in, bytes out: the edge (proxy.server.streaming.relay_stream) reads the upstream, hands
each read to `feed`, writes what it returns, and awaits only what the stream asks for between two
steps — the door's `settle` before each write (its own I/O: storing a response), the write of a
big first read's first event before its rest is processed (`pending`, then `resume`), and the
reviewers' decisions when the gate holds calls at the end (`held`; what the review service
writes meanwhile goes through `relay`).

Contract: `begin`, `feed` per read (and `resume` while `pending`), then exactly one of `finish`
(the upstream ended) or `fail` (the exchange broke; also after a review that could not end), then
`close` (the door's end).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from proxy.core.errors import error_payload
from proxy.core.plan.chat import FrontDoor, UpstreamDecoder
from proxy.core.stream.chunk_template import DoorPiece, KnownRun
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.pipeline_end import DONE, StreamFailure
from proxy.core.stream.sse import data_frame
from proxy.core.stream.trace import TraceBuilder

# A read, or another upstream protocol's read decoded to chat chunks with its runs apart.
Piece = bytes | list[bytes | KnownRun]

FIRST_EVENT_APART_BYTES = 4096


def first_event(piece: bytes) -> bytes:
    """The first event of a stream's first read when that read is big (an upstream that sends
    many events at once): it goes to the client before the rest is processed. Empty otherwise,
    and when the read does not hold a whole LF-ended event followed by more (the pipeline is the
    same whatever the split, so nothing else depends on where this cuts)."""
    if len(piece) <= FIRST_EVENT_APART_BYTES:
        return b""
    end = piece.find(b"\n\n", 0, FIRST_EVENT_APART_BYTES)
    return piece[: end + 2] if end >= 0 else b""


def first_apart(piece: Piece) -> tuple[Piece, ...]:
    """The first read as pieces with its first event apart (first_event), when it has one."""
    if isinstance(piece, bytes):
        head = first_event(piece)
        return (head, piece[len(head) :]) if head else (piece,)
    first = piece[0] if piece else None
    if not isinstance(first, bytes):
        return (piece,)
    head = first_event(first)
    return ([head], [first[len(head) :], *piece[1:]]) if head else (piece,)


class ChatDoor:
    """The chat-completions front door: the identity (proxy.core.protocols.chat). The pipeline's
    bytes are the client's; it adds no notes, ends nothing and stores nothing."""

    def planned(self, trace: TraceBuilder | None) -> None:
        return None

    def feed(self, data: bytes) -> bytes:
        return data

    def feed_pieces(self, pieces: Sequence[DoorPiece]) -> bytes:
        return b"".join([p if isinstance(p, bytes) else p.data for p in pieces])

    def close(self) -> bytes:
        return b""

    def completion(self, body: bytes) -> bytes:
        return body

    async def settle(self) -> None:
        return None


CHAT_DOOR = ChatDoor()


def front_door(door: FrontDoor | None) -> FrontDoor:
    """The door a chat answer is written through: the plan's (a front door other than chat
    completions), or the identity (None: the client speaks chat completions)."""
    return CHAT_DOOR if door is None else door


class ResponseStream:
    """One streamed answer: the upstream's reads in, the client's bytes out (module docstring)."""

    def __init__(
        self,
        pipeline: StreamPipeline,
        request_body: dict[str, Any] | None,
        *,
        gate: StreamGate | None = None,
        door: FrontDoor | None = None,
        upstream: UpstreamDecoder | None = None,
        trace: TraceBuilder | None = None,
    ) -> None:
        self._pipeline = pipeline
        self._request_body = request_body
        self._gate = gate
        self._upstream = upstream
        self.trace = trace  # (the review service notes the gate's events in it)
        # The door the edge awaits `settle` of before each write.
        self.door: FrontDoor = front_door(door)
        self._chat = door is None  # the identity door: the pipeline's (and gate's) bytes are the client's
        # A door with no gate between reads the texts of the pipeline's runs.
        self._runs = door is not None and gate is None
        self._first = True
        self._pending: Piece | None = None  # the first read's rest, after its first event
        # The exception the pipeline raised while ending a broken stream (for the edge's log): a
        # plain error event was written instead.
        self.broken: Exception | None = None
        if gate is not None and trace is not None:
            trace.hold_done()  # the gate may hold a call: `done` must include the hold

    # -- state the edge reads ----------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """The client's stream is complete (an oversized event ended it, say): stop reading."""
        return self._pipeline.closed

    @property
    def pending(self) -> bool:
        """The first read's first event went out alone: `resume` gives the rest."""
        return self._pending is not None

    @property
    def failure(self) -> StreamFailure | None:
        """Why the pipeline ended the stream with an error event itself, if it did."""
        return self._pipeline.failure

    @property
    def held(self) -> StreamGate | None:
        """After `finish`: the gate, when it holds calls for review (the edge settles them with
        the reviewers, writing through `relay`); None when nothing waits."""
        gate = self._gate
        return gate if gate is not None and gate.holding else None

    # -- the steps ---------------------------------------------------------------------------
    def begin(self, now_ms: float) -> bytes:
        """The stream's first bytes (the trace's opening events), before any upstream read."""
        if self._runs:  # (the trace's comments as values: see _through)
            pieces = self._pipeline.begin_runs(self._request_body, now_ms)
            return self.door.feed_pieces(pieces) if pieces else b""
        return self._out(self._pipeline.begin(self._request_body, now_ms))

    def feed(self, read: bytes, now_ms: float) -> bytes:
        """One upstream read → the client's bytes. A big first read gives its first event's alone
        (`pending` is then True: the edge writes them, then asks `resume` for the rest)."""
        piece: Piece = read if self._upstream is None else self._upstream.feed_pieces(read)
        if self._first:
            self._first = False
            pieces = first_apart(piece)
            if len(pieces) > 1:
                piece, self._pending = pieces
        return self._through(piece, now_ms)

    def resume(self, now_ms: float) -> bytes:
        """The rest of the first read, once its first event went out."""
        piece, self._pending = self._pending, None
        return b"" if piece is None else self._through(piece, now_ms)

    def finish(self, now_ms: float) -> bytes:
        """The upstream ended: what its decoder held, the pipeline's end (its closing trace and
        [DONE], or an error event for a truncated body), and — unless the gate holds a call for
        review (`held`) — what the gate kept back, the trace's `done` and [DONE]."""
        pipeline, gate = self._pipeline, self._gate
        out: list[bytes] = []
        if self._upstream is not None and not pipeline.closed:
            out.append(self._gated(pipeline.feed(self._upstream.close(), now_ms)))  # (an early end: an error)
        out.append(self._gated(pipeline.finish(now_ms)))
        if gate is not None and not gate.holding:
            # What was held while a call's name was unsettled (none was covered), the trace's
            # `done` (held back for the gate) and [DONE].
            closing = self.trace.release_done(now_ms) if self.trace is not None else []
            out.append(gate.flush(closing))
        return self._out(b"".join(out))

    def fail(self, failure: StreamFailure, now_ms: float) -> bytes:
        """The exchange broke (a transport error, a timeout, the reviewers not answering in time):
        the error event and [DONE] that end the client's stream. What the gate held never
        reaches the client (nobody reviewed it)."""
        try:
            frames = self._pipeline.fail(failure, now_ms)
        except Exception as exc:  # (the pipeline itself broke: a plain error event, and the edge logs it)
            self.broken = exc
            frames = b""
        gate = self._gate
        if gate is not None:
            gate.discard()
            if self.trace is not None:
                self.trace.release_done(now_ms)  # (for the listeners: the client gets the error)
        if not frames and (gate is not None or self.broken is not None):
            # (the pipeline had passed [DONE] on and the gate held it, or the pipeline broke)
            payload = error_payload(failure.message, failure.type, failure.code)
            frames = data_frame(orjson.dumps(payload)) + data_frame(DONE)
        return self._out(frames)

    def relay(self, data: bytes) -> bytes:
        """Bytes written while the gate's calls are settled (announcements, keep-alives, what the
        decisions release) → the client's, through the door."""
        return self._out(data)

    def close(self) -> bytes:
        """The door's end, after everything else (a stream that never ended: its failure)."""
        return self.door.close()

    # -- pieces ------------------------------------------------------------------------------
    def _through(self, piece: Piece, now_ms: float) -> bytes:
        """A read (or part of one) through pipeline, gate and door: the hot path, kept flat."""
        pipeline = self._pipeline
        if self._runs:  # a door reads the texts of the pipeline's runs
            runs = pipeline.feed_runs(piece, now_ms)
            return self.door.feed_pieces(runs) if runs else b""
        out = (
            pipeline.feed(piece, now_ms) if isinstance(piece, bytes) else pipeline.feed_pieces(piece, now_ms)
        )
        if self._gate is not None:
            out = self._gate.feed(out)
        if self._chat or not out:  # (the identity door: nothing to translate)
            return out
        return self.door.feed(out)

    def _gated(self, data: bytes) -> bytes:
        return data if self._gate is None else self._gate.feed(data)

    def _out(self, data: bytes) -> bytes:
        """What the door makes of the stream's next bytes (it is fed only bytes, never nothing)."""
        return self.door.feed(data) if data else b""
