"""Faults of the simulated upstream: the pure plan and steps, then each fault through the app, and
the disconnect on a real socket."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from proxy.mock import MockDisconnect, MockOptions, create_mock_app
from proxy.mock.faults import (
    DEFAULT_HUGE_BYTES,
    FEW_FRAMES,
    Abort,
    BadMockHeader,
    Fault,
    Plan,
    Sleep,
    broken_line,
    coalesce,
    gzip_steps,
    padded,
    parse_plan,
    stream_steps,
)
from proxy.mock.sending import client_left_within

FRAMES = [f'data: {{"n":{i}}}\n\n'.encode() for i in range(8)] + [b"data: [DONE]\n\n"]
CHAT = {"messages": [{"role": "user", "content": "Explain how a rainbow forms"}], "stream": True}


def data_lines(text: str) -> list[str]:
    return [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]


def unparseable(lines: list[str]) -> list[str]:
    bad = []
    for line in lines:
        if line == "[DONE]":
            continue
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            bad.append(line)
    return bad


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockOptions())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        yield c


# --- plan parsing ------------------------------------------------------------------------------


def test_plan_defaults_and_overrides() -> None:
    assert parse_plan({}, pace_ms=25, chunk_chars=4) == Plan(pace_s=0.025, chunk_chars=4)
    plan = parse_plan(
        {
            "x-mock-fault": " Gzip , slow-first,stall",
            "x-mock-pace-ms": "0",
            "x-mock-stall-s": "1.5",
            "x-mock-huge-bytes": "1000",
            "x-mock-delay-ms": "250",
            "x-mock-chunk-chars": "9",
        },
        pace_ms=25,
        chunk_chars=4,
    )
    faults = frozenset({Fault.GZIP, Fault.SLOW_FIRST, Fault.STALL})
    assert plan == Plan(faults=faults, pace_s=0, stall_s=1.5, huge_bytes=1000, delay_s=0.25, chunk_chars=9)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("x-mock-fault", "explode"),
        ("x-mock-pace-ms", "-1"),
        ("x-mock-stall-s", "soon"),
        ("x-mock-pace-ms", "nan"),
    ],
)
def test_plan_refuses_bad_headers(header: str, value: str) -> None:
    with pytest.raises(BadMockHeader) as caught:
        parse_plan({header: value}, pace_ms=0, chunk_chars=4)
    assert caught.value.header == header


async def test_bad_mock_header_is_a_400_naming_it(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "explode"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "x-mock-fault"
    assert "disconnect" in response.json()["error"]["message"]


# --- pure step shaping -------------------------------------------------------------------------


def test_plain_plan_passes_frames_through() -> None:
    assert list(stream_steps(FRAMES, Plan(), huge_at=7)) == FRAMES


def test_pace_sleeps_between_frames_not_before_the_first() -> None:
    steps = list(stream_steps(FRAMES, Plan(pace_s=0.01), huge_at=7))
    assert steps[0] == FRAMES[0]
    assert steps[1::2] == [Sleep(0.01)] * (len(FRAMES) - 1)
    assert steps[0::2] == FRAMES


def test_slow_first_sleeps_before_the_first_frame() -> None:
    steps = list(stream_steps(FRAMES, Plan(faults=frozenset({Fault.SLOW_FIRST}), delay_s=0.3), huge_at=7))
    assert steps == [Sleep(0.3), *FRAMES]


def test_disconnect_cuts_after_a_few_frames() -> None:
    steps = list(stream_steps(FRAMES, Plan(faults=frozenset({Fault.DISCONNECT})), huge_at=7))
    assert steps == [*FRAMES[:FEW_FRAMES], Abort()]


def test_stall_pauses_after_a_few_frames_then_continues() -> None:
    steps = list(stream_steps(FRAMES, Plan(faults=frozenset({Fault.STALL}), stall_s=4), huge_at=7))
    assert steps == [*FRAMES[:FEW_FRAMES], Sleep(4), *FRAMES[FEW_FRAMES:]]


def test_invalid_json_inserts_one_broken_copy_in_the_middle() -> None:
    steps = list(stream_steps(FRAMES, Plan(faults=frozenset({Fault.INVALID_JSON})), huge_at=7))
    middle = len(FRAMES) // 2
    assert steps == [*FRAMES[:middle], broken_line(FRAMES[middle]), *FRAMES[middle:]]
    assert len(unparseable(data_lines(b"".join(s for s in steps if isinstance(s, bytes)).decode()))) == 1


def test_padded_reaches_the_default_huge_size_in_pieces() -> None:
    pieces = list(padded(b'data: {"c":"@"}\n\n', b"@", DEFAULT_HUGE_BYTES))
    assert sum(len(p) for p in pieces) == DEFAULT_HUGE_BYTES
    assert max(len(p) for p in pieces) <= 64 * 1024
    assert pieces[0] == b'data: {"c":"' and pieces[-1] == b'"}\n\n'


def test_coalesce_joins_bytes_but_keeps_pauses_in_place() -> None:
    steps: list[Any] = [b"a", b"b", Sleep(1), b"c", Abort(), b"d", b"e"]
    assert list(coalesce(steps)) == [b"ab", Sleep(1), b"c", Abort(), b"de"]
    assert list(coalesce([b"x" * 10, b"y" * 10], limit=15)) == [b"x" * 10, b"y" * 10]


def test_gzip_steps_are_one_decodable_member_even_when_read_incrementally() -> None:
    compressed = [s for s in gzip_steps([b"data: 1\n\n", Sleep(1), b"data: 2\n\n"]) if isinstance(s, bytes)]
    decoder = zlib.decompressobj(wbits=31)
    assert decoder.decompress(compressed[0]) == b"data: 1\n\n"  # flushed: readable before the rest comes
    assert gzip.decompress(b"".join(compressed)) == b"data: 1\n\ndata: 2\n\n"


async def test_pause_ends_early_when_the_client_leaves() -> None:
    async def gone() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def silent() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    assert await client_left_within(gone, 30) is True
    assert await client_left_within(silent, 0.01) is False


# --- each fault through the app ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "shape"),
    [
        ("deepseek", {"error": ["message", "type", "param", "code"]}),
        ("qwen", {"error": ["code", "param", "message", "type"], "id": None, "request_id": None}),
        ("openai", {"error": ["message", "type", "param", "code"]}),
        ("ollama", {"error": ["message", "type", "param"]}),
        ("kimi", {"error": ["message", "type"]}),
        ("mistral", {"object": None, "message": None, "type": None, "param": None, "code": None}),
    ],
)
async def test_fault_400_is_the_providers_own_body(
    client: httpx.AsyncClient, dialect: str, shape: dict[str, Any]
) -> None:
    response = await client.post(
        f"/{dialect}/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "400"}
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == list(shape)  # same keys, same order
    for key, fields in shape.items():
        if fields is not None:
            assert list(body[key]) == fields


async def test_fault_400_openai_is_the_reference_body(client: httpx.AsyncClient) -> None:
    response = await client.post("/openai/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "400"})
    assert response.json() == {
        "error": {
            "message": "Unsupported value: 'minimal' is not supported with the 'gpt-5.1' model. "
            "Supported values are: 'none', 'low', 'medium', and 'high'.",
            "type": "invalid_request_error",
            "param": "reasoning.effort",
            "code": "unsupported_value",
        }
    }


async def test_fault_429_carries_the_rate_limit_headers(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "429"})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.headers["x-request-id"]
    assert response.headers["x-ratelimit-limit-requests"]
    assert response.headers["x-ratelimit-remaining-requests"] == "0"
    assert response.headers["x-ratelimit-reset-requests"]
    assert response.json()["error"]["code"] == "rate_limit_exceeded"


async def test_fault_500(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "500"})
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"


async def test_fault_non_sse_answers_html(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "non-sse"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.text.startswith("<!DOCTYPE html>")


async def test_fault_invalid_json_has_one_broken_line_and_still_ends(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "invalid-json"})
    lines = data_lines(response.text)
    assert len(unparseable(lines)) == 1
    assert lines[-1] == "[DONE]"


async def test_fault_invalid_json_non_stream_is_a_truncated_body(client: httpx.AsyncClient) -> None:
    body = {**CHAT, "stream": False}
    response = await client.post("/v1/chat/completions", json=body, headers={"X-Mock-Fault": "invalid-json"})
    assert response.status_code == 200
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(response.content)


async def test_fault_gzip_stream_is_compressed_on_the_wire(client: httpx.AsyncClient) -> None:
    async with client.stream(
        "POST", "/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "gzip", "X-Mock-Pace-Ms": "0"}
    ) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    assert response.headers["content-encoding"] == "gzip"
    assert raw[:2] == b"\x1f\x8b"
    text = gzip.decompress(raw).decode()
    assert data_lines(text)[-1] == "[DONE]" and not unparseable(data_lines(text))


async def test_fault_gzip_non_stream(client: httpx.AsyncClient) -> None:
    body = {**CHAT, "stream": False}
    response = await client.post("/kimi/v1/chat/completions", json=body, headers={"X-Mock-Fault": "gzip"})
    assert response.headers["content-encoding"] == "gzip"
    assert response.json()["object"] == "chat.completion"  # httpx decoded it


async def test_fault_huge_line_has_the_requested_size(client: httpx.AsyncClient) -> None:
    headers = {"X-Mock-Fault": "huge-line", "X-Mock-Huge-Bytes": "300000"}
    response = await client.post("/qwen/v1/chat/completions", json=CHAT, headers=headers)
    lines = response.text.split("\n\n")
    huge = [line for line in lines if len(line) > 100_000]
    assert [len(line.encode()) for line in huge] == [300_000]
    assert orjson.loads(huge[0].removeprefix("data: "))["object"] == "chat.completion.chunk"
    assert data_lines(response.text)[-1] == "[DONE]"


async def test_fault_huge_non_stream_body(client: httpx.AsyncClient) -> None:
    headers = {"X-Mock-Fault": "huge-line", "X-Mock-Huge-Bytes": "200000"}
    response = await client.post(
        "/openai/v1/chat/completions", json={**CHAT, "stream": False}, headers=headers
    )
    assert len(response.content) == 200_000
    assert response.json()["object"] == "chat.completion"


async def test_fault_stall_then_continue(client: httpx.AsyncClient) -> None:
    headers = {"X-Mock-Fault": "stall", "X-Mock-Stall-S": "0.01"}
    response = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert data_lines(response.text)[-1] == "[DONE]"


@pytest.mark.parametrize("stream", [True, False])
async def test_fault_slow_first_still_answers(client: httpx.AsyncClient, stream: bool) -> None:
    headers = {"X-Mock-Fault": "slow-first", "X-Mock-Delay-Ms": "5", "X-Mock-Pace-Ms": "1"}
    response = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream}, headers=headers)
    assert response.status_code == 200
    if stream:
        assert data_lines(response.text)[-1] == "[DONE]"


async def test_fault_disconnect_raises_inside_the_app(client: httpx.AsyncClient) -> None:
    with pytest.raises(MockDisconnect):
        await client.post("/v1/chat/completions", json=CHAT, headers={"X-Mock-Fault": "disconnect"})


# --- on a real socket --------------------------------------------------------------------------


@pytest.fixture
async def live_url() -> AsyncIterator[str]:
    config = uvicorn.Config(create_mock_app(), host="127.0.0.1", port=0, log_level="critical", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("stream", [True, False])
async def test_disconnect_cuts_the_connection_mid_body(live_url: str, stream: bool) -> None:
    received = b""
    async with httpx.AsyncClient(base_url=live_url, timeout=10) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream(
                "POST",
                "/deepseek/v1/chat/completions",
                json={**CHAT, "stream": stream},
                headers={"X-Mock-Fault": "disconnect"},
            ) as response:
                assert response.status_code == 200
                async for chunk in response.aiter_raw():
                    received += chunk
        # the server is still healthy for the next request
        assert (await client.get("/v1/models")).status_code == 200
    assert received  # some of the answer arrived first
    assert b"[DONE]" not in received
