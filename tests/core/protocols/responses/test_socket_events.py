"""A Responses WebSocket turn's events from SSE that comes from outside the door
(proxy.core.protocols.responses.socket_events: a native upstream's answer): one message per event
at every split, comment lines left out, nothing after the terminal event, other SSE shapes read as
the general decoder reads them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.protocols.responses.socket_events import EventSplitter, MessagesTooLarge
from proxy.core.stream.sse import SSEDecoder

STREAM = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n'
    b': trace {"type":"status"}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"a\\nb"}\n\n'
    b": keep-alive\n\n"
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":2}\n\n'
)


@pytest.mark.parametrize("stream_id", [None, "lane-1"])
def test_the_splitter_gives_each_event_one_message_at_every_split_comments_left_out(
    stream_id: str | None,
) -> None:
    expected: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0},
        {"type": "response.output_text.delta", "delta": "a\nb"},
        {"type": "response.completed", "sequence_number": 2},
    ]
    if stream_id is not None:
        expected = [{**event, "stream_id": stream_id} for event in expected]
    for cut in range(len(STREAM) + 1):
        splitter = EventSplitter(stream_id)
        texts = splitter.feed(STREAM[:cut]) + splitter.feed(STREAM[cut:]) + splitter.flush()
        assert [json.loads(text) for text in texts] == expected, cut


def test_the_splitter_marks_a_terminal_event_and_sends_nothing_after_it() -> None:
    splitter = EventSplitter()
    head = splitter.feed(STREAM[: STREAM.index(b"event: response.completed")])
    assert len(head) == 2 and not splitter.terminal
    # (typed by its data when it has no event line, as some upstreams write it)
    tail = splitter.feed(b'data: {"type":"response.failed","sequence_number":3}\n\ndata: {"type":"late"}\n\n')
    assert [json.loads(text)["type"] for text in tail] == ["response.failed"] and splitter.terminal
    assert splitter.feed(b'data: {"type":"response.output_text.delta"}\n\n') == []


def test_the_splitter_drops_an_event_cut_mid_way_at_the_end() -> None:
    cut = EventSplitter()
    assert len(cut.feed(STREAM[:-30])) == 2
    assert cut.flush() == [] and not cut.terminal  # (no half event sent as a message)
    whole = EventSplitter()  # (a last terminal event without its blank line is whole: it goes out)
    assert len(whole.feed(STREAM.rstrip(b"\n"))) == 2
    assert [json.loads(text)["type"] for text in whole.flush()] == ["response.completed"]
    assert whole.terminal


# Streams of other shapes than the proxy's own (what a native upstream may send): each splits as
# the general SSE decoder reads it, at every split, however far into the stream the shape changes.
OTHER_SHAPES = [
    STREAM.replace(b"\n", b"\r\n"),
    STREAM + b'id: 7\ndata: {"type":"x"}\n\n',
    b'data: {"type":"response.created"}\n\n: a comment\ndata: {"type":"response.in_progress"}\n\n'
    + b'data: {"type":\ndata: "response.completed"}\n\n',
    b'event: response.created\ndata:{"type":"response.created"}\n\n' + STREAM,
    b'data: {"type":"response.created"}\n\nevent:response.completed\ndata: {"type":"response.completed"}\n\n',
]


def reference(stream: bytes) -> list[str]:
    """The messages of what the general decoder makes of `stream`, read whole (each of these
    streams ends with a blank line: nothing is left for a flush)."""
    return EventSplitter().messages(SSEDecoder().feed(stream))


@pytest.mark.parametrize("stream", OTHER_SHAPES)
def test_the_splitter_reads_other_shapes_as_the_general_decoder_does_at_every_split(stream: bytes) -> None:
    expected = reference(stream)
    assert expected
    for cut in range(len(stream) + 1):
        splitter = EventSplitter()
        assert splitter.feed(stream[:cut]) + splitter.feed(stream[cut:]) + splitter.flush() == expected, cut


def test_an_event_past_the_limit_carries_the_messages_before_it() -> None:
    small = b'event: response.created\ndata: {"type":"response.created"}\n\n'
    big = b'event: response.output_text.delta\ndata: {"delta":"' + b"x" * 200 + b'"}\n\n'
    for shape in (small + big, (small + big).replace(b"\n", b"\r\n")):
        splitter = EventSplitter(max_event_bytes=100)
        with pytest.raises(MessagesTooLarge) as too_large:
            splitter.feed(shape)
        assert [json.loads(text)["type"] for text in too_large.value.messages] == ["response.created"]
        assert too_large.value.limit == 100
    unended = EventSplitter(max_event_bytes=100)  # (pending without its blank line, past the limit)
    with pytest.raises(MessagesTooLarge) as pending:
        unended.feed(small + big[:-2])
    assert len(pending.value.messages) == 1
