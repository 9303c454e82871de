"""Listeners: per-request observers see detailed trace events and exactly one end, whatever the
client asked for; the client's own trace view is unchanged by them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx
import orjson
import pytest

from proxy.access_log import AccessRecord
from proxy.app import create_app
from proxy.levels import TraceMode
from proxy.observe import BRIEF_TYPES, TappedTraceBuilder, TraceEvents
from proxy.trace import TraceBuilder
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


class Spy:
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
                "model": "deepseek-reasoner",
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
    assert record.route == "chat" and record.model == "deepseek-reasoner" and record.stream
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
