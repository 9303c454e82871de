"""How the stream pipeline ends a stream (StreamPipeline.finish / fail), and what it writes when
an event cannot be relayed: the closing events before [DONE], the error event of a broken
exchange, the end of a stream whose event was too large, the comment in place of an event a
hiding stream could not clean. Each runs once a stream or on a fault, never per chunk; they read
and write the pipeline's own state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from proxy.core import jsonio
from proxy.core.errors import UNREADABLE_ANSWER_CODE, error_payload
from proxy.core.stream.chunk_template import KnownEvent
from proxy.core.stream.pipeline_door import trace_frames
from proxy.core.stream.sse import EventTooLarge, data_frame

if TYPE_CHECKING:
    from proxy.core.stream.pipeline import StreamPipeline

DONE = b"[DONE]"
# What a hiding stream sends in place of an event it could not clean (SDKs skip comments).
WITHHELD_COMMENT = (
    b": withheld an upstream event that could not be parsed to remove its reasoning (X-Reasoning: hide)\n\n"
)


@dataclass(frozen=True, slots=True)
class StreamFailure:
    message: str
    type: str = "upstream_error"
    code: str = "upstream_stream_error"


def finish(pipeline: StreamPipeline, now_ms: float) -> bytes:
    """StreamPipeline.finish: the upstream body ended without a transport error."""
    if pipeline.closed:
        return b""
    tail = b""
    for event in pipeline._decoder.flush():  # (at most one)
        if ends_event(event.raw):  # complete after all: its last line end was a held CR
            tail = pipeline._process([event], now_ms)
        elif not pipeline._done_sent and event.raw.strip(b"\r\n"):
            failure = StreamFailure(
                "The upstream stream ended in the middle of an event (no blank line after it); "
                "the unfinished event was discarded.",
                code="upstream_truncated",
            )
            return tail + pipeline.fail(failure, now_ms)
    pipeline.closed = True
    if pipeline._done_sent:
        return tail
    pipeline._done_sent = True
    return tail + closing_bytes(pipeline, now_ms) + data_frame(DONE)


def fail(pipeline: StreamPipeline, failure: StreamFailure, now_ms: float) -> bytes:
    """StreamPipeline.fail: the exchange broke after the stream started: an error event, then [DONE]."""
    if pipeline.closed:
        return b""
    pipeline.closed = True
    if pipeline._done_sent:
        return b""
    pipeline.failure = failure
    out: list[bytes] = []
    trace, frames = pipeline._trace, pipeline._frames
    if trace is not None:
        out.append(frames.frames(trace.on_error(failure.message, now_ms, failure.code)))
        out.append(frames.frames(trace.finish(now_ms)))
        out.append(frames.rest())
    out.append(data_frame(orjson.dumps(error_payload(failure.message, failure.type, failure.code))))
    out.append(data_frame(DONE))
    pipeline._done_sent = True
    return b"".join(out)


def too_large(pipeline: StreamPipeline, exc: EventTooLarge, now_ms: float) -> bytes:
    message = (
        f"The upstream sent an event larger than {exc.limit} bytes (THINKPROXY_MAX_SSE_EVENT_BYTES); "
        "the stream was ended."
    )
    return pipeline.fail(StreamFailure(message, code="upstream_event_too_large"), now_ms)


def closing_bytes(
    pipeline: StreamPipeline,
    now_ms: float,
    out: list[bytes] | None = None,
    known: list[bytes | KnownEvent] | None = None,
) -> bytes:
    """What precedes [DONE]: the extractor's last chunks and the trace's closing events; with
    `out` and `known` (a front door's, see StreamPipeline._process) written there instead (b""
    returned)."""
    into: list[bytes] = [] if out is None else out
    trace, frames, capture = pipeline._trace, pipeline._frames, pipeline._capture
    for chunk in pipeline._extractor.flush():
        if capture is not None:
            capture.chunk(chunk)
        into.append(data_frame(jsonio.dumps(chunk)))
        if trace is not None:
            trace_frames(pipeline, trace.on_chunk(chunk, carries_reasoning(chunk), now_ms), into, known)
    if trace is not None:
        trace_frames(pipeline, trace.finish(now_ms), into, known)
        into.append(frames.rest())  # (no chunk ever came: what was held goes out now)
    return b"" if out is not None else b"".join(into)


def withheld(pipeline: StreamPipeline, now_ms: float) -> bytes:
    """Hiding fails closed: an event that cannot be cleaned is replaced by a comment saying so."""
    trace = pipeline._trace
    if trace is None:
        return WITHHELD_COMMENT
    message = "An upstream event could not be parsed to remove its reasoning; it was withheld."
    events = trace.on_error(message, now_ms, UNREADABLE_ANSWER_CODE)
    return pipeline._frames.frames(events) + WITHHELD_COMMENT


def ends_event(raw: bytes) -> bool:
    """Whether `raw` ends with two line ends (CRLF, CR or LF each), i.e. a blank line."""
    return raw.endswith((b"\n\n", b"\r\r", b"\n\r", b"\r\r\n", b"\n\r\n"))


def carries_reasoning(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and (delta.get("reasoning_content") or delta.get("reasoning")):
            return True
    return False
