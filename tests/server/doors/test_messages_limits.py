"""The Messages front door's bound on what a request expands into (issue 41, item 1), end to end
through a real proxy in front of the simulated DeepSeek: a thinking block's signature repeated
many times is opened and put back once; past THINKPROXY_MAX_BODY_BYTES a 413 in Anthropic's shape."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.core import seal
from proxy.core.replay.keys import tenant_of
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.doors.messages import MessagesDoor
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings, route_handler

MODEL = "deepseek-v4-pro"
SECRET = "a deployment secret for the expansion tests"
KEY = "sk-flood"


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def proxy_for(mock: BackgroundServer, **overrides: Any) -> tuple[BackgroundServer, MessagesDoor]:
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", state_secret=SECRET, **overrides)
    app = create_app(settings, table=simulated_table(mock.port))
    door = route_handler(app, "/v1/messages", "POST")
    assert isinstance(door, MessagesDoor)
    return BackgroundServer(app), door


def signature(door: MessagesDoor, mock: BackgroundServer, text: str) -> str:
    """The proxy's signature of a thinking block before a text answer, holding `text`."""
    binding = seal.Binding(
        tenant_of(SECRET.encode(), KEY), "deepseek", f"{mock.url}/deepseek/v1", "anthropic.thinking", ()
    )
    payload = {"reasoning": text, "model": MODEL, "tool_call_ids": [], "created": int(time.time())}
    blob = seal.seal(door.keys, binding, payload)
    assert isinstance(blob, seal.Blob)
    return blob.text


def history(signatures: list[str]) -> list[dict[str, Any]]:
    """One signed assistant turn per signature, each answered by the user."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Think about it."}]
    for sig in signatures:
        thinking = {"type": "thinking", "thinking": "(shown)", "signature": sig}
        messages.append({"role": "assistant", "content": [thinking, {"type": "text", "text": "Done."}]})
        messages.append({"role": "user", "content": "And now?"})
    return messages


def post(proxy: BackgroundServer, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": MODEL, "max_tokens": 64, "messages": messages}
    return httpx.post(f"{proxy.url}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)


def test_a_signature_repeated_many_times_is_put_back_once(mock: BackgroundServer) -> None:
    text = "t" * 300_000  # (compresses to a signature of a few hundred characters)
    server, door = proxy_for(mock)
    with server:
        sig = signature(door, mock, text)
        assert len(sig) < 2_000
        r = post(server, history([sig] * 60))
    assert r.status_code == 200, r.text
    body = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    restored = [m.get("reasoning_content") or "" for m in body["messages"] if m["role"] == "assistant"]
    assert sum(len(t) for t in restored) == len(text)  # on the first turn only, once
    assert len(json.dumps(body)) < len(text) + 20_000


def test_an_expansion_past_the_body_limit_is_a_413_that_says_so(mock: BackgroundServer) -> None:
    server, door = proxy_for(mock, max_body_bytes=200_000)
    with server:
        sigs = [signature(door, mock, f"{n}" * 150_000) for n in range(2)]
        httpx.delete(f"{mock.url}/_mock/requests")
        r = post(server, history(sigs))
    assert r.status_code == 413, r.text
    error = r.json()
    assert (
        error["type"] == "error" and "200000 bytes (THINKPROXY_MAX_BODY_BYTES)" in error["error"]["message"]
    )
    assert httpx.get(f"{mock.url}/_mock/requests").json() == []  # nothing was forwarded
