"""What both bridged doors' response sides share (proxy.core.protocols.door_stream), held for each
door: the encoders' one reading of the internal event stream (nothing after the finish reason but
usage, nothing after the terminal event, text deltas written directly exactly as the general path
writes them) and the transcoders' one batching (comments in their place, a stream cut short, a body
that is not JSON, runs counted)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.protocols.chat_events import (
    ChatEvent,
    Done,
    Error,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from proxy.core.protocols.door_stream import (
    CUT_SHORT,
    NOT_AN_OBJECT,
    DoorEncoder,
    DoorTranscoder,
    comment_event,
)
from proxy.core.protocols.messages.events import MessagesEncoder, ThinkingFacts
from proxy.core.protocols.messages.stream import MessagesTranscoder
from proxy.core.protocols.responses.events import ResponsesEncoder
from proxy.core.protocols.responses.output import ReasoningItemFacts, ResponseFrame, frames
from proxy.core.protocols.responses.stream import ResponsesTranscoder
from proxy.core.stream.chunk_template import KnownRun
from tests.helpers import STREAM_FIXTURES, pipeline_pieces

DOORS = ("responses", "messages")
# Each door's failure event.
FAILED = {"responses": "response.failed", "messages": "error"}
DONE = b"data: [DONE]\n\n"
DONE_EVENT = Done()


def seal_item(facts: ReasoningItemFacts) -> str:
    return f"sealed:{len(facts.text)}"


def sign(facts: ThinkingFacts) -> str:
    return f"sig:{len(facts.text)}"


def new_id(prefix: str) -> str:
    return f"{prefix}_1"


def encoder(door: str) -> DoorEncoder:
    if door == "responses":
        return ResponsesEncoder(ResponseFrame("resp_1", "m", 1_700_000_000), seal=seal_item, new_id=new_id)
    return MessagesEncoder("msg_1", "m", seal=sign, new_id=new_id)


def transcoder(door: str, templates: bool = True) -> DoorTranscoder:
    if door == "responses":
        frame = ResponseFrame("resp_1", "m", 1_700_000_000)
        return ResponsesTranscoder(frame, seal=seal_item, new_id=new_id, templates=templates)
    return MessagesTranscoder("msg_1", "m", seal=sign, new_id=new_id, templates=templates)


def data(**delta: Any) -> bytes:
    """One text chunk as the pipeline writes it (`finish` given: the finish reason instead)."""
    finish = delta.pop("finish", None)
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def delta(reasoning: bool, texts: list[str]) -> ChatEvent:
    return ReasoningDelta(texts) if reasoning else TextDelta(texts)


@pytest.mark.parametrize("door", DOORS)
def test_each_door_runs_the_one_skeleton(door: str) -> None:
    assert isinstance(encoder(door), DoorEncoder)
    assert isinstance(transcoder(door), DoorTranscoder)


@pytest.mark.parametrize("door", DOORS)
def test_output_after_the_finish_reason_is_not_carried_but_a_later_usage_counts(door: str) -> None:
    late: list[ChatEvent] = [
        TextDelta(["late"]),
        ReasoningDelta(["late"]),
        ToolCallDelta(0, "call_late", "late", "{}", None),
    ]
    usage = Usage({"prompt_tokens": 3, "completion_tokens": 7})
    events: list[ChatEvent] = [TextDelta(["an", "swer"]), Finish("stop", ()), *late, usage, DONE_EVENT]
    written = frames(encoder(door).feed(events))
    assert b"late" not in written
    assert b'"output_tokens":7' in written
    assert b'"an"' in written and b'"swer"' in written


@pytest.mark.parametrize("door", DOORS)
def test_nothing_follows_the_terminal_event(door: str) -> None:
    e = encoder(door)
    out = e.feed([TextDelta(["a"]), Error("boom", ""), TextDelta(["b"])])
    assert out[-1]["type"] == FAILED[door] and e.finished
    assert b"boom" in frames(out[-1:])
    assert e.feed([TextDelta(["c"]), Finish("stop", ()), DONE_EVENT]) == []
    assert e.fail("again") == [] and e.end() == []


@pytest.mark.parametrize("reasoning", [False, True])
@pytest.mark.parametrize("door", DOORS)
def test_text_deltas_written_directly_are_what_feed_writes(door: str, reasoning: bool) -> None:
    direct, general = encoder(door), encoder(door)
    opening = [delta(reasoning, ["open"])]
    assert frames(direct.feed(opening)) == frames(general.feed(opening))
    texts = ["b", 'c"d\n', "é 😀"]
    written = direct.text_delta_frames(reasoning, texts)
    assert written == frames(general.feed([delta(reasoning, [text]) for text in texts]))
    # (the other kind is not open: not written directly)
    assert direct.text_delta_frames(not reasoning, ["x"]) is None
    # the texts were kept: the whole answer the same
    ending: list[ChatEvent] = [Finish("stop", ()), DONE_EVENT]
    assert frames(direct.feed(ending)) == frames(general.feed(ending))


@pytest.mark.parametrize("door", DOORS)
def test_nothing_is_written_directly_before_an_item_opens_or_after_the_finish(door: str) -> None:
    e = encoder(door)
    assert e.text_delta_frames(False, ["a"]) is None
    e.feed([TextDelta(["a"]), Finish("stop", ())])
    assert e.text_delta_frames(False, ["b"]) is None


@pytest.mark.parametrize("door", DOORS)
def test_comments_keep_their_place_between_the_events(door: str) -> None:
    comment = b': trace {"stage":"x"}\n\n'
    stream = data(content="a") + comment + data(content="b") + data(finish="stop") + DONE
    out = transcoder(door).feed(stream)
    assert out.count(comment) == 1
    before, after = out.split(comment)
    assert b'"a"' in before and b'"b"' in after and b'"a"' not in after


@pytest.mark.parametrize("door", DOORS)
def test_a_stream_cut_short_ends_in_the_doors_failure(door: str) -> None:
    t = transcoder(door)
    out = t.feed(data(content="half"))
    end = t.close()
    assert b"half" in out and CUT_SHORT.encode() in end
    assert FAILED[door].encode() in end
    assert t.close() == b""  # (already ended)


@pytest.mark.parametrize("door", DOORS)
def test_a_completion_that_is_not_a_json_object_is_the_upstreams_error(door: str) -> None:
    for body in (b"[1]", b"not json"):
        answer = orjson.loads(transcoder(door).completion(body))
        assert NOT_AN_OBJECT in orjson.dumps(answer).decode()
        assert (answer["status"] == "failed") if door == "responses" else (answer["type"] == "error")


@pytest.mark.parametrize("door", DOORS)
def test_runs_are_read_by_their_shape_and_counted_on_each_door(door: str) -> None:
    stream = b"".join(data(content=f"t{i}") for i in range(40)) + data(finish="stop") + DONE
    fast, reference = transcoder(door), transcoder(door, templates=False)
    assert fast.feed(stream) + fast.close() == reference.feed(stream) + reference.close()
    assert fast.hits > 30 and reference.hits == 0


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("name", sorted(p.name for p in STREAM_FIXTURES.glob("*.sse")))
def test_a_paced_streams_reads_handed_over_one_by_one_give_the_reference_bytes(door: str, name: str) -> None:
    """A paced stream's reads, one event each, as the pipeline hands them over (mostly a run of one,
    which `feed_pieces` writes straight from the encoder's direct delta path): byte for byte what
    the reference path (every event decoded, every delta through `feed`) writes for the same bytes."""
    raw = (STREAM_FIXTURES / name).read_bytes()
    events = [i + 2 for i in range(len(raw)) if raw.startswith(b"\n\n", i)][:-1]
    pieces = pipeline_pieces(raw, events)
    handed, reference = transcoder(door), transcoder(door, templates=False)
    out = b"".join(handed.feed_pieces(piece) for piece in pieces) + handed.close()
    joined = [b"".join(p if isinstance(p, bytes) else p.data for p in piece) for piece in pieces]
    assert out == b"".join(reference.feed(read) for read in joined) + reference.close()
    runs_of_one = sum(1 for piece in pieces if len(piece) == 1 and isinstance(piece[0], KnownRun))
    assert runs_of_one == 0 or handed.hits >= runs_of_one


def test_comment_lines_are_one_event_each_line_ended() -> None:
    assert comment_event([b": trace {}"]) == b": trace {}\n\n"
    assert comment_event([b": a", b": b"]) == b": a\n: b\n\n"
    assert comment_event([]) == b"\n"


@pytest.mark.parametrize("door", DOORS)
def test_a_usage_after_the_terminal_event_does_not_change_the_answer(door: str) -> None:
    """A usage read alone (the transcoder records it without a batch) counts until the terminal
    event and not after it, as the encoder's `feed` counts it."""
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    later = {"prompt_tokens": 30, "completion_tokens": 40, "total_tokens": 70}
    usage_chunk = b"data: " + orjson.dumps({"id": "c1", "choices": [], "usage": usage}) + b"\n\n"
    later_chunk = b"data: " + orjson.dumps({"id": "c1", "choices": [], "usage": later}) + b"\n\n"
    stream = [data(content="hi"), data(finish="stop"), usage_chunk, DONE, later_chunk]
    direct, reference = transcoder(door), transcoder(door, templates=False)
    assert b"".join(direct.feed(piece) for piece in stream) == b"".join(
        reference.feed(piece) for piece in stream
    )
    assert direct.feed(b"") == b""
    final = direct.final
    assert final is not None
    assert final["usage"]["output_tokens"] == 4  # (both doors name it so)
