"""The two upstream HTTP clients over a real loopback socket: each sends exactly what the proxy
was given — no cookie jar shared between users, no defaults of the client library's own."""

from __future__ import annotations

import socket

import httpx
import orjson
import pytest

from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.server.upstream.aiohttp_client import AiohttpUpstream
from proxy.server.upstream.factory import build_upstream
from proxy.server.upstream.httpx_client import HttpxUpstream
from tests.helpers import make_settings
from tests.raw_upstream import RawUpstream, response

TRANSPORTS = ["aiohttp", "httpx"]
CHAT = orjson.dumps({"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]})
COMPLETION = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
        ],
    }
)


def answer_with_cookie(_: object) -> list[bytes | float | str]:
    headers = [
        ("Content-Type", "application/json"),
        ("Set-Cookie", "session=user-a-secret; Path=/"),
        ("Content-Length", str(len(COMPLETION))),
        # RawUpstream answers one request per connection and then closes it: said so, the proxy
        # never reuses it (else the next request could race the close and get a 502).
        ("Connection", "close"),
    ]
    return [response("200 OK", headers, COMPLETION)]


def raw_request(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Send exactly these bytes (no client library adding its own headers); return the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(head + b"Connection: close\r\n" + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while piece := client.recv(65536):
            got += piece
    return got


def header_names(head: bytes) -> list[str]:
    return [line.partition(b":")[0].decode().lower() for line in head.split(b"\r\n")[1:] if line]


@pytest.mark.parametrize(("transport", "kind"), [("aiohttp", AiohttpUpstream), ("httpx", HttpxUpstream)])
def test_the_transport_setting_picks_the_client(transport: str, kind: type) -> None:
    assert isinstance(build_upstream(make_settings(http_transport=transport)), kind)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_upstream_cookies_reach_only_their_client_and_are_never_replayed(transport: str) -> None:
    with RawUpstream(answer_with_cookie) as upstream:
        # A name, not an IP: aiohttp's cookie jar ignores cookies from IP addresses.
        base = f"http://localhost:{upstream.port}/v1"
        settings = make_settings(upstream_base_url=base, http_transport=transport)
        with BackgroundServer(create_app(settings), graceful_s=0.1) as proxy:
            first = httpx.post(f"{proxy.url}/v1/chat/completions", content=CHAT)
            assert first.headers["set-cookie"].startswith("session=user-a-secret")
            second = httpx.post(f"{proxy.url}/v1/chat/completions", content=CHAT)  # another user
            assert second.status_code == 200
    assert len(upstream.received) == 2
    assert "cookie" not in header_names(upstream.received[1].head)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_no_client_defaults_are_added_upstream(transport: str) -> None:
    with RawUpstream(answer_with_cookie) as upstream:
        settings = make_settings(upstream_base_url=f"{upstream.url}/v1", http_transport=transport)
        with BackgroundServer(create_app(settings), graceful_s=0.1) as proxy:
            raw_request(proxy.port, b"GET /v1/models HTTP/1.1\r\nHost: proxy\r\n")
            raw_request(
                proxy.port,
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nUser-Agent: my-app/1.0\r\n",
                CHAT,
            )
    models, chat = (r.head for r in upstream.received)
    # Only what the client sent, plus what HTTP itself needs (Host, framing, Connection) and the
    # request's X-Request-Id (docs/observability.md).
    allowed = {"host", "content-length", "connection", "x-request-id"}
    assert set(header_names(models)) <= allowed
    assert set(header_names(chat)) <= allowed | {"user-agent", "accept-encoding"}
    assert b"\r\nUser-Agent: my-app/1.0\r\n".lower() in chat.lower()
    assert b"\r\naccept-encoding: identity\r\n" in chat.lower()  # the proxy must read what it normalizes
