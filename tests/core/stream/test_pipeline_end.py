"""How the stream pipeline ends a stream (`finish`): a cut inside an event is never hidden."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder

CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}'
)


def pipeline(mode: TraceMode | None = None) -> StreamPipeline:
    trace = None if mode is None else TraceBuilder(mode=mode, zh=False, level="none", provider="p")
    return StreamPipeline(
        reasoning=ReasoningOptions(), trace=trace, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
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
