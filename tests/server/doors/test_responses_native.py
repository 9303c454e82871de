"""The Responses door's native forwarding (proxy.server.doors.responses_native) end to end: what goes to
an upstream that serves the Responses API itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.doors.responses_native import BLOBS_LEFT_OUT_HEADER, strip_proxy_blobs
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

HEADERS = {"authorization": "Bearer sk-test"}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def proxy_for(mock: BackgroundServer, prefix: str, **overrides: Any) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{mock.url}/{prefix}/v1", **overrides)
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


def test_the_proxys_own_blobs_never_reach_a_native_upstream(mock: BackgroundServer) -> None:
    """A conversation begun on a bridged model (its reasoning sealed by the proxy, `tp1.`) goes on
    with a native one: the upstream did not make those blobs and refuses them ("could not be
    verified"), so the items they are in are left out; everything else passes untouched."""
    bridged = {"model": "deepseek-v4-pro", "input": "Name a colour.", "reasoning": {"effort": "high"}}
    with proxy_for(mock, "deepseek", state="off") as proxy:
        first = httpx.post(f"{proxy.url}/v1/responses", json={**bridged, "store": False}, headers=HEADERS)
    output = first.json()["output"]
    ours = next(o for o in output if o["type"] == "reasoning")
    assert ours["encrypted_content"].startswith("tp1.")
    native = {
        "model": "gpt-5.4",
        "include": ["reasoning.encrypted_content"],
        "input": [
            {"type": "compaction", "encrypted_content": "tp1." + "A" * 60},
            {"role": "user", "content": "Name a colour."},
            *output,
            {"role": "user", "content": "And another?"},
        ],
    }
    with proxy_for(mock, "openai") as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=native, headers=HEADERS)
    sent = httpx.get(f"{mock.url}/_mock/requests/last").json()
    assert sent["path"] == "/openai/v1/responses"
    assert "tp1." not in json.dumps(sent["body"])
    assert [i.get("type", "message") for i in sent["body"]["input"]] == ["message", "message", "message"]
    assert r.status_code == 200, r.text
    # A native answer carries no trace: the client learns what was left out from a header.
    assert r.headers[BLOBS_LEFT_OUT_HEADER] == "2"
    with proxy_for(mock, "openai") as proxy:
        r = httpx.post(
            f"{proxy.url}/v1/responses", json={"model": "gpt-5.4", "input": "Hi."}, headers=HEADERS
        )
    assert BLOBS_LEFT_OUT_HEADER not in r.headers


def test_strip_leaves_a_body_without_our_blobs_alone() -> None:
    body = {"input": [{"type": "reasoning", "encrypted_content": "gAAAAA-openai", "summary": []}]}
    assert strip_proxy_blobs(body) == (None, 0)
    assert strip_proxy_blobs({"input": "hi"}) == (None, 0)
    ours = {"type": "reasoning", "encrypted_content": "tp1.x", "summary": []}
    assert strip_proxy_blobs({"input": [ours, *body["input"]]}) == (body, 1)


@pytest.mark.parametrize("level", [None, "off", "standard", "deep"])
@pytest.mark.parametrize("context", ["all_turns", "current_turn", "auto"])
def test_gpt_5_6_reasoning_context_passes_through_beside_the_level(
    mock: BackgroundServer, level: str | None, context: str
) -> None:
    """openai-python's Reasoning.context (gpt-5.6 defaults to all_turns): the proxy sets only the
    effort its level names and leaves the client's context, and summary, as they came."""
    body = {"model": "gpt-5.6", "input": "Hi.", "reasoning": {"context": context, "summary": "auto"}}
    headers = {**HEADERS, **({"x-thinking-level": level} if level else {})}
    with proxy_for(mock, "openai") as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers=headers)
    assert r.status_code == 200, r.text
    sent = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]["reasoning"]
    effort = {None: None, "off": "none", "standard": "medium", "deep": "high"}[level]
    assert sent == {"context": context, "summary": "auto", **({"effort": effort} if effort else {})}


def test_a_reasoning_context_the_upstream_refuses_comes_back_as_it_sent_it(mock: BackgroundServer) -> None:
    body = {"model": "gpt-5.6", "input": "Hi.", "reasoning": {"context": "every_turn"}}
    direct = httpx.post(f"{mock.url}/openai/v1/responses", json=body, headers=HEADERS)
    assert direct.status_code == 400 and direct.json()["error"]["param"] == "reasoning.context"
    with proxy_for(mock, "openai") as proxy:
        r = httpx.post(
            f"{proxy.url}/v1/responses", json=body, headers={**HEADERS, "x-thinking-level": "deep"}
        )
    assert (r.status_code, r.json()["error"]) == (400, direct.json()["error"])
