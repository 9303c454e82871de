"""End to end over real sockets: the official openai SDK → proxy (uvicorn) → upstream (uvicorn)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

MESSAGES = [{"role": "user", "content": "Why is the sky blue?"}]


def chunk(i: int, content: str) -> bytes:
    body = {
        "id": "chatcmpl-e2e",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def proxy_for(upstream: str, **overrides: object) -> BackgroundServer:
    return BackgroundServer(create_app(make_settings(upstream_base_url=upstream, **overrides)))


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=20)


def test_sdk_gets_the_same_chunks_as_direct(mock: BackgroundServer) -> None:
    def collect(base: str) -> list[dict[str, object]]:
        stream = sdk(base).chat.completions.create(model="deepseek-flash", messages=MESSAGES, stream=True)
        # ids and timestamps differ per response, like a real provider's; everything else must match
        return [c.model_dump(exclude={"id", "created"}) for c in stream]

    direct = collect(f"{mock.url}/v1")
    with proxy_for(f"{mock.url}/v1") as proxy:
        proxied = collect(f"{proxy.url}/v1")
    assert proxied == direct
    assert any(c["choices"] and c["choices"][0]["delta"].get("reasoning_content") for c in proxied)


def test_non_stream_same_as_direct(mock: BackgroundServer) -> None:
    def ask(base: str) -> dict[str, object]:
        return sdk(base).chat.completions.create(model="deepseek-flash", messages=MESSAGES).model_dump()

    direct = ask(f"{mock.url}/v1")
    with proxy_for(f"{mock.url}/v1") as proxy:
        proxied = ask(f"{proxy.url}/v1")
    for answer in (direct, proxied):
        answer.pop("id", None)
        answer.pop("created", None)
    assert proxied == direct


def test_upstream_400_byte_for_byte_stream_and_non_stream(mock: BackgroundServer) -> None:
    with proxy_for(f"{mock.url}/v1") as proxy:
        for stream in (False, True):
            body = {"model": "deepseek-flash", "messages": MESSAGES, "stream": stream}
            headers = {"x-mock-fault": "400", "authorization": "Bearer sk-test"}
            direct = httpx.post(f"{mock.url}/v1/chat/completions", json=body, headers=headers)
            via = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers)
            assert via.status_code == direct.status_code == 400
            assert via.content == direct.content
            assert via.headers["content-type"] == direct.headers["content-type"]


def test_sdk_sees_mid_stream_failure_as_an_error(mock: BackgroundServer) -> None:
    with proxy_for(f"{mock.url}/v1") as proxy:
        with httpx.stream(
            "POST",
            f"{proxy.url}/v1/chat/completions",
            json={"model": "deepseek-flash", "messages": MESSAGES, "stream": True},
            headers={"x-mock-fault": "disconnect"},
            timeout=10,
        ) as r:
            raw = r.read()
        events = [e for e in raw.split(b"\n\n") if e]
        assert events[-1] == b"data: [DONE]"
        error = orjson.loads(events[-2].removeprefix(b"data: "))["error"]
        assert error["type"] == "upstream_error" and error["message"]

        stream = sdk(f"{proxy.url}/v1").chat.completions.create(
            model="deepseek-flash",
            messages=MESSAGES,
            stream=True,
            extra_headers={"x-mock-fault": "disconnect"},
        )
        with pytest.raises(openai.APIError):
            for _ in stream:
                pass


class GatedUpstream:
    """An upstream that sends one chunk, then waits for the test before sending the rest, and
    records when its response stream is torn down."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.closed = threading.Event()

    def app(self) -> Starlette:
        async def chat(request: Request) -> StreamingResponse:
            await request.body()

            async def body() -> AsyncIterator[bytes]:
                try:
                    yield chunk(0, "first")
                    while not self.release.is_set():
                        await asyncio.sleep(0.01)
                    for i in range(1, 4):
                        yield chunk(i, f" part{i}")
                    yield b"data: [DONE]\n\n"
                finally:
                    self.closed.set()

            return StreamingResponse(body(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_first_chunk_arrives_while_upstream_is_still_sending() -> None:
    gate = GatedUpstream()
    with BackgroundServer(gate.app()) as upstream, proxy_for(f"{upstream.url}/v1") as proxy:
        stream = sdk(f"{proxy.url}/v1").chat.completions.create(model="m", messages=MESSAGES, stream=True)
        first = next(iter(stream))  # would hang until the timeout if the proxy buffered
        assert first.choices[0].delta.content == "first"
        assert not gate.release.is_set()
        gate.release.set()
        rest = "".join(c.choices[0].delta.content or "" for c in stream)
        assert rest == " part1 part2 part3"


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_client_disconnect_closes_the_upstream_stream(transport: str) -> None:
    gate = GatedUpstream()  # never released: the upstream would stall forever
    with (
        BackgroundServer(gate.app()) as upstream,
        proxy_for(f"{upstream.url}/v1", http_transport=transport) as proxy,
    ):
        with httpx.stream(
            "POST",
            f"{proxy.url}/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
            timeout=10,
        ) as r:
            for _ in r.iter_raw():
                break  # got the first chunk; now hang up
        assert gate.closed.wait(timeout=3.0), "the upstream stream stayed open after the client left"


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_unreachable_upstream_gives_502(transport: str) -> None:
    from proxy.server.serving import bind_loopback

    sock = bind_loopback()
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    with proxy_for(f"http://127.0.0.1:{port}/v1", http_transport=transport) as proxy:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": "m", "messages": MESSAGES})
    assert r.status_code == 502
    assert f"127.0.0.1:{port}" in r.json()["error"]["message"]


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_upstream_silent_past_read_timeout_gives_504(transport: str) -> None:
    async def silent(request: Request) -> StreamingResponse:
        await asyncio.sleep(3)
        return StreamingResponse(iter([b"{}"]), media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", silent, methods=["POST"])])
    with (
        BackgroundServer(app, graceful_s=0.1) as upstream,
        proxy_for(f"{upstream.url}/v1", read_timeout=0.3, http_transport=transport) as proxy,
    ):
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions", json={"model": "m", "messages": MESSAGES}, timeout=10
        )
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_timeout"


@pytest.mark.parametrize("stream", [False, True])
def test_client_disconnect_before_the_upstream_answers_cancels_the_upstream_request(stream: bool) -> None:
    left = threading.Event()

    async def slow(request: Request) -> StreamingResponse:
        await request.body()
        for _ in range(500):  # up to 10 s, unless the proxy hangs up first
            if await request.is_disconnected():
                left.set()
                break
            await asyncio.sleep(0.02)
        return StreamingResponse(iter([b"{}"]), media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", slow, methods=["POST"])])
    with BackgroundServer(app, graceful_s=0.1) as upstream, proxy_for(f"{upstream.url}/v1") as proxy:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{proxy.url}/v1/chat/completions",
                json={"model": "m", "messages": MESSAGES, "stream": stream},
                timeout=httpx.Timeout(5, read=0.3),
            )
        assert left.wait(timeout=3.0), "the proxy kept waiting on the upstream after its client left"


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_mid_stream_cut_is_reported_the_same_on_both_transports(
    mock: BackgroundServer, transport: str
) -> None:
    with proxy_for(f"{mock.url}/v1", http_transport=transport) as proxy:
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "deepseek-flash", "messages": MESSAGES, "stream": True},
            headers={"x-mock-fault": "disconnect"},
            timeout=10,
        )
    events = [e for e in r.content.split(b"\n\n") if e]
    error = orjson.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["code"] == "upstream_protocol_error"
    # aiohttp once reported a cut body as "400, message=…"; the port in the message may hold "400".
    assert not error["message"].startswith("400") and "400, message" not in error["message"]
    assert len(r.headers.get_list("date")) == 1


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_non_stream_body_stalling_past_read_timeout_is_a_read_timeout_not_a_total_one(transport: str) -> None:
    async def stalls(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b'{"id": "x", '
            await asyncio.sleep(3)
            yield b"}"

        return StreamingResponse(body(), media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", stalls, methods=["POST"])])
    with (
        BackgroundServer(app, graceful_s=0.1) as upstream,
        proxy_for(
            f"{upstream.url}/v1", read_timeout=0.3, total_timeout=60, http_transport=transport
        ) as proxy,
    ):
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions", json={"model": "m", "messages": MESSAGES}, timeout=10
        )
    assert r.status_code == 504
    message = r.json()["error"]["message"]
    assert "THINKPROXY_READ_TIMEOUT" in message and "TOTAL" not in message
