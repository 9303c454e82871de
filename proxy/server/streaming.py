"""Writing an answer to the client, once the relay chose how: the raw body as it came, or a chat
stream through its ResponseStream (proxy.core.stream.response_stream: decoder, pipeline, review
gate and front door, pure), one client write per upstream read; calls the review gate holds are
settled here, with the reviewers, before the stream ends. Only bytes move here: what to write is
the stream's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Send

from proxy.core.errors import BadUpstreamResponse, ProxyError
from proxy.core.events import AccessRecord, notify_stream
from proxy.core.plan.chat import FrontDoor
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.pipeline_end import StreamFailure
from proxy.core.stream.response_stream import CHAT_DOOR, ResponseStream
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


Write = Callable[[bytes], Awaitable[None]]  # bytes to the client


def client_writer(record: AccessRecord, watch: ClientWatch, send: Send, door: FrontDoor = CHAT_DOOR) -> Write:
    """Bytes to the client, counted, under the write timeout; the door's own I/O (storing a
    response, large reasoning) settled before each write, so a client that continues from what it
    reads finds it stored."""

    async def write(data: bytes) -> None:
        await door.settle()
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


async def relay_stream(
    response: UpstreamResponse,
    stream: ResponseStream,
    elapsed_ms: ElapsedMs,
    record: AccessRecord,
    watch: ClientWatch,
    total_timeout: float,
    review: ReviewService | None,
    send: Send,
) -> None:
    """A streamed chat answer: each upstream read handed to the stream (proxy.core.stream.
    response_stream), what it returns written, what it asks awaited (the door's settle before a
    write, the reviewers when the gate holds calls). Every failure ends the stream with an error
    event, then [DONE]; then the door's end."""
    clock = time.perf_counter
    write = client_writer(record, watch, send, stream.door)
    started = clock() - elapsed_ms() / 1000.0
    failure: ProxyError | None = None
    notify_stream(record)
    try:
        # (uvicorn's send does not raise when the client is gone, so what this catches is the
        # upstream's failure; the client leaving is the disconnect watch's business.)
        await write(stream.begin(elapsed_ms()))
        async for read in response.reader(decoded=True):
            now = watch.last_read = clock()  # the hot loop: runs for every upstream read
            out = stream.feed(read, (now - started) * 1000.0)
            if stream.pending:  # a big first read: its first event goes out before the rest is read
                await write(out)
                watch.last_read = clock()
                out = stream.resume(elapsed_ms())
            if out:
                await write(out)
                watch.last_read = clock()  # (time blocked writing is not upstream silence)
            if stream.closed:  # e.g. an oversized event ended the stream: stop reading
                break
        await write(stream.finish(elapsed_ms()))
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
    if failure is not None:
        record.error = failure.code
        ended = StreamFailure(failure.message, type=failure.type, code=failure.code)
        await write(fail(stream, ended, elapsed_ms()))
    else:
        if stream.failure is not None:  # the pipeline ended the stream with an error event itself
            record.error = record.error or stream.failure.code
        gate = stream.held
        if gate is not None and review is not None:
            await settle_held_calls(gate, review, stream, record, watch, write, total_timeout, elapsed_ms)
    await write(stream.close())


def fail(stream: ResponseStream, failure: StreamFailure, now_ms: float) -> bytes:
    """The stream's error event and [DONE] (ResponseStream.fail), the pipeline's own failure to
    write them logged."""
    frames = stream.fail(failure, now_ms)
    if stream.broken is not None:
        logger.error(
            "The stream pipeline failed while ending a stream; a plain error event is sent.",
            exc_info=stream.broken,
        )
    return frames


async def settle_held_calls(
    gate: StreamGate,
    review: ReviewService,
    stream: ResponseStream,
    record: AccessRecord,
    watch: ClientWatch,
    write: Write,
    total_timeout: float,
    elapsed_ms: ElapsedMs,
) -> None:
    """The upstream is done and the gate holds calls: wait for the reviewers, then release (what
    the review service writes goes through the stream's door)."""

    async def through(data: bytes) -> None:
        await write(stream.relay(data))

    try:
        decided = await review.settle_stream(
            gate, through, watch.touch, review_context(record), stream.trace, elapsed_ms
        )
    except asyncio.CancelledError:
        fired = watch.take_cancel()
        if fired is None:
            raise  # the client left (its reviews are withdrawn), or an outside cancellation
        if fired is ClientTooSlow:
            # (take_cancel absorbed the cancellation: re-raising it would escape the response)
            raise ClientTooSlow from None  # it reads nothing: no error event can reach it
        # The total timeout ran out while a reviewer was awaited: the held call is not released.
        record.error = "review_incomplete"
        message = (
            f"The exchange reached the total timeout of {total_timeout:g} s (THINKPROXY_TOTAL_TIMEOUT) "
            "while a tool call waited for review; the call was not released."
        )
        ended = StreamFailure(message, type="proxy_error", code="review_incomplete")
        await write(fail(stream, ended, elapsed_ms()))
        return
    audit_undecided(decided)


def door_writer(door: FrontDoor, write: Write) -> Write:
    """A non-stream answer the review gate writes once settled, translated by the door (the gate
    writes the whole body in one piece; the spaces that keep the connection alive while a
    reviewer decides pass as they are)."""

    async def translated(data: bytes) -> None:
        if data.strip():
            data = door.completion(data)
            await door.settle()
        await write(data)

    return translated
