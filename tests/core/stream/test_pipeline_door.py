"""What the stream pipeline hands a front door (`begin_runs`, `feed_runs`): the chat path's bytes,
with the events it decoded as their values."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import jsonio
from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.stream.chunk_template import DoorPiece, KnownEvent, joined
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.sse import SSEDecoder
from tests.helpers import STREAM_FIXTURES, stream_pipeline

STREAMS = STREAM_FIXTURES
pipeline = stream_pipeline


def door_pieces(p: StreamPipeline, pieces: list[bytes]) -> list[DoorPiece]:
    out = list(p.begin_runs({"messages": []}, 0.0))
    for piece in pieces:
        out += p.feed_runs(piece, 1.0)
    return out


def decoded_value(event: bytes) -> Any:
    """What a reader decoding `event` again gets: the chunk, the comment lines, or [DONE]."""
    (sse,) = SSEDecoder(1 << 20).feed(event)
    if sse.data is None:
        return [line for line in sse.raw.splitlines() if line.startswith(b":")]
    return None if sse.data == b"[DONE]" else jsonio.loads(sse.data)


@pytest.mark.parametrize("name", sorted(p.name for p in STREAMS.glob("*.sse")))
@pytest.mark.parametrize("fmt", [TraceFormat.COMMENT, TraceFormat.EVENT])
def test_a_front_door_gets_the_decoded_events_as_their_values(name: str, fmt: TraceFormat) -> None:
    # Each event the pipeline decodes goes to a door with what decoding it again gives (the chunk
    # as parsed, the trace comment's line, [DONE]), whole, and the bytes are the chat path's.
    raw = (STREAMS / name).read_bytes()
    events_at = [i + 2 for i in range(len(raw)) if raw.startswith(b"\n\n", i)]
    for cuts in ([], events_at):
        reads = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if a < b]
        handed = door_pieces(pipeline(TraceMode.DETAILED, fmt), reads)
        chat = pipeline(TraceMode.DETAILED, fmt)
        assert joined(handed) == chat.begin({"messages": []}, 0.0) + b"".join(
            [chat.feed(r, 1.0) for r in reads]
        )
        known = [piece for piece in handed if isinstance(piece, KnownEvent)]
        assert any(event.chunk is not None for event in known)
        assert any(event.chunk is None and event.comments is None for event in known)  # [DONE]
        if fmt is TraceFormat.COMMENT:
            assert any(event.comments is not None for event in known)
        for event in known:
            value = event.chunk if event.chunk is not None else event.comments
            assert value == decoded_value(event.data), event.data


def test_a_chunk_that_may_hold_a_big_integer_goes_to_a_door_as_bytes() -> None:
    # orjson rounds integers past 64 bits, which the door's reading keeps exact: such a chunk's
    # value is not handed over (the door decodes it).
    big = (
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"n":123456789012345678901234}]}\n\n'
    )
    handed = door_pieces(pipeline(None, options=ReasoningOptions()), [big + b"data: [DONE]\n\n"])
    assert not any(isinstance(piece, KnownEvent) and piece.chunk is not None for piece in handed)
    assert joined(handed) == big + b"data: [DONE]\n\n"
