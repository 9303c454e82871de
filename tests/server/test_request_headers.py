"""Request headers on their way up: exact bytes, no Expect, no look-alike control headers — unit
tests of proxy.core.controls.refuse_control_header_look_alikes, then a raw-socket upstream that
records the bytes it receives."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from proxy.core.controls import refuse_control_header_look_alikes
from proxy.core.errors import BadRequest
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

CAFE_UTF8 = "café".encode()


@pytest.mark.parametrize(
    "name",
    [
        "x_thinking_level",
        "x_trace",
        "x_trace_format",
        "x_reasoning",
        "x_upstream_base_url",
        "x-thinking_level",
    ],
)
def test_control_headers_spelled_with_underscores_are_refused(name: str) -> None:
    with pytest.raises(BadRequest) as caught:
        refuse_control_header_look_alikes(["authorization", name])
    assert caught.value.param == name and "hyphens" in caught.value.message


def test_other_underscore_headers_are_fine() -> None:
    refuse_control_header_look_alikes(["x_custom", "x-thinking-level", "x_thinking_levels"])


# -- against a raw-socket upstream -----------------------------------------------------------------


class RawUpstream:
    """Records the exact request heads it receives; answers every request 200 `{}`."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.heads: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = conn.recv(65536)
                    if not piece:
                        break
                    data += piece
                self.heads.append(data.partition(b"\r\n\r\n")[0] + b"\r\n")
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
                    b"connection: close\r\n\r\n{}"
                )


@pytest.fixture(scope="module")
def upstream() -> Iterator[RawUpstream]:
    up = RawUpstream()
    yield up
    up.sock.close()


def ask(server: BackgroundServer, head: bytes) -> bytes:
    with socket.create_connection((server.host, server.port), timeout=15) as sock:
        sock.sendall(head)
        data = b""
        while piece := sock.recv(65536):
            data += piece
        return data


def final_status(answer: bytes) -> int:
    # (uvicorn may first send an interim 100 Continue)
    return int(answer.rsplit(b"HTTP/1.1 ", 1)[1][:3])


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_non_ascii_header_bytes_arrive_unchanged(upstream: RawUpstream, transport: str) -> None:
    settings = make_settings(
        upstream_base_url=f"http://127.0.0.1:{upstream.port}/v1", http_transport=transport
    )
    with BackgroundServer(create_app(settings)) as p:
        answer = ask(
            p,
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Name: " + CAFE_UTF8 + b"\r\nConnection: close\r\n\r\n",
        )
    assert final_status(answer) == 200
    assert b"\r\nx-name: " + CAFE_UTF8 + b"\r\n" in upstream.heads[-1].lower()


def test_non_utf8_header_bytes_are_exact_with_httpx(upstream: RawUpstream) -> None:
    settings = make_settings(upstream_base_url=f"http://127.0.0.1:{upstream.port}/v1", http_transport="httpx")
    with BackgroundServer(create_app(settings)) as p:
        answer = ask(p, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Raw: \xff\xfe\r\nConnection: close\r\n\r\n")
    assert final_status(answer) == 200
    assert b"\r\nx-raw: \xff\xfe" in upstream.heads[-1].lower()


def test_non_utf8_header_bytes_are_a_400_with_aiohttp(upstream: RawUpstream) -> None:
    settings = make_settings(
        upstream_base_url=f"http://127.0.0.1:{upstream.port}/v1", http_transport="aiohttp"
    )
    sent = len(upstream.heads)
    with BackgroundServer(create_app(settings)) as p:
        answer = ask(p, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Raw: \xff\xfe\r\nConnection: close\r\n\r\n")
    assert final_status(answer) == 400 and b'"param":"x-raw"' in answer
    assert len(upstream.heads) == sent  # nothing forwarded


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_expect_100_continue_is_not_forwarded(upstream: RawUpstream, transport: str) -> None:
    settings = make_settings(
        upstream_base_url=f"http://127.0.0.1:{upstream.port}/v1", http_transport=transport
    )
    body = b'{"input": "x"}'
    with BackgroundServer(create_app(settings)) as p:
        answer = ask(
            p,
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % len(body)
            + body,
        )
    assert final_status(answer) == 200
    assert b"expect" not in upstream.heads[-1].lower()


@pytest.mark.parametrize("path", ["/v1/models", "/v1/chat/completions"])
def test_an_underscore_control_header_is_refused_not_forwarded(upstream: RawUpstream, path: str) -> None:
    settings = make_settings(upstream_base_url=f"http://127.0.0.1:{upstream.port}/v1")
    sent = len(upstream.heads)
    body = b'{"model": "m", "messages": []}'
    with BackgroundServer(create_app(settings)) as p:
        answer = ask(
            p,
            b"POST %s HTTP/1.1\r\nHost: x\r\nX_Thinking_Level: deep\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (path.encode(), len(body)) + body,
        )
    assert final_status(answer) == 400
    assert b"X-Thinking-Level" in answer and b"x_thinking_level" in answer
    assert len(upstream.heads) == sent
