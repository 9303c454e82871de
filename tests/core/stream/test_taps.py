"""Listeners: per-request observers see detailed trace events and exactly one end, whatever the
client asked for; the client's own trace view is unchanged by them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx
import orjson
import pytest

from proxy.core.controls import TraceMode
from proxy.core.events import AccessRecord, RequestObserver, TraceEvents
from proxy.core.stream.taps import (
    BRIEF_TYPES,
    AnswerKeepingTraceBuilder,
    TappedTraceBuilder,
    tap_needs_detail,
)
from proxy.core.stream.trace import TraceBuilder
from proxy.server.app import create_app
from tests.helpers import Recorder, make_settings

TOOL_CHUNKS = [
    {"id": "c", "choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]},
    {
        "id": "c",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "function": {"name": "kb_search", "arguments": '{"q":1}'},
                        }
                    ]
                },
            }
        ],
    },
    {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
]


def run(builder: TraceBuilder) -> list[dict[str, Any]]:
    out = builder.begin(None, 0.0)
    for i, chunk in enumerate(TOOL_CHUNKS):
        out += builder.on_chunk(chunk, "reasoning_content" in chunk["choices"][0]["delta"], 10.0 * (i + 1))
    return out + builder.finish(100.0)


@pytest.mark.parametrize("mode", [TraceMode.OFF, TraceMode.BRIEF, TraceMode.DETAILED])
def test_tapped_builder_gives_the_client_its_own_mode_and_the_tap_everything(mode: TraceMode) -> None:
    tapped: list[dict[str, Any]] = []
    builder = TappedTraceBuilder(
        client_mode=mode, tap=tapped.extend, zh=False, level="deep", provider="deepseek", method="params"
    )
    client = run(builder)
    detailed = run(
        TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="deep", provider="deepseek", method="params")
    )
    assert tapped == detailed
    if mode is TraceMode.OFF:
        assert client == []
    elif mode is TraceMode.DETAILED:
        assert client == detailed
    else:
        brief = run(
            TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="deep", provider="deepseek", method="params")
        )
        assert client == brief  # same events, same contiguous seq as a plain brief trace
        assert {e["type"] for e in client} <= BRIEF_TYPES
        assert [e["seq"] for e in client] == list(range(len(client)))


@pytest.mark.parametrize("mode", [TraceMode.OFF, TraceMode.BRIEF, TraceMode.DETAILED])
def test_a_tap_content_with_brief_events_gets_the_brief_trace_unless_the_client_wants_more(
    mode: TraceMode,
) -> None:
    tapped: list[dict[str, Any]] = []
    builder = TappedTraceBuilder(
        client_mode=mode,
        tap=tapped.extend,
        detailed_tap=False,
        zh=False,
        level="deep",
        provider="deepseek",
        method="params",
    )
    client = run(builder)
    want = TraceMode.DETAILED if mode is TraceMode.DETAILED else TraceMode.BRIEF
    expected = run(TraceBuilder(mode=want, zh=False, level="deep", provider="deepseek", method="params"))
    assert tapped == expected
    assert client == ([] if mode is TraceMode.OFF else expected)


def test_only_observers_content_with_brief_events_spare_the_detailed_trace() -> None:
    brief, detailed, blind = Spy(), Spy(), Spy()
    brief.brief_trace = True
    blind.wants_trace = False
    assert not tap_needs_detail([brief, blind])
    assert tap_needs_detail([brief, detailed])


class Spy(RequestObserver):
    wants_trace = True

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.ended: list[AccessRecord] = []

    def on_trace(self, events: TraceEvents) -> None:
        self.events.extend(events)

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        assert duration_ms >= 0
        self.ended.append(record)


class SpyListener:
    def __init__(self) -> None:
        self.spies: list[Spy] = []

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> Spy:
        record.forward_headers.append(("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01"))
        spy = Spy()
        self.spies.append(spy)
        return spy


def sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


async def test_observer_sees_detailed_trace_and_one_end_while_client_trace_is_off() -> None:
    rec = Recorder(
        lambda r: httpx.Response(200, content=sse(TOOL_CHUNKS), headers={"content-type": "text/event-stream"})
    )
    listener = SpyListener()
    app = create_app(make_settings(trace="off"), transport=httpx.MockTransport(rec), listeners=[listener])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        r = await client.post(
            "/v1/chat/completions",
            json={
                "model": "deepseek-v4-pro",
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-thinking-level": "deep"},
        )
    assert r.status_code == 200
    assert b": trace" not in r.content  # the client asked for no trace and gets none
    (spy,) = listener.spies
    types = [e["type"] for e in spy.events]
    assert (
        types[0] == "status" and "reasoning.end" in types and "tool_call.end" in types and types[-1] == "done"
    )
    (record,) = spy.ended
    assert record.route == "chat" and record.model == "deepseek-v4-pro" and record.stream
    assert record.level_requested == "deep" and record.level == "deep" and record.thinking_method == "params"
    assert record.status == 200
    assert rec.requests[0].headers["traceparent"].startswith("00-111")


async def test_observer_ends_once_on_refused_and_passthrough_requests() -> None:
    listener = SpyListener()
    app = create_app(
        make_settings(),
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"data": []})),
        listeners=[listener],
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        bad = await client.post("/v1/chat/completions", content=b"{not json")
        ok = await client.get("/v1/models")
    assert bad.status_code == 400 and ok.status_code == 200
    first, second = listener.spies
    assert [r.status for r in first.ended] == [400] and [r.status for r in second.ended] == [200]
    assert second.ended[0].route == "passthrough" and second.events == []


COMPLETION = {
    "id": "chatcmpl-9",
    "object": "chat.completion",
    "model": "deepseek-v4-pro-0813",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello", "reasoning_content": "hmm"},
            "finish_reason": "stop",
        }
    ],
}


@pytest.mark.parametrize("stream", [False, True])
async def test_observers_headers_replace_the_clients_and_reach_every_response(stream: bool) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if stream:
            return httpx.Response(
                200, content=sse(TOOL_CHUNKS), headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(200, json=COMPLETION)

    class HeaderListener(SpyListener):
        def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> Spy:
            record.response_headers.append(("x-observed", "yes"))
            return super().start(record, headers)

    rec = Recorder(answer)
    listener = HeaderListener()
    app = create_app(make_settings(trace="off"), transport=httpx.MockTransport(rec), listeners=[listener])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        theirs = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
        body = {
            "model": "deepseek-v4-pro",
            "stream": stream,
            "messages": [{"role": "user", "content": "hi"}],
        }
        r = await client.post("/v1/chat/completions", json=body, headers={"traceparent": theirs})
        models = await client.get("/v1/models")
    assert r.headers["x-observed"] == "yes" and models.headers["x-observed"] == "yes"
    assert rec.requests[0].headers.get_list("traceparent") == ["00-" + "1" * 32 + "-" + "2" * 16 + "-01"]
    if not stream:
        # A builder that only feeds listeners shows the client nothing: no empty `trace` key.
        assert "trace" not in r.json()
    record = listener.spies[0].ended[0]
    expected_id = "chatcmpl-9" if not stream else "c"
    assert record.response_id == expected_id
    assert record.response_model == ("deepseek-v4-pro-0813" if not stream else "")


def test_answer_keeping_builder_hands_over_text_and_tool_calls_once_and_shows_the_client_the_same() -> None:
    kept: list[list[dict[str, Any]]] = []
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": "Let me "}}]},
        {"choices": [{"index": 0, "delta": {"content": "look."}}]},
        *TOOL_CHUNKS[1:],
    ]
    keeper = AnswerKeepingTraceBuilder(
        output=kept.append,
        client_mode=TraceMode.BRIEF,
        tap=lambda events: None,
        zh=False,
        level="deep",
        provider="deepseek",
        method="params",
    )
    plain = TappedTraceBuilder(
        client_mode=TraceMode.BRIEF,
        tap=lambda e: None,
        zh=False,
        level="deep",
        provider="deepseek",
        method="params",
    )
    for builder in (keeper, plain):
        builder.begin(None, 0.0)
    seen = (
        [[*keeper.on_chunk(c, False, 1.0)] for c in chunks],
        [[*plain.on_chunk(c, False, 1.0)] for c in chunks],
    )
    assert seen[0] == seen[1]
    assert keeper.finish(2.0) == plain.finish(2.0) and keeper.finish(3.0) == []
    assert kept == [
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "Let me look."},
                    {"type": "tool_call", "id": "call_1", "name": "kb_search", "arguments": '{"q":1}'},
                ],
                "finish_reason": "tool_calls",
            }
        ]
    ]


def test_answer_keeping_builder_reads_a_whole_completion() -> None:
    kept: list[list[dict[str, Any]]] = []
    keeper = AnswerKeepingTraceBuilder(
        output=kept.append,
        client_mode=TraceMode.OFF,
        tap=lambda events: None,
        zh=False,
        level="none",
        provider="deepseek",
        method=None,
    )
    assert keeper.on_completion(COMPLETION, True, 5.0) == []  # the client asked for no trace
    assert kept == [
        [{"role": "assistant", "parts": [{"type": "text", "content": "hello"}], "finish_reason": "stop"}]
    ]


def test_an_observer_that_fails_at_the_end_costs_the_others_nothing() -> None:
    from proxy.core.events import notify_end

    class Broken(RequestObserver):
        wants_trace = False

        def on_trace(self, events: TraceEvents) -> None:
            pass

        def on_end(self, record: AccessRecord, duration_ms: float) -> None:
            raise RuntimeError("observer bug")

    after = Spy()
    record = AccessRecord(method="POST", path="/v1/chat/completions", status=200)
    record.observers = [Broken(), after]
    failed = notify_end(record, 1.0)  # does not raise: the failures are returned, for the edge to log
    assert after.ended == [record]
    assert record.observers == []  # let go of (no cycle through an observer keeping its record)
    assert [(type(o).__name__, str(e)) for o, e in failed] == [("Broken", "observer bug")]


class OutcomeReader(RequestObserver):
    """Reads the builder's outcome at the end, watches no events, hears when a stream starts."""

    wants_trace = False
    wants_outcome = True

    def __init__(self) -> None:
        self.streams = 0

    def on_trace(self, events: TraceEvents) -> None:
        raise AssertionError("never asked: wants_trace is False")

    def on_stream(self) -> None:
        self.streams += 1

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        pass


def test_an_outcome_reader_keeps_a_builder_the_client_does_not_see() -> None:
    from proxy.core.stream.taps import build_trace, needs_outcome, trace_tap

    observers = [OutcomeReader()]
    assert needs_outcome(observers) and trace_tap(observers) is None  # type: ignore[arg-type]
    common: dict[str, Any] = {"zh": False, "level": "deep", "provider": "deepseek", "method": "params"}
    assert build_trace(TraceMode.OFF, None, **common) is None  # nobody reads it
    builder = build_trace(TraceMode.OFF, None, outcome=True, detailed_tap=False, **common)
    assert builder is not None
    assert run(builder) == []  # the client asked for no trace and gets none
    outcome = builder.outcome()
    assert outcome is not None and outcome.ttft_ms == 10 and outcome.reasoning_ms == 10
    # A client that asked for a trace keeps its own plain builder: nothing is added for the reader.
    brief = build_trace(TraceMode.BRIEF, None, outcome=True, detailed_tap=False, **common)
    assert type(brief) is TraceBuilder


def test_observers_hear_when_a_stream_starts() -> None:
    from proxy.core.events import notify_stream

    reader = OutcomeReader()
    record = AccessRecord(method="POST", path="/v1/chat/completions")
    record.observers = [Spy(), reader]  # (Spy has no on_stream: it is not asked)
    notify_stream(record)
    assert reader.streams == 1


def test_a_whole_answer_reaches_the_tap_in_one_call_and_the_client_renumbered() -> None:
    calls: list[list[str]] = []
    builder = TappedTraceBuilder(
        client_mode=TraceMode.BRIEF,
        tap=lambda events: calls.append([e["type"] for e in events]),
        zh=False,
        level="deep",
        provider="deepseek",
    )
    builder.begin(None, 0.0)
    body = {"id": "c", "choices": [{"message": {"content": "Hi", "reasoning_content": "hmm"}}]}
    shown = builder.on_completion(body, True, 5.0)
    assert len(calls) == 2 and calls[1][:2] == ["status", "reasoning.start"] and calls[1][-1] == "done"
    assert [e["type"] for e in shown] == ["status", "status", "done"]
    assert [e["seq"] for e in shown] == [1, 2, 3]  # (0 was analyzing, at begin)
    assert calls[1].count("status") == 2 and len(calls[1]) == 5  # the tap's own numbering is untouched


def test_an_observer_that_is_not_a_request_observer_is_named_at_once() -> None:
    from proxy.core.events import start_observers

    class OldStyle:
        wants_trace = False

        def on_end(self, record: AccessRecord, duration_ms: float) -> None:
            pass

    class Listener:
        def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> Any:
            return OldStyle()

    record = AccessRecord(method="POST", path="/v1/chat/completions")
    with pytest.raises(
        TypeError, match=r"Listener\.start returned a OldStyle, not a proxy\.core\.events\.RequestObserver"
    ):
        start_observers([Listener()], record, [])
