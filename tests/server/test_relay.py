"""The relay against misbehaving loopback upstreams (tests/raw_upstream.py): truncation stays
visible, every failure ends as documented, headers are relayed faithfully, only valid HTTP goes
back, and the time limits hold — on both HTTP clients."""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import threading
import time
import zlib
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import chat_scope, coroutines_running_in, make_settings
from tests.raw_upstream import HOLD, RESET, RawUpstream, Received, Step, chunked, response

TRANSPORTS = ["aiohttp", "httpx"]
ASK = {"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]}
STREAM = {**ASK, "stream": True}
COMPLETION = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "deepseek-flash",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
        ],
    }
)


def sse_chunk(content: str) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "deepseek-flash",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def proxy_for(upstream: RawUpstream, transport: str, **overrides: object) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{upstream.url}/v1", http_transport=transport, **overrides)
    return BackgroundServer(create_app(settings), graceful_s=0.1)


def frames(raw: bytes) -> list[bytes]:
    return [f for f in raw.split(b"\n\n") if f]


def final_error(raw: bytes) -> dict[str, object]:
    fs = frames(raw)
    assert fs[-1] == b"data: [DONE]"
    error: dict[str, object] = orjson.loads(fs[-2].removeprefix(b"data: "))["error"]
    return error


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [r.access for r in caplog.records if r.name == "thinkproxy.access"]  # type: ignore[attr-defined]


# --- 1. truncation stays visible --------------------------------------------------------------

CUT_BODIES = {
    "short-of-content-length": [
        response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "100")], b'{"data": ['),
    ],
    "broken-chunked-framing": [
        response("200 OK", [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")]),
        chunked(b'{"data": [', end=False),
        0.05,  # (so the head is read before the framing breaks)
        b"ZZ\r\n",
    ],
    "reset": [
        response("200 OK", [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")]),
        chunked(b'{"data": [', end=False),
        0.05,
        RESET,
    ],
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("cut", sorted(CUT_BODIES))
def test_a_cut_passthrough_body_reaches_the_client_incomplete(
    transport: str, cut: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy")
    with (
        RawUpstream(CUT_BODIES[cut]) as upstream,
        proxy_for(upstream, transport) as proxy,
        pytest.raises(httpx.RemoteProtocolError),  # never a shorter body that reads complete
    ):
        httpx.get(f"{proxy.url}/v1/models", timeout=10)
    [line] = access_lines(caplog)
    assert line["status"] == 200  # what the client was told before the cut
    assert line["error"] in ("upstream_protocol_error", "upstream_bad_response")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_cut_upstream_error_body_reaches_the_client_incomplete(transport: str) -> None:
    head = response(
        "500 Internal Server Error", [("Content-Type", "application/json"), ("Content-Length", "80")]
    )
    with (
        RawUpstream([head + b'{"error": {"message": "overlo']) as upstream,
        proxy_for(upstream, transport) as proxy,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        httpx.post(f"{proxy.url}/v1/chat/completions", json=ASK, timeout=10)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sse_ending_inside_an_event_ends_with_upstream_truncated(transport: str) -> None:
    head = response("200 OK", [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked")])
    cut = sse_chunk("Hello") + b'data: {"id":"c1","choices":[{"delta":{"content":" wor'
    with RawUpstream([head, chunked(cut)]) as upstream, proxy_for(upstream, transport) as proxy:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=STREAM, timeout=10)
    assert r.status_code == 200
    assert frames(r.content)[0] == sse_chunk("Hello").rstrip(b"\n")
    assert b" wor" not in r.content  # the unfinished event is discarded, not forwarded
    error = final_error(r.content)
    assert error["code"] == "upstream_truncated" and error["type"] == "upstream_error"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sse_ending_cleanly_between_events_without_done_gets_a_done(transport: str) -> None:
    head = response("200 OK", [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked")])
    with (
        RawUpstream([head, chunked(sse_chunk("Hello"))]) as upstream,
        proxy_for(upstream, transport) as proxy,
    ):
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=STREAM, timeout=10)
    assert frames(r.content) == [sse_chunk("Hello").rstrip(b"\n"), b"data: [DONE]"]


# --- 3. no uncaught errors --------------------------------------------------------------------


BAD_ENCODINGS = {
    "corrupt-gzip": ("gzip", lambda body: gzip.compress(body)[:10] + b"\xff" * 40),
    "cut-gzip": ("gzip", lambda body: gzip.compress(body)[:-12]),
    "corrupt-deflate": ("deflate", lambda body: b"\x78\x9c" + b"\xff" * 40),
    "br": ("br", lambda body: b"\x0b\x02\x80hello\x03"),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("bad", sorted(BAD_ENCODINGS))
def test_undecodable_non_stream_body_is_an_openai_shaped_502(
    transport: str, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy")
    encoding, mangle = BAD_ENCODINGS[bad]
    body = mangle(COMPLETION * 20)
    head = response(
        "200 OK",
        [
            ("Content-Type", "application/json"),
            ("Content-Encoding", encoding),
            ("Content-Length", str(len(body))),
        ],
    )
    with RawUpstream([head + body]) as upstream, proxy_for(upstream, transport) as proxy:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=ASK, timeout=10)
    assert r.status_code == 502
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert error["type"] == "upstream_error" and encoding in error["message"]
    assert error["code"] in ("upstream_bad_encoding", "upstream_unsupported_encoding")
    [line] = access_lines(caplog)
    assert (line["status"], line["error"]) == (502, error["code"])


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("bad", sorted(BAD_ENCODINGS))
def test_undecodable_stream_body_ends_with_an_error_event_and_done(
    transport: str, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy")
    encoding, mangle = BAD_ENCODINGS[bad]
    body = mangle(sse_chunk("Hello") * 20 + b"data: [DONE]\n\n")
    head = response(
        "200 OK",
        [
            ("Content-Type", "text/event-stream"),
            ("Content-Encoding", encoding),
            ("Content-Length", str(len(body))),
        ],
    )
    with RawUpstream([head + body]) as upstream, proxy_for(upstream, transport, trace="brief") as proxy:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=STREAM, timeout=10)
    assert r.status_code == 200
    error = final_error(r.content)
    assert error["code"] in ("upstream_bad_encoding", "upstream_unsupported_encoding")
    [line] = access_lines(caplog)
    assert line["error"] == error["code"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_proxy_bug_before_the_response_is_a_json_500_with_one_traceback(
    transport: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import proxy.server.relay

    def broken(*args: object, **kwargs: object) -> bytes:
        raise RuntimeError("a bug")

    monkeypatch.setattr(proxy.server.relay, "process_completion", broken)
    caplog.set_level(logging.INFO, logger="thinkproxy")
    head = response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(COMPLETION)))]
    )
    with RawUpstream([head + COMPLETION]) as upstream, proxy_for(upstream, transport) as proxy:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=ASK, timeout=10)
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "internal_error"
    assert "a bug" not in r.text  # the details go to the log, not to the client
    tracebacks = [rec for rec in caplog.records if rec.exc_info]
    assert len(tracebacks) == 1 and "a bug" in str(tracebacks[0].exc_info[1])  # type: ignore[index]
    [line] = access_lines(caplog)
    assert (line["status"], line["error"]) == (500, "internal_error")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_proxy_bug_mid_stream_is_an_error_event_then_done(
    transport: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import proxy.server.relay as relay_module
    from proxy.core.stream.response_stream import ResponseStream

    class Broken:
        """The answer's ResponseStream, whose feed has a bug. (A wrapper, not a patch of the class:
        in the compiled build ResponseStream and StreamPipeline are native classes, whose methods
        call each other natively, past any patch.)"""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.real = ResponseStream(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

        def feed(self, piece: object, now_ms: float) -> bytes:
            raise RuntimeError("a bug")

    monkeypatch.setattr(relay_module, "ResponseStream", Broken)
    caplog.set_level(logging.INFO, logger="thinkproxy")
    head = response("200 OK", [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked")])
    with RawUpstream([head, chunked(sse_chunk("Hi"))]) as upstream, proxy_for(upstream, transport) as proxy:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=STREAM, timeout=10)
    error = final_error(r.content)
    assert error["code"] == "internal_error"
    assert len([rec for rec in caplog.records if rec.exc_info]) == 1
    [line] = access_lines(caplog)
    assert line["error"] == "internal_error"


# --- 4. repeated headers ----------------------------------------------------------------------

REPEATED = [
    ("Set-Cookie", "a=1; Path=/"),
    ("Set-Cookie", "b=2; Path=/"),
    ("Link", "<https://example.com/1>; rel=next"),
    ("Link", "<https://example.com/2>; rel=prev"),
    ("WWW-Authenticate", 'Bearer realm="a"'),
    ("WWW-Authenticate", 'Basic realm="b"'),
    ("Keep-Alive", "timeout=5"),
    ("Connection", "keep-alive, x-hop"),
    ("X-Hop", "1"),
    ("Proxy-Authenticate", "Basic"),
]


def repeated_answer(req: object) -> list[bytes | float | str]:
    body = COMPLETION
    ctype = "application/json"
    status = "200 OK"
    head = bytes(req.head)  # type: ignore[attr-defined]
    if b'"stream":true' in req.body:  # type: ignore[attr-defined]
        body, ctype = sse_chunk("Hi") + b"data: [DONE]\n\n", "text/event-stream"
    if head.startswith(b"GET"):
        body = b'{"data": []}'
    if b"x-want-error" in head.lower():
        status, body = "429 Too Many Requests", b'{"error": {"message": "slow down"}}'
    return [response(status, [("Content-Type", ctype), ("Content-Length", str(len(body))), *REPEATED], body)]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("path", ["non-stream", "stream", "passthrough", "error"])
def test_every_occurrence_of_a_repeated_header_is_relayed(transport: str, path: str) -> None:
    with RawUpstream(repeated_answer) as upstream, proxy_for(upstream, transport) as proxy:
        if path == "passthrough":
            r = httpx.get(f"{proxy.url}/v1/models", timeout=10)
        else:
            headers = {"x-want-error": "1"} if path == "error" else {}
            body = STREAM if path == "stream" else ASK
            r = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert r.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]
    assert len(r.headers.get_list("link")) == 2
    assert r.headers.get_list("www-authenticate") == ['Bearer realm="a"', 'Basic realm="b"']
    for hop in ("keep-alive", "x-hop", "proxy-authenticate"):
        assert hop not in r.headers
    assert len(r.headers.get_list("date")) == 1


# --- 6 / 9. only valid HTTP is relayed ---------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("route", ["chat", "passthrough"])
@pytest.mark.parametrize(
    "status",
    ["101 Switching Protocols", "600 Beyond", "999 Way Beyond"],
)
def test_a_status_outside_200_to_599_is_a_502(
    transport: str, route: str, status: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy")
    head = response(status, [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Content-Length", "0")])
    with RawUpstream([head, HOLD]) as upstream, proxy_for(upstream, transport) as proxy:
        if route == "chat":
            r = httpx.post(f"{proxy.url}/v1/chat/completions", json=ASK, timeout=10)
        else:
            r = httpx.get(f"{proxy.url}/v1/realtime", headers={"upgrade": "websocket"}, timeout=10)
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"
    [line] = access_lines(caplog)
    assert line["status"] == 502


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("bad", ["X-Evil: a\x01b", "X-Evil: a\x7fb", "X Bad Name: 1"])
def test_a_header_that_is_not_valid_http_is_a_502_with_a_truthful_log_line(
    transport: str, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy")
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + bad.encode("latin-1")
        + b"\r\nContent-Length: %d\r\n\r\n" % len(COMPLETION)
    )
    with RawUpstream([head + COMPLETION]) as upstream, proxy_for(upstream, transport) as proxy:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=ASK, timeout=10)
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"
    [line] = access_lines(caplog)
    assert line["status"] == 502 and line["error"] in ("upstream_invalid_header", "upstream_bad_response")


# --- 11. header bytes are relayed, never re-encoded ---------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_non_ascii_header_bytes_travel_unchanged_both_ways(transport: str) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Word: na\xc3\xafve caf\xe9\r\n"
    answer = head + b"Content-Length: %d\r\n\r\n" % len(COMPLETION) + COMPLETION
    body = orjson.dumps(ASK)
    with (
        RawUpstream([answer]) as upstream,
        proxy_for(upstream, transport) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client,
    ):
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
            b"X-Note: caf\xc3\xa9\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        got = b""
        while piece := client.recv(65536):
            got += piece
    assert b"\r\nx-note: caf\xc3\xa9\r\n" in upstream.received[0].head.lower()
    assert b"\r\nx-word: na\xc3\xafve caf\xe9\r\n" in got  # (UTF-8, then a latin-1 byte)


# --- 5. timeouts -------------------------------------------------------------------------------


def trickle(pieces: int, pause: float) -> list[bytes | float | str]:
    head = response(
        "200 OK", [("Content-Type", "application/octet-stream"), ("Transfer-Encoding", "chunked")]
    )
    steps: list[bytes | float | str] = [head]
    for _ in range(pieces):
        steps += [chunked(b"x" * 16, end=False), pause]
    return [*steps, b"0\r\n\r\n"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_total_timeout_bounds_a_passthrough_relay(transport: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy")
    # Never silent for long (a piece every 50 ms), but going on for 6 s: only the total timeout ends it.
    with (
        RawUpstream(trickle(120, 0.05)) as upstream,
        proxy_for(upstream, transport, total_timeout=0.5, read_timeout=10) as proxy,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        httpx.get(f"{proxy.url}/v1/files/f1/content", timeout=10)
    [line] = access_lines(caplog)
    assert line["error"] == "upstream_timeout"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_total_timeout_of_a_non_stream_exchange_is_end_to_end(transport: str) -> None:
    # 0.5 s to the head, 0.5 s more for the body: each under the 0.7 s total, together over it.
    body = COMPLETION
    head = response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    with (
        RawUpstream([0.5, head + body[:10], 0.5, body[10:]]) as upstream,
        proxy_for(upstream, transport, total_timeout=0.7, read_timeout=10) as proxy,
    ):
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=ASK, timeout=10)
    assert r.status_code == 504
    assert "THINKPROXY_TOTAL_TIMEOUT" in r.json()["error"]["message"]


BIG = 32 * 1024 * 1024


def big_body() -> list[bytes | float | str]:
    head = response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(BIG))])
    return [head, *([b"x" * (1024 * 1024)] * (BIG // (1024 * 1024)))]


def slow_reader(port: int) -> socket.socket:
    """A client with a tiny receive buffer that sent its request and reads nothing yet."""
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    client.settimeout(20)
    client.connect(("127.0.0.1", port))
    client.sendall(b"GET /v1/files/f1/content HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
    return client


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_time_blocked_writing_to_a_slow_client_is_not_upstream_silence(transport: str) -> None:
    with (
        RawUpstream(big_body()) as upstream,
        proxy_for(upstream, transport, read_timeout=0.3, write_timeout=30) as proxy,
        slow_reader(proxy.port) as client,
    ):
        threading.Event().wait(1.5)  # reads nothing for 5 read timeouts
        got = bytearray()
        while piece := client.recv(1024 * 1024):
            got += piece
    _, _, body = bytes(got).partition(b"\r\n\r\n")
    assert body.endswith(b"0\r\n\r\n")  # the whole body, ended cleanly
    assert body.count(b"x") == BIG


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_client_that_stops_reading_is_dropped_and_the_upstream_released(
    transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy")
    with (
        RawUpstream(big_body()) as upstream,
        proxy_for(upstream, transport, read_timeout=30, write_timeout=0.5) as proxy,
        slow_reader(proxy.port),
    ):
        assert upstream.closed.wait(10), "the upstream was held while the client read nothing"
    [line] = access_lines(caplog)
    assert line["error"] == "client_write_timeout"


# --- 12.4 bounded bodies -------------------------------------------------------------------------


def gzip_of_zeros(size: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join([*(z.compress(bytes(1024 * 1024)) for _ in range(size // (1024 * 1024))), z.flush()])


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("encoding", ["gzip", "identity"])
def test_a_non_stream_body_over_the_limit_is_a_502_naming_it(transport: str, encoding: str) -> None:
    limit = 1024 * 1024
    body = gzip_of_zeros(64 * 1024 * 1024) if encoding == "gzip" else b"x" * (2 * limit)
    head = response(
        "200 OK",
        [
            ("Content-Type", "application/json"),
            ("Content-Encoding", encoding),
            ("Content-Length", str(len(body))),
        ],
    )
    with (
        RawUpstream([head + body]) as upstream,
        proxy_for(upstream, transport, max_response_bytes=limit) as proxy,
    ):
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=ASK, timeout=10)
    assert r.status_code == 502
    error = r.json()["error"]
    assert error["code"] == "upstream_response_too_large"
    assert "THINKPROXY_MAX_RESPONSE_BYTES" in error["message"] and str(limit) in error["message"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_gzip_bomb_in_a_stream_ends_at_the_event_limit(transport: str) -> None:
    body = gzip_of_zeros(64 * 1024 * 1024)
    head = response(
        "200 OK",
        [
            ("Content-Type", "text/event-stream"),
            ("Content-Encoding", "gzip"),
            ("Content-Length", str(len(body))),
        ],
    )
    with (
        RawUpstream([head + body]) as upstream,
        proxy_for(upstream, transport, max_sse_event_bytes=1024 * 1024) as proxy,
    ):
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=STREAM, timeout=10)
    assert final_error(r.content)["code"] == "upstream_event_too_large"


def raw_post(port: int, extra_head: bytes, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
            + extra_head
            + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body
        )
        got = b""
        while piece := client.recv(65536):
            got += piece
    return got


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_header_value_neither_ascii_nor_utf8_is_sent_exactly_or_refused(transport: str) -> None:
    answer = response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(COMPLETION)))]
    )
    with RawUpstream([answer + COMPLETION]) as upstream, proxy_for(upstream, transport) as proxy:
        got = raw_post(proxy.port, b"X-Note: caf\xe9\r\n", orjson.dumps(ASK))
    if transport == "httpx":  # httpx sends bytes as they are
        assert b"\r\nx-note: caf\xe9\r\n" in upstream.received[0].head.lower()
    else:  # aiohttp writes header values as UTF-8: refused rather than changed
        assert (got.startswith(b"HTTP/1.1 400 ") and b"X-Note" in got) or b"x-note" in got
        assert upstream.received == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_request_nested_deeper_than_the_encoder_writes_is_an_openai_shaped_error(
    transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy")
    deep = b'{"model": "m", "messages": [], "x": ' + b"[" * 300 + b"]" * 300 + b"}"
    with (
        RawUpstream([response("200 OK", [("Content-Length", "2")], b"{}")]) as upstream,
        proxy_for(upstream, transport) as proxy,
    ):
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            content=deep,
            headers={"content-type": "application/json", "x-thinking-level": "deep"},
            timeout=10,
        )
    assert r.status_code in (400, 500) and r.headers["content-type"] == "application/json"
    assert set(r.json()["error"]) >= {"message", "type", "code"}
    assert len(access_lines(caplog)) == 1


# --- a client gone while the upstream is awaited -------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_served_a_client_gone_while_the_upstream_is_awaited_cancels_it_told_by_the_edge(
    transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The server edge tells the relay of the disconnect itself: no task per request reads `receive`.
    caplog.set_level(logging.INFO, logger="thinkproxy")
    body = orjson.dumps(ASK)
    with RawUpstream([HOLD]) as upstream, proxy_for(upstream, transport) as proxy:
        sock = socket.create_connection((proxy.host, proxy.port), timeout=10)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        deadline = time.monotonic() + 10
        while not upstream.received and time.monotonic() < deadline:
            time.sleep(0.01)
        assert upstream.received, "the request never reached the upstream"
        running = coroutines_running_in(proxy)
        sock.close()
        assert upstream.closed.wait(10), "the proxy kept waiting on the upstream after its client left"
        deadline = time.monotonic() + 10
        while not access_lines(caplog) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "RequestResponseCycle.run_asgi" in running  # (looked while the request was in flight)
    assert "ClientWatch._watch" not in running
    [line] = access_lines(caplog)
    assert line["error"] == "client_disconnected"


async def test_in_process_a_client_gone_while_the_upstream_is_awaited_cancels_it_told_by_receive() -> None:
    # No server edge (an in-process client): the watch reads `receive` for the disconnect.
    asked, cancelled = asyncio.Event(), asyncio.Event()

    async def upstream(request: httpx.Request) -> httpx.Response:
        asked.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return httpx.Response(200, content=COMPLETION)

    app = create_app(make_settings(), transport=httpx.MockTransport(upstream))
    body = [{"type": "http.request", "body": orjson.dumps(ASK), "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if body:
            return body.pop()
        await asked.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(chat_scope([(b"content-type", b"application/json")]), receive, send)
    assert cancelled.is_set()
    assert sent[0]["status"] == 499


# --- what a request leaves behind ---------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_served_requests_leave_no_reference_cycles(transport: str) -> None:
    # A cycle per request (the disconnect watch's cancelled task holding the watch; an observer
    # holding its record) is left for the cyclic collector, whose full passes then stall every
    # stream in flight. Requests must be freed by reference counting alone.
    import gc

    from proxy.core.events import AccessRecord
    from proxy.server.asgi import ClientWatch

    events = sse_chunk("hi") + b"data: [DONE]\n\n"
    # (Connection: close: RawUpstream serves one request per connection; a reused one could race
    # its close.)
    close = ("Connection", "close")
    sse_head = [("Content-Type", "text/event-stream"), ("Content-Length", str(len(events))), close]
    stream = response("200 OK", sse_head, events)
    json_head = [("Content-Type", "application/json"), ("Content-Length", str(len(COMPLETION))), close]
    json_answer = response("200 OK", json_head, COMPLETION)

    def script(received: Received) -> list[Step]:
        return [stream if b'"stream":true' in received.body else json_answer]

    with RawUpstream(script) as upstream, proxy_for(upstream, transport, trace="brief") as proxy:
        with httpx.Client(timeout=10) as client:
            for body in (ASK, STREAM) * 3:
                assert client.post(f"{proxy.url}/v1/chat/completions", json=body).status_code == 200
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for body in (ASK, STREAM) * 3:
                with httpx.Client(timeout=10) as client:
                    assert client.post(f"{proxy.url}/v1/chat/completions", json=body).status_code == 200
            gc.collect()
            left = [type(o).__name__ for o in gc.garbage if isinstance(o, (ClientWatch, AccessRecord))]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert left == []


# --- the first token of a big first read --------------------------------------------------------


async def test_the_first_event_of_a_big_first_read_is_written_before_the_rest_is_processed() -> None:
    # An upstream that sends many events at once: the client's first token must not wait until
    # the whole read went through the pipeline.

    from proxy.server.app import create_app

    events = [sse_chunk("Hello")] + [sse_chunk(f" word {i}") for i in range(400)] + [b"data: [DONE]\n\n"]
    body = b"".join(events)
    assert len(body) > 16_000

    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    app = create_app(make_settings(), transport=httpx.MockTransport(upstream))
    request = orjson.dumps(STREAM)
    scope = chat_scope(
        [(b"content-type", b"application/json"), (b"content-length", str(len(request)).encode())]
    )
    arrived = False
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal arrived
        if not arrived:
            arrived = True
            return {"type": "http.request", "body": request, "more_body": False}
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    pieces = [m["body"] for m in sent if m["type"] == "http.response.body" and m["body"]]
    assert pieces[0] == events[0]  # alone: the rest of the read came after it
    assert b"".join(pieces) == body
