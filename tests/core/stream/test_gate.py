"""The stream review gate (proxy.core.stream.gate): what it holds, and what each decision makes of the
held stream. Non-stream completions: test_gate_completion.py; shapes it removes: test_gate_shapes.py."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from proxy.core.controls import TraceFormat
from proxy.core.errors import BadRequest
from proxy.core.review.rules import ClientTool, Decision, ReviewPolicy, Verdict, parse_decision
from proxy.core.stream.gate import StreamGate

POLICY = ReviewPolicy(("send_email", "delete_*"))


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def call_fragment(index: int, *, id: str | None = None, name: str | None = None, args: str = "") -> dict:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if id is not None:
        fragment["id"] = id
        fragment["type"] = "function"
    if name is not None:
        fragment["function"]["name"] = name
    return fragment


def sse(*chunks: dict[str, Any], trace: list[dict[str, Any]] | None = None) -> bytes:
    out = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return out


def stream(calls: list[tuple[str, str, list[str]]], content: str = "Let me check.") -> list[bytes]:
    """The events of a stream with reasoning, content, then each (id, name, argument pieces) call."""
    events = [
        b": trace " + orjson.dumps({"type": "status", "seq": 0, "t_ms": 1, "stage": "thinking"}) + b"\n\n",
        sse(chunk({"role": "assistant", "reasoning_content": "thinking"})),
        sse(chunk({"content": content})),
    ]
    seq = 1
    for index, (call_id, name, pieces) in enumerate(calls):
        events.append(
            b": trace "
            + orjson.dumps({"type": "tool_call.start", "seq": seq, "t_ms": 2, "name": name})
            + b"\n\n"
        )
        seq += 1
        events.append(sse(chunk({"tool_calls": [call_fragment(index, id=call_id, name=name)]})))
        events += [sse(chunk({"tool_calls": [call_fragment(index, args=p)]})) for p in pieces]
    events.append(sse(chunk({}, "tool_calls" if calls else "stop")))
    events.append(b": trace " + orjson.dumps({"type": "done", "seq": seq, "t_ms": 9}) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"rv_{next(counter)}"


def gate(trace: TraceFormat | None = TraceFormat.COMMENT) -> StreamGate:
    return StreamGate(POLICY, new_id=ids(), trace_format=trace, zh=False, max_event_bytes=1 << 20)


def run(
    events: list[bytes], decide: dict[str, Decision] | None, *, split: int | None = None
) -> tuple[bytes, bytes, StreamGate]:
    g = gate()
    data = b"".join(events)
    pieces = [data] if split is None else [data[:split], data[split:]]
    passed = b"".join(g.feed(p) for p in pieces)
    if not g.holding:
        return passed + g.flush(), b"", g
    calls = g.held_calls(now=100.0, timeout=30.0)
    later = g.request_frames(9.0) + g.release(
        decide if decide is not None else {c.review_id: Decision(Verdict.APPROVE) for c in calls}, 20.0
    )
    return passed, later, g


def data_chunks(body: bytes) -> list[Any]:
    out = []
    for block in body.split(b"\n\n"):
        if block.startswith(b"data: "):
            payload = block[6:]
            out.append(payload if payload == b"[DONE]" else orjson.loads(payload))
    return out


def traces(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(b[8:]) for b in body.split(b"\n\n") if b.startswith(b": trace ")]


def assemble(body: bytes) -> tuple[str, dict[int, dict[str, str]], str | None]:
    """What an SDK accumulates: content, calls by index, finish reason."""
    content, calls, finish = "", {}, None
    for c in data_chunks(body):
        if c == b"[DONE]":
            continue
        choice = c["choices"][0]
        content += choice["delta"].get("content") or ""
        for f in choice["delta"].get("tool_calls") or []:
            entry = calls.setdefault(f["index"], {"id": "", "name": "", "arguments": ""})
            entry["id"] += f.get("id", "")
            entry["name"] += f.get("function", {}).get("name", "") or ""
            entry["arguments"] += f.get("function", {}).get("arguments", "") or ""
        finish = choice.get("finish_reason") or finish
    return content, calls, finish


def test_a_call_the_policy_does_not_cover_streams_through_unchanged() -> None:
    events = stream([("call_1", "kb_search", ['{"q":', '"x"}'])])
    passed, later, g = run(events, None)
    assert passed == b"".join(events) and later == b"" and not g.holding


def test_content_before_a_covered_call_streams_and_the_call_is_held() -> None:
    events = stream([("call_1", "send_email", ['{"to":', '"a@b.c"}'])])
    g = gate()
    passed = g.feed(b"".join(events))
    content, calls, finish = assemble(passed)
    assert content == "Let me check." and calls == {} and finish is None
    assert b"[DONE]" not in passed and g.holding
    (held,) = g.held_calls(now=1.0, timeout=5.0)
    assert (held.tool, held.call_id, held.arguments, held.expires) == (
        "send_email",
        "call_1",
        '{"to":"a@b.c"}',
        6.0,
    )


def test_approve_releases_the_held_events_unchanged_at_every_split() -> None:
    events = stream([("call_1", "send_email", ['{"to":', '"a@b.c"}'])])
    expected_data = [e.strip() for e in events if e.startswith(b"data:")]
    for split in range(len(b"".join(events)) + 1):
        passed, later, _ = run(events, None, split=split)
        body = passed + later
        kept = [b for b in body.split(b"\n\n") if b and b"review." not in b]
        # Data events are byte-identical; trace frames are renumbered around the review events.
        assert [b for b in kept if b.startswith(b"data:")] == expected_data, split
        assert [t["seq"] for t in traces(body)] == list(range(len(traces(body)))), split
        assert [t["type"] for t in traces(body)][-3:] == ["review.request", "review.decision", "done"]


def test_modify_sends_the_reviewers_arguments_once() -> None:
    events = stream([("call_1", "send_email", ['{"to":', '"a@b.c"}'])])
    passed, later, _ = run(events, {"rv_1": Decision(Verdict.MODIFY, arguments='{"to":"x@y.z"}')})
    _, calls, finish = assemble(passed + later)
    assert calls == {0: {"id": "call_1", "name": "send_email", "arguments": '{"to":"x@y.z"}'}}
    assert finish == "tool_calls"
    assert (passed + later).endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("verdict", [Verdict.REJECT, Verdict.TIMEOUT])
def test_reject_or_timeout_removes_the_call_and_ends_with_text_and_stop(verdict: Verdict) -> None:
    events = stream([("call_1", "delete_repo", ['{"name":"prod"}'])])
    decision = Decision(verdict, comment="not today" if verdict is Verdict.REJECT else None)
    passed, later, _ = run(events, {"rv_1": decision})
    body = passed + later
    content, calls, finish = assemble(body)
    assert calls == {} and finish == "stop"
    # Who decided is said: a reviewer's comment alone would read like the model's own reason.
    said = (
        "was rejected by a reviewer: not today"
        if verdict is Verdict.REJECT
        else "was not made: the review timed out"
    )
    assert content == f"Let me check.The call to delete_repo {said}."
    assert traces(body)[-1]["type"] == "done" and traces(body)[-1]["finish_reason"] == "stop"
    assert body.endswith(b"data: [DONE]\n\n") and body.count(b"[DONE]") == 1


def test_parallel_calls_each_reviewed_and_the_rest_renumbered() -> None:
    events = stream(
        [
            ("call_a", "kb_search", ['{"q":1}']),
            ("call_b", "send_email", ['{"to":"a"}']),
            ("call_c", "delete_file", ['{"p":"/"}']),
        ]
    )
    g = gate()
    passed = g.feed(b"".join(events))
    held = g.held_calls(now=0.0, timeout=1.0)
    assert [(c.tool, c.index) for c in held] == [("send_email", 1), ("delete_file", 2)]
    later = g.release(
        {held[0].review_id: Decision(Verdict.REJECT), held[1].review_id: Decision(Verdict.APPROVE)}, 20.0
    )
    content, calls, finish = assemble(passed + later)
    assert [(i, c["name"], c["id"]) for i, c in sorted(calls.items())] == [
        (0, "kb_search", "call_a"),
        (1, "delete_file", "call_c"),
    ]
    assert finish == "tool_calls" and "send_email was rejected by a reviewer." in content


def test_without_a_client_trace_the_gate_adds_no_trace_frames() -> None:
    events = [e for e in stream([("call_1", "send_email", ["{}"])]) if not e.startswith(b": trace")]
    g = gate(trace=None)
    body = g.feed(b"".join(events))
    calls = g.held_calls(now=0.0, timeout=1.0)
    body += g.request_frames(9.0) + g.release({calls[0].review_id: Decision(Verdict.APPROVE)}, 20.0)
    assert body == b"".join(events)


def test_discard_drops_what_was_held() -> None:
    g = gate()
    g.feed(b"".join(stream([("call_1", "send_email", ["{}"])])[:-3]))
    assert g.holding
    g.discard()
    assert not g.holding


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"decision": "maybe"}', "decision"),
        (b"{}", "decision"),
        (b'{"decision": "modify"}', "arguments"),
        (b'{"decision": "modify", "arguments": "{}"}', "arguments"),
        (b'{"decision": "approve", "arguments": {}}', "arguments"),
        (b'{"decision": "reject", "comment": 3}', "comment"),
    ],
)
def test_malformed_decisions_name_the_field(body: bytes, param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_decision(body, "r")
    assert caught.value.param == param


def test_decision_comment_is_one_bounded_line() -> None:
    decision = parse_decision(b'{"decision": "reject", "comment": "no\\r\\nway' + b"x" * 900 + b'"}', "ann")
    assert decision.comment is not None and "\n" not in decision.comment and len(decision.comment) == 500
    assert decision.reviewer == "ann"


def test_an_uncovered_call_whose_name_never_settled_is_flushed_at_the_end() -> None:
    # A call with a name but no arguments and no finish chunk: held until its name settles, which
    # never happens; the end of the stream lets it go (with [DONE]) since it was never covered.
    events = [
        sse(chunk({"content": "hi"})),
        sse(chunk({"tool_calls": [call_fragment(0, id="call_1", name="now")]})),
        b"data: [DONE]\n\n",
    ]
    g = gate(trace=None)
    passed = g.feed(b"".join(events))
    assert b"[DONE]" not in passed and not g.holding
    assert passed + g.flush() == b"".join(events)
    assert g.flush() == b""


def test_a_covered_call_is_never_flushed() -> None:
    g = gate(trace=None)
    g.feed(b"".join(stream([("call_1", "send_email", ["{}"])])))
    assert g.holding and g.flush() == b""


@pytest.mark.parametrize("body", [b'{"decision": []}', b'{"decision": {}}', b'{"decision": 1}'])
def test_a_decision_that_is_not_a_string_is_a_400(body: bytes) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_decision(body, "r")
    assert caught.value.param == "decision"


# A Responses client's `send_email` in namespace `mail`: the chat upstream calls it `mail__send_email`.
MAIL = {"mail__send_email": ClientTool("send_email", "mail")}


@pytest.mark.parametrize("pattern", ["send_email", "mail.send_email", "mail.*", "mail__send_email", "*email"])
def test_a_namespaced_call_is_matched_by_each_name_its_client_knows(pattern: str) -> None:
    """The policy matches what the client will run (the bare name, `namespace.name`) as well as the
    flattened name the upstream called; the reviewer and the client are shown `namespace.name`."""
    g = StreamGate(
        ReviewPolicy((pattern,)),
        new_id=ids(),
        trace_format=None,
        zh=False,
        max_event_bytes=1 << 20,
        names=MAIL,
    )
    events = stream([("call_1", "mail__send_email", ['{"to":"a"}'])])
    passed = g.feed(b"".join(events))
    assert assemble(passed)[1] == {} and g.holding
    (held,) = g.held_calls(now=0.0, timeout=1.0, extra={"model": "m"})
    assert held.tool == "mail.send_email"
    assert held.listing()["upstream_tool"] == "mail__send_email" and held.listing()["model"] == "m"
    content, calls, _ = assemble(passed + g.release({held.review_id: Decision(Verdict.REJECT)}, 5.0))
    assert calls == {} and content.endswith("The call to mail.send_email was rejected by a reviewer.")


def test_a_namespaced_call_another_namespace_names_is_not_held() -> None:
    g = StreamGate(
        ReviewPolicy(("crm.send_email",)),
        new_id=ids(),
        trace_format=None,
        zh=False,
        max_event_bytes=1 << 20,
        names=MAIL,
    )
    events = stream([("call_1", "mail__send_email", ['{"to":"a"}'])])
    passed = g.feed(b"".join(events))
    assert not g.holding and passed + g.flush() == b"".join(events)
