"""One streamed answer's way from the upstream's bytes to the client's (proxy.core.stream.
response_stream), on plain values: chat (the identity door), each front door, with and without the
review gate, another upstream protocol's answer decoded first, every way a stream ends, and the
same bytes whatever the split of the upstream's reads."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from proxy.core.controls import TraceFormat
from proxy.core.protocols.messages.events import ThinkingFacts
from proxy.core.protocols.messages.stream import MessagesTranscoder
from proxy.core.protocols.responses.output import ResponseFrame
from proxy.core.protocols.responses.stream import ResponsesTranscoder
from proxy.core.protocols.responses.upstream_request import ResponsesAnswer
from proxy.core.review.rules import Decision, ReviewPolicy, Verdict
from proxy.core.stream.chunk_template import KnownRun
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.pipeline_end import StreamFailure
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.response_stream import (
    CHAT_DOOR,
    FIRST_EVENT_APART_BYTES,
    ResponseStream,
    first_apart,
    first_event,
    front_door,
)

DONE = b"data: [DONE]\n\n"
NOW = 5.0  # (one clock reading for every step: the bytes, not the times, are under test)


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def call(index: int, *, id: str | None = None, name: str | None = None, args: str = "") -> bytes:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if id is not None:
        fragment |= {"id": id, "type": "function"}
        fragment["function"]["name"] = name
    return chunk({"tool_calls": [fragment]})


TEXT = (
    chunk({"role": "assistant", "content": ""})
    + b"".join(chunk({"content": word}) for word in ("Hello", ", ", "wor", "ld", " ✓"))
    + chunk({}, "stop")
    + DONE
)


def tool_stream(name: str) -> bytes:
    return (
        chunk({"role": "assistant", "content": "Let me check."})
        + call(0, id="call_1", name=name)
        + call(0, args='{"to":')
        + call(0, args='"a@b.c"}')
        + chunk({}, "tool_calls")
        + DONE
    )


def pipeline() -> StreamPipeline:
    return StreamPipeline(
        reasoning=ReasoningOptions(), trace=None, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
    )


def gate() -> StreamGate:
    counter = itertools.count(1)
    return StreamGate(
        ReviewPolicy(("send_email",)),
        new_id=lambda: f"rv_{next(counter)}",
        trace_format=None,
        zh=False,
        max_event_bytes=1 << 20,
    )


def responses_door() -> ResponsesTranscoder:
    counter = itertools.count()
    return ResponsesTranscoder(
        ResponseFrame("resp_1", "m", 1_700_000_000, summary=False, echo={}),
        seal=lambda facts: None,
        new_id=lambda prefix: f"{prefix}_{next(counter)}",
    )


def messages_door() -> MessagesTranscoder:
    def sign(facts: ThinkingFacts) -> str:
        return "sig"

    return MessagesTranscoder("msg_1", "m", seal=sign, new_id=lambda prefix: f"{prefix}_1")


# Each door as the stream takes it: None for chat, else the door's transcoder (its pure half: the
# stream feeds and closes it; its `settle` is the edge's to await).
Door = Callable[[], Any]
DOORS: dict[str, Door] = {"chat": lambda: None, "responses": responses_door, "messages": messages_door}


def make(door: Door, *, gated: bool = False, upstream: ResponsesAnswer | None = None) -> ResponseStream:
    return ResponseStream(
        pipeline(), {}, gate=gate() if gated else None, door=door(), upstream=upstream, trace=None
    )


def run(stream: ResponseStream, reads: list[bytes], decide: Verdict = Verdict.APPROVE) -> bytes:
    """What the edge does, without the I/O: every step's output in order; a held call decided."""
    out = [stream.begin(NOW)]
    for read in reads:
        out.append(stream.feed(read, NOW))
        if stream.pending:
            out.append(stream.resume(NOW))
        if stream.closed:
            break
    out.append(stream.finish(NOW))
    held = stream.held
    if held is not None:
        calls = held.held_calls(now=100.0, timeout=30.0)
        decisions = {c.review_id: Decision(decide) for c in calls}
        out.append(stream.relay(held.release(decisions, NOW)))
    out.append(stream.close())
    return b"".join(out)


def splits(data: bytes) -> list[list[bytes]]:
    """The body in two reads, cut at every offset."""
    return [[data[:i], data[i:]] for i in range(1, len(data))]


def events(out: bytes) -> list[Any]:
    """The `data:` payloads of an SSE body, in order ([DONE] as bytes)."""
    found: list[Any] = []
    for block in out.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                payload = line[6:]
                found.append(payload if payload == b"[DONE]" else orjson.loads(payload))
    return found


def kinds(out: bytes) -> list[str]:
    return [e["type"] for e in events(out) if isinstance(e, dict) and "type" in e]


def texts(door: str, out: bytes) -> str:
    """The answer's text as a door's client reads it from its events."""
    found = [e for e in events(out) if isinstance(e, dict)]
    if door == "responses":
        return "".join(e["delta"] for e in found if e.get("type") == "response.output_text.delta")
    return "".join(e["delta"]["text"] for e in found if e.get("type") == "content_block_delta")


# --- chat: the identity door ------------------------------------------------------------------------


def test_chat_passes_an_unchanged_stream_byte_for_byte_whatever_the_split() -> None:
    assert run(make(DOORS["chat"]), [TEXT]) == TEXT
    for reads in splits(TEXT):
        assert run(make(DOORS["chat"]), reads) == TEXT


def test_the_identity_door_is_the_door_of_a_chat_client() -> None:
    assert front_door(None) is CHAT_DOOR
    door: Any = responses_door()
    assert front_door(door) is door
    run_ = KnownRun(chunk({"content": "a"}), b"data: ", b"\n\n", ["a"])
    assert CHAT_DOOR.feed(TEXT) is TEXT and CHAT_DOOR.completion(b"{}") == b"{}"
    assert CHAT_DOOR.feed_pieces([b"x", run_]) == b"x" + run_.data and CHAT_DOOR.close() == b""
    assert make(DOORS["chat"]).door is CHAT_DOOR


def test_a_stream_the_upstream_ends_without_done_gets_its_done() -> None:
    assert run(make(DOORS["chat"]), [TEXT[: -len(DONE)]]) == TEXT


# --- each front door --------------------------------------------------------------------------------

STARTS = {"responses": "response.created", "messages": "message_start"}
ENDS = {"responses": "response.completed", "messages": "message_stop"}
FAILS = {"responses": "response.failed", "messages": "error"}


@pytest.mark.parametrize("name", ["responses", "messages"])
def test_a_door_writes_its_protocol_the_same_whatever_the_split(name: str) -> None:
    whole = run(make(DOORS[name]), [TEXT])
    assert kinds(whole)[0] == STARTS[name] and kinds(whole)[-1] == ENDS[name]
    assert texts(name, whole) == "Hello, world ✓"
    # The door reads what the pipeline wrote, and nothing else:
    alone = DOORS[name]()
    assert alone is not None
    assert whole == alone.feed(TEXT) + alone.close()
    for reads in splits(TEXT):
        assert run(make(DOORS[name]), reads) == whole


@pytest.mark.parametrize("name", ["responses", "messages"])
def test_a_stream_cut_short_ends_failed_at_the_door(name: str) -> None:
    stream = make(DOORS[name])
    out = stream.begin(NOW) + stream.feed(TEXT[:200], NOW)
    out += stream.fail(StreamFailure("the upstream went away"), NOW) + stream.close()
    assert kinds(out)[-1] == FAILS[name] and ENDS[name] not in kinds(out)
    assert b"the upstream went away" in out


# --- the review gate --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DOORS))
def test_a_call_the_gate_does_not_cover_goes_out_as_without_a_gate(name: str) -> None:
    body = tool_stream("get_weather")
    plain = run(make(DOORS[name]), [body])
    assert events(run(make(DOORS[name], gated=True), [body])) == events(plain)
    for reads in splits(body)[::7]:
        assert events(run(make(DOORS[name], gated=True), reads)) == events(plain)


@pytest.mark.parametrize("name", list(DOORS))
def test_a_covered_call_waits_for_its_review_then_goes_out_as_decided(name: str) -> None:
    body = tool_stream("send_email")
    stream = make(DOORS[name], gated=True)
    before = stream.begin(NOW) + stream.feed(body, NOW) + stream.finish(NOW)
    assert b"send_email" not in before and b"[DONE]" not in before  # held: nothing past the call
    assert not set(ENDS.values()) & set(kinds(before))
    assert stream.held is not None
    approved = run(make(DOORS[name], gated=True), [body])
    assert approved.startswith(before) and b"send_email" in approved
    assert events(approved) == events(run(make(DOORS[name]), [body]))  # approved: as it came
    rejected = run(make(DOORS[name], gated=True), [body], Verdict.REJECT)
    assert rejected.startswith(before) and b"a@b.c" not in rejected  # the call never reaches the client
    if name == "chat":
        assert events(rejected)[-2]["choices"][0]["finish_reason"] == "stop"  # (no call left)
    for reads in splits(body)[::5]:
        assert run(make(DOORS[name], gated=True), reads) == approved


@pytest.mark.parametrize("name", list(DOORS))
def test_a_failure_while_a_call_is_held_never_releases_it(name: str) -> None:
    stream = make(DOORS[name], gated=True)
    out = stream.begin(NOW) + stream.feed(tool_stream("send_email"), NOW) + stream.finish(NOW)
    assert stream.held is not None
    out += stream.fail(StreamFailure("review timed out", type="proxy_error", code="review_incomplete"), NOW)
    out += stream.close()
    assert b"a@b.c" not in out and b"review timed out" in out
    assert stream.held is None
    if name == "chat":
        assert out.endswith(DONE) and events(out)[-2]["error"]["code"] == "review_incomplete"


# --- failures ---------------------------------------------------------------------------------------


def test_a_broken_exchange_ends_with_an_error_event_then_done() -> None:
    stream = make(DOORS["chat"])
    out = stream.begin(NOW) + stream.feed(TEXT[:150], NOW)
    failed = stream.fail(StreamFailure("gone", code="upstream_stream_error"), NOW)
    *_, error, done = events(out + failed)
    assert error["error"]["message"] == "gone" and error["error"]["code"] == "upstream_stream_error"
    assert done == b"[DONE]" and failed.endswith(DONE)
    assert stream.fail(StreamFailure("again"), NOW) == b""  # (once)
    assert stream.broken is None and stream.close() == b""


def test_a_truncated_body_is_the_pipelines_own_failure() -> None:
    stream = make(DOORS["chat"])
    out = stream.begin(NOW) + stream.feed(TEXT[:-5], NOW) + stream.finish(NOW)
    assert stream.failure is not None and stream.failure.code == "upstream_truncated"
    assert out.endswith(DONE)


# --- another upstream protocol, decoded first -------------------------------------------------------


def responses_api_stream() -> bytes:
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    whole = {**item, "content": [{"type": "output_text", "text": "Hello"}]}
    answer = {"id": "resp_1", "model": "gpt-5.4", "created_at": 1, "output": []}
    delta = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "item_id": "msg_1"}
    found: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**answer, "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {**delta, "delta": "Hel"},
        {**delta, "delta": "lo"},
        {"type": "response.output_item.done", "output_index": 0, "item": whole},
        {"type": "response.completed", "response": {**answer, "status": "completed"}},
    ]
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in found)


@pytest.mark.parametrize("name", list(DOORS))
def test_another_upstream_protocol_is_decoded_before_the_pipeline_whatever_the_split(name: str) -> None:
    body = responses_api_stream()
    whole = run(make(DOORS[name], upstream=ResponsesAnswer(include_usage=False)), [body])
    assert b"Hel" in whole and b"lo" in whole
    if name == "chat":
        assert [e["choices"][0]["delta"].get("content") for e in events(whole)[:-1]] == ["Hel", "lo", None]
    for reads in splits(body)[::3]:
        assert run(make(DOORS[name], upstream=ResponsesAnswer(include_usage=False)), reads) == whole


def test_an_upstream_protocol_cut_short_ends_with_an_error_event() -> None:
    body = responses_api_stream()
    cut = body[: body.index(b"event: response.completed")]
    out = run(make(DOORS["chat"], upstream=ResponsesAnswer(include_usage=False)), [cut])
    assert out.endswith(DONE) and "error" in events(out)[-2]


# --- the first event of a big first read ------------------------------------------------------------

BIG = chunk({"role": "assistant", "content": "Hello"}) + b"".join(
    chunk({"content": f" word {i}"}) for i in range(120)
)


@pytest.mark.parametrize("name", list(DOORS))
def test_the_first_event_of_a_big_first_read_comes_apart(name: str) -> None:
    assert len(BIG) > FIRST_EVENT_APART_BYTES
    stream = make(DOORS[name])
    first = stream.feed(BIG + DONE, NOW)
    assert stream.pending
    rest = stream.resume(NOW)
    assert not stream.pending and stream.resume(NOW) == b""
    alone = make(DOORS[name])
    assert first == alone.feed(chunk({"role": "assistant", "content": "Hello"}), NOW)
    whole = first + rest + stream.finish(NOW) + stream.close()
    assert whole == run(make(DOORS[name]), [BIG + DONE])
    later = stream.feed(BIG, NOW)  # (only the first read)
    assert not stream.pending and later == b""  # (the stream had ended)


def test_first_event_is_cut_only_from_a_big_read_with_more_after_it() -> None:
    event = chunk({"content": "Hello"})
    assert first_event(event * 2) == b""  # small: processed whole
    big = event + b"x" * FIRST_EVENT_APART_BYTES
    assert first_event(big) == event
    assert first_event(b"data: " + b"y" * FIRST_EVENT_APART_BYTES + b"\n\n" + event) == b""  # no end in reach


def test_first_apart_cuts_a_decoded_first_read_the_same_way() -> None:
    # Another upstream protocol's first read arrives decoded, as pieces: the first event of its
    # first piece goes apart, and the pieces after it stay as they came (a run keeps its texts).
    event = chunk({"content": "Hello"})
    big = event + b"x" * FIRST_EVENT_APART_BYTES
    run_ = KnownRun(event, b"data: ", b"\n\n", ["Hello"])
    assert first_apart(big) == (event, big[len(event) :])
    assert first_apart(event) == (event,)
    assert first_apart([big, run_]) == ([event], [big[len(event) :], run_])
    assert first_apart([run_, big]) == ([run_, big],)  # (a run first: nothing to cut)
    assert first_apart([]) == ([],)
