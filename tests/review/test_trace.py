"""The trace of a held call: the clock runs through the hold (`t_ms` and `done` include it), the
review events are part of the documented vocabulary, and what the gate really produces validates
against docs/trace-event.schema.json."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import orjson
import pytest

from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.review.rules import Decision, ReviewPolicy, Verdict
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.gate_completion import completion_held_calls, release_completion
from proxy.core.stream.taps import build_trace
from proxy.core.stream.trace import TraceBuilder
from proxy.demo import simulated_table
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.review.test_e2e import ASK, EMAIL_TOOL, decide, mock, pending, proxy_settings  # noqa: F401

DOCS = Path(__file__).parents[2] / "docs"
VALIDATOR = jsonschema.Draft202012Validator(orjson.loads((DOCS / "trace-event.schema.json").read_bytes()))
POLICY = ReviewPolicy(("send_email",))


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"rv_{next(counter)}"


def traces(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(b[8:]) for b in body.split(b"\n\n") if b.startswith(b": trace ")]


def held_stream(builder: TraceBuilder) -> bytes:
    """A stream as the pipeline writes it: the builder's events at fake clock readings (ms)."""

    def comments(events: list[dict[str, Any]]) -> bytes:
        return b"".join(b": trace " + orjson.dumps(e) + b"\n\n" for e in events)

    def data(delta: dict[str, Any], finish: str | None = None) -> bytes:
        c = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        c["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return comments(builder.on_chunk(c, False, clock[0])) + b"data: " + orjson.dumps(c) + b"\n\n"

    clock = [1.0]
    out = comments(builder.begin({"messages": ASK}, 1.0))
    clock[0] = 5.0
    out += data({"role": "assistant", "content": "Sure."})
    clock[0] = 10.0
    out += data(
        {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "send_email", "arguments": "{}"}}]}
    )
    clock[0] = 13.0
    out += data({}, "tool_calls")
    out += comments(builder.finish(13.0)) + b"data: [DONE]\n\n"
    return out


@pytest.mark.parametrize("verdict", [Verdict.APPROVE, Verdict.REJECT, Verdict.TIMEOUT])
def test_done_and_t_ms_include_the_hold(verdict: Verdict) -> None:
    builder = TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="none", provider="p")
    builder.hold_done()
    gate = StreamGate(
        POLICY, new_id=ids(), trace_format=TraceFormat.COMMENT, zh=False, max_event_bytes=1 << 20
    )
    body = gate.feed(held_stream(builder))
    assert gate.holding
    (call,) = gate.held_calls(now=0.0, timeout=30.0)
    body += gate.request_frames(13.0)
    # 24 s later (a fake clock: readings are passed in), the reviewer decides.
    closing = builder.release_done(
        24_013.0, finish_reason="tool_calls" if verdict is Verdict.APPROVE else "stop"
    )
    body += gate.release({call.review_id: Decision(verdict, comment="not now")}, 24_013.0, closing)
    events = traces(body)
    assert [e["seq"] for e in events] == list(range(len(events)))
    times = [e["t_ms"] for e in events]
    assert times == sorted(times), events
    done = events[-1]
    assert done["type"] == "done" and done["t_ms"] == 24_013 and done["total_ms"] == 24_013
    assert done["message"] == "Done in 24.0 s"
    kinds = [e["type"] for e in events]
    request, decision = events[kinds.index("review.request")], events[kinds.index("review.decision")]
    assert request["t_ms"] <= 13 and decision["t_ms"] == 24_013
    assert done["finish_reason"] == ("tool_calls" if verdict is Verdict.APPROVE else "stop")
    for event in events:
        VALIDATOR.validate(event)
    assert body.endswith(b"data: [DONE]\n\n") and body.count(b"[DONE]") == 1


def test_the_console_tap_sees_the_hold_and_a_done_that_includes_it() -> None:
    tapped: list[dict[str, Any]] = []
    builder = build_trace(TraceMode.BRIEF, tapped.extend, zh=False, level="none", provider="p", method=None)
    assert builder is not None
    builder.hold_done()
    gate = StreamGate(
        POLICY, new_id=ids(), trace_format=TraceFormat.COMMENT, zh=False, max_event_bytes=1 << 20
    )
    gate.feed(held_stream(builder))
    assert "done" not in [e["type"] for e in tapped]  # not yet: the exchange is not over
    (call,) = gate.held_calls(now=0.0, timeout=30.0)
    for event in gate.review_events(13.0):
        builder.note(event, 13.0)
    assert [e["type"] for e in tapped][-1] == "review.request"
    decided = gate.decision_events({call.review_id: Decision(Verdict.APPROVE)})
    for event in decided:
        builder.note(event, 24_013.0)
    builder.release_done(24_013.0)
    kinds = [e["type"] for e in tapped]
    assert kinds[-3:] == ["review.request", "review.decision", "done"]
    assert tapped[-1]["total_ms"] == 24_013
    assert [e["seq"] for e in tapped] == list(range(len(tapped)))
    for event in tapped:
        VALIDATOR.validate(event)
    assert builder.outcome() is not None


def test_without_a_hold_the_done_comes_before_done_as_ever() -> None:
    builder = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="none", provider="p")
    builder.hold_done()
    gate = StreamGate(
        POLICY, new_id=ids(), trace_format=TraceFormat.COMMENT, zh=False, max_event_bytes=1 << 20
    )
    events = (
        b"".join(b": trace " + orjson.dumps(e) + b"\n\n" for e in builder.begin(None, 0.0))
        + b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
    )
    builder.finish(3.0)
    body = gate.feed(events + b"data: [DONE]\n\n")
    assert not gate.holding and b"[DONE]" not in body  # [DONE] waits for the closing events
    body += gate.flush(builder.release_done(3.5))
    assert [e["type"] for e in traces(body)] == ["status", "done"]
    assert body.endswith(b"data: [DONE]\n\n")


def test_completion_trace_includes_the_hold() -> None:
    body = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "send_email", "arguments": "{}"}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    builder = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="none", provider="p")
    builder.hold_done()
    body["trace"] = builder.begin(None, 0.0) + builder.on_completion(body, False, 13.0)
    assert "done" not in [e["type"] for e in body["trace"]]
    held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0)
    out = release_completion(
        body,
        held,
        {held[0].review_id: Decision(Verdict.REJECT, comment="no")},
        zh=False,
        now_ms=24_013.0,
        closing=builder.release_done(24_013.0, finish_reason="stop"),
    )
    trace = out["trace"]
    assert [e["type"] for e in trace][-3:] == ["review.request", "review.decision", "done"]
    assert trace[-1]["total_ms"] == 24_013 and trace[-1]["finish_reason"] == "stop"
    assert [e["seq"] for e in trace] == list(range(len(trace)))
    assert [e["t_ms"] for e in trace] == sorted(e["t_ms"] for e in trace)
    for event in trace:
        VALIDATOR.validate(event)


@pytest.mark.parametrize("trace_format", ["comment", "event"])
@pytest.mark.parametrize("mode", ["brief", "detailed"])
def test_real_events_of_a_held_stream_validate_and_include_the_hold(
    mock: BackgroundServer,  # noqa: F811
    trace_format: str,
    mode: str,
) -> None:
    # The review times out after 0.3 s: the hold lasts at least that long, whatever the machine.
    app = create_app(proxy_settings(mock, review_timeout=0.3), table=simulated_table(mock.port))
    body = {"model": "deepseek-v4", "messages": ASK, "tools": [EMAIL_TOOL], "stream": True}
    headers = {"X-Trace": mode, "X-Trace-Format": trace_format}
    with BackgroundServer(app) as server:
        raw = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=30).content
    events = (
        traces(raw)
        if trace_format == "comment"
        else [
            orjson.loads(b.split(b"data: ", 1)[1])["trace"]
            for b in raw.split(b"\n\n")
            if b.startswith(b"event: trace")
        ]
    )
    kinds = [e["type"] for e in events]
    assert "review.request" in kinds and "review.decision" in kinds and kinds[-1] == "done"
    for event in events:
        VALIDATOR.validate(event)
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert [e["t_ms"] for e in events] == sorted(e["t_ms"] for e in events)
    decision = events[kinds.index("review.decision")]
    request = events[kinds.index("review.request")]
    assert decision["t_ms"] - request["t_ms"] >= 299  # (the 0.3 s hold; stamps rounded to 0.1 ms)
    assert events[-1]["total_ms"] >= decision["t_ms"]


def test_real_events_of_a_held_completion_validate_and_include_the_hold(mock: BackgroundServer) -> None:  # noqa: F811
    app = create_app(proxy_settings(mock, review_timeout=0.3), table=simulated_table(mock.port))
    body = {"model": "deepseek-v4", "messages": ASK, "tools": [EMAIL_TOOL]}
    with BackgroundServer(app) as server:
        answer = httpx.post(
            f"{server.url}/v1/chat/completions", json=body, headers={"X-Trace": "detailed"}, timeout=30
        ).json()
    events = answer["trace"]
    for event in events:
        VALIDATOR.validate(event)
    kinds = [e["type"] for e in events]
    assert kinds[-3:] == ["review.request", "review.decision", "done"]
    # The hold (review_timeout 0.3 s) is inside `done`. (Not to the tenth: both stamps are rounded
    # to 0.1 ms, and the request is stamped a few µs after the reviewer's clock starts.)
    assert events[-1]["total_ms"] - events[kinds.index("review.request")]["t_ms"] >= 299
    assert [e["t_ms"] for e in events] == sorted(e["t_ms"] for e in events)
