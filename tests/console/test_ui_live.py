"""The live list in a real headless Chromium, for every door: rows of /v1/responses and
/v1/messages show their model and level (not "POST /v1/messages" and "—"), token columns and
"—" for the thinking time of an answer that was not streamed; the filters and the search narrow
the list; the page follows the system's dark mode."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from proxy.server.serving import BackgroundServer
from tests.console.test_ui import WAIT_MS, mock, open_live, page, proxy_for, pytestmark  # noqa: F401

QUESTION = "Why is the sky blue?"
MODEL = "deepseek-v4-pro"


@pytest.fixture
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:  # noqa: F811
    with proxy_for(mock) as server:  # its own proxy: only this test's requests in the list
        yield server


def one_request_per_door(url: str) -> None:
    """A streamed chat completion, a Responses request, a Messages request and a Responses turn
    over a WebSocket, each asking for deep thinking the way its own API says it."""
    chat = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": MODEL,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": QUESTION}],
        },
        headers={"x-thinking-level": "deep"},
        timeout=30,
    )
    responses = httpx.post(
        f"{url}/v1/responses",
        json={"model": MODEL, "input": QUESTION, "reasoning": {"effort": "high"}},
        timeout=30,
    )
    messages = httpx.post(
        f"{url}/v1/messages",
        headers={"anthropic-version": "2023-06-01"},
        json={
            "model": MODEL,
            "max_tokens": 2048,
            "thinking": {"type": "adaptive"},
            "output_config": {"effort": "high"},
            "messages": [{"role": "user", "content": QUESTION}],
        },
        timeout=30,
    )
    for answer in (chat, responses, messages):
        assert answer.status_code == 200, answer.text
    # And one turn of the Responses API's WebSocket mode.
    with connect(f"{url.replace('http', 'ws', 1)}/v1/responses") as ws:
        create = {
            "type": "response.create",
            "model": MODEL,
            "input": QUESTION,
            "reasoning": {"effort": "high"},
        }
        ws.send(json.dumps(create))
        while (event := json.loads(ws.recv()))["type"] not in (
            "response.completed",
            "response.failed",
            "error",
        ):
            pass
        assert event["type"] == "response.completed", event


def rows_by_door(tab: Any) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for row in tab.query_selector_all('[data-role="request"]'):
        names = ("door", "model", "level", "thinking", "input", "output", "reasoning")
        cells = {name: row.query_selector(f'[data-role="cell-{name}"]').inner_text() for name in names}
        found[cells["door"]] = cells
    return found


def wait_rows(tab: Any, n: int) -> None:
    tab.wait_for_function(
        f"""() => [...document.querySelectorAll('[data-role="request"]')]
             .filter(r => r.dataset.status === "200").length === {n}""",
        timeout=WAIT_MS,
    )


def visible_doors(tab: Any) -> list[str]:
    return [
        cell.inner_text() for cell in tab.query_selector_all('[data-role="request"] [data-role="cell-door"]')
    ]


def test_every_door_shows_its_model_level_tokens_and_thinking_time(
    proxy: BackgroundServer,
    page: Any,  # noqa: F811
) -> None:
    open_live(page, proxy.url)
    one_request_per_door(proxy.url)
    wait_rows(page, 4)
    rows = rows_by_door(page)
    assert set(rows) == {"chat", "responses", "messages", "websocket"}
    for door, cells in rows.items():
        assert cells["model"] == MODEL, (door, cells)  # not "POST /v1/messages"
        assert cells["level"] == "deep", (door, cells)  # not "—"
        assert re.fullmatch(r"[\d,]+", cells["input"]), (door, cells)
        assert re.fullmatch(r"[\d,]+", cells["output"]), (door, cells)
    # Streamed: timed. Not streamed: the reasoning came at once, so "—", never "0 ms".
    assert re.fullmatch(r"\d+(\.\d)? (ms|s)", rows["chat"]["thinking"]), rows["chat"]
    assert rows["responses"]["thinking"] == "—" and rows["messages"]["thinking"] == "—"

    # A filter narrows the list to one door; the search to what it names; both clear again.
    page.select_option('[data-role="filter-door"]', "messages")
    assert visible_doors(page) == ["messages"]
    assert "1 shown" in page.inner_text('[data-role="feed-count"]')
    page.select_option('[data-role="filter-door"]', "")
    page.fill('[data-role="search"]', "websocket")
    assert visible_doors(page) == ["websocket"]
    page.fill('[data-role="search"]', "no-such-model")
    assert visible_doors(page) == []
    assert "No request held matches" in page.inner_text('[data-role="requests"]')
    page.fill('[data-role="search"]', "")
    page.select_option('[data-role="filter-level"]', "deep")
    assert sorted(visible_doors(page)) == ["chat", "messages", "responses", "websocket"]
    page.goto("about:blank")  # its live connection ends before the server stops


def test_filters_and_columns_speak_chinese(proxy: BackgroundServer, browser: Any) -> None:
    context = browser.new_context(locale="zh-CN")
    tab = context.new_page()
    try:
        open_live(tab, proxy.url)
        one_request_per_door(proxy.url)
        wait_rows(tab, 4)
        header = tab.inner_text("table.requests thead")
        assert "入口" in header and "缓存" in header and "推理" in header
        assert tab.inner_text('[data-role="filter-door"] option[value=""]') == "全部入口"
        assert tab.inner_text('[data-role="filter-status"] option[value="error"]') == "出错"
        tab.goto("about:blank")
    finally:
        context.close()


def test_dark_mode_follows_the_system_setting(proxy: BackgroundServer, browser: Any) -> None:
    backgrounds = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme)
        tab = context.new_page()
        try:
            tab.goto(f"{proxy.url}/ui#playground")
            backgrounds[scheme] = tab.evaluate(
                """() => [getComputedStyle(document.documentElement).backgroundColor,
                          getComputedStyle(document.querySelector('.controls')).backgroundColor,
                          getComputedStyle(document.querySelector('[data-role="prompt"]')).backgroundColor]"""
            )
        finally:
            context.close()

    def luminance(css: str) -> float:
        r, g, b = (int(x) for x in re.findall(r"\d+", css)[:3])
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    assert all(luminance(color) > 200 for color in backgrounds["light"]), backgrounds
    assert all(luminance(color) < 60 for color in backgrounds["dark"]), backgrounds


def test_thinking_an_upstream_dropped_is_flagged_on_its_row(
    mock: BackgroundServer,  # noqa: F811
    page: Any,  # noqa: F811
) -> None:
    """A native Anthropic upstream that drops thinking blocks (the prefix before them changed)
    says so in `input_transformations`; the row carries a badge and its detail says why."""
    from tests.server.doors.test_messages_native import BINDING_BETA, VERSION, fable_history
    from tests.server.doors.test_messages_native import proxy_for as native_proxy_for

    with native_proxy_for(mock, ui=True) as proxy:
        open_live(page, proxy.url)
        body = fable_history(proxy)
        binding = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
        changed = {**body, "system": "Rules rewritten by a harness.", "thinking": binding}
        headers = {**VERSION, "x-api-key": "k", "anthropic-beta": BINDING_BETA}
        assert httpx.post(f"{proxy.url}/v1/messages", json=changed, headers=headers).status_code == 200
        wait_rows(page, 2)
        badges = page.locator('[data-role="request"] [data-role="thinking-dropped"]')
        assert badges.count() == 1 and badges.inner_text() == "1 thinking block dropped"
        page.goto("about:blank")
