"""The console's endpoints: off unless enabled; the page with its strict policy; the live data as
JSON and SSE (recorded whatever trace the client asked for); admin keys in gateway mode."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from proxy.console.routes import UI_DIR
from proxy.core.errors import ConfigError
from proxy.core.stream.sse import SSEDecoder
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_BODY = {
    "model": "deepseek-flash",
    "stream": True,
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [WEATHER_TOOL],
}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


def console_app(mock: BackgroundServer, **overrides: Any) -> Any:
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", **{"ui": True, **overrides})
    return create_app(settings, table=simulated_table(mock.port))


@asynccontextmanager
async def client_for(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `app` with the app's lifespan run around it, so that what the app opens (its
    upstream client's sessions) is closed at the end, as `serve` closes it."""
    # A loopback name: a proxy bound to loopback answers to no other on its console (browser_guard).
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
    ):
        yield client


async def test_console_is_off_unless_enabled(mock: BackgroundServer) -> None:
    async with client_for(console_app(mock, ui=False)) as client:
        for path in ("/ui", "/ui/assets/console.js", "/thinkproxy/requests", "/thinkproxy/events"):
            assert (await client.get(path)).status_code == 404, path


async def test_page_and_assets_are_served_with_a_strict_policy(mock: BackgroundServer) -> None:
    async with client_for(console_app(mock)) as client:
        page = await client.get("/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy
        for asset in ("console.js", "live.js", "playground.js", "timeline.js", "console.css"):
            r = await client.get(f"/ui/assets/{asset}")
            assert r.status_code == 200, asset
        assert "javascript" in (await client.get("/ui/assets/console.js")).headers["content-type"]
        assert (await client.get("/ui/assets/../routes.py")).status_code == 404
        # Everything it loads is its own: no CDN, nothing remote, no build step (plain files).
        texts = [page.text]
        for asset in sorted((UI_DIR / "assets").iterdir()):
            texts.append((await client.get(f"/ui/assets/{asset.name}")).text)
        for text in texts:
            assert not re.search(r"(src|href)=\"(https?:)?//", text)
            assert not re.search(r"(import|from)\s*\(?\s*[\"'](https?:)?//", text)
            assert 'fetch("http' not in text and "fetch('http" not in text


async def test_requests_lists_a_tool_call_with_its_detailed_trace_even_with_trace_off(
    mock: BackgroundServer,
) -> None:
    async with client_for(console_app(mock)) as client:
        r = await client.post(
            "/v1/chat/completions",
            json=TOOL_BODY,
            headers={"x-trace": "off", "x-thinking-level": "deep", "authorization": "Bearer sk-client-1"},
        )
        assert r.status_code == 200 and b"trace" not in r.content
        listing = (await client.get("/thinkproxy/requests")).json()
    assert listing["object"] == "list" and listing["shared"] is False
    (entry,) = listing["data"]
    assert entry["provider"] == "deepseek" and entry["model"] == "deepseek-flash"
    assert entry["level_requested"] == "deep" and entry["level"] == "deep" and entry["status"] == 200
    assert entry["finish_reason"] == "tool_calls" and entry["tool_calls"] == [{"name": "get_weather"}]
    assert None not in (entry["ttft_ms"], entry["reasoning_ms"], entry["total_ms"])
    kinds = [e["type"] for e in entry["events"]]
    assert "reasoning.end" in kinds and "tool_call.end" in kinds and kinds[-1] == "done"
    text = orjson.dumps(listing)
    assert b"sk-client-1" not in text  # no key
    assert b"I have a tool for this" not in text  # no reasoning text (the mock's reasoning says so)
    assert b"Weather in Paris?" not in text  # no prompt


async def test_gateway_mode_needs_an_admin_key_and_client_keys_are_not_admin_keys(
    mock: BackgroundServer,
) -> None:
    app = console_app(mock, upstream_api_key="sk-upstream", client_keys=["ck-1"], admin_keys=["ak-1"])
    async with client_for(app) as client:
        for path in ("/thinkproxy/requests", "/thinkproxy/events"):
            for headers in ({}, {"authorization": "Bearer ck-1"}, {"authorization": "ak-1"}):
                r = await client.get(path, headers=headers)
                assert r.status_code == 401, (path, headers)
                assert r.json()["error"]["code"] == "admin_key_required"
                assert r.headers["www-authenticate"].startswith("Bearer")
        ok = await client.get("/thinkproxy/requests", headers={"authorization": "Bearer ak-1"})
        assert ok.status_code == 200
        assert (await client.get("/ui")).status_code == 200  # the page itself asks for the key


def test_gateway_mode_without_admin_keys_refuses_to_start(mock: BackgroundServer) -> None:
    with pytest.raises(ConfigError, match="THINKPROXY_ADMIN_KEYS"):
        console_app(mock, upstream_api_key="sk-upstream", client_keys=["ck-1"])


def test_events_stream_a_snapshot_then_each_request_live(mock: BackgroundServer) -> None:
    with BackgroundServer(console_app(mock)) as proxy, httpx.Client(base_url=proxy.url, timeout=10) as http:
        http.post("/v1/chat/completions", json={**TOOL_BODY, "stream": False})
        seen: list[tuple[bytes, dict[str, Any]]] = []
        with http.stream("GET", "/thinkproxy/events") as events:
            assert events.headers["content-type"].startswith("text/event-stream")
            decoder = SSEDecoder()
            sent = False
            for piece in events.iter_bytes():
                for event in decoder.feed(piece):
                    seen.append((event.event or b"", orjson.loads(event.data)))
                if seen and not sent:
                    sent = True
                    http.post("/v1/chat/completions", json={**TOOL_BODY, "model": "second"})
                if any(name == b"request" for name, _ in seen):
                    break
    name, snapshot = seen[0]
    assert name == b"snapshot" and [e["model"] for e in snapshot["data"]] == ["deepseek-flash"]
    kinds = [name for name, _ in seen]
    assert b"progress" in kinds  # the request in flight, as its trace events happened
    finished = next(data for name, data in seen if name == b"request")
    assert finished["model"] == "second" and finished["in_flight"] is False


def test_serve_ui_flag_serves_the_console(mock: BackgroundServer) -> None:
    from tests.test_faults import start_serve

    server, base = start_serve(mock, "--ui", ready_path="/ui")
    try:
        assert httpx.get(f"{base}/ui", timeout=5).status_code == 200
        assert httpx.get(f"{base}/thinkproxy/requests", timeout=5).json()["object"] == "list"
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=20)
    assert b"console at http://127.0.0.1:" in out


def test_serve_refuses_the_console_in_gateway_mode_without_admin_keys() -> None:
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "THINKPROXY_UPSTREAM_BASE_URL": "https://api.deepseek.com/v1",
        "THINKPROXY_UPSTREAM_API_KEY": "sk-upstream",
        "THINKPROXY_CLIENT_KEYS": "ck-1",
        "THINKPROXY_ADMIN_KEYS": "",
    }
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--ui"], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 2 and b"THINKPROXY_ADMIN_KEYS" in done.stderr


async def test_too_many_live_views_are_refused_not_buffered(mock: BackgroundServer) -> None:
    from proxy.console.feed import MAX_SUBSCRIBERS

    app = console_app(mock)
    for _ in range(MAX_SUBSCRIBERS):
        app.state.console.feed.subscribe()
    async with client_for(app) as client:
        r = await client.get("/thinkproxy/events")
    assert r.status_code == 503 and r.json()["error"]["code"] == "too_many_watchers"


def test_gateway_mode_is_client_keys_for_the_console_too(mock: BackgroundServer, tmp_path: Any) -> None:
    """A routes file with per-route keys (no THINKPROXY_UPSTREAM_API_KEY) is gateway mode as much
    as an upstream key is: the console's data needs an admin key, and without one the proxy does
    not start."""
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        f'routes:\n  - {{name: ds, models: ["*"], upstream: "{mock.url}/deepseek/v1", api_key_env: DS_KEY}}\n'
    )
    settings = {"upstream_base_url": None, "routes_file": routes, "client_keys": ["alice:ck-1"], "ui": True}
    with pytest.raises(ConfigError, match="THINKPROXY_ADMIN_KEYS"):
        create_app(make_settings(**settings), table=simulated_table(mock.port), environ={"DS_KEY": "sk-ds"})
    app = create_app(
        make_settings(**settings, admin_keys=["ops:ak-1"]),
        table=simulated_table(mock.port),
        environ={"DS_KEY": "sk-ds"},
    )
    with BackgroundServer(app) as proxy, httpx.Client(base_url=proxy.url, timeout=10) as http:
        for path in ("/thinkproxy/requests", "/thinkproxy/events"):
            for headers in ({}, {"authorization": "Bearer ck-1"}):
                assert http.get(path, headers=headers).status_code == 401, (path, headers)
        assert http.get("/thinkproxy/requests", headers={"authorization": "Bearer ak-1"}).status_code == 200


def fat_feed(requests: int) -> Any:
    """A feed of fat requests, ~170 KB each as JSON: 40 tool-call events, every string at its cap
    in 4-byte characters (tests.console.test_feed; the widest, 200 events, is ~0.8 MB)."""
    from proxy.console.feed import Feed
    from tests.console.test_feed import finish, record, widest_turn

    feed = Feed(history=10_000)
    events = widest_turn()[:40]
    for i in range(requests):
        finish(feed, record(model=f"m{i}"), events)
    return feed


def routes_of(feed: Any) -> Any:
    from proxy.console.routes import AdminAccess, ConsoleRoutes

    return ConsoleRoutes(feed, AdminAccess((), False), {})


def frame_data(frame: bytes) -> Any:
    head, _, data = frame.partition(b"\ndata: ")
    assert data.endswith(b"\n\n")
    return head.removeprefix(b"event: "), orjson.loads(data)


async def test_the_snapshot_is_cut_to_its_byte_bound_and_says_what_it_left_out() -> None:
    """A new watcher was sent the whole listing first, outside its queue's bound (40 MB with fat
    answers): now the newest requests up to SNAPSHOT_BYTES, and how many older ones were left out."""
    from proxy.console.routes import SNAPSHOT_BYTES

    feed = fat_feed(30)
    total = len(feed.local())
    stream = routes_of(feed)._stream()
    try:
        snapshot = await anext(stream)
    finally:
        await stream.aclose()
    assert len(snapshot) <= SNAPSHOT_BYTES
    name, listing = frame_data(snapshot)
    assert name == b"snapshot" and listing["object"] == "list" and listing["history"] == 10_000
    shown = [entry["model"] for entry in listing["data"]]
    assert 0 < len(shown) < total and shown == [f"m{i}" for i in range(29, 29 - len(shown), -1)]
    assert listing["truncated"] is True and listing["omitted"] == total - len(shown)


async def test_the_snapshot_counts_against_the_watchers_budget() -> None:
    """What was handed to the server for a watcher that does not read sits in its buffer: the
    snapshot, then each frame, counts against the watcher's bytes until the next one is sent."""
    from proxy.console.feed import SUBSCRIBER_BYTES
    from tests.console.test_feed import finish, record

    feed = fat_feed(30)
    stream = routes_of(feed)._stream()
    try:
        snapshot = await anext(stream)  # the watcher's server has it; nobody knows if it was read
        (watcher,) = feed._subscribers
        # ~90 KB frames: the queue would take 1 MiB of them on top of the snapshot.
        events = [
            {"type": "status", "seq": i, "t_ms": i, "message": "m" * 400, "stage": "thinking"}
            for i in range(200)
        ]
        for _ in range(30):
            finish(feed, record(), events)
        assert watcher.queue.nbytes > 0
        assert watcher.queue.nbytes + len(snapshot) <= SUBSCRIBER_BYTES
        assert watcher.queue.sending == len(snapshot)
        # The next frame's send returned: the snapshot left the server's buffer; that frame counts now.
        first = await anext(stream)
        assert watcher.queue.sending == len(snapshot) + len(first)
        second = await anext(stream)
        assert watcher.queue.sending == len(first) + len(second)
    finally:
        await stream.aclose()
    assert not feed.watched


async def test_the_listing_is_cut_to_its_byte_bound_and_says_what_it_left_out() -> None:
    from starlette.applications import Starlette

    from proxy.console.routes import LISTING_BYTES

    feed = fat_feed(60)
    total = len(feed.local())
    assert total == 60
    app = Starlette(routes=routes_of(feed).routes())
    async with client_for(app) as client:
        r = await client.get("/thinkproxy/requests")
    assert r.status_code == 200 and len(r.content) <= LISTING_BYTES
    listing = r.json()
    shown = [entry["model"] for entry in listing["data"]]
    assert 0 < len(shown) < total and shown == [f"m{i}" for i in range(59, 59 - len(shown), -1)]
    assert listing["truncated"] is True and listing["omitted"] == total - len(shown)
    # Nothing left out: it says so too.
    from tests.console.test_feed import finish, record

    small = type(feed)(history=5)
    finish(small, record(model="m"))
    async with client_for(Starlette(routes=routes_of(small).routes())) as client:
        listing = (await client.get("/thinkproxy/requests")).json()
    assert listing["truncated"] is False and listing["omitted"] == 0 and len(listing["data"]) == 1
