"""Relaying one upstream exchange to the client: the edge between the upstream client and the
client's connection.

Three ways a response travels back, chosen once its headers are in:

- **raw** — errors, and every body the proxy does not understand (other `/v1/*` routes, non-2xx,
  non-JSON answers): bytes exactly as they came. A body cut short upstream (short of its
  content-length, a reset, broken chunked framing) is cut short for the client too: the
  connection is dropped without ending the body, never ended cleanly.
- **completion** — a non-stream chat answer: read whole (decoded, bounded by
  THINKPROXY_MAX_RESPONSE_BYTES), normalized and traced by the pure pipeline, then written.
- **stream** — an SSE chat answer: through the pure StreamPipeline, one client write per upstream
  read; any failure after the stream started ends it with an error event, then `[DONE]`.

Every exchange runs under one ClientWatch: client disconnect, read timeout (upstream silence),
total timeout (end to end, for every kind), write timeout (a client that stops reading). Before
anything is relayed, the upstream's status and headers are checked: only what is valid HTTP goes
back to the client.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Send

from proxy.core.controls import TraceFormat
from proxy.core.errors import BadUpstreamResponse, ProxyError, error_payload
from proxy.core.review_rules import HeldCall
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.pipeline import DONE, StreamFailure, StreamPipeline, process_completion
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.sse import data_frame
from proxy.core.stream.taps import notify_stream
from proxy.core.stream.trace import TraceBuilder
from proxy.review.service import ReviewService, audit_undecided
from proxy.server.access_log import AccessRecord
from proxy.server.asgi import (
    ClientTooSlow,
    ClientWatch,
    RelayAborted,
    RelayResponse,
    UpstreamStalled,
    WatchFired,
    body_piece,
)
from proxy.server.request_ids import rename_upstream_request_id
from proxy.server.upstream.common import (
    TRANSPORT_ERRORS,
    Upstream,
    UpstreamRequest,
    UpstreamResponse,
    describe_upstream,
    read_timeout_error,
    total_timeout_error,
    translate_error,
)
from proxy.server.upstream.headers import filter_headers
from proxy.settings import Settings

logger = logging.getLogger("thinkproxy.relay")

# The server adds its own Date; the upstream's would make a second one.
DROP_RESPONSE_RELAYED = frozenset({"content-length", "date"})
DROP_RESPONSE_DECODED = frozenset({"content-length", "content-encoding", "date"})
# Upstream headers a client may rely on (rate limits, request ids) are kept with everything else;
# these are the ones the proxy sets on SSE so that no intermediary buffers or caches the stream.
SSE_HEADERS = (("cache-control", "no-cache"), ("x-accel-buffering", "no"))

CLIENT_CLOSED_REQUEST = 499  # nginx's convention for "the client left before the answer"

# RFC 9110 §5.1 / §5.5: a field name is a token; a value holds no control character but HTAB.
_TOKEN_CHARS = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]*")
_BAD_VALUE_CHAR = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

ElapsedMs = Callable[[], float]
LogAccess = Callable[[AccessRecord, float], None]


@dataclass(frozen=True, slots=True)
class ChatContext:
    """What the chat route decided about the response: how to normalize and trace it."""

    request_body: dict[str, Any]
    reasoning: ReasoningOptions
    trace: TraceBuilder | None
    trace_format: TraceFormat
    capture: TurnCollector | None = None  # the replay store's collector, when the store is on
    # Set only when a review policy is configured (proxy.review): holds covered tool calls back.
    gate: StreamGate | None = None
    zh: bool = False


def note_response(record: AccessRecord, trace: TraceBuilder | None) -> None:
    """The answer's id and model, usage and times, for listeners (the trace builder saw them go by)."""
    if trace is None:
        return
    if trace.response is not None:
        record.response_id = trace.response.id
        record.response_model = trace.response.model
    record.outcome = trace.outcome()


def client_gone(record: AccessRecord, started: float, log: LogAccess) -> Response:
    record.status = CLIENT_CLOSED_REQUEST
    record.error = "client_disconnected"
    log(record, started)
    return Response(status_code=CLIENT_CLOSED_REQUEST)  # nobody reads it; ASGI wants a response


def check_response_head(response: UpstreamResponse) -> None:
    """Refuse (502) a status or header the proxy must not relay.

    Only final statuses 200–599 are relayed: a 1xx the HTTP client did not absorb (101 Switching
    Protocols above all: the connection would stay in HTTP mode while a front proxy believed it
    upgraded) and anything outside 100–599 are not answers. A header name that is not a token or
    a value with control bytes would make the server drop the connection with no response."""
    status = response.status
    if not 200 <= status <= 599:
        raise BadUpstreamResponse(
            f"Upstream {describe_upstream(response.url)} answered with status {status}; only final "
            "statuses 200-599 are relayed (a 1xx such as 101 Switching Protocols never is).",
            code="upstream_invalid_status",
        )
    names = "".join(name for name, _ in response.headers)
    values = "".join(value for _, value in response.headers)
    if (
        _TOKEN_CHARS.fullmatch(names)
        and not _BAD_VALUE_CHAR.search(values)
        and all(name for name, _ in response.headers)
    ):
        return
    for name, value in response.headers:
        if not name or not _TOKEN_CHARS.fullmatch(name) or _BAD_VALUE_CHAR.search(value):
            raise BadUpstreamResponse(
                f"Upstream {describe_upstream(response.url)} sent an invalid header {name[:60]!r} (a "
                "name that is not an HTTP token, or a value with control characters); the response is "
                "not relayed.",
                code="upstream_invalid_header",
            )


class Relay:
    """Runs one upstream exchange under a ClientWatch and turns it into the client's response."""

    def __init__(
        self, settings: Settings, upstream: Upstream, log: LogAccess, review: ReviewService | None = None
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.log = log
        self.review = review

    async def __call__(
        self,
        receive: Receive,
        req: UpstreamRequest,
        record: AccessRecord,
        started: float,
        *,
        extra_headers: list[tuple[str, str]],
        chat: ChatContext | None,
    ) -> Response:
        s = self.settings
        watch = ClientWatch(
            receive,
            read_timeout=s.read_timeout,
            deadline=started + s.total_timeout,  # end to end: never restarted for the body
            write_timeout=s.write_timeout,
        )
        try:
            response = await self._exchange(watch, req, record, started, extra_headers, chat)
        except BaseException:
            watch.close()
            raise
        if not isinstance(response, RelayResponse):
            watch.close()
        return response

    def _timeout(self, fired: type[WatchFired], url: str) -> ProxyError:
        if fired is UpstreamStalled:
            return read_timeout_error(url)
        return total_timeout_error(url, self.settings.total_timeout)

    async def _exchange(
        self,
        watch: ClientWatch,
        req: UpstreamRequest,
        record: AccessRecord,
        started: float,
        extra_headers: list[tuple[str, str]],
        chat: ChatContext | None,
    ) -> Response:
        try:
            response = await watch.run(self.upstream.open(req))
        except WatchFired as fired:
            raise self._timeout(type(fired), req.url) from None
        if response is None:
            return client_gone(record, started, self.log)
        watch.last_read = time.perf_counter()
        record.upstream_status = response.status
        response.headers = rename_upstream_request_id(response.headers, record)
        try:
            check_response_head(response)
        except BaseException:
            await response.aclose()
            raise

        async def close(error: str | None) -> None:
            try:
                await response.aclose()
            except Exception:  # nothing left to tell the client; the request is still logged
                logger.exception("Closing the upstream response failed.")
            if chat is not None:
                note_response(record, chat.trace)
            record.status = response.status
            if error is not None:
                record.error = record.error or error
            self.log(record, started)

        content_type = response.header("content-type") or ""
        is_sse = content_type.startswith("text/event-stream")
        ok = 200 <= response.status < 300
        if chat is None or not ok or not (is_sse or content_type.startswith("application/json")):
            # Errors and bodies the proxy does not understand travel back exactly as they came.
            headers = filter_headers(response.headers, DROP_RESPONSE_RELAYED) + extra_headers
            return RelayResponse(
                partial(relay_raw, response, record, watch),
                status_code=response.status,
                headers=headers,
                watch=watch,
                on_close=close,
            )

        def elapsed_ms() -> float:
            return (time.perf_counter() - started) * 1000.0

        if not is_sse:
            return await self._completion(watch, response, record, started, extra_headers, chat, elapsed_ms)
        if chat.gate is not None and chat.trace is not None:
            chat.trace.hold_done()  # the gate may hold a call: `done` must include the hold
        pipeline = StreamPipeline(
            reasoning=chat.reasoning,
            trace=chat.trace,
            trace_format=chat.trace_format,
            max_event_bytes=self.settings.max_sse_event_bytes,
            capture=chat.capture,
        )
        headers = (
            filter_headers(response.headers, DROP_RESPONSE_DECODED | {"cache-control"})
            + list(SSE_HEADERS)
            + extra_headers
        )
        return RelayResponse(
            partial(
                relay_stream,
                response,
                pipeline,
                chat,
                elapsed_ms,
                record,
                watch,
                self.settings.total_timeout,
                self.review,
            ),
            status_code=response.status,
            headers=headers,
            watch=watch,
            on_close=close,
        )

    async def _completion(
        self,
        watch: ClientWatch,
        response: UpstreamResponse,
        record: AccessRecord,
        started: float,
        extra_headers: list[tuple[str, str]],
        chat: ChatContext,
        elapsed_ms: ElapsedMs,
    ) -> Response:
        try:
            raw = await watch.run(read_all(response, watch, self.settings.max_response_bytes))
        except WatchFired as fired:
            raise self._timeout(type(fired), response.url) from None
        except TRANSPORT_ERRORS as exc:
            raise translate_error(exc, response.url) from exc
        finally:
            await response.aclose()
        if raw is None:
            return client_gone(record, started, self.log)
        holds = self.review is not None and self.review.would_hold(raw)
        if holds and chat.trace is not None:
            chat.trace.hold_done()  # a call will be held: `done` must include the hold
        out = process_completion(
            raw,
            reasoning=chat.reasoning,
            trace=chat.trace,
            request_body=chat.request_body,
            now_ms=elapsed_ms(),
            capture=chat.capture,
        )
        note_response(record, chat.trace)
        headers = filter_headers(response.headers, DROP_RESPONSE_DECODED) + extra_headers
        status = response.status
        held = (
            self.review.held_in_completion(out, review_context(record)) if self.review is not None else None
        )
        if held is None and holds:
            held = (orjson.loads(out), [])  # (the trace's `done` is held back: it must be released)
        if held is not None and self.review is not None:
            return self._reviewed_completion(
                self.review, held, watch, record, started, headers, chat, elapsed_ms
            )
        headers.append(("content-length", str(len(out))))
        record.bytes_out = len(out)

        async def write(send: Send) -> None:
            watch.writing = True  # the write timeout bounds a client that does not read its answer
            await send(body_piece(out))

        async def close(error: str | None) -> None:
            record.status = status
            if error is not None:
                record.error = record.error or error
            self.log(record, started)

        return RelayResponse(write, status_code=status, headers=headers, watch=watch, on_close=close)

    def _reviewed_completion(
        self,
        review: ReviewService,
        held: tuple[dict[str, Any], list[HeldCall]],
        watch: ClientWatch,
        record: AccessRecord,
        started: float,
        headers: list[tuple[str, str]],
        chat: ChatContext,
        elapsed_ms: ElapsedMs,
    ) -> Response:
        """A non-stream answer holding a call: headers now, the body once every call is decided."""
        parsed, calls = held

        async def write(send: Send) -> None:
            decided = await review.settle_completion(
                parsed,
                calls,
                chat.zh,
                _client_writer(record, watch, send),
                watch.touch,
                chat.trace,
                elapsed_ms,
            )
            audit_undecided(decided)

        async def close(error: str | None) -> None:
            record.status = 200
            if error is not None:
                record.error = record.error or error
            self.log(record, started)

        return RelayResponse(write, status_code=200, headers=headers, watch=watch, on_close=close)


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
            pieces: tuple[bytes, ...] = (read,)
            if first_read:
                first_read = False
                head = first_event(read)
                if head:  # the first token is not kept waiting while the rest of a big read is processed
                    pieces = (head, read[len(head) :])
            for piece in pieces:
                out = pipeline.feed(piece, (now - started) * 1000.0)
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


def failure_frames(pipeline: StreamPipeline, failure: ProxyError, now_ms: float) -> bytes:
    """The error event and [DONE] that end a broken stream, even when the pipeline itself broke."""
    try:
        return pipeline.fail(StreamFailure(failure.message, type=failure.type, code=failure.code), now_ms)
    except Exception:
        logger.exception("The stream pipeline failed while ending a stream; a plain error event is sent.")
        payload = error_payload(failure.message, failure.type, failure.code)
        return data_frame(orjson.dumps(payload)) + data_frame(DONE)
