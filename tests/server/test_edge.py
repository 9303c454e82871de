"""The client edge (proxy.server.edge) against a real uvicorn server on 127.0.0.1: header limits, the
header and body timeouts, the connection cap, and answers that stay readable while the client is
still sending. Raw sockets where the misbehaviour needs one; short configured timeouts, and only
generous bounds on how long the server may take to answer or close."""

from __future__ import annotations

import asyncio
import gc
import queue
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.mock import MockOptions, create_mock_app
from proxy.server.access_log import AccessFormatter
from proxy.server.app import create_app
from proxy.server.edge import EDGE_REQUEST, EdgeRequest
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings, start_serve

GENEROUS_S = 15.0  # "answered or closed within": never a measurement, only a bound for a hung test
LIMIT = 256 * 1024
OVERSIZED = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"a" * (3 * LIMIT) + b'"}]}'


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions()), graceful_s=0.1) as server:
        yield server


def edge_proxy(mock: BackgroundServer, **overrides: object) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", **overrides)
    return BackgroundServer(create_app(settings))


_OPENED: list[socket.socket] = []


@pytest.fixture(autouse=True)
def close_sockets() -> Iterator[None]:
    """The raw sockets a test opened, closed after it (however it ended)."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def connect(server: BackgroundServer) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=GENEROUS_S)
    _OPENED.append(sock)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset after the answer counts as closed)."""
    data = b""
    while True:
        try:
            piece = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not piece:
            return data
        data += piece


def split_answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def error_of(body: bytes) -> dict[str, object]:
    error: dict[str, object] = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "code", "param"}
    return error


def healthy(server: BackgroundServer) -> bool:
    return httpx.get(f"{server.url}/healthz", timeout=GENEROUS_S).status_code == 200


# -- 413 stays readable ----------------------------------------------------------------------------


def test_urllib_reads_the_413_every_time(mock: BackgroundServer) -> None:
    with edge_proxy(mock, max_body_bytes=LIMIT) as p:
        statuses = []
        for _ in range(20):
            req = urllib.request.Request(
                f"{p.url}/v1/chat/completions", data=OVERSIZED, headers={"content-type": "application/json"}
            )
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(req, timeout=GENEROUS_S)
            statuses.append(caught.value.code)
            assert b"THINKPROXY_MAX_BODY_BYTES" in caught.value.read()
        assert statuses == [413] * 20
        assert healthy(p)


@pytest.mark.parametrize("chunked", [False, True])
def test_httpx_reads_the_413_every_time(mock: BackgroundServer, chunked: bool) -> None:
    def pieces() -> Iterator[bytes]:
        for i in range(0, len(OVERSIZED), 16384):
            yield OVERSIZED[i : i + 16384]

    with edge_proxy(mock, max_body_bytes=LIMIT) as p, httpx.Client(timeout=GENEROUS_S) as client:
        statuses = []
        for _ in range(20):
            content = pieces() if chunked else OVERSIZED
            r = client.post(f"{p.url}/v1/chat/completions", content=content)
            statuses.append(r.status_code)
            assert r.json()["error"]["code"] == "request_too_large"
            assert r.headers["connection"] == "close"
        assert statuses == [413] * 20


def test_openai_sdk_reads_the_413_every_time(mock: BackgroundServer) -> None:
    with edge_proxy(mock, max_body_bytes=LIMIT) as p:
        client = openai.OpenAI(base_url=f"{p.url}/v1", api_key="sk-test", max_retries=0, timeout=GENEROUS_S)
        statuses = []
        for _ in range(20):
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(
                    model="deepseek-v4", messages=[{"role": "user", "content": "a" * (3 * LIMIT)}]
                )
            statuses.append(caught.value.status_code)
            assert "THINKPROXY_MAX_BODY_BYTES" in caught.value.message
        client.close()
        assert statuses == [413] * 20


THREE_MB_OVER = LIMIT + 3 * 1024 * 1024


def small_buffers(server: BackgroundServer) -> BackgroundServer:
    """Loopback's kernel buffers hold megabytes: a client could hand a whole body to its kernel
    before the server stopped reading, and read the answer by luck. With small ones (what a real
    network path gives), a close before the client finished sending is a broken pipe every time."""
    server.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # (accepted sockets inherit it)
    return server


def send_whole_body_then_read(server: BackgroundServer, body: bytes, *, chunked: bool) -> bytes:
    """A client that writes its whole request before it reads anything (urllib, requests, curl)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    sock.settimeout(GENEROUS_S)
    sock.connect((server.host, server.port))
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    with sock:
        if chunked:
            sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(body), 65536):
                piece = body[i : i + 65536]
                sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            sock.sendall(b"0\r\n\r\n")
        else:
            sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return read_until_closed(sock)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_3_mb_over_the_limit_gets_its_413_every_time(mock: BackgroundServer, chunked: bool) -> None:
    """After answering 413 the server reads and discards what the client still sends until the body
    has arrived (its end, by Content-Length or the last chunk), and only then closes: it let go at
    twice the limit, and a client still sending met a broken pipe instead of the answer."""
    body = b"a" * THREE_MB_OVER
    with small_buffers(edge_proxy(mock, max_body_bytes=LIMIT)) as p:
        for _ in range(20):
            status, headers, answer = split_answer(send_whole_body_then_read(p, body, chunked=chunked))
            assert status == 413 and headers["connection"] == "close"
            assert error_of(answer)["code"] == "request_too_large"
        assert healthy(p)


@pytest.mark.parametrize("chunked", [False, True])
def test_after_a_413_the_connection_is_closed_once_the_body_has_arrived(
    mock: BackgroundServer, chunked: bool
) -> None:
    """Not after the time bound: the body's end is found by parsing what is discarded. A request
    sent after it on the same connection is not served (the 413 said `connection: close`)."""
    with edge_proxy(mock, max_body_bytes=1024, header_timeout=4 * GENEROUS_S) as p:
        sock = connect(p)
        rest = b"a" * 100_000
        if chunked:
            head = b"Transfer-Encoding: chunked\r\n\r\n"
            rest = b"%x\r\n" % len(rest) + rest + b"\r\n0\r\n\r\n"
        else:
            head = b"Content-Length: %d\r\n\r\n" % len(rest)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + head + rest[:50_000])
        status, _, _ = split_answer(sock.recv(65536))
        assert status == 413
        sock.sendall(rest[50_000:] + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_until_closed(sock) == b""  # (the 413 was all; the server's FIN followed it)
        started = time.monotonic()
        with pytest.raises(OSError):  # closed, not half-closed: what follows is refused
            while time.monotonic() - started < GENEROUS_S:
                sock.sendall(b"a" * 100)
                time.sleep(0.05)
        sock.close()
        assert healthy(p)


def test_draining_after_an_early_answer_is_bounded(mock: BackgroundServer) -> None:
    """A client that keeps trickling the rest of an oversized body is cut off (after the header
    timeout: the time the server lingers after an answer)."""
    with edge_proxy(mock, max_body_bytes=1024, header_timeout=0.5) as p:
        sock = connect(p)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        status, _, body = split_answer(sock.recv(65536))
        assert status == 413 and error_of(body)["code"] == "request_too_large"
        started = time.monotonic()
        with pytest.raises(OSError):  # the reset can come on any send
            while time.monotonic() - started < GENEROUS_S:
                sock.sendall(b"a" * 100)
                time.sleep(0.05)
        sock.close()


def early_401(p: BackgroundServer) -> socket.socket:
    """A kept-alive POST answered (401, gateway mode) after 200 of its 1,000 body bytes."""
    sock = connect(p)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
        b"Content-Length: 1000\r\n\r\n" + b"a" * 200
    )
    status, headers, _ = split_answer(sock.recv(65536))
    assert status == 401 and headers.get("connection") != "close"
    return sock


def test_after_an_early_answer_the_rest_of_the_body_is_discarded_and_the_connection_reused(
    mock: BackgroundServer,
) -> None:
    with edge_proxy(mock, upstream_api_key="sk-gw", client_keys="ck-1", client_body_timeout=GENEROUS_S) as p:
        sock = early_401(p)
        sock.sendall(b"a" * 800 + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 200 ")


def test_after_an_early_answer_a_trickled_rest_is_cut_off(mock: BackgroundServer) -> None:
    with edge_proxy(mock, upstream_api_key="sk-gw", client_keys="ck-1", client_body_timeout=0.5) as p:
        sock = early_401(p)
        sock.sendall(b"a" * 10)  # and nothing more: the server closes after the body timeout
        assert read_until_closed(sock) == b""


# -- request head limits ---------------------------------------------------------------------------


def test_a_head_over_the_byte_limit_is_431(mock: BackgroundServer) -> None:
    with edge_proxy(mock, max_header_bytes=8192) as p:
        sock = connect(p)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        status, headers, body = split_answer(read_until_closed(sock))
        assert status == 431 and headers["connection"] == "close"
        error = error_of(body)
        assert error["code"] == "request_headers_too_large"
        assert "THINKPROXY_MAX_HEADER_BYTES" in str(error["message"])
        # just under the limit is fine
        r = httpx.get(f"{p.url}/v1/models", headers={"x-big": "a" * 7000}, timeout=GENEROUS_S)
        assert r.status_code == 200


def test_a_single_endless_header_is_cut_off(mock: BackgroundServer) -> None:
    with edge_proxy(mock, max_header_bytes=8192) as p:
        sock = connect(p)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        # 512 KB at most: past the 8 KB limit, and under what the server reads and discards after
        # refusing a head (so it answers, and never has to cut this client off)
        for _ in range(64):
            sock.sendall(b"a" * 8192)
            if select.select([sock], [], [], 0)[0]:
                break
        status, _, body = split_answer(sock.recv(65536))
        sock.close()
        assert status == 431 and error_of(body)["code"] == "request_headers_too_large"
        assert healthy(p)


def test_too_many_header_lines_is_431(mock: BackgroundServer) -> None:
    with edge_proxy(mock, max_header_count=20) as p:
        lines = b"".join(b"X-H%d: v\r\n" % i for i in range(30))
        sock = connect(p)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
        status, _, body = split_answer(read_until_closed(sock))
        assert status == 431 and "THINKPROXY_MAX_HEADER_COUNT" in str(error_of(body)["message"])
        r = httpx.get(f"{p.url}/v1/models", headers={f"x-h{i}": "v" for i in range(10)}, timeout=GENEROUS_S)
        assert r.status_code == 200


def test_endless_header_lines_on_several_connections_leave_the_server_serving(
    mock: BackgroundServer,
) -> None:
    with edge_proxy(mock) as p:
        socks = [connect(p) for _ in range(4)]
        for sock in socks:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        answered: dict[int, bytes] = {}
        # 2,000 lines (110 KB) at most per connection: far past the default limit of 100 lines, and
        # under what the server reads and discards after refusing a head (so it never cuts one off)
        for n in range(2_000):
            for i, sock in enumerate(socks):
                if i in answered:
                    continue
                sock.sendall(b"X-Line-%d: %s\r\n" % (n, b"v" * 40))
                if select.select([sock], [], [], 0)[0]:
                    answered[i] = sock.recv(65536)
            if len(answered) == len(socks):
                break
        for i, sock in enumerate(socks):
            if i not in answered:
                answered[i] = sock.recv(65536)
        for sock in socks:
            sock.close()
        assert [split_answer(a)[0] for a in answered.values()] == [431] * 4
        assert healthy(p)


# -- slow clients ----------------------------------------------------------------------------------


def test_an_unfinished_head_gets_408_after_the_header_timeout(mock: BackgroundServer) -> None:
    with edge_proxy(mock, header_timeout=0.5) as p:
        sock = connect(p)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        status, _, body = split_answer(read_until_closed(sock))  # (returns once the server closes)
        assert status == 408
        assert "THINKPROXY_HEADER_TIMEOUT" in str(error_of(body)["message"])
        assert healthy(p)


def test_a_header_trickled_byte_by_byte_is_still_timed_out(mock: BackgroundServer) -> None:
    with edge_proxy(mock, header_timeout=0.5) as p:
        sock = connect(p)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\n")
        answer = b""
        started = time.monotonic()
        sock.settimeout(0.1)
        while time.monotonic() - started < GENEROUS_S:
            try:
                sock.sendall(b"X")
                piece = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not piece:
                break
            answer += piece
        assert answer.startswith(b"HTTP/1.1 408 ")


def test_a_connection_that_never_sends_is_closed(mock: BackgroundServer) -> None:
    with edge_proxy(mock, header_timeout=0.5) as p:
        sock = connect(p)
        assert read_until_closed(sock) == b""  # closed quietly: no request, no answer


def test_an_unfinished_body_gets_408_after_the_body_timeout(mock: BackgroundServer) -> None:
    with edge_proxy(mock, client_body_timeout=0.5) as p:
        sock = connect(p)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n" + b'{"model": "m", '
        )
        status, headers, body = split_answer(read_until_closed(sock))
        assert status == 408 and headers["connection"] == "close"
        error = error_of(body)
        assert error["code"] == "request_timeout"
        assert "THINKPROXY_CLIENT_BODY_TIMEOUT" in str(error["message"])
        assert healthy(p)


def test_connections_over_the_cap_get_503_and_the_cap_frees_up(mock: BackgroundServer) -> None:
    with edge_proxy(mock, max_client_connections=3, header_timeout=GENEROUS_S) as p:
        held = [connect(p) for _ in range(3)]
        over = connect(p)
        status, headers, body = split_answer(read_until_closed(over))
        assert status == 503 and headers["retry-after"] == "1"
        assert "THINKPROXY_MAX_CLIENT_CONNECTIONS" in str(error_of(body)["message"])
        for sock in held:
            sock.close()
        deadline = time.monotonic() + GENEROUS_S
        while True:  # the server notices the closes on its own schedule
            r = httpx.get(f"{p.url}/healthz", timeout=GENEROUS_S)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.status_code == 200


# -- what the limits leave alone -------------------------------------------------------------------


def test_keep_alive_and_pipelined_requests_still_work(mock: BackgroundServer) -> None:
    with edge_proxy(mock, header_timeout=0.5) as p:
        sock = connect(p)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
        time.sleep(0.8)  # longer than the header timeout: an idle kept-alive connection is not timed out
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        raw = read_until_closed(sock)
        assert raw.count(b"HTTP/1.1 200 OK") == 3


def test_a_refused_request_gets_an_access_line(
    mock: BackgroundServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="thinkproxy.access")
    with edge_proxy(mock, max_header_count=10) as p:
        sock = connect(p)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\n" + b"X: y\r\n" * 20 + b"\r\n")
        read_until_closed(sock)
    refused = [r for r in caplog.records if r.name == "thinkproxy.access"]
    assert [r.access["status"] for r in refused] == [431]  # type: ignore[attr-defined]
    assert refused[0].access["error"] == "request_headers_too_large"  # type: ignore[attr-defined]


def test_a_path_with_encoded_line_breaks_stays_one_access_line(
    mock: BackgroundServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="thinkproxy.access")
    with edge_proxy(mock) as p:
        sock = connect(p)
        # (a %0a never reaches the app: the router's path pattern stops at a line feed; %0d does)
        target = b"/v1/models%0d2026-01-01%20method=GET%09x%1b[2J%c2%85%e2%80%a8"
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        read_until_closed(sock)
    [record] = [r for r in caplog.records if r.name == "thinkproxy.access"]
    line = AccessFormatter(json_lines=False).format(record)
    assert not any(c in line for c in "\r\n\t\x1b\x85\u2028")
    # (Starlette's URL parsing already drops CR and tab from the path; the rest is escaped here)
    assert r'path="/v1/models2026-01-01 method=GETx\x1b[2J\x85\u2028" status=404' in line


def test_thinkproxy_serve_applies_the_edge_settings(mock: BackgroundServer) -> None:
    """The limits reach a real `thinkproxy serve` (settings → CLI → every worker's protocol)."""
    server, base = start_serve(
        mock,
        "--workers",
        "2",
        THINKPROXY_MAX_HEADER_COUNT="10",
        THINKPROXY_HEADER_TIMEOUT="0.5",
        THINKPROXY_LOG_LEVEL="warning",
    )
    host, port = base.removeprefix("http://").split(":")
    try:
        for _ in range(4):  # fresh connections: whichever worker takes them
            with socket.create_connection((host, int(port)), timeout=GENEROUS_S) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 20 + b"\r\n")
                assert split_answer(read_until_closed(sock))[0] == 431
            with socket.create_connection((host, int(port)), timeout=GENEROUS_S) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                assert split_answer(read_until_closed(sock))[0] == 408
    finally:
        server.terminate()
        server.communicate(timeout=30)


# -- what the edge tells the app: a body already whole, the client's disconnect ----------------------


class Told:
    """A Starlette app whose endpoints report what the edge's extension (EDGE_REQUEST) tells them;
    `reports` gets what each saw, `checked` is set once an endpoint has asked (for the client's next
    step)."""

    def __init__(self) -> None:
        self.reports: queue.Queue[object] = queue.Queue()
        self.checked = threading.Event()
        self.app = Starlette(
            routes=[
                Route("/take", self.take, methods=["POST"]),
                Route("/leave", self.leave, methods=["POST"]),
            ]
        )

    async def take(self, request: Request) -> JSONResponse:
        taken = request.scope["extensions"][EDGE_REQUEST]["take_body"]()
        self.checked.set()
        read = b""
        if taken is None:
            async for piece in request.stream():
                read += piece
        return JSONResponse({"taken": None if taken is None else taken.decode(), "read": read.decode()})

    async def leave(self, request: Request) -> JSONResponse:
        hooks = request.scope["extensions"][EDGE_REQUEST]
        assert hooks["take_body"]() == b"{}"
        gone = asyncio.Event()
        hooks["on_disconnect"](gone.set)
        self.checked.set()
        await asyncio.wait_for(gone.wait(), GENEROUS_S)
        self.reports.put("told")
        hooks["on_disconnect"](lambda: self.reports.put("told at once, once gone"))
        self.reports.put(await request.receive())
        return JSONResponse({})


def post_in_one_write(sock: socket.socket, path: str, body: bytes) -> object:
    """POST `body` on a kept-alive `sock`, its head and body in one write, and read the JSON answer:
    the body arrives with its head, before the app runs. (A client that writes them apart, as
    http.client and httpx do, has its body taken from the edge only when both are in by the time
    the app asks; otherwise it is read from `receive`.)"""
    sock.sendall(
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(body)) + body
    )
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    _, headers, answer = split_answer(raw)
    while len(answer) < int(headers["content-length"]):
        answer += sock.recv(65536)
    return orjson.loads(answer)


def test_a_body_whole_before_the_app_runs_is_taken_from_the_edge() -> None:
    told = Told()
    with BackgroundServer(told.app) as server:
        assert post_in_one_write(connect(server), "/take", b"hello") == {"taken": "hello", "read": ""}


def test_a_body_still_arriving_is_read_from_receive() -> None:
    told = Told()
    with BackgroundServer(told.app) as server:
        sock = connect(server)
        sock.sendall(
            b"POST /take HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\nhello"
        )
        assert told.checked.wait(GENEROUS_S)
        sock.sendall(b"world")
        status, _, body = split_answer(read_until_closed(sock))
    assert status == 200 and orjson.loads(body) == {"taken": None, "read": "helloworld"}


def test_a_body_awaiting_its_100_continue_is_read_from_receive_which_sends_it() -> None:
    told = Told()
    with BackgroundServer(told.app) as server:
        sock = connect(server)
        sock.sendall(
            b"POST /take HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\n\r\nhello"
        )
        raw = read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    status, _, body = split_answer(raw.removeprefix(b"HTTP/1.1 100 Continue\r\n\r\n"))
    assert status == 200 and orjson.loads(body) == {"taken": None, "read": "hello"}


def test_a_client_gone_is_told_to_the_app_and_receive_says_so_too() -> None:
    told = Told()
    with BackgroundServer(told.app) as server:
        sock = connect(server)
        sock.sendall(b"POST /leave HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert told.checked.wait(GENEROUS_S)
        sock.close()
        reports = [told.reports.get(timeout=GENEROUS_S) for _ in range(3)]
    assert reports == ["told", "told at once, once gone", {"type": "http.disconnect"}]


def test_a_whole_body_over_the_limit_taken_from_the_edge_is_413(mock: BackgroundServer) -> None:
    # Chunked (no length to refuse it by before it is read): the body is whole in the edge's hands.
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"a" * 200 + b'"}]}'
    with edge_proxy(mock, max_body_bytes=100) as p:
        sock = connect(p)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
        )
        status, _, answer = split_answer(read_until_closed(sock))
    assert status == 413
    assert error_of(answer)["message"] == (
        "Request body exceeds the limit of 100 bytes (THINKPROXY_MAX_BODY_BYTES)."
    )


def test_the_edges_requests_on_a_kept_alive_connection_leave_no_reference_cycles() -> None:
    # A request's hooks are in its scope, which its uvicorn cycle holds: were the cycle held back
    # strongly, every request would be a reference cycle for the cyclic collector (whose full
    # passes stall every stream in flight).
    told = Told()
    with BackgroundServer(told.app) as server:
        sock = connect(server)
        post_in_one_write(sock, "/take", b"warm")
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(3):
                assert post_in_one_write(sock, "/take", b"hello") == {"taken": "hello", "read": ""}
            gc.collect()
            left = [o for o in gc.garbage if isinstance(o, EdgeRequest)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert left == []
