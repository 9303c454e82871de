"""What a browser could be tricked into sending: a foreign Host on the console (DNS rebinding) is
a 421, a cross-site write from an origin that is not allowed is a 403, and neither is executed."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from proxy.server.app import create_app
from proxy.server.browser_guard import HostRule, is_loopback_name, same_origin, split_host
from proxy.server.serving import BackgroundServer
from tests.helpers import Recorder, chat_scope, make_settings, passes_straight_through

COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
}


def client(recorder: Recorder | None = None, **overrides: Any) -> httpx.AsyncClient:
    recorder = recorder or Recorder(lambda r: httpx.Response(200, json=COMPLETION))
    app = create_app(make_settings(ui=True, **overrides), transport=httpx.MockTransport(recorder))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost:8080")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("localhost:8080", ("localhost", 8080)),
        ("LOCALHOST.", ("localhost", None)),
        ("[::1]:8080", ("::1", 8080)),
        ("127.0.0.1", ("127.0.0.1", None)),
        ("evil.example:80", ("evil.example", 80)),
        ("", None),
        ("a:notaport", None),
        ("user@host", None),
        ("host/path", None),
    ],
)
def test_split_host(value: str, expected: tuple[str, int | None] | None) -> None:
    assert split_host(value) == expected


def test_loopback_names() -> None:
    for name in ("localhost", "app.localhost", "127.0.0.1", "127.8.9.1", "::1"):
        assert is_loopback_name(name), name
    for name in ("evil.example", "localhost.evil.example", "10.0.0.1", "0.0.0.0", "::"):
        assert not is_loopback_name(name), name


def test_host_rule_by_binding() -> None:
    loopback = HostRule.for_binding("127.0.0.1", [])
    assert loopback.active and loopback.allows("localhost") and not loopback.allows("evil.example")
    assert HostRule.for_binding("::1", []).active
    everywhere = HostRule.for_binding("0.0.0.0", [])
    assert not everywhere.active and everywhere.allows("evil.example")
    named = HostRule.for_binding("0.0.0.0", ["proxy.example.com", "*.corp.example"])
    assert named.allows("proxy.example.com") and named.allows("a.corp.example")
    assert not named.allows("corp.example") and not named.allows("localhost")
    # Set explicitly, the list replaces the loopback names even on loopback.
    assert not HostRule.for_binding("127.0.0.1", ["proxy.example.com"]).allows("localhost")


def test_same_origin() -> None:
    assert same_origin("http://localhost:8080", "localhost:8080")
    assert same_origin("https://proxy.example.com", "proxy.example.com")
    assert same_origin("https://proxy.example.com", "proxy.example.com:443")
    assert not same_origin("http://localhost:8081", "localhost:8080")
    assert not same_origin("https://evil.example", "localhost:8080")
    assert not same_origin("null", "localhost:8080")
    assert not same_origin("http://localhost:8080", None)


@pytest.mark.parametrize("path", ["/ui", "/thinkproxy/requests", "/thinkproxy/events"])
async def test_a_foreign_host_is_refused_on_the_console_when_bound_to_loopback(path: str) -> None:
    async with client() as http:
        refused = await http.get(path, headers={"host": "rebound.evil.example:8080"})
        assert refused.status_code == 421
        error = refused.json()["error"]
        assert error["code"] == "host_not_allowed" and "THINKPROXY_ALLOWED_HOSTS" in error["message"]
        if path != "/thinkproxy/events":  # (a stream would not end)
            for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080"):
                assert (await http.get(path, headers={"host": host})).status_code == 200, host


async def test_allowed_hosts_name_the_console_on_every_interface() -> None:
    async with client(host="0.0.0.0", allowed_hosts=["proxy.example.com"]) as http:
        ok = await http.get("/thinkproxy/requests", headers={"host": "proxy.example.com"})
        assert ok.status_code == 200
        assert (await http.get("/thinkproxy/requests", headers={"host": "other.example"})).status_code == 421
    async with client(host="0.0.0.0") as http:  # no names known: the console answers to any
        assert (await http.get("/thinkproxy/requests", headers={"host": "other.example"})).status_code == 200


async def test_the_api_is_not_host_checked() -> None:
    """Clients reach the API by any name (a Kubernetes Service, a tunnel); only the console's data
    is what a rebound page could read."""
    recorder = Recorder(lambda r: httpx.Response(200, json=COMPLETION))
    async with client(recorder) as http:
        r = await http.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": []},
            headers={"host": "anything.example"},
        )
    assert r.status_code == 200 and len(recorder.requests) == 1


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings", "/thinkproxy/reviews/some-id"])
async def test_a_cross_site_text_plain_post_is_refused_and_not_executed(path: str) -> None:
    recorder = Recorder(lambda r: httpx.Response(200, json=COMPLETION))
    async with client(recorder) as http:
        r = await http.post(
            path,
            content=b'{"model": "m", "messages": [{"role": "user", "content": "spend"}]}',
            headers={"origin": "https://evil.example", "content-type": "text/plain"},
        )
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "cross_site_request_refused"
    assert "THINKPROXY_CORS_ORIGINS" in r.json()["error"]["message"]
    assert recorder.requests == []


async def test_same_origin_allowed_origins_and_sdks_write() -> None:
    recorder = Recorder(lambda r: httpx.Response(200, json=COMPLETION))
    body = {"model": "m", "messages": []}
    async with client(recorder, cors_origins=["https://app.example"]) as http:
        # The console's own playground (same origin), an allowed front-end, an SDK (no Origin).
        for headers in ({"origin": "http://localhost:8080"}, {"origin": "https://app.example"}, {}):
            r = await http.post("/v1/chat/completions", json=body, headers=headers)
            assert r.status_code == 200, headers
        # Reads are not writes: a cross-site GET is answered (CORS keeps it from the page).
        r = await http.get("/healthz", headers={"origin": "https://evil.example"})
        assert r.status_code == 200
    assert len(recorder.requests) == 3


async def test_a_rebound_page_cannot_write_as_its_own_origin() -> None:
    """After DNS rebinding, Origin and Host both name the attacker's host: same-origin, but not a
    host this proxy answers to."""
    recorder = Recorder(lambda r: httpx.Response(200, json=COMPLETION))
    async with client(recorder) as http:
        r = await http.post(
            "/v1/chat/completions",
            content=b'{"model": "m", "messages": []}',
            headers={
                "host": "evil.example:8080",
                "origin": "http://evil.example:8080",
                "content-type": "text/plain",
            },
        )
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_site_request_refused"
    assert recorder.requests == []
    recorder = Recorder(lambda r: httpx.Response(200, json=COMPLETION))
    async with client(recorder, host="0.0.0.0", allowed_hosts=["proxy.example.com"]) as http:
        rebound = {"host": "evil.example", "origin": "http://evil.example"}
        assert (await http.post("/v1/chat/completions", json={}, headers=rebound)).status_code == 403
        own = {"host": "proxy.example.com", "origin": "http://proxy.example.com"}
        assert (await http.post("/v1/chat/completions", json={}, headers=own)).status_code == 200
    assert len(recorder.requests) == 1


@pytest.mark.parametrize("name", ["host", "origin"])
async def test_two_host_or_origin_headers_are_refused(name: str) -> None:
    recorder = Recorder(lambda r: httpx.Response(200, json=COMPLETION))
    async with client(recorder) as http:
        first = "evil.example" if name == "host" else "https://evil.example"
        second = "localhost" if name == "host" else "http://localhost:8080"
        r = await http.post("/thinkproxy/reviews/x", json={}, headers=[(name, first), (name, second)])
    assert r.status_code == 400 and r.json()["error"]["code"] == "duplicate_header"
    assert recorder.requests == []


def test_a_cross_site_websocket_upgrade_is_refused_and_a_same_origin_one_is_not() -> None:
    """A page on any origin may open a WebSocket to the proxy without asking first (no CORS): the
    upgrade is a write, refused as an HTTP write is, with the same status and error body."""
    app = create_app(make_settings())
    with BackgroundServer(app) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/responses"
        with pytest.raises(InvalidStatus) as refused:
            connect(url, origin=Origin("https://evil.example")).close()
        with (
            connect(url, origin=Origin(f"http://127.0.0.1:{server.port}")) as same_site,
            connect(url) as no_origin,
        ):
            same_site.send(json.dumps({"type": "response.cancel"}))
            no_origin.send(json.dumps({"type": "response.cancel"}))
            answers = [json.loads(same_site.recv(timeout=10)), json.loads(no_origin.recv(timeout=10))]
    assert refused.value.response.status_code == 403
    assert json.loads(refused.value.response.body)["error"]["code"] == "cross_site_request_refused"
    assert [a["error"]["code"] for a in answers] == ["unknown_event_type"] * 2  # (the door answered)


def test_a_request_it_lets_through_is_the_inner_apps_own_coroutine() -> None:
    """Nothing of the guard's stays on the way of a request it lets through (an SDK's POST, a GET):
    the inner app's coroutine is the request's, not one of the guard's awaiting it."""
    from proxy.server.browser_guard import BrowserGuard

    rule = HostRule.for_binding("127.0.0.1", [])
    guard = lambda app: BrowserGuard(app, rule, ["https://app.example"])  # noqa: E731
    post = chat_scope([(b"host", b"localhost:8080"), (b"content-type", b"application/json")])
    assert passes_straight_through(guard, post)
    assert passes_straight_through(guard, {**post, "headers": [(b"origin", b"https://app.example")]})
    assert passes_straight_through(guard, {**post, "method": "GET", "path": "/v1/models"})
    assert passes_straight_through(guard, {"type": "lifespan"})
    # (a refusal is the guard's own answer)
    assert not passes_straight_through(guard, {**post, "headers": [(b"origin", b"https://evil.example")]})
