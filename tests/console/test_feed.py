"""The console's feed: a bounded ring of request summaries (a flood evicts the oldest; one
session's flood, its own rows), bounded events per request, summaries without reasoning text or
keys, and nothing serialized for nobody."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import orjson

from proxy.console.feed import (
    SUBSCRIBER_BYTES,
    SUBSCRIBER_GAP,
    SUBSCRIBER_QUEUE,
    Feed,
    FeedObserver,
    sse_frame,
)
from proxy.console.summary import MAX_EVENTS, MAX_SUMMARY, MAX_TEXT, summarize
from proxy.core.events import AccessRecord
from proxy.core.usage import ReasoningTokens, TokenUsage


def record(**fields: Any) -> AccessRecord:
    rec = AccessRecord(method="POST", path="/v1/chat/completions", route="chat")
    for key, value in fields.items():
        setattr(rec, key, value)
    return rec


def finish(feed: Feed, rec: AccessRecord, events: list[dict[str, Any]] | None = None) -> FeedObserver:
    observer = feed.start(rec, [("authorization", "Bearer sk-secret")])
    if events:
        observer.on_trace(events)
    rec.status = 200
    observer.on_end(rec, 12.5)
    return observer


def test_ring_keeps_the_newest_requests_and_a_flood_evicts_the_oldest() -> None:
    feed = Feed(history=5)
    for i in range(1000):
        finish(feed, record(model=f"m{i}"))
    kept = feed.local()
    assert len(kept) == 5
    assert [entry["model"] for entry in kept] == ["m999", "m998", "m997", "m996", "m995"]


def test_events_per_request_are_bounded_and_the_cut_is_counted() -> None:
    # (A streamed answer: only a stream times the first token and the thinking.)
    feed = Feed(history=3)
    flood = [{"type": "status", "seq": i, "t_ms": i, "message": "x", "stage": "thinking"} for i in range(500)]
    done = {"type": "done", "seq": 500, "t_ms": 900, "message": "Done", "ttft_ms": 4, "reasoning_ms": 80}
    observer = feed.start(record(stream=True), [])
    observer.on_trace(flood[:300])
    observer.on_trace(flood[300:])
    observer.on_trace([done])
    observer.on_end(record(status=200, stream=True), 950.0)
    (entry,) = feed.local()
    assert len(entry["events"]) == MAX_EVENTS
    assert entry["events_dropped"] == 501 - MAX_EVENTS
    # The figures come from `done` even when its event was not kept.
    assert entry["ttft_ms"] == 4 and entry["reasoning_ms"] == 80 and entry["total_ms"] == 950.0


def test_summary_carries_the_request_facts_and_tool_calls() -> None:
    feed = Feed(history=3)
    events = [
        {"type": "status", "seq": 0, "t_ms": 1, "message": "Analyzing", "stage": "analyzing"},
        {
            "type": "tool_call.start",
            "seq": 1,
            "t_ms": 5,
            "message": "c",
            "id": "c1",
            "name": "kb",
            "index": 0,
        },
        {
            "type": "done",
            "seq": 2,
            "t_ms": 9,
            "message": "Done",
            "finish_reason": "tool_calls",
            "ttft_ms": 3,
            "reasoning_ms": 2,
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12, "weird": "x"},
        },
    ]
    finish(
        feed,
        record(
            provider="deepseek",
            model="deepseek-flash",
            level_requested="deep",
            level="deep",
            thinking_method="params",
            stream=True,
        ),
        events,
    )
    (entry,) = feed.local()
    assert entry["provider"] == "deepseek" and entry["model"] == "deepseek-flash"
    assert entry["level_requested"] == "deep" and entry["level"] == "deep"
    assert entry["thinking_method"] == "params" and entry["status"] == 200 and entry["stream"] is True
    assert entry["tool_calls"] == [{"name": "kb"}] and entry["finish_reason"] == "tool_calls"
    assert entry["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    assert entry["in_flight"] is False and entry["replica"] == feed.replica
    assert b"sk-secret" not in orjson.dumps(entry)  # headers are never kept


def test_long_model_names_are_cut() -> None:
    entry = summarize(
        record(model="m" * 1000),
        request_id="r",
        replica="x",
        started_at_ms=0,
        events=[],
        events_dropped=0,
        tools=[],
        done=None,
        duration_ms=None,
    )
    assert len(entry["model"]) == MAX_TEXT + 1 and entry["in_flight"] is True and entry["status"] is None


def test_nothing_is_pushed_or_serialized_while_nobody_watches(monkeypatch: Any) -> None:
    feed = Feed(history=3)
    calls: list[str] = []
    monkeypatch.setattr(FeedObserver, "summary", lambda self, d: calls.append("summary") or {"id": "x"})
    observer = feed.start(record(), [])
    observer.on_trace([{"type": "status", "seq": 0, "t_ms": 0, "message": "", "stage": "analyzing"}])
    assert calls == []  # a trace event with no watcher builds nothing
    observer.on_end(record(status=200), 1.0)
    assert calls == []  # nor its end: the ring keeps the facts, summarized when it is read
    assert feed.local() == [{"id": "x"}] and feed.local() == [{"id": "x"}]
    assert calls == ["summary"]  # once per request, however often the ring is read


def test_a_finished_request_keeps_its_facts_not_its_record() -> None:
    feed = Feed(history=3)
    rec = record(model="m", status=200)
    rec.request_messages = [{"role": "user", "content": "kept by nobody"}]
    observer = feed.start(rec, [])
    observer.on_end(rec, 4.0)
    assert observer.record is None  # the request's messages are not held by the ring
    rec.status = 500  # (what happens to the record afterwards changes nothing)
    (entry,) = feed.local()
    assert entry["model"] == "m" and entry["status"] == 200 and entry["total_ms"] == 4.0


async def test_watchers_get_progress_then_the_finished_request() -> None:
    feed = Feed(history=3)
    watcher = feed.subscribe()
    assert watcher is not None
    observer = feed.start(record(model="m"), [])
    observer.on_trace([{"type": "status", "seq": 0, "t_ms": 0, "message": "", "stage": "analyzing"}])
    observer.on_end(record(model="m", status=200), 5.0)
    frames = [watcher.queue.get_nowait(), watcher.queue.get_nowait()]
    assert frames[0].startswith(b"event: progress\ndata: ") and b'"in_flight":true' in frames[0]
    assert frames[1].startswith(b"event: request\ndata: ") and b'"in_flight":false' in frames[1]
    feed.unsubscribe(watcher)
    assert not feed.watched


async def test_a_slow_watcher_holds_at_most_its_byte_bound_and_is_told_of_the_gap() -> None:
    feed = Feed(history=3)
    watcher = feed.subscribe()
    assert watcher is not None
    # ~90 KB a frame (a long agent turn, every event kept): two frames a request (progress, end).
    events = [
        {"type": "status", "seq": i, "t_ms": i, "message": "m" * 400, "stage": "thinking"}
        for i in range(MAX_EVENTS)
    ]
    for _ in range(100):
        finish(feed, record(), events)
    assert 0 < watcher.queue.nbytes <= SUBSCRIBER_BYTES
    assert feed.watched and not watcher.overflowed  # behind, not gone
    frames = []
    while watcher.queue.qsize():
        frames.append(watcher.queue.get_nowait())
    assert all(not f.startswith(b"event: gap") for f in frames[:-1])
    assert frames[-1].startswith(b"event: gap\ndata: ")
    gap = orjson.loads(frames[-1].split(b"data: ", 1)[1])
    assert gap["dropped"] == 200 - (len(frames) - 1) > 0
    # Caught up: what comes next arrives again, after the marker.
    finish(feed, record(model="after"))
    latest = watcher.queue.get_nowait()
    assert latest.startswith(b"event: request") and b'"model":"after"' in latest


async def test_the_gap_marker_keeps_its_place_between_the_frames() -> None:
    feed = Feed(history=3)
    watcher = feed.subscribe()
    assert watcher is not None
    for i in range(SUBSCRIBER_QUEUE + 5):  # small frames: the count bound is reached first
        finish(feed, record(model=f"m{i}"))
    assert watcher.queue.qsize() == SUBSCRIBER_QUEUE + 1  # the frames kept and one marker
    first = watcher.queue.get_nowait()
    assert b'"model":"m0"' in first
    finish(feed, record(model="late"))  # queued after the marker
    rest = []
    while watcher.queue.qsize():
        rest.append(watcher.queue.get_nowait())
    assert rest[-2].startswith(b"event: gap") and orjson.loads(rest[-2].split(b"data: ", 1)[1]) == {
        "dropped": 5
    }
    assert b'"model":"late"' in rest[-1]


async def test_a_watcher_that_never_reads_is_let_go_and_its_frames_freed() -> None:
    feed = Feed(history=3)
    watcher = feed.subscribe()
    assert watcher is not None
    for _ in range(SUBSCRIBER_QUEUE + SUBSCRIBER_GAP + 1):
        finish(feed, record())
    assert watcher.overflowed and not feed.watched  # its place is free for another watcher
    assert watcher.queue.qsize() == 0 and watcher.queue.nbytes == 0


async def test_a_reader_waiting_for_frames_gets_them_and_can_be_cancelled() -> None:
    import asyncio

    feed = Feed(history=3)
    watcher = feed.subscribe()
    assert watcher is not None
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(watcher.queue.get(), 0.01)  # (a keep-alive tick cancels the wait)
    waiting = asyncio.ensure_future(watcher.queue.get())
    await asyncio.sleep(0)
    finish(feed, record(model="m"))
    frame = await waiting
    assert b'"model":"m"' in frame and watcher.queue.nbytes == 0


FAT = "x" * 500_000


def fat_events() -> list[dict[str, Any]]:
    """What an upstream can make the trace carry: ids, names, finish reasons, usage, errors."""
    return [
        {"type": "tool_call.start", "seq": 0, "t_ms": 1, "message": FAT, "id": FAT, "name": FAT, "index": 0},
        {"type": "tool_call.end", "seq": 1, "t_ms": 2, "message": FAT, "id": FAT, "name": FAT,
         "input_summary": FAT},
        {"type": "error", "seq": 2, "t_ms": 3, "message": FAT, "code": FAT},
        {"type": "done", "seq": 3, "t_ms": 4, "message": "Done", "finish_reason": FAT, "ttft_ms": 1,
         "reasoning_ms": 2, "usage": {"prompt_tokens": 5, FAT: FAT, "details": {FAT: [FAT] * 100}}},
    ]  # fmt: skip


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_every_upstream_string_the_console_keeps_is_cut() -> None:
    feed = Feed(history=20)
    client_events = fat_events()
    for _ in range(20):
        finish(feed, record(model=FAT, path="/v1/" + FAT, error=FAT), client_events)
    listing = orjson.dumps(feed.local())
    assert len(listing) < 20 * 16 * 1024  # 20 such answers were 40 MB
    entry = feed.local()[0]
    assert max(len(s) for s in strings(entry)) <= MAX_SUMMARY + 1
    assert entry["finish_reason"] == FAT[:MAX_TEXT] + "…"
    assert entry["tool_calls"] == [{"name": FAT[:MAX_TEXT] + "…"}]
    assert entry["error"] == FAT[:MAX_TEXT] + "…" and entry["path"] == ("/v1/" + FAT)[:MAX_TEXT] + "…"
    assert entry["usage"] == {"prompt_tokens": 5}
    start = entry["events"][0]
    assert start["id"] == FAT[:MAX_TEXT] + "…" and start["index"] == 0 and start["seq"] == 0
    # The events the client's own stream carries are not touched.
    assert client_events == fat_events()


def test_strings_of_events_beyond_the_kept_ones_are_cut_too() -> None:
    feed = Feed(history=3)
    observer = feed.start(record(), [])
    observer.on_trace(
        [{"type": "status", "seq": i, "t_ms": i, "message": "", "stage": "x"} for i in range(MAX_EVENTS)]
    )
    observer.on_trace(fat_events())
    observer.on_end(record(status=200), 5.0)
    (entry,) = feed.local()
    assert entry["events_dropped"] == 4
    assert entry["tool_calls"] == [{"name": FAT[:MAX_TEXT] + "…"}]
    assert entry["finish_reason"] == FAT[:MAX_TEXT] + "…"
    assert len(orjson.dumps(entry)) < 64 * 1024


def test_sse_frame_is_one_event() -> None:
    assert sse_frame("request", {"a": "x\ny"}) == b'event: request\ndata: {"a":"x\\ny"}\n\n'


def test_the_feed_is_called_per_trace_event_never_per_chunk() -> None:
    """However long the stream, the observer hears only of the (few) trace events."""
    from proxy.core.controls import TraceFormat, TraceMode
    from proxy.core.stream.pipeline import StreamPipeline
    from proxy.core.stream.reasoning import ReasoningOptions
    from proxy.core.stream.taps import build_trace

    def calls_for(answer_chunks: int) -> int:
        feed = Feed(history=3)
        observer = feed.start(record(), [])
        count = 0

        def counted(events: Any) -> None:
            nonlocal count
            count += 1
            observer.on_trace(events)

        pipeline = StreamPipeline(
            reasoning=ReasoningOptions(),
            trace=build_trace(TraceMode.OFF, counted, zh=False, level="deep", provider="p", method=None),
            trace_format=TraceFormat.COMMENT,
            max_event_bytes=1 << 20,
        )

        def chunk(delta: dict[str, Any]) -> bytes:
            return b"data: " + orjson.dumps({"id": "c", "choices": [{"index": 0, "delta": delta}]}) + b"\n\n"

        pipeline.begin(None, 0)
        pipeline.feed(chunk({"reasoning_content": "hmm"}), 1)
        for i in range(answer_chunks):
            pipeline.feed(chunk({"content": "word "}), 2 + i)
        pipeline.finish(10_000)
        observer.on_end(record(status=200), 1.0)
        assert feed.local()[0]["events"][-1]["type"] == "done"
        return count

    assert calls_for(10) == calls_for(2000) <= 5


async def test_watchers_are_bounded() -> None:
    from proxy.console.feed import MAX_SUBSCRIBERS

    feed = Feed(history=3)
    watchers = [feed.subscribe() for _ in range(MAX_SUBSCRIBERS)]
    assert None not in watchers and feed.subscribe() is None


# A 4-byte character: Python keeps such a string at 4 bytes a character, JSON at 4 too.
WIDE = "\U0001d54f" * 1000


def widest_turn() -> list[dict[str, Any]]:
    """The most one request can make the console keep: MAX_EVENTS tool-call events (an agent turn
    of 100 calls, or a hostile upstream), every string at its cap in 4-byte characters."""
    events: list[dict[str, Any]] = []
    for i in range(MAX_EVENTS // 2):
        common = {"t_ms": i, "message": WIDE, "id": f"{i}{WIDE}", "name": f"{i}{WIDE}", "index": i}
        events.append({"type": "tool_call.start", "seq": 2 * i, **common})
        events.append({"type": "tool_call.end", "seq": 2 * i + 1, **common, "input_summary": WIDE})
    return events


def test_the_ring_is_bounded_in_bytes_whatever_the_history() -> None:
    """At ~1 MB a request, THINKPROXY_UI_HISTORY=200 held ~200 MB and the allowed 10,000 far more:
    the ring evicts its oldest requests by bytes too, and what it counts is what the process
    really holds (tracemalloc: every allocation, the summaries made when the ring is read too)."""
    import gc
    import tracemalloc

    from proxy.console.feed import RING_BYTES

    events = widest_turn()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        feed = Feed(history=10_000)
        for i in range(60):
            finish(feed, record(model=f"m{i}"), events)
        kept = feed.local()  # (summaries are made when the ring is read, and kept with it)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 1 < len(kept) < 60
    assert [entry["model"] for entry in kept] == [f"m{i}" for i in range(59, 59 - len(kept), -1)]
    assert held <= RING_BYTES, f"{held / 2**20:.1f} MiB held for {len(kept)} requests"
    assert feed.ring_bytes <= RING_BYTES and held <= feed.ring_bytes  # counted, not undercounted


def test_a_small_ring_budget_keeps_at_least_the_newest_request() -> None:
    feed = Feed(history=100, max_bytes=1)
    for i in range(3):
        finish(feed, record(model=f"m{i}"))
    assert [entry["model"] for entry in feed.local()] == ["m2"]


def test_rows_carry_door_session_client_kind_tokens_and_no_time_for_an_unstreamed_answer() -> None:
    """Issue 44: every door's row has its model, level and door; a non-stream answer's thinking
    time is null (it was "0 ms" beside its reasoning tokens); the sessions' notes name the row's
    session and client kind."""
    feed = Feed(history=5)
    done = {"type": "done", "seq": 0, "t_ms": 9, "message": "Done", "ttft_ms": 0, "reasoning_ms": 0}
    rec = record(route="messages", path="/v1/messages", model="deepseek-v4-pro", level="deep", stream=False)
    rec.notes.update(session="cc-1", client_kind="claude-code")
    rec.usage = TokenUsage(input=100, output=40, cached_input=60, reasoning=ReasoningTokens(35, "reported"))
    rec.level_source, rec.model_suffix = "suffix", "deep"
    observer = feed.start(rec, [])
    observer.on_trace([done])
    observer.on_end(rec, 20.0)
    (entry,) = feed.local()
    assert (entry["door"], entry["model"], entry["level"]) == ("messages", "deepseek-v4-pro", "deep")
    assert (entry["session"], entry["client_kind"]) == ("cc-1", "claude-code")
    assert (entry["level_source"], entry["model_suffix"]) == ("suffix", "deep")
    assert entry["thinking_ms"] is None and entry["reasoning_ms"] is None and entry["ttft_ms"] is None
    assert entry["tokens"] == {
        "input": 100,
        "cached": 60,
        "reasoning": 35,
        "reasoning_source": "reported",
        "output": 40,
    }
    ws = record(route="responses", transport="websocket", stream=True)
    feed.start(ws, []).on_end(ws, 5.0)
    assert feed.local()[0]["door"] == "websocket"


def test_a_flood_from_one_session_evicts_its_own_rows_not_the_other_sessions() -> None:
    """A page opened after one agent session flooded the proxy still finds the other sessions:
    once the ring is full, a session holding more than its share (a quarter) gives up its own
    oldest row; requests without a session are each their own."""
    feed = Feed(history=20)
    for name in ("alice", "bob", "carol"):
        finish(feed, record(model=name, notes={"session": name}))
    finish(feed, record(model="lone"))  # no session: its own
    for i in range(300):
        finish(feed, record(model=f"flood{i}", notes={"session": "flood"}))
    kept = feed.local()
    assert len(kept) == 20
    models = [entry["model"] for entry in kept]
    assert {"alice", "bob", "carol", "lone"} <= set(models)
    assert models[0] == "flood299" and models[15] == "flood284"  # the flood's newest, in order
    # Without a flood the oldest go, as before.
    quiet = Feed(history=3)
    for i in range(6):
        finish(quiet, record(model=f"m{i}", notes={"session": f"s{i}"}))
    assert [entry["model"] for entry in quiet.local()] == ["m5", "m4", "m3"]


def test_the_shared_listing_is_cut_per_session_too() -> None:
    from proxy.console.feed import fair_cut

    flood = [{"id": f"f{i}", "session": "flood"} for i in range(10)]
    others = [{"id": "a", "session": "a"}, {"id": "b", "session": None}]
    entries = flood + others  # newest first: the flood came last
    kept = fair_cut(entries, 6)
    assert [e["id"] for e in kept] == ["f0", "f1", "f2", "f3", "a", "b"]
    assert fair_cut(entries[:4], 6) == entries[:4]


def test_a_streamed_answer_without_reasoning_has_no_thinking_time() -> None:
    """The trace's `done` says `reasoning_ms: 0` when the model did not reason; the row's thinking
    time is then null ("—"), as for an unstreamed answer, not a span of 0 ms."""
    feed = Feed(history=5)
    done = {"type": "done", "seq": 3, "t_ms": 40, "message": "Done", "ttft_ms": 12, "reasoning_ms": 0}
    rec = record(model="deepseek-v4-pro", level="off", stream=True)
    observer = feed.start(rec, [])
    observer.on_trace([done])
    observer.on_end(rec, 41.0)
    (entry,) = feed.local()
    assert entry["thinking_ms"] is None and entry["ttft_ms"] == 12
