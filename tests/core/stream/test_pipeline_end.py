"""How the stream pipeline ends a stream (`finish`, `fail`): a cut inside an event is never hidden, a
failure is an error event, and [DONE] comes once."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.pipeline_end import StreamFailure
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder
from tests.helpers import sse_frames

CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}'
)


def pipeline(mode: TraceMode | None = None, max_event_bytes: int = 1 << 20) -> StreamPipeline:
    trace = None if mode is None else TraceBuilder(mode=mode, zh=False, level="none", provider="p")
    return StreamPipeline(
        reasoning=ReasoningOptions(),
        trace=trace,
        trace_format=TraceFormat.COMMENT,
        max_event_bytes=max_event_bytes,
    )


def run(pieces: list[bytes], mode: TraceMode | None = None) -> tuple[bytes, StreamPipeline]:
    p = pipeline(mode)
    out = p.begin({"messages": []}, 0.0)
    for piece in pieces:
        out += p.feed(piece, 1.0)
    return out + p.finish(2.0), p


def error_of(out: bytes) -> dict[str, object]:
    events = [e for e in out.split(b"\n\n") if e and not e.startswith(b":")]
    assert events[-1] == b"data: [DONE]"
    error: dict[str, object] = orjson.loads(events[-2].removeprefix(b"data: "))["error"]
    return error


@pytest.mark.parametrize("mode", [None, TraceMode.BRIEF])
@pytest.mark.parametrize("cut", [b'data: {"id":"c","choi', b"data: {}\n", b"data: {}\r\n", b": ping"])
def test_a_stream_cut_inside_an_event_ends_with_upstream_truncated_at_every_split(
    mode: TraceMode | None, cut: bytes
) -> None:
    raw = CHUNK + b"\n\n" + cut
    whole, p = run([raw], mode)
    assert whole.count(CHUNK) == 1 and cut not in whole  # the complete event goes, the tail does not
    assert error_of(whole)["code"] == "upstream_truncated"
    assert p.failure is not None and p.failure.code == "upstream_truncated"
    for i in range(1, len(raw)):
        assert run([raw[:i], raw[i:]], mode)[0] == whole, i


@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r", b"\n\n\n", b"\r\n\r\n\r\n"])
def test_a_clean_end_at_an_event_boundary_without_done_gets_a_done(end: bytes) -> None:
    raw = CHUNK + end
    whole, p = run([raw])
    assert whole.startswith(CHUNK) and whole.endswith(b"data: [DONE]\n\n")
    assert b"error" not in whole and p.failure is None
    for i in range(1, len(raw)):
        assert run([raw[:i], raw[i:]])[0] == whole, i


def test_bytes_after_done_are_not_a_truncation() -> None:
    out, p = run([CHUNK + b'\n\ndata: [DONE]\n\ndata: {"x'])
    assert out.endswith(b"data: [DONE]\n\n") and out.count(b"[DONE]") == 1
    assert p.failure is None


def test_stream_without_done_gets_one() -> None:
    chunk = b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}\n\n'
    out, _ = run([chunk])
    assert out == chunk + b"data: [DONE]\n\n"


def test_oversized_event_ends_stream_with_error_and_done() -> None:
    ok = b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}\n\n'
    p = pipeline(None, max_event_bytes=200)
    out = p.feed(ok + b"data: " + b"x" * 500, 1.0)
    assert p.closed
    fs = sse_frames(out)
    assert fs[0] + b"\n\n" == ok
    assert orjson.loads(fs[1][6:])["error"]["code"] == "upstream_event_too_large"
    assert fs[2] == b"data: [DONE]"
    assert p.feed(b"more", 2.0) == b"" and p.finish(3.0) == b""


def test_failure_after_start_is_error_event_then_done_once() -> None:
    p = pipeline(TraceMode.BRIEF)
    p.begin(None, 0.0)
    out = p.fail(StreamFailure("Upstream reset", code="upstream_protocol_error"), 5.0)
    fs = sse_frames(out)
    assert fs[-1] == b"data: [DONE]"
    assert orjson.loads(fs[-2][6:]) == {
        "error": {
            "message": "Upstream reset",
            "type": "upstream_error",
            "code": "upstream_protocol_error",
            "param": None,
        }
    }
    assert any(f.startswith(b": trace ") and b'"error"' in f for f in fs)
    assert p.fail(StreamFailure("again"), 6.0) == b"" and p.finish(7.0) == b""
