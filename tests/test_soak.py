"""The load-and-soak check (bench/soak.py): its classifier and leak detector, and a short soak of
30 paced streams for 3 s through a real `thinkproxy serve` and simulated upstream."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from proxy.mock import MockOptions, create_mock_app
from proxy.server.serving import BackgroundServer

SOAK_PATH = Path(__file__).resolve().parent.parent / "bench" / "soak.py"

pytestmark = pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="needs Linux /proc")


def load_soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("thinkproxy_bench_soak", SOAK_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


soak = load_soak()

CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
)
TRACE_DONE = b': trace {"type":"done","seq":1}\n\n'
DONE = b"data: [DONE]\n\n"
ERROR_FRAME = b'data: {"error":{"message":"cut","type":"upstream_error","code":"upstream_unreachable"}}\n\n'
OPENAI_ERROR = b'{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}'


def kind_of_stream(body: bytes, *, status: int = 200, fault: str | None = None, trace: bool = True) -> str:
    outcome = soak.classify_stream(status, body, fault, trace)
    kind: str = outcome.kind
    return kind


def kind_of_json(body: bytes, *, status: int = 200, fault: str | None = None, trace: bool = True) -> str:
    outcome = soak.classify_json(status, body, fault, trace)
    kind: str = outcome.kind
    return kind


# --- the classifier ------------------------------------------------------------------------------


def test_a_whole_stream_is_completed() -> None:
    assert kind_of_stream(CHUNK + CHUNK + TRACE_DONE + DONE) == "stream_done"
    assert kind_of_stream(CHUNK + DONE, trace=False) == "stream_done"


@pytest.mark.parametrize(
    ("body", "fault", "kind"),
    [
        (CHUNK + CHUNK, None, "stream_without_done"),
        (CHUNK + DONE + CHUNK, None, "stream_without_done"),
        (CHUNK + DONE + DONE, None, "done_not_once"),
        (CHUNK + ERROR_FRAME + DONE, None, "stream_error_unprovoked"),
        (CHUNK + TRACE_DONE + DONE, "disconnect", "upstream_cut_not_reported"),
        (b'data: {"id": \n\n' + TRACE_DONE + DONE, None, "invalid_chunk"),
        (CHUNK + DONE, None, "trace_done_missing"),
        (b"Traceback (most recent call last):\n  File x\n" + DONE, None, "traceback_in_body"),
    ],
)
def test_broken_streams_are_unexpected(body: bytes, fault: str | None, kind: str) -> None:
    assert kind_of_stream(body, fault=fault) == kind
    assert soak.Outcome(kind).unexpected


def test_documented_stream_errors_are_expected() -> None:
    assert (
        kind_of_stream(CHUNK + ERROR_FRAME + TRACE_DONE + DONE, fault="disconnect") == "stream_error_framed"
    )
    assert kind_of_stream(OPENAI_ERROR, status=429, fault="429") == "upstream_error_passed"
    broken = b'data: {"id": \n\n'
    assert kind_of_stream(CHUNK + broken + TRACE_DONE + DONE, fault="invalid-json") == "stream_done"


def test_statuses_the_upstream_did_not_send_are_unexpected() -> None:
    assert kind_of_stream(OPENAI_ERROR, status=500) == "http_500"
    assert kind_of_stream(OPENAI_ERROR, status=502, fault="400") == "http_502"
    assert kind_of_stream(b"Internal Server Error", status=429, fault="429") == "upstream_error_altered"


def test_non_stream_outcomes() -> None:
    completion = b'{"choices":[{"message":{"content":"hi"}}],"trace":[]}'
    assert kind_of_json(completion) == "json_ok"
    assert kind_of_json(b'{"choices":[]}') == "trace_missing"
    assert kind_of_json(b'{"choices":[]}', trace=False) == "json_ok"
    assert kind_of_json(OPENAI_ERROR, status=400, fault="400") == "upstream_error_passed"
    assert kind_of_json(OPENAI_ERROR, status=502, fault="disconnect") == "upstream_broken_502"
    assert kind_of_json(b'{"choices":[{"mess', fault="invalid-json") == "upstream_invalid_passed"
    withheld = b'{"error":{"message":"withheld","type":"upstream_error","code":"reasoning_not_removable"}}'
    assert kind_of_json(withheld, status=502, fault="invalid-json") == "upstream_invalid_withheld"
    assert kind_of_json(withheld, status=502) == "http_502"
    assert kind_of_json(b'{"choices":[{"mess') == "invalid_json_body"
    assert kind_of_json(OPENAI_ERROR, status=502) == "http_502"
    assert kind_of_json(b"Internal Server Error", status=500) == "http_500"


# --- the /proc readers and the leak detector ---------------------------------------------------

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000005 00:00000000 00000000     0        0 111 1 0
   1: 0100007F:A1B2 0100007F:1F90 01 00000010:00000000 00:00000000 00000000     0        0 222 1 0
   2: 0100007F:A1B3 0100007F:1F90 08 00000000:00000001 00:00000000 00000000     0        0 333 1 0
   3: 0100007F:A1B4 0100007F:1F90 08 00000000:00000041 00:00000000 00000000     0        0 444 1 0
"""


def test_proc_net_tcp_rows() -> None:
    rows = soak.parse_proc_net_tcp(PROC_NET_TCP)
    assert [(r.local_port, r.remote_port, r.state_name, r.inode) for r in rows] == [
        (8080, 0, "LISTEN", 111),
        (41394, 8080, "ESTABLISHED", 222),
        (41395, 8080, "CLOSE_WAIT", 333),
        (41396, 8080, "CLOSE_WAIT", 444),
    ]
    assert rows[0].rx_queue == 5  # a listening socket: its accept queue
    assert rows[1].tx_queue == 16
    # The peer's FIN counts as one byte in the kernel's figure; only what is left beyond it is unread.
    assert [r.unread for r in rows[1:]] == [0, 0, 64]


@pytest.fixture
def upstream() -> Iterator[BackgroundServer]:
    app = soak.InflightCounter(create_mock_app(MockOptions(pace_ms=300)))
    with BackgroundServer(app) as server:
        yield server


def test_the_leak_detector_sees_a_response_nobody_reads(upstream: BackgroundServer) -> None:
    me = os.getpid()  # this process plays both the "proxy" (the socket below) and the upstream
    body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    with socket.create_connection((upstream.host, upstream.port)) as sock:
        sock.sendall(request)
        report: Any = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the first bytes sit unread in our socket
            report = soak.connection_report(me, 0, me, upstream.port)
            if report.proxy_unread:
                break
            time.sleep(0.05)
        assert report.proxy_unread == 1
        assert report.mock_inflight == 1
        assert report.leaked >= 2 and not report.ok
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the upstream notices the close at its next pause
        report = soak.connection_report(me, 0, me, upstream.port)
        if report.mock_inflight == 0:
            break
        time.sleep(0.05)
    assert report.ok and report.leaked == 0


# --- the short soak ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_soak() -> Any:
    config = soak.SoakConfig(
        streams=30,
        duration=3.0,
        # Higher shares than the long run so that a few seconds still cover every path.
        disconnect_rate=0.2,
        fault_rate=0.15,
        idle_s=0.5,
    )
    return soak.run_soak(config)


def test_short_soak_has_no_unexpected_outcome(short_soak: Any) -> None:
    assert short_soak.stats.unexpected == 0, soak.format_summary(short_soak)


def test_short_soak_completes_streams_and_exercises_the_error_paths(short_soak: Any) -> None:
    counts = short_soak.stats.counts
    assert counts["stream_done"] > 0, soak.format_summary(short_soak)
    assert counts["json_ok"] > 0
    assert counts["client_disconnect"] > 0
    assert counts["upstream_error_passed"] > 0


def test_short_soak_leaves_no_upstream_response_in_flight(short_soak: Any) -> None:
    conns = short_soak.connections
    assert conns.mock_inflight == 0, soak.format_summary(short_soak)
    assert conns.proxy_unread == 0 and conns.proxy_unsent == 0
    assert conns.leaked == 0
    assert conns.proxy_client_side == 0  # every client connection was closed on the proxy's side too
