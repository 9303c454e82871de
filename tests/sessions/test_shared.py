"""Sessions across replicas (THINKPROXY_STATE_URL=redis://…): two proxies sharing a real Redis
each list one session with both replicas' requests summed and their details; with Redis down,
each answers for its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.sessions.shared import DETAILS_KEY, INDEX_KEY, SUMS_KEY, merge
from tests.helpers import make_settings
from tests.realredis import free_port

BODY = {"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


def replica(mock: BackgroundServer, state_url: str) -> BackgroundServer:
    # (the console on: without admin keys it is what serves the sessions API)
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", state_url=state_url, ui=True)
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


def until(check: Any, what: str, tries: int = 200) -> Any:
    """Polls (bounded) for what another replica writes asynchronously."""
    for _ in range(tries):
        value = check()
        if value:
            return value
        time.sleep(0.025)
    raise AssertionError(f"never happened: {what}")


def session(url: str, session_id: str) -> dict[str, Any] | None:
    r = httpx.get(f"{url}/thinkproxy/sessions/{session_id}", timeout=5)
    return r.json() if r.status_code == 200 else None


def test_every_replica_sums_one_session_over_both(mock: BackgroundServer, redis_url: str) -> None:
    with replica(mock, redis_url) as a, replica(mock, redis_url) as b:
        for url in (a.url, b.url, b.url):
            r = httpx.post(
                f"{url}/v1/chat/completions", json=BODY, headers={"X-Session-Id": "shared-1"}, timeout=10
            )
            assert r.status_code == 200
        for url in (a.url, b.url):
            found = until(
                lambda u=url: (s := session(u, "shared-1")) and s["requests"] == 3 and s, "3 requests"
            )
            assert len(found["details"]) == 3 and found["details_kept"] == 3
            listing = httpx.get(f"{url}/thinkproxy/sessions", timeout=5).json()
            assert listing["shared"] is True
            (summary,) = [s for s in listing["sessions"] if s["id"] == "shared-1"]
            assert summary["requests"] == 3 and summary["tokens"] == found["tokens"]
        alone = [
            httpx.get(f"{u}/thinkproxy/sessions/shared-1", timeout=5).json()["tokens"]["output"]
            for u in (a.url,)
        ]
        assert alone[0] > 0


def test_a_session_dropped_from_the_index_leaves_no_keys_behind(
    mock: BackgroundServer, redis_url: str
) -> None:
    """Past THINKPROXY_SESSIONS_MAX the oldest sessions leave the index, and their sums and
    details go with them (they stayed for the TTL, a day, one pair per invented session id)."""
    url = redis_url.rsplit("/", 1)[0] + "/5"  # (a database of its own: only this test's sessions)
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1", state_url=url, sessions_max=2, ui=True
    )
    ids = ("gone-1", "gone-2", "kept-1", "kept-2")
    direct = redis.Redis.from_url(url)
    try:
        with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as a:
            for session_id in ids:
                r = httpx.post(
                    f"{a.url}/v1/chat/completions",
                    json=BODY,
                    headers={"X-Session-Id": session_id},
                    timeout=10,
                )
                assert r.status_code == 200

            def kept(prefix: str) -> set[str]:
                return {key.decode().removeprefix(prefix) for key in direct.scan_iter(prefix + "*")}

            until(lambda: direct.zscore(INDEX_KEY, "kept-2") is not None, "the last session written")
            until(
                lambda: kept(SUMS_KEY) == {"kept-1", "kept-2"} and kept(DETAILS_KEY) == {"kept-1", "kept-2"},
                "only the indexed sessions' keys",
            )
            assert {m.decode() for m in direct.zrange(INDEX_KEY, 0, -1)} == {"kept-1", "kept-2"}
    finally:
        direct.flushdb()
        direct.close()


def test_with_redis_down_each_replica_answers_for_its_own(mock: BackgroundServer) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with replica(mock, dead) as a:
        r = httpx.post(f"{a.url}/v1/chat/completions", json=BODY, headers={"X-Session-Id": "own"}, timeout=10)
        assert r.status_code == 200
        listing = httpx.get(f"{a.url}/thinkproxy/sessions", timeout=5).json()
        assert listing["shared"] is False and [s["id"] for s in listing["sessions"]] == ["own"]
        assert session(a.url, "own") is not None


def test_merge_sums_the_replicas_parts_and_skips_what_it_cannot_read() -> None:
    part = {
        "id": "s", "source": "request", "client": "curl", "key": None, "doors": ["chat"], "requests": 2,
        "first_at": 5, "last_at": 9, "models": ["m"],
        "levels": {"off": 0, "standard": 2, "deep": 0, "default": 0},
        "tokens": {"input": 10, "cached": 5, "reasoning": 1, "output": 2}, "cache_hit_ratio": 0.5,
        "cost_usd": 0.5, "cost_complete": True, "errors": 0, "tool_calls": 1, "details_kept": 2,
        "details_dropped": 0,
    }  # fmt: skip
    other = {
        **part,
        "source": "responses",
        "doors": ["responses"],
        "first_at": 1,
        "cost_usd": None,
        "cost_complete": False,
    }
    merged = merge([part, other])
    assert merged is not None
    assert (merged["requests"], merged["first_at"], merged["last_at"]) == (4, 1, 9)
    assert merged["doors"] == ["chat", "responses"] and merged["source"] == "responses"
    assert merged["tokens"] == {"input": 20, "cached": 10, "reasoning": 2, "output": 4}
    assert (merged["cost_usd"], merged["cost_complete"], merged["cache_hit_ratio"]) == (0.5, False, 0.5)
    assert merge([{"id": "s"}]) is None and merge([]) is None
