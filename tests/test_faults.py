"""Upstream faults and limits against real loopback servers: the proxy returns what it can,
frames failures as documented, frees the upstream, and keeps serving everyone else."""

from __future__ import annotations

import gzip
import logging
import os
import signal
import threading
from collections.abc import Iterator

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings, start_serve, worker_pids

ASK = {"model": "deepseek-v4", "messages": [{"role": "user", "content": "Tell me about tides."}]}
STREAM = {**ASK, "stream": True}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions()), graceful_s=0.1) as server:
        yield server


def proxy(mock: BackgroundServer, **overrides: object) -> BackgroundServer:
    return BackgroundServer(
        create_app(make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", **overrides))
    )


def frames(raw: bytes) -> list[bytes]:
    return [f for f in raw.split(b"\n\n") if f]


def final_error(raw: bytes) -> dict[str, object]:
    fs = frames(raw)
    assert fs[-1] == b"data: [DONE]"
    error: dict[str, object] = orjson.loads(fs[-2].removeprefix(b"data: "))["error"]
    return error


def still_serving(server: BackgroundServer) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", json=ASK, timeout=10)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_stall_mid_stream_ends_with_error_event_after_read_timeout(
    mock: BackgroundServer, transport: str
) -> None:
    with proxy(mock, read_timeout=0.5, http_transport=transport) as p:
        r = httpx.post(
            f"{p.url}/v1/chat/completions",
            json=STREAM,
            headers={"x-mock-fault": "stall", "x-mock-stall-s": "20"},
            timeout=15,
        )
        assert r.status_code == 200
        assert frames(r.content)[0].startswith(b"data: {")  # what arrived before the stall was relayed
        error = final_error(r.content)
        assert error["code"] == "upstream_timeout" and "timed out" in str(error["message"])
        still_serving(p)


def test_invalid_json_line_passes_through_and_the_stream_goes_on(mock: BackgroundServer) -> None:
    def broken_frames(raw: bytes) -> list[bytes]:
        out = []
        for f in frames(raw):
            if f.startswith(b"data: {"):
                try:
                    orjson.loads(f[6:])
                except orjson.JSONDecodeError:
                    out.append(f)
        return out

    with proxy(mock, trace="detailed") as p:
        r = httpx.post(f"{p.url}/v1/chat/completions", json=STREAM, headers={"x-mock-fault": "invalid-json"})
        assert r.status_code == 200
        [broken] = broken_frames(r.content)  # forwarded as it came, not dropped, not "fixed"
        first_data = next(f for f in frames(r.content) if f.startswith(b"data: {"))
        stream_id = orjson.loads(first_data[6:])["id"]
        assert broken.startswith(b'data: {"id":"' + stream_id.encode())
        assert frames(r.content)[-1] == b"data: [DONE]"
        assert b'"type":"done"' in r.content


def test_non_sse_answer_to_a_stream_request_comes_back_as_is(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        direct = httpx.post(
            f"{mock.url}/deepseek/v1/chat/completions", json=STREAM, headers={"x-mock-fault": "non-sse"}
        )
        r = httpx.post(f"{p.url}/v1/chat/completions", json=STREAM, headers={"x-mock-fault": "non-sse"})
        assert (r.status_code, r.content) == (direct.status_code, direct.content)
        assert r.headers["content-type"] == direct.headers["content-type"]


@pytest.mark.parametrize("stream", [True, False])
def test_gzip_body_from_upstream_is_decoded_and_normalized(mock: BackgroundServer, stream: bool) -> None:
    with proxy(mock, trace="brief") as p:
        r = httpx.post(
            f"{p.url}/v1/chat/completions",
            json={**ASK, "stream": stream},
            headers={"x-mock-fault": "gzip", "accept-encoding": "identity"},
        )
        assert r.status_code == 200 and "content-encoding" not in r.headers
        body = r.content
        with pytest.raises(gzip.BadGzipFile):
            gzip.decompress(body)
        if stream:
            assert b": trace " in body and frames(body)[-1] == b"data: [DONE]"
        else:
            assert orjson.loads(body)["trace"][-1]["type"] == "done"


def test_oversized_upstream_event_ends_the_stream_and_frees_the_upstream(mock: BackgroundServer) -> None:
    with proxy(mock, max_sse_event_bytes=256 * 1024) as p:
        r = httpx.post(
            f"{p.url}/v1/chat/completions",
            json=STREAM,
            headers={"x-mock-fault": "huge-line", "x-mock-huge-bytes": str(24 * 1024 * 1024)},
            timeout=30,
        )
        assert r.status_code == 200
        assert len(r.content) < 1024 * 1024  # the proxy stopped reading instead of buffering 24 MB
        assert final_error(r.content)["code"] == "upstream_event_too_large"
        still_serving(p)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_upstream_connection_limit_gives_504_and_frees_the_slot(
    mock: BackgroundServer, transport: str
) -> None:
    with proxy(mock, max_upstream_connections=1, connect_timeout=0.5, http_transport=transport) as p:
        first_open = threading.Event()
        result: dict[str, bytes] = {}

        def hold() -> None:
            with httpx.stream(
                "POST",
                f"{p.url}/v1/chat/completions",
                json=STREAM,
                headers={"x-mock-fault": "stall", "x-mock-stall-s": "2"},
                timeout=15,
            ) as r:
                chunks = []
                for chunk in r.iter_raw():
                    first_open.set()
                    chunks.append(chunk)
                result["body"] = b"".join(chunks)

        holder = threading.Thread(target=hold)
        holder.start()
        assert first_open.wait(10)
        r = httpx.post(f"{p.url}/v1/chat/completions", json=ASK, timeout=10)
        assert r.status_code == 504
        assert "THINKPROXY_MAX_UPSTREAM_CONNECTIONS" in r.json()["error"]["message"]
        holder.join(15)
        assert frames(result["body"])[-1] == b"data: [DONE]"  # the held stream was not disturbed
        still_serving(p)  # and its connection went back to the pool


def test_no_key_in_logs_or_errors(mock: BackgroundServer, caplog: pytest.LogCaptureFixture) -> None:
    secret, client_key = "sk-upstream-SECRET-4242", "ck-CLIENT-SECRET-77"
    caplog.set_level(logging.DEBUG)
    with proxy(mock, upstream_api_key=secret, client_keys=[client_key]) as p:
        bad = httpx.post(
            f"{p.url}/v1/chat/completions", json=ASK, headers={"authorization": "Bearer ck-wrong-999"}
        )
        assert bad.status_code == 401 and b"ck-wrong-999" not in bad.content
        good = httpx.post(
            f"{p.url}/v1/chat/completions", json=STREAM, headers={"authorization": f"Bearer {client_key}"}
        )
        assert good.status_code == 200
        sent = httpx.get(f"{mock.url}/_mock/requests/last").json()["headers"]
        assert sent["authorization"].endswith("4242") and client_key not in str(sent)
    logged = caplog.text
    access = [r for r in caplog.records if r.name == "thinkproxy.access"]
    assert len(access) >= 2 and {r.access["status"] for r in access} >= {401, 200}  # type: ignore[attr-defined]
    for s in (secret, client_key, "ck-wrong-999"):
        assert s not in logged
        assert s.encode() not in good.content


def test_sigterm_lets_in_flight_streams_finish(mock: BackgroundServer) -> None:
    server, base = start_serve(mock, THINKPROXY_SHUTDOWN_TIMEOUT="20")
    try:
        with httpx.stream(
            "POST",
            f"{base}/v1/chat/completions",
            json=STREAM,
            headers={"x-mock-pace-ms": "40"},
            timeout=20,
        ) as r:
            pieces = r.iter_raw()
            body = next(pieces)
            server.send_signal(signal.SIGTERM)
            for piece in pieces:
                body += piece
        assert frames(body)[-1] == b"data: [DONE]"
        assert b'"error"' not in body
        # uvicorn re-raises SIGTERM after its graceful shutdown, so "killed by SIGTERM" is the clean exit
        assert server.wait(timeout=20) in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


def test_total_timeout_bounds_a_slow_but_steady_exchange(mock: BackgroundServer) -> None:
    with proxy(mock, total_timeout=0.6, read_timeout=10) as p:
        r = httpx.post(
            f"{p.url}/v1/chat/completions", json=STREAM, headers={"x-mock-pace-ms": "100"}, timeout=15
        )
        assert r.status_code == 200
        error = final_error(r.content)
        assert error["code"] == "upstream_timeout" and "THINKPROXY_TOTAL_TIMEOUT" in str(error["message"])

        r = httpx.post(
            f"{p.url}/v1/chat/completions",
            json=ASK,
            headers={"x-mock-fault": "slow-first", "x-mock-delay-ms": "5000"},
            timeout=15,
        )
        assert r.status_code == 504
        assert "THINKPROXY_TOTAL_TIMEOUT" in r.json()["error"]["message"]
        still_serving(p)


def test_every_worker_writes_access_lines(mock: BackgroundServer) -> None:
    """Each worker in turn is the only one running (the others are stopped with SIGSTOP), so the
    request it answers can only be logged by it; the access line's pid says who wrote it."""
    server, base = start_serve(mock, "--workers", "2", ready_path="/v1/models")
    answered: list[int] = []
    try:
        workers = worker_pids(server.pid, 2)
        assert len(workers) == 2
        for worker in workers:
            others = [w for w in workers if w != worker]
            for other in others:
                os.kill(other, signal.SIGSTOP)
            try:
                r = httpx.get(f"{base}/v1/models", headers={"connection": "close"}, timeout=30)
                answered.append(r.status_code)
            finally:
                for other in others:
                    os.kill(other, signal.SIGCONT)
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=30)[0].decode()
    assert answered == [200, 200]
    for worker in workers:
        assert f"pid={worker} method=GET path=/v1/models status=200" in output, output


# -- hostile answers and odd requests, end to end ----------------------------------------------------

SECRET_REASONING = "SECRET-REASONING-51f0"


def fixed_upstream(stream_body: bytes, json_body: bytes, seen: list[bytes]) -> Starlette:
    """An upstream that answers every chat request with these exact bytes, and records the bodies."""

    async def chat(request: Request) -> Response:
        body = await request.body()
        seen.append(body)
        if orjson.loads(body).get("stream"):
            return Response(stream_body, media_type="text/event-stream")
        return Response(json_body, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


HOSTILE_STREAM = (
    b'data: {"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"'
    + SECRET_REASONING.encode()
    + b'"}}],'
    b'"error":null}\n\n'
    b'data: {"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"'
    + SECRET_REASONING.encode()
    + b' \\ud800"}}]}\n\n'
    b'data: {"id":"c","deep":'
    + b"[" * 300
    + b"]" * 300
    + b',"choices":[{"index":0,"delta":{"reasoning_content":"'
    + SECRET_REASONING.encode()
    + b'"}}]}\n\n'
    b'data: {"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"'
    + SECRET_REASONING.encode()
    + b'"}}\n\n'
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"the answer"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("trace", ["off", "detailed"])
def test_hidden_reasoning_never_reaches_the_client_from_odd_chunks(trace: str) -> None:
    seen: list[bytes] = []
    cut_json = b'{"id":"x","choices":[{"index":0,"message":{"reasoning_content":"' + SECRET_REASONING.encode()
    with (
        BackgroundServer(fixed_upstream(HOSTILE_STREAM, cut_json, seen)) as upstream,
        BackgroundServer(create_app(make_settings(upstream_base_url=f"{upstream.url}/v1"))) as p,
    ):
        headers = {"x-reasoning": "hide", "x-trace": trace}
        r = httpx.post(f"{p.url}/v1/chat/completions", json=STREAM, headers=headers, timeout=10)
        assert r.status_code == 200
        assert SECRET_REASONING.encode() not in r.content
        assert b"the answer" in r.content and r.content.endswith(b"data: [DONE]\n\n")
        r = httpx.post(f"{p.url}/v1/chat/completions", json=ASK, headers=headers, timeout=10)
        assert r.status_code == 502 and r.json()["error"]["code"] == "reasoning_not_removable"
        assert SECRET_REASONING not in r.text
        # shown, the same answers pass as they came
        r = httpx.post(f"{p.url}/v1/chat/completions", json=ASK, headers={"x-trace": "off"}, timeout=10)
        assert r.status_code == 200 and r.content == cut_json


def test_odd_requests_are_refused_or_kept_exact_end_to_end() -> None:
    seen: list[bytes] = []
    answer = orjson.dumps({"id": "x", "choices": [{"index": 0, "message": {"content": "ok"}}]})
    with (
        BackgroundServer(fixed_upstream(b"", answer, seen)) as upstream,
        BackgroundServer(create_app(make_settings(upstream_base_url=f"{upstream.url}/v1"))) as p,
    ):
        url = f"{p.url}/v1/chat/completions"
        deep = b'{"model":"m","messages":[],"x":' + b"[" * 300 + b"]" * 300 + b"}"
        r = httpx.post(url, content=deep, headers={"x-thinking-level": "deep"}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["code"] == "json_too_deep"
        twice = [("x-thinking-level", "off"), ("x-thinking-level", "deep")]
        r = httpx.post(url, content=orjson.dumps(ASK), headers=twice, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["param"] == "X-Thinking-Level"
        r = httpx.post(
            url, content=orjson.dumps(ASK), headers=[(b"x-thinking-level", b"deep\xa0")], timeout=10
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "X-Thinking-Level"
        assert seen == []
        big = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"seed":1180591620717411303424}'
        r = httpx.post(url, content=big, headers={"x-thinking-level": "deep"}, timeout=10)
        assert r.status_code == 200
        assert b'"seed":1180591620717411303424' in seen[0]
