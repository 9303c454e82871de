"""Relaying one upstream exchange to the client: the edge between the upstream client and the
client's connection.

Three ways a response travels back, chosen once its headers are in:

- **raw** — errors, and every body the proxy does not understand (other `/v1/*` routes, non-2xx,
  non-JSON answers): bytes exactly as they came. A body cut short upstream (short of its
  content-length, a reset, broken chunked framing) is cut short for the client too: the
  connection is dropped without ending the body, never ended cleanly.
- **completion** — a non-stream chat answer: read whole (decoded, bounded by
  THINKPROXY_MAX_RESPONSE_BYTES), normalized and traced by the pure pipeline, then written in
  the client's protocol (its front door's `completion`; the identity for chat).
- **stream** — an SSE chat answer: through its pure ResponseStream (decoder, StreamPipeline,
  review gate, front door: proxy.core.stream.response_stream), one client write per upstream
  read; any failure after the stream started ends it with an error event, then `[DONE]`.

Every exchange runs under one ClientWatch: client disconnect, read timeout (upstream silence),
total timeout (end to end, for every kind), write timeout (a client that stops reading). Before
anything is relayed, the upstream's status and headers are checked: only what is valid HTTP goes
back to the client.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from proxy.core.errors import BadUpstreamResponse, ProxyError
from proxy.core.events import AccessRecord
from proxy.core.headers import filter_headers
from proxy.core.native_usage import UsageReader
from proxy.core.plan.chat import ChatContext
from proxy.core.plan.request import UpstreamRequest
from proxy.core.review.rules import HeldCall
from proxy.core.stream.completion import process_completion
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.response_stream import ResponseStream, front_door
from proxy.core.stream.trace import TraceBuilder
from proxy.core.usage import ReasoningTally, account
from proxy.review.service import ReviewService, audit_undecided
from proxy.server.asgi import (
    ClientWatch,
    RelayResponse,
    UpstreamStalled,
    WatchFired,
    body_piece,
    edge_hooks,
)
from proxy.server.relayed_usage import note_relayed, read_as_relayed
from proxy.server.request_ids import rename_upstream_request_id
from proxy.server.streaming import (
    ElapsedMs,
    client_writer,
    door_writer,
    read_all,
    relay_raw,
    relay_stream,
    review_context,
)
from proxy.server.upstream.common import (
    TRANSPORT_ERRORS,
    Upstream,
    UpstreamResponse,
    describe_upstream,
    read_timeout_error,
    total_timeout_error,
    translate_error,
)
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

LogAccess = Callable[[AccessRecord, float], None]


def note_response(record: AccessRecord, trace: TraceBuilder | None, tally: ReasoningTally) -> None:
    """The answer's id and model, usage and times, for listeners (the trace builder saw them go
    by), and its token counts: the usage as the client got it, with the reasoning estimate from
    the text the tally counted (proxy.core.usage)."""
    outcome = None
    if trace is not None:
        if trace.response is not None:
            record.response_id = trace.response.id
            record.response_model = trace.response.model
        outcome = record.outcome = trace.outcome()
    estimate = tally.estimate()
    if outcome is not None or estimate is not None:  # (an answer the proxy did not read has none)
        record.usage = account(outcome.usage if outcome is not None else None, estimate)


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
    if not response.headers:
        return
    # (every name and every value checked at once, in C: a generator per header was ~18 calls)
    names, values = zip(*response.headers, strict=True)
    if _TOKEN_CHARS.fullmatch("".join(names)) and not _BAD_VALUE_CHAR.search("".join(values)) and all(names):
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
        request: Request,
        req: UpstreamRequest,
        record: AccessRecord,
        started: float,
        *,
        extra_headers: list[tuple[str, str]],
        chat: ChatContext | None,
        usage: UsageReader | None = None,
    ) -> Response:
        """`request`: the client's (its `receive`, or the server edge's hooks, tell its disconnect).
        `usage`: for an answer relayed as it came (`chat` None) that a model gives, the reader
        of its token counts (proxy.core.native_usage), put on the record at its end."""
        s = self.settings
        hooks = edge_hooks(request.scope)
        watch = ClientWatch(
            request.receive,
            read_timeout=s.read_timeout,
            deadline=started + s.total_timeout,  # end to end: never restarted for the body
            write_timeout=s.write_timeout,
            on_disconnect=None if hooks is None else hooks["on_disconnect"],
        )
        try:
            response = await self._exchange(watch, req, record, started, extra_headers, chat, usage)
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
        usage: UsageReader | None = None,
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

        tally = ReasoningTally()  # the answer's reasoning text, counted for its token estimate

        async def close(error: str | None) -> None:
            try:
                await response.aclose()
            except Exception:  # nothing left to tell the client; the request is still logged
                logger.exception("Closing the upstream response failed.")
            if chat is not None:
                note_response(record, chat.trace, tally)
            elif usage is not None:
                note_relayed(record, usage, started)
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
            encoded = (response.header("content-encoding") or "identity").lower() != "identity"
            if usage is not None and (not ok or encoded):
                usage = None  # (an error has no usage; a compressed body is not read)
            write = partial(relay_raw, response, record, watch)
            return RelayResponse(
                write if usage is None else partial(read_as_relayed, write, usage),
                status_code=response.status,
                headers=headers,
                watch=watch,
                on_close=close,
            )

        def elapsed_ms() -> float:
            return (time.perf_counter() - started) * 1000.0

        if not is_sse:
            return await self._completion(
                watch, response, record, started, extra_headers, chat, elapsed_ms, tally
            )
        pipeline = StreamPipeline(
            reasoning=chat.reasoning,
            trace=chat.trace,
            trace_format=chat.trace_format,
            max_event_bytes=self.settings.max_sse_event_bytes,
            capture=chat.capture,
            tally=tally,
        )
        stream = ResponseStream(
            pipeline,
            chat.request_body,
            gate=chat.gate,
            door=chat.door,
            upstream=chat.upstream,
            trace=chat.trace,
        )
        headers = (
            filter_headers(response.headers, DROP_RESPONSE_DECODED | {"cache-control"})
            + list(SSE_HEADERS)
            + extra_headers
        )
        write = partial(
            relay_stream,
            response,
            stream,
            elapsed_ms,
            record,
            watch,
            self.settings.total_timeout,
            self.review,
        )
        return RelayResponse(write, status_code=response.status, headers=headers, watch=watch, on_close=close)

    async def _completion(
        self,
        watch: ClientWatch,
        response: UpstreamResponse,
        record: AccessRecord,
        started: float,
        extra_headers: list[tuple[str, str]],
        chat: ChatContext,
        elapsed_ms: ElapsedMs,
        tally: ReasoningTally,
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
        if chat.upstream is not None:
            raw = chat.upstream.completion(raw)
        holds = self.review is not None and self.review.would_hold(raw, chat.client_names)
        if holds and chat.trace is not None:
            chat.trace.hold_done()  # a call will be held: `done` must include the hold
        out = process_completion(
            raw,
            reasoning=chat.reasoning,
            trace=chat.trace,
            request_body=chat.request_body,
            now_ms=elapsed_ms(),
            capture=chat.capture,
            tally=tally,
        )
        note_response(record, chat.trace, tally)
        headers = filter_headers(response.headers, DROP_RESPONSE_DECODED) + extra_headers
        status = response.status
        held = (
            self.review.held_in_completion(out, review_context(record), names=chat.client_names)
            if self.review is not None
            else None
        )
        if held is None and holds:
            held = (orjson.loads(out), [])  # (the trace's `done` is held back: it must be released)
        if held is not None and self.review is not None:
            return self._reviewed_completion(
                self.review, held, watch, record, started, headers, chat, elapsed_ms
            )
        door = front_door(chat.door)
        out = door.completion(out)
        await door.settle()  # (the door's own I/O, storing a response, before the client reads it)
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
                door_writer(front_door(chat.door), client_writer(record, watch, send)),
                watch.touch,
                chat.trace,
                elapsed_ms,
                names=chat.client_names,
            )
            audit_undecided(decided)

        async def close(error: str | None) -> None:
            record.status = 200
            if error is not None:
                record.error = record.error or error
            self.log(record, started)

        return RelayResponse(write, status_code=200, headers=headers, watch=watch, on_close=close)
