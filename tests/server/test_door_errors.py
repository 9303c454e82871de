"""What the front doors' errors quote of a client's input: never a huge value whole (a 1 MB id or
name comes back cut to a few hundred characters, its length said). Each door's own errors:
test_responses_door.py, test_messages_door.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

HUGE = "x" * 1_000_000
MODEL = "deepseek-v4-pro"


@pytest.fixture(scope="module")
def proxy() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as mock:
        settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", max_body_bytes=4 << 20)
        with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
            yield server


WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
CASES: list[tuple[str, dict[str, Any]]] = [
    ("responses", {"model": MODEL, "input": "hi", "previous_response_id": "resp_" + HUGE}),
    ("responses", {"model": MODEL, "input": "hi", "tool_choice": HUGE}),
    (
        "responses",
        {
            "model": MODEL,
            "input": "hi",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": HUGE},
        },
    ),
    ("responses", {"model": MODEL, "input": "hi", "reasoning": {"effort": HUGE}}),
    ("responses", {"model": MODEL, "input": [{"type": HUGE}]}),
    (
        "messages",
        {
            "model": MODEL,
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": HUGE},
        },
    ),
    ("messages", {"model": MODEL, "max_tokens": 8, "messages": [{"role": HUGE, "content": "hi"}]}),
    (
        "messages",
        {
            "model": MODEL,
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
            "output_config": {"effort": HUGE},
        },
    ),
]


@pytest.mark.parametrize(("door", "body"), CASES)
def test_an_error_never_echoes_a_huge_client_value(
    proxy: BackgroundServer, door: str, body: dict[str, Any]
) -> None:
    r = httpx.post(f"{proxy.url}/v1/{door}", json=body, timeout=30)
    assert r.status_code == 400, r.text[:500]
    assert len(r.content) < 2_000, r.text[:500]
    assert "…" in r.json().get("error", {}).get("message", "")
