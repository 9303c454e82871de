"""The sessions' listener: what it keeps of a request is what the store counts (the detail's
JSON), not more; requests no model was asked for make no session."""

from __future__ import annotations

import gc
import tracemalloc

from proxy.core.events import AccessRecord
from proxy.core.usage import TokenUsage
from proxy.sessions.listener import SessionsListener
from proxy.sessions.stats import Stats
from proxy.sessions.store import SessionStore


def finish(listener: SessionsListener, session: str, route: str = "chat") -> AccessRecord:
    record = AccessRecord(method="POST", path="/v1/chat/completions", route=route, status=200)
    record.request_id, record.model = f"{session}-r", "deepseek-v4-pro"
    if route != "passthrough":
        record.usage = TokenUsage(input=10, output=5)
    observer = listener.start(record, [("X-Session-Id", session)])
    observer.on_end(record, 3.0)
    return record


def test_what_a_request_keeps_is_about_what_the_store_counts() -> None:
    """orjson's bytes keep the ~8 KiB buffer they were written in: kept as they came, each
    ~0.7 KB detail held ~8 KB, ten times the bytes the store's bound counted."""
    store = SessionStore(max_sessions=10_000, max_bytes=1 << 30, per_session=10)
    listener = SessionsListener(store, Stats(1))
    finish(listener, "warm")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        counted = store.detail_bytes
        for i in range(500):
            finish(listener, f"s{i}")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    details = store.detail_bytes - counted
    # The details, and per session its sums and slot (measured: ~1.55 KB).
    assert held <= details + 500 * 2048, (held, details)


def test_the_record_names_its_session_for_the_console_and_a_listing_makes_none() -> None:
    store = SessionStore(max_sessions=10, max_bytes=1 << 20, per_session=10)
    listener = SessionsListener(store, Stats(10))
    record = finish(listener, "task-7")
    assert (record.notes["session"], record.notes["client_kind"]) == ("task-7", "unknown")
    finish(listener, "listing", route="passthrough")
    assert [s.id for s in store.newest_first()] == ["task-7"]
