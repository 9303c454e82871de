from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.stream.sse import EventTooLarge, SSEDecoder, SSEEvent, comment_frame, data_frame, encode_event

STREAMS = Path(__file__).parents[2] / "fixtures" / "streams"
SSE_FIXTURES = sorted(STREAMS.glob("*.sse"))


def decode(chunks: list[bytes], max_event_bytes: int = 1 << 20) -> list[SSEEvent]:
    decoder = SSEDecoder(max_event_bytes)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def canonical(events: list[SSEEvent]) -> list[SSEEvent]:
    """`events` with each run of adjacent blank-line-only events merged into one.

    Such events carry nothing; the decoder returns a run of them as one event per read, so how a
    run is grouped depends on where the reads split it. Everything else is split-invariant.
    """
    out: list[SSEEvent] = []
    for event in events:
        if out and _blank(event) and _blank(out[-1]):
            out[-1] = SSEEvent(out[-1].raw + event.raw)
        else:
            out.append(event)
    return out


def _blank(event: SSEEvent) -> bool:
    return bool(event.raw) and not event.raw.strip(b"\r\n")


def fields(events: list[SSEEvent]) -> list[tuple[bytes | None, bytes | None, bytes | None, int | None]]:
    return [(e.data, e.event, e.id, e.retry) for e in events]


# One stream exercising every rule: comments, multi-line data, event/id/retry, a field without a
# colon, a value whose leading space is stripped only once, unknown fields, LF / CRLF / CR ends.
MIXED = (
    b": comment at start\n\n"
    b'data: {"a":1}\n\n'
    b"event: trace\r\nid: 7\r\nretry: 1500\r\ndata: line one\r\ndata:line two\r\n\r\n"
    b"data:  two spaces\rdata\r\r"
    b"x-unknown: kept\ndata: after unknown\n\n"
    b"\n\n"
    b"retry: soon\nid: a\x00b\ndata: bad retry and id\n\r\n"
    b"data: [DONE]\n\n"
)

MIXED_EXPECTED = [
    (None, None, None, None),
    (b'{"a":1}', None, None, None),
    (b"line one\nline two", b"trace", b"7", 1500),
    (b" two spaces\n", None, None, None),
    (b"after unknown", None, None, None),
    (None, None, None, None),
    (b"bad retry and id", None, None, None),
    (b"[DONE]", None, None, None),
]


def test_mixed_stream_fields() -> None:
    events = decode([MIXED])
    assert fields(events) == MIXED_EXPECTED
    assert b"".join(e.raw for e in events) == MIXED


def test_mixed_stream_identical_at_every_split() -> None:
    whole = decode([MIXED])
    for i in range(len(MIXED) + 1):
        assert canonical(decode(split_at(MIXED, [i]))) == canonical(whole), i


def test_mixed_stream_fed_byte_by_byte() -> None:
    assert decode([bytes([b]) for b in MIXED]) == decode([MIXED])


def test_common_event_fast_path() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b'data: {"x":1}\n\ndata: {"y":2}\n\ndata: {"z"')
    assert [(e.raw, e.data) for e in events] == [
        (b'data: {"x":1}\n\n', b'{"x":1}'),
        (b'data: {"y":2}\n\n', b'{"y":2}'),
    ]
    assert [e.data for e in decoder.feed(b":3}\n\n")] == [b'{"z":3}']
    assert decoder.flush() == []


def test_trailing_cr_waits_for_next_byte() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\n\r") == []  # the last CR may be half of a CRLF
    (event,) = decoder.feed(b"\ndata: b\r\n")
    assert event.raw == b"data: a\r\n\r\n"
    assert [e.data for e in decoder.flush()] == [b"b"]


def test_cr_only_event_end_is_decided_by_the_next_byte() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == []
    (event,) = decoder.feed(b"data: b\r\r")
    assert (event.raw, event.data) == (b"data: a\r\r", b"a")
    (tail,) = decoder.flush()
    assert (tail.raw, tail.data) == (b"data: b\r\r", b"b")


def test_flush_returns_unterminated_tail() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]\n\ndata: partial") != []
    (tail,) = decoder.flush()
    assert (tail.raw, tail.data) == (b"data: partial", b"partial")
    assert decoder.flush() == []


@pytest.mark.parametrize("path", SSE_FIXTURES, ids=lambda p: p.name)
def test_fixture_events_identical_at_every_split(path: Path) -> None:
    data = path.read_bytes()
    whole = decode([data])
    assert b"".join(e.raw for e in whole) == data
    assert whole[-1].data == b"[DONE]"
    for i in range(len(data) + 1):
        assert canonical(decode(split_at(data, [i]))) == canonical(whole), i


# Streams built from the tokens that matter to the grammar, so that random inputs hit them often.
TOKENS = [
    b"\r",
    b"\n",
    b"\r\n",
    b":",
    b" ",
    b"data",
    b"data: ",
    b"event: e",
    b"id: 1",
    b"retry: 5",
    b"x",
    b"{}",
    b"\x00",
]
sse_like = st.lists(st.sampled_from(TOKENS), max_size=40).map(b"".join)
any_bytes = st.one_of(st.binary(max_size=200), sse_like)


@settings(max_examples=300, deadline=None)
@given(data=any_bytes, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_raw_round_trip_and_split_invariance(data: bytes, cuts: list[int]) -> None:
    whole = decode([data])
    assert b"".join(e.raw for e in whole) == data
    split = decode(split_at(data, [c % (len(data) + 1) for c in cuts]))
    assert b"".join(e.raw for e in split) == data
    assert canonical(split) == canonical(whole)


def reference_dispatch(data: bytes) -> list[tuple[bytes | None, bytes]]:
    """(event, data) of each dispatched event, straight from the spec's line algorithm."""
    lines = re.split(rb"\r\n|\r|\n", data)
    out: list[tuple[bytes | None, bytes]] = []
    event: bytes | None = None
    buf: list[bytes] = []

    def dispatch() -> None:
        nonlocal event
        if buf:
            out.append((event, b"\n".join(buf)))
        buf.clear()
        event = None

    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        if not line:
            if not last:
                dispatch()
            continue
        if line.startswith(b":"):
            continue
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            buf.append(value)
        elif name == b"event":
            event = value
    dispatch()  # the decoder's flush() hands over an unterminated tail as an event
    return out


@settings(max_examples=300, deadline=None)
@given(data=sse_like, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=4))
def test_matches_spec_line_algorithm(data: bytes, cuts: list[int]) -> None:
    events = decode(split_at(data, [c % (len(data) + 1) for c in cuts]))
    assert [(e.event, e.data) for e in events if e.data is not None] == reference_dispatch(data)


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("count", [10_000, 10_001])
def test_a_run_of_blank_lines_is_one_event_per_read(end: bytes, count: int) -> None:
    # 20 MB of bare line ends used to become ten million events: seconds of CPU per megabyte.
    data = b"data: a\n\n" + end * count + b"data: b\n\n"
    decoder = SSEDecoder(max_event_bytes=64)
    events = decoder.feed(data[:5000]) + decoder.feed(data[5000:]) + decoder.flush()
    assert b"".join(e.raw for e in events) == data
    assert [e.data for e in events if e.data is not None] == [b"a", b"b"]
    assert len(events) <= 5


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"data: x", b":c"]), max_size=30).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=4),
)
def test_blank_runs_split_anywhere_keep_the_events(data: bytes, cuts: list[int]) -> None:
    whole = decode([data])
    split = decode(split_at(data, [c % (len(data) + 1) for c in cuts]))
    assert b"".join(e.raw for e in split) == data
    assert canonical(split) == canonical(whole)
    assert [(e.event, e.data) for e in whole if e.data is not None] == reference_dispatch(data)


def test_blank_runs_at_every_split() -> None:
    data = b"\n\n\n\r\r\n\r\n\rdata: a\r\r\r\n\n\n\n\r: c\n\n\n\n\n"
    whole = decode([data])
    for i, j in itertools.combinations(range(len(data) + 1), 2):
        assert canonical(decode(split_at(data, [i, j]))) == canonical(whole), (i, j)


def test_event_too_large_in_one_chunk_keeps_earlier_events() -> None:
    decoder = SSEDecoder(max_event_bytes=16)
    with pytest.raises(EventTooLarge) as info:
        decoder.feed(b"data: ok\n\ndata: " + b"x" * 20 + b"\n\n")
    assert [e.data for e in info.value.events] == [b"ok"]
    assert info.value.limit == 16


def test_event_too_large_pending_is_bounded() -> None:
    decoder = SSEDecoder(max_event_bytes=32)
    decoder.feed(b"data: " + b"x" * 20)
    with pytest.raises(EventTooLarge):
        decoder.feed(b"x" * 20)


@pytest.mark.parametrize("size", [15, 16, 17])
def test_event_too_large_iff_an_event_exceeds_limit_at_any_split(size: int) -> None:
    event = b"data: " + b"y" * (size - 10) + b"\r\n\r\n"  # `size` bytes in all
    stream = b"data: a\n\n" + event + b"data: b\n\n"
    limit = 16
    for i in range(len(stream) + 1):
        decoder = SSEDecoder(max_event_bytes=limit)
        try:
            for chunk in split_at(stream, [i]):
                decoder.feed(chunk)
            decoder.flush()
        except EventTooLarge:
            assert size > limit, i
        else:
            assert size <= limit, i


def test_encode_event_keeps_other_lines_and_replaces_data() -> None:
    (event,) = decode([b": note\r\nevent: delta\r\ndata: old\r\ndata: old2\r\nid: 9\r\n\r\n"])
    encoded = encode_event(event, b'{"new":1}\nsecond')
    assert encoded == b': note\nevent: delta\ndata: {"new":1}\ndata: second\nid: 9\n\n'
    (again,) = decode([encoded])
    assert (again.data, again.event, again.id) == (b'{"new":1}\nsecond', b"delta", b"9")


def test_encode_event_without_data_appends_it() -> None:
    assert encode_event(SSEEvent(b"event: x\n\n"), b"1") == b"event: x\ndata: 1\n\n"


@given(st.binary(max_size=50))
def test_encode_event_data_round_trips(data: bytes) -> None:
    (event,) = decode([encode_event(SSEEvent(b"data: x\n\n", b"x"), data)])
    assert event.data == re.sub(rb"\r\n|\r", b"\n", data)


def test_frames() -> None:
    assert data_frame(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert comment_frame(b'trace {"t":1}') == b': trace {"t":1}\n\n'


@pytest.mark.parametrize(
    ("fed", "idle"),
    [(b"", True), (b"data: x\n\n", True), (b"data: unfinished", False), (b"data: x\r\n", False)],
)
def test_idle_only_with_nothing_pending(fed: bytes, idle: bool) -> None:
    decoder = SSEDecoder()
    decoder.feed(fed)
    assert decoder.idle is idle
