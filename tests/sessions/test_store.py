"""The session store's bounds: a flood from one session never evicts the others, details are
capped per session and in bytes overall while the sums keep counting, and the least recently
active sessions go first."""

from __future__ import annotations

from collections import deque
from typing import Any

from proxy.sessions.store import SessionStore
from tests.helpers import session_facts as facts


def add(store: SessionStore, session: str, at: int, **over: Any) -> None:
    store.add(session, "header", "curl", facts(at, **over))


def test_a_flood_of_2000_requests_from_one_session_leaves_the_others() -> None:
    store = SessionStore(max_sessions=100, max_bytes=1 << 20, per_session=200)
    for i in range(50):
        add(store, f"other-{i}", i)
    for i in range(2000):
        add(store, "flood", 1000 + i)
    assert len(store) == 51
    flood = store.get("flood")
    assert flood is not None
    summary = flood.summary()
    assert summary["requests"] == 2000  # the sums count every request
    assert (summary["details_kept"], summary["details_dropped"]) == (200, 1800)
    assert summary["tokens"] == {"input": 200_000, "cached": 160_000, "reasoning": 20_000, "output": 40_000}
    assert summary["cache_hit_ratio"] == 0.8
    for i in range(50):
        other = store.get(f"other-{i}")
        assert other is not None and other.summary()["details_kept"] == 1


def test_details_are_bounded_in_bytes_and_the_sums_stay() -> None:
    size = facts(0).held()
    store = SessionStore(max_sessions=100, max_bytes=size * 10, per_session=1000)
    for i in range(30):
        add(store, f"s{i % 3}", i)
    assert store.detail_bytes <= size * 10
    total = sum(s.summary()["requests"] for s in store.newest_first())
    kept = sum(s.summary()["details_kept"] for s in store.newest_first())
    assert total == 30 and kept <= 10
    # The least recently active sessions' details went first; the newest request is kept.
    newest = store.get("s2")
    assert newest is not None and newest.details


def test_sessions_past_the_count_go_least_recently_active_first() -> None:
    store = SessionStore(max_sessions=3, max_bytes=1 << 20, per_session=10)
    for name, at in (("a", 1), ("b", 2), ("c", 3), ("a", 4), ("d", 5)):
        add(store, name, at)
    assert [s.id for s in store.newest_first()] == ["d", "a", "c"]
    assert store.detail_bytes == sum(s.detail_bytes for s in store.newest_first())


def test_cost_is_null_when_nothing_was_priced_and_incomplete_when_some_was_not() -> None:
    store = SessionStore(max_sessions=10, max_bytes=1 << 20, per_session=10)
    add(store, "unpriced", 1, cost_usd=None)
    add(store, "mixed", 2)
    add(store, "mixed", 3, cost_usd=None)
    unpriced, mixed = store.get("unpriced"), store.get("mixed")
    assert unpriced is not None and mixed is not None
    assert unpriced.summary()["cost_usd"] is None
    assert (mixed.summary()["cost_usd"], mixed.summary()["cost_complete"]) == (0.001, False)


def test_levels_doors_errors() -> None:
    store = SessionStore(max_sessions=10, max_bytes=1 << 20, per_session=10)
    add(store, "s", 1, level="off", door="messages")
    add(store, "s", 2, level=None, status=502, door="chat")
    session = store.get("s")
    assert session is not None
    summary = session.summary()
    assert summary["levels"] == {"off": 1, "standard": 0, "deep": 0, "default": 1}
    assert summary["doors"] == ["messages", "chat"] and summary["errors"] == 1
    assert (summary["first_at"], summary["last_at"]) == (1, 2)


class Watched(deque[Any]):
    """An emptied session's details that count how often the store looks at them."""

    looked = 0

    def __len__(self) -> int:
        Watched.looked += 1
        return super().__len__()


def test_the_byte_trim_walks_only_the_sessions_still_holding_details() -> None:
    """Once the byte cap is reached, the sessions whose details were dropped stay the least
    recently active: the trim must not walk over them on every request (it did: O(sessions))."""
    size = facts(0).held()
    store = SessionStore(max_sessions=10_000, max_bytes=size * 5, per_session=1000)
    for i in range(500):
        add(store, f"s{i}", i)
    emptied = [s for s in store.newest_first() if not s.details]
    assert len(emptied) >= 490
    for session in emptied:
        session.details = Watched()
    Watched.looked = 0
    for i in range(20):
        add(store, f"late-{i}", 1000 + i)
    assert Watched.looked == 0
    assert store.detail_bytes <= size * 5 and len(store) == 520
    holding = [s.id for s in store.newest_first() if s.details]
    assert holding and set(holding) <= {f"late-{i}" for i in range(20)}
