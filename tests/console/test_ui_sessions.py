"""Agent sessions in the console, in a real headless Chromium, from requests through the proxy
and its mock upstream (never injected fixtures): the Sessions view lists a session and shows it as
turns of model calls; the live list collapses a session's requests into one row, and a flood of
2,000 requests from one session leaves every other session's rows visible; the charts draw the
proxy's own figures; a request's detail shows what the proxy changed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from proxy.server.serving import BackgroundServer
from tests.console.test_ui import (  # noqa: F401
    PROMPT,
    WAIT_MS,
    mock,
    open_live,
    page,
    proxy_for,
    pytestmark,
    tool_conversation,
)

MODEL = "deepseek-flash"
FLOOD = 2_000


@pytest.fixture
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:  # noqa: F811
    with proxy_for(mock) as server:  # its own proxy: only this test's requests and sessions
        yield server


def ask(
    url: str,
    session: str | None = None,
    level: str = "deep",
    client: httpx.Client | None = None,
    key: str | None = None,
) -> None:
    headers = {"x-thinking-level": level}
    if session is not None:
        headers["x-session-id"] = session
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Is 17 prime?"}]}
    post = client.post if client is not None else httpx.post
    r = post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text


def session_json(url: str, session: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/thinkproxy/sessions/{session}", timeout=10)
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


def test_sessions_view_lists_a_session_and_shows_its_turns(proxy: BackgroundServer, page: Any) -> None:  # noqa: F811
    headers = {"x-thinking-level": "deep", "x-session-id": "agent-task-1"}
    tool_conversation(proxy.url, headers, stream_options={"include_usage": True})
    ask(proxy.url, "agent-task-2", level="off")
    page.goto(f"{proxy.url}/ui#sessions")
    row = page.wait_for_selector('[data-role="session"][data-session="agent-task-1"]', timeout=WAIT_MS)
    assert row.get_attribute("data-requests") == "2"
    assert page.query_selector('[data-role="session"][data-session="agent-task-2"]') is not None
    facts = session_json(proxy.url, "agent-task-1")
    # The row's figures are the API's: cache hits as a percentage of input, the cost or "—".
    ratio = facts["cache_hit_ratio"]
    expected = "—" if ratio is None else f"{ratio * 100:.{0 if ratio in (0, 1) or ratio >= 0.995 else 1}f}%"
    assert row.query_selector('[data-role="session-cache"]').inner_text() == expected

    row.click()
    page.wait_for_selector('[data-role="session-detail"]:not([hidden]) [data-role="turn"]', timeout=WAIT_MS)
    turns = page.query_selector_all('[data-role="turn"]')
    # One user turn: a model call that called get_weather, then the call that answered.
    assert [turn.get_attribute("data-calls") for turn in turns] == ["2"]
    calls = page.query_selector_all('[data-role="call"]')
    assert [call.get_attribute("data-id") for call in calls] == [r["id"] for r in facts["details"]]
    assert "get_weather" in calls[0].query_selector('[data-role="call-tools"]').inner_text()
    assert calls[0].query_selector('[data-role="call-answer"]') is None
    assert calls[1].query_selector('[data-role="call-answer"]') is not None
    assert calls[1].query_selector('[data-role="call-level"]').inner_text() == "deep"
    input_total = sum(r["tokens"]["input"] for r in facts["details"])
    running = calls[1].query_selector('[data-role="running"]').inner_text()
    assert "2 calls" in running and f"in {input_total:,}" in running
    html = page.content()
    assert PROMPT not in html  # a session shows figures and names, never the prompt

    # From the live list: the session's row opens, a request's detail links to its session.
    open_live(page, proxy.url)
    page.locator('[data-role="session-row"][data-session="agent-task-1"]').click()
    page.locator('[data-role="request"][data-session="agent-task-1"]').first.click()
    page.click('[data-role="detail"] [data-role="session-link"]')
    page.wait_for_selector('[data-role="session-detail"]:not([hidden]) [data-role="turn"]', timeout=WAIT_MS)
    assert page.inner_text('[data-role="session-title"]') == "agent-task-1"
    assert page.get_attribute('[data-role="session"].selected', "data-session") == "agent-task-1"
    page.goto("about:blank")


def test_live_list_collapses_a_session_and_a_flood_leaves_other_sessions_visible(
    proxy: BackgroundServer,
    page: Any,  # noqa: F811
) -> None:
    open_live(page, proxy.url)
    others = ["other-a", "other-b", "other-c"]
    for session in others:
        ask(proxy.url, session)
    ask(proxy.url)  # no session named: a session of its own
    page.wait_for_function(
        '() => document.querySelectorAll(\'[data-role="request"][data-status="200"]\').length === 4',
        timeout=WAIT_MS,
    )
    # 2,000 requests from one session, eight at a time (bounded: one pass, then it stops).
    with httpx.Client() as client, ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: ask(proxy.url, "flood", level="off", client=client), range(FLOOD)))
    # The page holds as many rows as the proxy's history (200): once every update has arrived,
    # the flood is one collapsed row of its newest 196, and every other session's row is there.
    held = 200 - 4
    flood = page.locator('[data-role="session-row"][data-session="flood"]')
    page.wait_for_selector(
        f'[data-role="session-row"][data-session="flood"][data-count="{held}"]', timeout=WAIT_MS
    )
    for session in others:
        assert page.locator(f'[data-role="request"][data-session="{session}"]').count() == 1
    assert page.locator('[data-role="request"][data-status="200"]').count() == 4
    assert f"{held} requests" in flood.inner_text()
    flood.click()  # opened: its requests listed beneath it
    page.wait_for_function(
        '(n) => document.querySelectorAll(\'[data-role="request"][data-session="flood"]\').length === n',
        arg=held,
        timeout=WAIT_MS,
    )
    assert page.get_attribute('[data-role="session-row"][data-session="flood"]', "aria-expanded") == "true"
    page.goto("about:blank")


def canvas_ink(tab: Any, chart: str) -> int:
    """How many pixels of the chart's plot canvas were drawn."""
    count: int = tab.evaluate(
        """(chart) => {
             const canvas = document.querySelector(`[data-chart="${chart}"] canvas`);
             const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
             let drawn = 0;
             for (let i = 3; i < data.length; i += 4) if (data[i] > 0) drawn += 1;
             return drawn;
           }""",
        chart,
    )
    return count


def test_charts_draw_the_proxys_own_figures(proxy: BackgroundServer, page: Any) -> None:  # noqa: F811
    for level in ("deep", "deep", "deep", "off", "off"):
        ask(proxy.url, level=level)
    page.goto(f"{proxy.url}/ui#charts")
    page.wait_for_selector('[data-chart="requests"][data-total="5"] canvas', timeout=WAIT_MS)
    assert all(canvas_ink(page, chart) > 0 for chart in ("requests", "tokens-level", "tokens", "cache"))
    legend = page.inner_text('[data-chart="requests"] .u-legend')
    assert "deep" in legend and "off" in legend and "standard" not in legend
    by_level = page.inner_text('[data-chart="tokens-level"] .u-legend')
    assert "deep · Out" in by_level and "deep · Reasoning" in by_level and "standard" not in by_level
    share = page.inner_text('[data-chart="share"]')
    assert f"{MODEL} · deep" in share and f"{MODEL} · off" in share
    latency = page.inner_text('[data-chart="latency"]')
    assert re.search(r"total p50\s+\d", latency), latency
    # In Chinese too.
    page.click('[data-role="lang"]')
    assert "按实际级别" in page.inner_text('[data-chart="requests"] figcaption')


def shown_changes(tab: Any) -> list[dict[str, str]]:
    return [
        {"field": li.get_attribute("data-field"), "op": li.get_attribute("data-op"), "text": li.inner_text()}
        for li in tab.query_selector_all('[data-role="changes"] [data-role="change"]')
    ]


def test_detail_shows_what_the_proxy_changed(mock: BackgroundServer, page: Any) -> None:  # noqa: F811
    with proxy_for(mock, allowed_upstreams=[f"127.0.0.1:{mock.port}"]) as server:
        open_live(page, server.url)
        ask(server.url, level="deep")  # DeepSeek: thinking fields set in the body
        # A model without a thinking switch: the proxy injects a thinking prompt instead.
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Is 17 prime?"}]}
        headers = {"x-thinking-level": "standard", "x-upstream-base-url": f"{mock.url}/prompted/v1"}
        r = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        page.wait_for_function(
            '() => document.querySelectorAll(\'[data-role="request"][data-status="200"]\').length === 2',
            timeout=WAIT_MS,
        )
        listed = httpx.get(f"{server.url}/thinkproxy/requests", timeout=10).json()["data"]
        for index in range(2):
            page.locator('[data-role="request"]').nth(index).click()  # (the list is redrawn)
            page.wait_for_selector('[data-role="changes"]:not([hidden])', timeout=WAIT_MS)
            shown = shown_changes(page)
            # Each change the proxy recorded, field by field: what it did, and its value or summary.
            expected = listed[index]["changes"]
            assert [(c["field"], c["op"]) for c in shown] == [(c["field"], c["change"]) for c in expected]
            for change, line in zip(expected, shown, strict=True):
                assert change["field"] in line["text"]
                assert str(change.get("to", change.get("summary", ""))) in line["text"]
        ops = {(c["field"], c["change"]) for row in listed for c in row["changes"]}
        assert ("messages", "injected") in ops and ("thinking", "set") in ops
        assert "Is 17 prime?" not in page.inner_text('[data-role="detail"]')
        page.goto("about:blank")


def test_gateway_sessions_and_charts_ask_for_an_admin_key_once(
    mock: BackgroundServer,  # noqa: F811
    page: Any,  # noqa: F811
) -> None:
    admin = "ak-sessions-admin-4c1d"
    overrides = {
        "upstream_api_key": "sk-upstream",
        "client_keys": ["alice:ck-alice-9"],
        "admin_keys": [admin],
    }
    with proxy_for(mock, **overrides) as gateway:
        ask(gateway.url, "task-9", key="ck-alice-9")
        page.goto(f"{gateway.url}/ui#sessions")
        page.wait_for_selector('[data-role="sessions-auth"]:not([hidden])', timeout=WAIT_MS)
        assert page.query_selector_all('[data-role="session"]') == []
        page.fill('[data-role="sessions-key"]', admin)
        page.click('[data-role="sessions-login"]')
        # In gateway mode a session belongs to its key: its id says whose.
        page.wait_for_selector('[data-role="session"][data-session="alice:task-9"]', timeout=WAIT_MS)
        assert page.is_hidden('[data-role="sessions-auth"]')
        page.click('[data-panel-link="charts"]')  # the key entered once serves the charts too
        page.wait_for_selector('[data-chart="requests"][data-total="1"] canvas', timeout=WAIT_MS)
        assert page.is_hidden('[data-role="charts-auth"]')
        assert "key alice" in page.inner_text('[data-chart="cost"]')
        page.click('[data-panel-link="live"]')  # and the live view, which was waiting for one
        page.wait_for_selector('[data-role="connection"][data-state="live"]', timeout=WAIT_MS)
        assert page.is_hidden('[data-role="admin-auth"]')
        html = page.content()
        assert admin not in html and "ck-alice-9" not in html and "sk-upstream" not in html
        page.goto("about:blank")


def test_without_session_accounting_the_views_say_so(mock: BackgroundServer, page: Any) -> None:  # noqa: F811
    with proxy_for(mock, sessions=False) as plain:
        ask(plain.url, "ignored")
        page.goto(f"{plain.url}/ui#sessions")
        page.wait_for_selector('[data-role="sessions-off"]:not([hidden])', timeout=WAIT_MS)
        assert page.is_hidden('[data-role="sessions-empty"]')
        page.click('[data-panel-link="charts"]')
        page.wait_for_selector('[data-role="charts-off"]:not([hidden])', timeout=WAIT_MS)
        assert page.query_selector_all('[data-role="chart"]') == []
        page.goto("about:blank")


def test_sessions_view_filters_and_reads_older_pages(proxy: BackgroundServer, page: Any) -> None:  # noqa: F811
    with httpx.Client() as client:
        for n in range(52):
            ask(proxy.url, f"task-{n:02}", client=client)
    messages = httpx.post(
        f"{proxy.url}/v1/messages",
        headers={"anthropic-version": "2023-06-01", "x-session-id": "claude-task"},
        json={"model": MODEL, "max_tokens": 512, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert messages.status_code == 200, messages.text
    page.goto(f"{proxy.url}/ui#sessions")
    rows = page.locator('[data-role="session"]')
    page.wait_for_selector('[data-role="sessions-more"]:not([hidden])', timeout=WAIT_MS)
    assert rows.count() == 50  # the newest page
    assert rows.first.get_attribute("data-session") == "claude-task"
    page.click('[data-role="sessions-more"]')
    page.wait_for_selector('[data-role="sessions-more"][hidden]', state="attached", timeout=WAIT_MS)
    assert rows.count() == 53 and rows.last.get_attribute("data-session") == "task-00"
    # The proxy filters: one door, then all again.
    page.select_option('[data-role="sessions-filter-door"]', "messages")
    page.wait_for_function(
        "() => document.querySelectorAll('[data-role=\"session\"]').length === 1", timeout=WAIT_MS
    )
    assert rows.first.get_attribute("data-session") == "claude-task"
    page.select_option('[data-role="sessions-filter-door"]', "")
    page.wait_for_function(
        "() => document.querySelectorAll('[data-role=\"session\"]').length === 50", timeout=WAIT_MS
    )
