"""The console across replicas (THINKPROXY_STATE_URL): two proxies sharing a real Redis each see
the other's requests, as JSON and live; with Redis down, each one's own view still works."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.core.stream.sse import SSEDecoder
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings
from tests.realredis import free_port

BODY = {"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


def replica(mock: BackgroundServer, state_url: str, **overrides: Any) -> BackgroundServer:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1", ui=True, state_url=state_url, **overrides
    )
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


def until(check: Any, what: str, tries: int = 200) -> Any:
    """Polls (bounded) for something another replica writes asynchronously."""
    for _ in range(tries):
        value = check()
        if value:
            return value
        time.sleep(0.025)
    raise AssertionError(f"never happened: {what}")


def models(url: str) -> list[str]:
    listing = httpx.get(f"{url}/thinkproxy/requests", timeout=5).json()
    return [entry["model"] for entry in listing["data"]] if listing["shared"] else []


def test_every_replica_lists_every_replicas_requests(mock: BackgroundServer, redis_url: str) -> None:
    with replica(mock, redis_url) as a, replica(mock, redis_url) as b:
        httpx.post(f"{a.url}/v1/chat/completions", json={**BODY, "model": "via-a"}, timeout=10)
        httpx.post(f"{b.url}/v1/chat/completions", json={**BODY, "model": "via-b"}, timeout=10)
        for url in (a.url, b.url):
            until(lambda url=url: {"via-a", "via-b"} <= set(models(url)), f"both requests on {url}")
        listing = httpx.get(f"{b.url}/thinkproxy/requests", timeout=5).json()
        replicas = {entry["model"]: entry["replica"] for entry in listing["data"]}
        assert replicas["via-a"] != replicas["via-b"]
        assert len(listing["data"]) == len({entry["id"] for entry in listing["data"]})  # no duplicates


def test_a_replica_streams_another_replicas_request_live(mock: BackgroundServer, redis_url: str) -> None:
    with replica(mock, redis_url) as a, replica(mock, redis_url) as b, httpx.Client(timeout=10) as http:
        seen: list[dict[str, Any]] = []
        with http.stream("GET", f"{b.url}/thinkproxy/events") as events:
            decoder = SSEDecoder()
            started = False
            for piece in events.iter_bytes():
                for event in decoder.feed(piece):
                    if event.event == b"request":
                        seen.append(orjson.loads(event.data))
                    elif event.event == b"snapshot" and not started:
                        started = True  # from here on, what any replica finishes reaches b
                        http.post(f"{a.url}/v1/chat/completions", json={**BODY, "model": "live-from-a"})
                if any(entry["model"] == "live-from-a" for entry in seen):
                    break
    assert seen[-1]["model"] == "live-from-a"


def test_redis_down_leaves_each_replica_its_own_view(mock: BackgroundServer) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with replica(mock, dead) as a:
        r = httpx.post(f"{a.url}/v1/chat/completions", json={**BODY, "model": "local"}, timeout=10)
        assert r.status_code == 200
        listing = until(
            lambda: (data := httpx.get(f"{a.url}/thinkproxy/requests", timeout=5).json())["data"] and data,
            "the local listing",
        )
        assert listing["shared"] is False and [e["model"] for e in listing["data"]] == ["local"]


def test_an_oversized_entry_from_the_stream_is_skipped() -> None:
    """Whatever wrote it (an older replica, anyone with access to Redis), a summary larger than
    this version ever makes is not kept, listed or sent to watchers."""
    from proxy.console.shared import MAX_ENTRY_BYTES, _decode

    small = orjson.dumps({"id": "a-1", "model": "m"})
    fat = orjson.dumps({"id": "a-2", "model": "x" * MAX_ENTRY_BYTES})
    assert _decode({b"e": small}) == {"id": "a-1", "model": "m"}
    assert _decode({b"e": fat}) is None


async def test_a_shared_listing_reads_the_stream_only_up_to_its_bytes(redis_url: str) -> None:
    """THINKPROXY_UI_HISTORY may be 10,000 and each summary read back up to 2 MiB: a listing reads
    the newest a page at a time until it has its bytes, and says how many it left out."""
    from proxy.console.shared import READ_PAGE, STREAM_KEY, SharedFeed

    feed = SharedFeed(redis_url, history=500, replica="r")
    try:
        await feed._redis.delete(STREAM_KEY)  # (other tests' requests)
        raw = [orjson.dumps({"id": f"r-{i}", "model": f"m{i}", "pad": "x" * 10_000}) for i in range(120)]
        for data in raw:
            await feed._redis.xadd(STREAM_KEY, {"e": data})
        found = await feed.recent(500, 100_000)
        assert found is not None
        entries, omitted = found
        fit = 100_000 // len(raw[0])
        assert [e["model"] for e in entries] == [f"m{i}" for i in range(119, 119 - fit, -1)]
        assert omitted == 120 - fit
        # Everything fits: every page read, newest first, none twice, nothing left out.
        assert 2 * READ_PAGE < 120  # (three pages)
        found = await feed.recent(500, 10 << 20)
        assert found is not None
        entries, omitted = found
        assert [e["model"] for e in entries] == [f"m{i}" for i in range(119, -1, -1)] and omitted == 0
        found = await feed.recent(70, 10 << 20)  # the count bound: no more than `history`
        assert found is not None and len(found[0]) == 70 and found[1] == 0
    finally:
        await feed._redis.delete(STREAM_KEY)
        await feed.aclose()


@pytest.mark.filterwarnings("error")
async def test_the_shared_feed_builds_its_clients_without_a_warning() -> None:
    """Its clients are asyncio ones: a synchronous redis.retry.Retry handed to them printed a
    UserWarning in every log with Redis and the console on (any warning fails this test)."""
    from proxy.console.shared import SharedFeed

    feed = SharedFeed("redis://127.0.0.1:1", history=10, replica="r")  # (nothing is connected)
    await feed.aclose()
