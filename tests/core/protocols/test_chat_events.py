"""The internal event stream (proxy.core.protocols.chat_events): the pipeline's chat chunks read
once as typed events, in the order the doors read them; the same events at every split of real
streams; runs of more of the same as one event carrying the texts that reading each chunk gives,
whether read from the bytes by their shape or handed over with their texts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.core.protocols.chat_events import (
    DONE,
    NO_CHOICE,
    ChatEvent,
    ChatEventReader,
    Comment,
    Error,
    Finish,
    ReasoningDelta,
    ReasoningDetails,
    TextDelta,
    ToolCallDelta,
    Usage,
    call_index,
    chunk_events,
    completion_events,
)
from proxy.core.stream.chunk_template import KnownRun, joined
from tests.core.protocols.messages.test_runs import BUILT, hostile, piped, synthetic
from tests.helpers import known_pieces, pipeline_pieces, split_points

STREAMS = Path(__file__).resolve().parents[2] / "fixtures" / "streams"
FIXTURES = sorted(p.name for p in STREAMS.glob("*.sse"))


def data(value: Any) -> bytes:
    return b"data: " + json.dumps(value).encode() + b"\n\n"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
        **extra,
    }


def merged(events: list[ChatEvent]) -> list[ChatEvent]:
    """`events` with each run of deltas of one kind as one event (how a run reads them): the form
    in which reading chunk by chunk and reading runs must agree."""
    out: list[ChatEvent] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta([*last.texts, *event.texts])
        elif isinstance(event, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta([*last.texts, *event.texts])
        else:
            out.append(event)
    return out


def read(pieces: list[bytes], *, templates: bool = True) -> tuple[list[ChatEvent], ChatEventReader]:
    reader = ChatEventReader(templates=templates)
    events = [event for piece in pieces for event in reader.feed(piece)] + reader.close()
    return events, reader


def reference(stream: bytes) -> list[ChatEvent]:
    """Every event decoded, chunk by chunk (no run read by its shape)."""
    events, reader = read([stream], templates=False)
    assert reader.taken == reader.handed == 0
    assert all(len(e.texts) == 1 for e in events if isinstance(e, TextDelta | ReasoningDelta))
    return merged(events)


STREAMS_UNDER_TEST = {
    **{name: lambda name=name: (STREAMS / name).read_bytes() for name in FIXTURES},
    **{f"piped {name}": lambda name=name: piped((STREAMS / name).read_bytes()) for name in FIXTURES},
    "synthetic": synthetic,
    "escaped": lambda: synthetic(escaped=True),
    "hostile": hostile,
}


# --------------------------------------------------------------------------------------------------
# One chunk's events
# --------------------------------------------------------------------------------------------------
def test_a_chunk_gives_its_facts_in_the_order_the_doors_read_them() -> None:
    details = [{"type": "reasoning.encrypted", "data": "x"}]
    calls = [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a"'}}]
    delta = {"reasoning_content": "r", "reasoning_details": details, "content": "t", "tool_calls": calls}
    usage = {"prompt_tokens": 3}
    events = chunk_events(chunk(delta, "tool_calls", usage=usage))
    assert events == [
        Usage(usage),
        ReasoningDelta(["r"]),
        ReasoningDetails(details),
        TextDelta(["t"]),
        ToolCallDelta(0, "call_1", "f", '{"a"', None),
        Finish("tool_calls", ()),
    ]


def test_an_error_chunk_is_one_error_and_nothing_else() -> None:
    failed = chunk({"content": "lost"}, usage={"prompt_tokens": 1}, error={"message": "boom", "code": "x"})
    assert chunk_events(failed) == [Error("boom", "x")]
    assert chunk_events({"error": "plain"}) == [Error("plain", "")]
    # (a null `error` beside an answer is none)
    assert chunk_events(chunk({"content": "a"}, error=None)) == [TextDelta(["a"])]


@pytest.mark.parametrize(
    ("delta", "events"),
    [
        ({"reasoning_content": "", "reasoning": "r"}, [ReasoningDelta(["r"])]),
        ({"reasoning_content": "a", "reasoning": "b"}, [ReasoningDelta(["a"])]),
        ({"content": "", "reasoning_content": None, "role": "assistant"}, []),
        ({"content": 5, "reasoning_details": "not a list", "tool_calls": {"not": "a list"}}, []),
        (
            {"tool_calls": ["not a fragment", {"function": "not a mapping", "index": True, "id": 3}]},
            [ToolCallDelta(None, "", "", "", None)],
        ),
        (
            {"tool_calls": [{"id": "c", "extra_content": {"google": {"thought_signature": "s"}}}]},
            [ToolCallDelta(None, "c", "", "", {"google": {"thought_signature": "s"}})],
        ),
    ],
)
def test_a_delta_gives_only_what_it_carries(delta: dict[str, Any], events: list[ChatEvent]) -> None:
    assert chunk_events(chunk(delta)) == events


def test_only_choice_0_counts() -> None:
    other = {"index": 1, "delta": {"content": "other"}, "finish_reason": "stop"}
    mine = {"index": 0, "delta": {"content": "mine"}, "finish_reason": None}
    assert chunk_events({"choices": [other, mine]}) == [TextDelta(["mine"])]
    assert chunk_events({"choices": [other], "usage": {"n": 1}}) == [Usage({"n": 1})]
    assert chunk_events({"choices": "nope"}) == []


def test_a_finish_names_the_stop_strings_the_choice_reports() -> None:
    choice = {"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END", "matched_stop": "##"}
    assert chunk_events({"choices": [choice]}) == [Finish("stop", ("END", "##"))]
    choice = {"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": 128009}  # (a token id)
    assert chunk_events({"choices": [choice]}) == [Finish("stop", ())]
    assert chunk_events(chunk({}, "")) == []


def test_a_fragment_without_an_index_finds_its_call() -> None:
    calls = {0: "call_a", 1: "call_b"}
    assert call_index("call_b", calls, 0) == 1  # (its id)
    assert call_index("call_new", calls, 0) == 2  # (a new id: a new call)
    assert call_index("", calls, 0) == 0  # (no id: the last call)
    assert call_index("", calls, None) == 2
    assert call_index("", {}, None) == 0


# --------------------------------------------------------------------------------------------------
# A whole completion's events
# --------------------------------------------------------------------------------------------------
def test_a_completion_is_its_message_as_one_delta_then_done() -> None:
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        "not a call",
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "[]"}},
    ]
    message = {"role": "assistant", "reasoning_content": "why", "content": "answer", "tool_calls": calls}
    usage = {"prompt_tokens": 9}
    completion = {
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": usage,
    }
    assert completion_events(completion) == [
        Usage(usage),
        ReasoningDelta(["why"]),
        TextDelta(["answer"]),
        ToolCallDelta(0, "call_1", "f", "{}", None),
        ToolCallDelta(2, "call_2", "g", "[]", None),
        Finish("tool_calls", ()),
        DONE,
    ]


def test_a_completion_without_a_finish_reason_finished_with_stop() -> None:
    choice = {"index": 0, "message": {"content": "hi"}, "matched_stop": "##"}
    assert completion_events({"choices": [choice]}) == [TextDelta(["hi"]), Finish("stop", ("##",)), DONE]


def test_a_completion_that_cannot_be_used_is_one_error() -> None:
    assert completion_events({"error": {"message": "no", "code": "rate_limit_exceeded"}}) == [
        Error("no", "rate_limit_exceeded")
    ]
    assert completion_events({"choices": []}) == [Error(NO_CHOICE, "")]
    assert completion_events({"choices": [{"index": 0, "message": {}}], "error": None})[-1] == DONE


# --------------------------------------------------------------------------------------------------
# The stream reader
# --------------------------------------------------------------------------------------------------
def test_comments_pass_as_they_came_and_done_ends() -> None:
    stream = (
        b': trace {"type":"status"}\n: keep-alive\n\n'
        + data(chunk({"content": "a"}))
        + b": beside data is dropped\n"
        + data(chunk({"content": "b"}))
        + b"event: x\n\n"
        + b"data: not json\n\n"
        + b"data: [1]\n\n"
        + b"data: [DONE]\n\n"
    )
    events, _ = read([stream])
    assert events == [
        Comment([b': trace {"type":"status"}', b": keep-alive"]),
        TextDelta(["a"]),
        TextDelta(["b"]),
        DONE,
    ]


def test_close_reads_the_event_the_stream_did_not_end() -> None:
    reader = ChatEventReader()
    assert reader.feed(data(chunk({"content": "a"})) + b"data: [DONE]") == [TextDelta(["a"])]
    assert reader.close() == [DONE]
    assert reader.close() == []


@pytest.mark.parametrize("name", list(STREAMS_UNDER_TEST))
def test_every_split_gives_the_same_events(name: str) -> None:
    """The same events however the stream is cut in two, or read 97 bytes at a time. The streams
    built for the hard cases inside an event (escapes, holes, comments in a run) are cut at every
    byte; the recorded ones, raw and piped, at every line end, the bytes around it and every 7th
    byte (tests.helpers.split_points): what they add to the built streams is real providers'
    shapes and event sequences, which a cut at every boundary and several inside each event still
    try; the SSE decoder's own tests keep every byte."""
    stream = STREAMS_UNDER_TEST[name]()
    expected = reference(stream)
    whole, _ = read([stream])
    assert merged(whole) == expected
    for cut in range(len(stream) + 1) if name in BUILT else split_points(stream, 7):
        events, _ = read([stream[:cut], stream[cut:]])
        assert merged(events) == expected, f"split at {cut}: {stream[max(0, cut - 30) : cut + 30]!r}"
    step = 97
    events, _ = read([stream[i : i + step] for i in range(0, len(stream), step)])
    assert merged(events) == expected


@pytest.mark.parametrize("name", ["synthetic", "escaped", "piped deepseek-reasoner.sse"])
def test_a_run_is_one_event_with_its_texts(name: str) -> None:
    stream = STREAMS_UNDER_TEST[name]()
    events, reader = read([stream])
    runs = [e for e in events if isinstance(e, TextDelta | ReasoningDelta) and len(e.texts) > 1]
    assert runs
    chunks = stream.count(b"data: {")
    assert reader.taken > chunks * 3 // 4  # (most of the stream: not decoded chunk by chunk)
    texts = [t for e in events if isinstance(e, TextDelta | ReasoningDelta) for t in e.texts]
    assert texts == [
        t for e in reference(stream) if isinstance(e, TextDelta | ReasoningDelta) for t in e.texts
    ]


def handed(pieces: list[list[bytes | KnownRun]]) -> tuple[list[ChatEvent], ChatEventReader]:
    reader = ChatEventReader()
    events = [event for piece in pieces for event in reader.feed_pieces(piece)] + reader.close()
    return events, reader


@pytest.mark.parametrize("name", ["synthetic", "escaped", "hostile", *(f"piped {n}" for n in FIXTURES)])
def test_runs_handed_over_give_the_events_of_their_bytes_at_every_split(name: str) -> None:
    """Runs handed over with their texts read as their bytes do, wherever the stream is cut in two:
    at every line end, the bytes around it and every 13th byte (tests.helpers.split_points; a run
    is handed over as whole events, so a cut matters by the event it falls in and whether at its
    boundary)."""
    stream = STREAMS_UNDER_TEST[name]()
    expected = reference(stream)
    for cut in split_points(stream, 13):
        events, _ = handed([known_pieces(stream[:cut]), known_pieces(stream[cut:])])
        assert merged(events) == expected, f"split at {cut}: {stream[max(0, cut - 30) : cut + 30]!r}"


@pytest.mark.parametrize("name", FIXTURES)
def test_what_the_pipeline_hands_over_reads_as_its_bytes(name: str) -> None:
    raw = (STREAMS / name).read_bytes()
    events_at = [i + 2 for i in range(len(raw)) if raw.startswith(b"\n\n", i)][:-1]
    for cuts in ([], events_at, list(range(13, len(raw), 97))):
        pieces = pipeline_pieces(raw, cuts)
        expected, _ = read([joined(piece) for piece in pieces], templates=False)
        events, reader = handed(pieces)
        assert merged(events) == merged(expected)
        run_texts = sum(len(p.texts) for piece in pieces for p in piece if isinstance(p, KnownRun))
        assert reader.handed == run_texts  # (every run handed over taken from its texts)
