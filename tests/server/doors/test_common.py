"""What every door shares on the server side (proxy.server.doors.common): a request's entry in the
providers table is looked up once, whichever door it came in by."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from proxy.core.config.providers import Dialect, ProvidersTable
from proxy.server.app import create_app
from tests.helpers import make_settings

MODEL = "deepseek-v4-pro"
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
CHUNK = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": MODEL,
    "choices": [{"index": 0, "delta": {"content": "hello"}, "finish_reason": "stop"}],
}
STREAM = b"data: " + orjson.dumps(CHUNK) + b"\n\ndata: [DONE]\n\n"


def chat_upstream(request: httpx.Request) -> httpx.Response:
    """A chat-only upstream: one answer, streamed when asked."""
    if orjson.loads(request.content).get("stream") is True:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=STREAM)
    return httpx.Response(200, json=COMPLETION)


# Each door's path and body (the default upstream is DeepSeek's: both doors are bridged to chat).
DOORS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"model": MODEL, "input": "hi"}),
    "messages": (
        "/v1/messages",
        {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
    ),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("door", list(DOORS))
async def test_one_request_looks_its_entry_up_once_on_every_door(
    door: str, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = ProvidersTable.load()
    looked_up: list[tuple[Any, ...]] = []
    match = table.match

    def counted(base_url: str, model: str | None = None) -> Dialect:
        looked_up.append((base_url, model))
        return match(base_url, model)

    monkeypatch.setattr(table, "match", counted)
    app = create_app(make_settings(), transport=httpx.MockTransport(chat_upstream), table=table)
    path, body = DOORS[door]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        r = await client.post(path, json={**body, "stream": stream})
    assert r.status_code == 200, r.text
    assert b"hello" in r.content  # (the answer went all the way through the door)
    assert looked_up == [("https://api.deepseek.com/v1", MODEL)]


@pytest.mark.parametrize("door", ["responses", "messages"])
async def test_the_open_responses_version_header_is_accepted_and_not_sent_to_a_chat_upstream(
    door: str,
) -> None:
    """Open Responses clients may name the version they speak: a chat upstream has no use for it."""
    seen: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return chat_upstream(request)

    app = create_app(make_settings(), transport=httpx.MockTransport(upstream))
    path, body = DOORS[door]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        r = await client.post(path, json=body, headers={"OpenResponses-Version": "2026-04-24"})
    assert r.status_code == 200, r.text
    (sent,) = seen
    assert "openresponses-version" not in sent.headers


async def test_the_open_responses_version_header_reaches_a_native_responses_upstream() -> None:
    seen: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "resp_1", "object": "response", "output": []})

    app = create_app(
        make_settings(upstream_base_url="https://api.openai.com/v1"), transport=httpx.MockTransport(upstream)
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        r = await client.post(
            "/v1/responses",
            json={"model": "gpt-5.4", "input": "hi"},
            headers={"OpenResponses-Version": "2026-04-24"},
        )
    assert r.status_code == 200, r.text
    assert seen[0].headers["openresponses-version"] == "2026-04-24"
