"""Writing an answer to the client, once the relay chose how: the raw body as it came, or a chat
stream through the response pipeline (proxy.core.stream.pipeline), one client write per upstream
read; calls the review gate holds are settled here before the stream ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.types import Message, Send

from proxy.core.errors import BadUpstreamResponse, ProxyError, error_payload
from proxy.core.events import AccessRecord, notify_stream
from proxy.core.plan.chat import ChatContext, FrontDoor
from proxy.core.stream.chunk_template import KnownRun
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.pipeline import DONE, StreamFailure, StreamPipeline
from proxy.core.stream.sse import data_frame
from proxy.core.stream.trace import TraceBuilder
from proxy.review.service import ReviewService, audit_undecided
from proxy.server.asgi import (
    ClientTooSlow,
    ClientWatch,
    RelayAborted,
    UpstreamStalled,
    body_piece,
)
from proxy.server.upstream.common import (
    TRANSPORT_ERRORS,
    UpstreamResponse,
    describe_upstream,
    read_timeout_error,
    total_timeout_error,
    translate_error,
)

logger = logging.getLogger("thinkproxy.relay")

ElapsedMs = Callable[[], float]  # milliseconds since the request arrived


def review_context(record: AccessRecord) -> dict[str, Any]:
    """What a reviewer sees about the request a held call came from (never its content)."""
    return {"model": record.model, "provider": record.provider}


def _client_writer(
    record: AccessRecord, watch: ClientWatch, send: Send
) -> Callable[[bytes], Awaitable[None]]:
    async def write(data: bytes) -> None:
        if data:
            record.bytes_out += len(data)
            watch.writing = True
            await send(body_piece(data))
            watch.writing = False

    return write


async def read_all(response: UpstreamResponse, watch: ClientWatch, limit: int) -> bytes:
    """A whole (decoded) body, each read counting as upstream activity for the read timeout; more
    than `limit` decoded bytes is a 502 (a small gzip body can inflate to gigabytes)."""
    pieces = []
    size = 0
    async for piece in response.reader(decoded=True):
        watch.last_read = time.perf_counter()
        size += len(piece)
        if size > limit:
            raise BadUpstreamResponse(
                f"Upstream {describe_upstream(response.url)} sent a response body larger than {limit} "
                "bytes once decoded (THINKPROXY_MAX_RESPONSE_BYTES); it was not relayed.",
                code="upstream_response_too_large",
            )
        pieces.append(piece)
    return b"".join(pieces)


async def relay_raw(response: UpstreamResponse, record: AccessRecord, watch: ClientWatch, send: Send) -> None:
    """The body exactly as it came; an upstream failure aborts the client's response."""
    clock = time.perf_counter
    try:
        async for piece in response.raw_reader():
            watch.last_read = clock()
            record.bytes_out += len(piece)
            watch.writing = True
            await send(body_piece(piece))
            watch.writing = False
            watch.last_read = clock()
    except TRANSPORT_ERRORS as exc:
        # Headers are already sent: the client must see the body end early, not a shorter one.
        raise RelayAborted(translate_error(exc, response.url).code) from None


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


def first_apart(piece: bytes | list[bytes | KnownRun]) -> tuple[bytes | list[bytes | KnownRun], ...]:
    """The first read as pieces with its first event apart (first_event), when it has one."""
    if isinstance(piece, bytes):
        head = first_event(piece)
        return (head, piece[len(head) :]) if head else (piece,)
    first = piece[0] if piece else None
    if not isinstance(first, bytes):
        return (piece,)
    head = first_event(first)
    return ([head], [first[len(head) :], *piece[1:]]) if head else (piece,)


async def relay_stream(
    response: UpstreamResponse,
    pipeline: StreamPipeline,
    chat: ChatContext,
    elapsed_ms: ElapsedMs,
    record: AccessRecord,
    watch: ClientWatch,
    total_timeout: float,
    review: ReviewService | None,
    send: Send,
) -> None:
    """SSE through the pipeline; every failure ends the stream with an error event, then [DONE].

    With a review gate, what the pipeline writes goes through the gate first; a held call is
    settled once the upstream is done (proxy.review)."""
    clock = time.perf_counter
    gate = chat.gate
    upstream = chat.upstream  # another upstream protocol: decoded to chat chunks first
    # A front door without a review gate between: the pipeline's output goes to it in pieces.
    door = send if isinstance(send, DoorSend) and gate is None else None
    started = clock() - elapsed_ms() / 1000.0
    failure: ProxyError | None = None
    notify_stream(record)
    try:
        first = pipeline.begin(chat.request_body, elapsed_ms())
        if first:
            await send(body_piece(first))
        # (uvicorn's send does not raise when the client is gone, so what this catches is the
        # upstream's failure; the client leaving is the disconnect watch's business.)
        first_read = True
        async for read in response.reader(decoded=True):
            now = clock()  # the hot loop: runs for every upstream read
            watch.last_read = now
            # A piece is a read, or another upstream protocol's read decoded to chat chunks, its
            # runs of more of the same with their texts (which the pipeline then does not read again).
            pieces: tuple[bytes | list[bytes | KnownRun], ...] = (read,)
            if upstream is not None:
                pieces = (upstream.feed_pieces(read),)
            if first_read:
                first_read = False
                pieces = first_apart(pieces[0])
            for piece in pieces:
                ms = (now - started) * 1000.0
                if door is not None:  # a front door reads the texts of the pipeline's runs
                    runs = pipeline.feed_runs(piece, ms)
                    if runs:
                        watch.writing = True
                        await door.runs(runs)
                        watch.writing = False
                        now = watch.last_read = clock()
                    continue
                if isinstance(piece, bytes):
                    out = pipeline.feed(piece, ms)
                else:
                    out = pipeline.feed_pieces(piece, ms)
                if gate is not None:
                    out = gate.feed(out)
                if out:
                    record.bytes_out += len(out)
                    watch.writing = True
                    await send(body_piece(out))
                    watch.writing = False
                    now = watch.last_read = clock()
            if pipeline.closed:  # e.g. an oversized event ended the stream: stop reading
                break
        if upstream is not None and not pipeline.closed:
            rest = pipeline.feed(upstream.close(), elapsed_ms())  # (an early end is an error event)
            if gate is not None:
                rest = gate.feed(rest)
            if rest:
                record.bytes_out += len(rest)
                watch.writing = True
                await send(body_piece(rest))
                watch.writing = False
        tail = pipeline.finish(elapsed_ms())
        if gate is not None:
            tail = gate.feed(tail)
    except TRANSPORT_ERRORS as exc:
        failure = translate_error(exc, response.url)
    except ProxyError as exc:  # a body that cannot be decoded, say
        failure = exc
    except asyncio.CancelledError:
        fired = watch.take_cancel()
        if fired is None:
            raise  # the client left, or an outside cancellation: never swallowed
        if fired is ClientTooSlow:
            raise ClientTooSlow from None  # it reads nothing: no error event can reach it
        if fired is UpstreamStalled:
            failure = read_timeout_error(response.url)
        else:
            failure = total_timeout_error(response.url, total_timeout)
    except Exception:
        logger.exception("Unexpected error in the stream relay; the stream ends with an error event.")
        failure = ProxyError("The proxy failed while relaying this stream (an internal error; see its log).")
    if failure is None:
        if pipeline.failure is not None:  # the pipeline ended the stream with an error event itself
            record.error = record.error or pipeline.failure.code
        if tail:
            record.bytes_out += len(tail)
            watch.writing = True
            await send(body_piece(tail))
            watch.writing = False
        if gate is not None and gate.holding and review is not None:
            await settle_held_calls(gate, review, record, watch, send, total_timeout, chat.trace, elapsed_ms)
        elif gate is not None:
            # What was held while a call's name was unsettled (none was covered), the trace's
            # `done` (held back for the gate) and [DONE].
            closing = chat.trace.release_done(elapsed_ms()) if chat.trace is not None else []
            if rest := gate.flush(closing):
                await send(body_piece(rest))
        return
    frames = failure_frames(pipeline, failure, elapsed_ms())
    if gate is not None:
        gate.discard()  # a call nobody reviewed never reaches the client
        if chat.trace is not None:
            chat.trace.release_done(elapsed_ms())  # (for the listeners: the client gets the error)
        if not frames:  # the pipeline had passed [DONE] on, and the gate held it: end the stream
            payload = error_payload(failure.message, failure.type, failure.code)
            frames = data_frame(orjson.dumps(payload)) + data_frame(DONE)
    record.error = failure.code
    watch.writing = True
    await send(body_piece(frames))


async def settle_held_calls(
    gate: StreamGate,
    review: ReviewService,
    record: AccessRecord,
    watch: ClientWatch,
    send: Send,
    total_timeout: float,
    trace: TraceBuilder | None,
    elapsed_ms: ElapsedMs,
) -> None:
    """The upstream is done and the gate holds calls: wait for the reviewers, then release."""
    try:
        decided = await review.settle_stream(
            gate, _client_writer(record, watch, send), watch.touch, review_context(record), trace, elapsed_ms
        )
    except asyncio.CancelledError:
        fired = watch.take_cancel()
        if fired is None:
            raise  # the client left (its reviews are withdrawn), or an outside cancellation
        if fired is ClientTooSlow:
            # (take_cancel absorbed the cancellation: re-raising it would escape the response)
            raise ClientTooSlow from None  # it reads nothing: no error event can reach it
        # The total timeout ran out while a reviewer was awaited: the held call is not released.
        gate.discard()
        if trace is not None:
            trace.release_done(elapsed_ms())  # (for the listeners: the client gets the error)
        record.error = "review_incomplete"
        message = (
            f"The exchange reached the total timeout of {total_timeout:g} s (THINKPROXY_TOTAL_TIMEOUT) "
            "while a tool call waited for review; the call was not released."
        )
        payload = error_payload(message, "proxy_error", "review_incomplete")
        watch.writing = True
        await send(body_piece(data_frame(orjson.dumps(payload)) + data_frame(DONE)))
        return
    audit_undecided(decided)


class DoorSend:
    """What a stream written in a front door's protocol is sent to (through_door): every message
    (the pipeline's output, a settled review, an error event) goes through the door; `runs` takes
    the pipeline's output with its runs apart (StreamPipeline.feed_runs), which the door reads
    from their texts. The door's own I/O (storing the response) runs before the bytes that end
    the client's stream, so a client that continues from it at once finds it stored."""

    __slots__ = ("door", "record", "send")

    def __init__(self, door: FrontDoor, record: AccessRecord, send: Send) -> None:
        self.door, self.record, self.send = door, record, send

    async def __call__(self, message: Message) -> None:
        data = message.get("body", b"")
        out = self.door.feed(data)
        await self.door.settle()  # (a no-op until the answer is whole: then stored before its end is sent)
        self.record.bytes_out += len(out) - len(data)
        if out:
            await self.send({**message, "body": out})

    async def runs(self, pieces: list[bytes | KnownRun]) -> None:
        """The pipeline's output as StreamPipeline.feed_runs gives it (not counted by the writer)."""
        out = self.door.feed_pieces(pieces)
        await self.door.settle()
        self.record.bytes_out += len(out)
        if out:
            await self.send(body_piece(out))


async def through_door(
    door: FrontDoor, write: Callable[[Send], Awaitable[None]], record: AccessRecord, send: Send
) -> None:
    """A stream written in a front door's protocol: everything `write` sends goes through the door
    (DoorSend), then the door's end."""
    await write(DoorSend(door, record, send))
    tail = door.close()
    await door.settle()
    if tail:
        record.bytes_out += len(tail)
        await send(body_piece(tail))


def completion_through_door(door: FrontDoor, send: Send) -> Send:
    """A non-stream answer the review gate writes once settled, translated by the door (the gate
    writes the whole body in one piece; the body's end closes the connection's response)."""

    async def translated(message: Message) -> None:
        data = message.get("body", b"")
        if data.strip():  # (the spaces that keep the connection alive while a reviewer decides pass)
            data = door.completion(data)
            await door.settle()
        await send({**message, "body": data})

    return translated


def failure_frames(pipeline: StreamPipeline, failure: ProxyError, now_ms: float) -> bytes:
    """The error event and [DONE] that end a broken stream, even when the pipeline itself broke."""
    try:
        return pipeline.fail(StreamFailure(failure.message, type=failure.type, code=failure.code), now_ms)
    except Exception:
        logger.exception("The stream pipeline failed while ending a stream; a plain error event is sent.")
        payload = error_payload(failure.message, failure.type, failure.code)
        return data_frame(orjson.dumps(payload)) + data_frame(DONE)
