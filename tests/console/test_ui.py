"""The console in a real headless Chromium (the Debian `chromium`, driven by Playwright; never a
downloaded browser): the live view shows another client's tool-using request with its timeline
and nothing private; the playground streams thinking and answer; HTML in model output or tool
names never runs; in gateway mode the page asks for an admin key and refuses a client key."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.demo import WEATHER_TOOL, simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does it)"
)

CLIENT_KEY = "sk-other-client-3b9f1c"
PROMPT = "What's the weather in Paris right now?"
# Words of the simulated model's reasoning before a tool call (proxy.mock.scenarios).
REASONING_WORDS = "I have a tool for this"
WAIT_MS = 15_000
XSS = '<script>window.__pwned="script"</script> <img src=x onerror="window.__pwned=\'img\'">'
XSS_TOOL = "<img src=x onerror=window.__pwned='tool'>"


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(pace_ms=3.0))) as server:
        yield server


def proxy_for(mock: BackgroundServer, **overrides: Any) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", ui=True, **overrides)
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


@pytest.fixture(scope="module")
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:
    with proxy_for(mock) as server:
        yield server


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], errors  # no script error in the page


def open_live(page: Any, url: str) -> None:
    page.goto(f"{url}/ui")
    page.wait_for_selector('[data-role="connection"][data-state="live"]', timeout=WAIT_MS)


def tool_conversation(
    url: str, headers: dict[str, str], tool: dict[str, Any] = WEATHER_TOOL, **extra: Any
) -> None:
    """Another client: a tool call, then the tool's result and the answer (no trace asked for);
    `extra` body fields go with both requests."""
    body: dict[str, Any] = {
        "model": "deepseek-flash",
        "stream": True,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": [tool],
        **extra,
    }
    first = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert first.status_code == 200
    call_id = re.search(rb'"id":"(call_[0-9a-f]+)"', first.content)
    assert call_id is not None
    name = tool["function"]["name"]
    body["messages"] += [
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "(the reasoning the client got)",  # DeepSeek wants it back
            "tool_calls": [
                {
                    "id": call_id.group(1).decode(),
                    "type": "function",
                    "function": {"name": name, "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id.group(1).decode(), "content": '{"temp_c": 17}'},
    ]
    second = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert second.status_code == 200


def kinds(page: Any, scope: str) -> list[str]:
    items = page.query_selector_all(f'{scope} [data-role="trace-item"]')
    return [item.get_attribute("data-kind") for item in items]


def test_live_view_shows_another_clients_tool_call_with_its_timeline(
    mock: BackgroundServer, page: Any
) -> None:
    with proxy_for(mock) as proxy:  # its own proxy: only this test's requests in the list
        open_live(page, proxy.url)
        headers = {"authorization": f"Bearer {CLIENT_KEY}", "x-thinking-level": "deep", "x-trace": "off"}
        tool_conversation(proxy.url, headers)
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-role="request"]')]
                 .filter(r => r.dataset.status === "200").length === 2""",
            timeout=WAIT_MS,
        )
        rows = page.locator('[data-role="request"]')
        newest, oldest = rows.nth(0).inner_text(), rows.nth(1).inner_text()
        assert "deepseek" in newest and "deepseek-flash" in newest and "deep" in newest
        assert "get_weather" in oldest  # the tool call is listed with its request
        rows.nth(1).click()
        page.wait_for_selector('[data-role="detail"]:not([hidden])')
        shown = kinds(page, '[data-role="timeline"]')
        assert shown[0] == "status" and shown[-1] == "done"
        assert {"reasoning.start", "reasoning.end", "tool_call.start", "tool_call.end"} <= set(shown)
        card = page.inner_text('[data-role="timeline"] [data-kind="tool_call.end"]')
        assert "get_weather" in card and "city" in card
        # Auto shows the brief view of the same trace.
        page.click('[data-role="detail-mode"] [data-mode="brief"]')
        assert set(kinds(page, '[data-role="timeline"]')) <= {"status", "tool_call.start", "error", "done"}
        rows.nth(0).click()
        page.click('[data-role="detail-mode"] [data-mode="detailed"]')
        assert "tool_result" in kinds(page, '[data-role="timeline"]')
        # Nothing private reached the page: no key, no reasoning text, no prompt.
        html = page.content()
        assert CLIENT_KEY not in html and REASONING_WORDS not in html and PROMPT not in html
        page.goto("about:blank")  # its live connection ends before the server stops


def test_playground_streams_thinking_and_answer(proxy: BackgroundServer, page: Any) -> None:
    page.goto(f"{proxy.url}/ui#playground")
    page.fill('[data-role="api-key"]', "sk-playground-key-91c2")
    page.fill('[data-role="model"]', "deepseek-flash")
    page.select_option('[data-role="level"]', "deep")
    page.select_option('[data-role="trace-mode"]', "detailed")
    page.fill('[data-role="prompt"]', "Is 1,000,003 a prime number?")
    page.click('[data-role="send"]')
    page.wait_for_selector('[data-role="pg-timeline"] [data-kind="done"]', timeout=WAIT_MS)
    reasoning = page.inner_text('[data-role="reasoning"]')
    assert "They want a short, direct answer" in reasoning  # the user's own reasoning text
    assert re.fullmatch(r"Thought for \d+(\.\d)? (ms|s)", page.inner_text('[data-role="thinking-summary"]'))
    assert "You said" in page.inner_text('[data-role="answer"]')
    shown = kinds(page, '[data-role="pg-timeline"]')
    assert shown[0] == "status" and "reasoning.end" in shown and shown[-1] == "done"
    # The thinking block is collapsible.
    page.click('[data-role="thinking-summary"]')
    assert page.eval_on_selector('[data-role="thinking"]', "el => el.open") is False
    # Chinese, by the toggle; the next request's trace follows the page's language too.
    page.click('[data-role="lang"]')
    assert page.inner_text('[data-role="thinking-summary"]').startswith("思考了")
    assert page.inner_text('[data-role="send"]') == "发送"

    # With the sample tool, a tool card; with reasoning hidden, the duration but no text.
    page.check('[data-role="tools"]')
    page.select_option('[data-role="reasoning-visibility"]', "hide")
    page.fill('[data-role="prompt"]', PROMPT)
    page.click('[data-role="send"]')
    page.wait_for_selector('[data-role="pg-timeline"] [data-kind="done"]', timeout=WAIT_MS)
    assert "get_weather" in page.inner_text('[data-role="pg-timeline"] [data-kind="tool_call.start"]')
    assert REASONING_WORDS not in page.inner_text('[data-role="reasoning"]')
    assert page.inner_text('[data-role="thinking-summary"]').startswith("思考了")

    # The live view (a page of its own) lists both requests, without their reasoning or the key.
    live = page.context.new_page()
    open_live(live, proxy.url)
    live.wait_for_selector('[data-role="request"]')
    html = live.content()
    assert "sk-playground-key-91c2" not in html and "They want a short" not in html


def test_html_in_model_output_and_tool_names_never_runs(
    mock: BackgroundServer, proxy: BackgroundServer, browser: Any
) -> None:
    # The page's own policy would block inline scripts anyway; turn it off so what is tested is
    # that the console never parses model output or tool names as HTML.
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    try:
        open_live(page, proxy.url)
        evil_tool = {**WEATHER_TOOL, "function": {**WEATHER_TOOL["function"], "name": XSS_TOOL}}
        body = {
            "model": "deepseek-flash",
            "stream": True,
            "messages": [{"role": "user", "content": XSS}],
            "tools": [evil_tool],
        }
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions", json=body, headers={"x-thinking-level": "deep"}, timeout=10
        )
        assert r.status_code == 200
        row = page.locator('[data-role="request"][data-status="200"]', has_text=XSS_TOOL)
        row.wait_for(timeout=WAIT_MS)
        row.click()
        page.wait_for_selector('[data-role="timeline"] [data-kind="tool_call.end"]')
        assert XSS_TOOL in page.inner_text('[data-role="timeline"]')  # shown as text

        page.goto(f"{proxy.url}/ui#playground")
        page.fill('[data-role="prompt"]', XSS)
        page.select_option('[data-role="level"]', "deep")
        page.click('[data-role="send"]')
        page.wait_for_selector('[data-role="pg-timeline"] [data-kind="done"]', timeout=WAIT_MS)
        assert XSS in page.inner_text('[data-role="answer"]')  # the model's echo, as text
        assert XSS in page.inner_text('[data-role="reasoning"]')
        assert page.evaluate("window.__pwned") is None
        injected = page.query_selector_all(
            '[data-role="answer"] *, [data-role="reasoning"] *, [data-role="timeline"] img, '
            '[data-role="timeline"] script, [data-role="requests"] img'
        )
        assert injected == []
    finally:
        context.close()


def test_gateway_console_asks_for_an_admin_key_and_refuses_a_client_key(
    mock: BackgroundServer, page: Any
) -> None:
    admin_key = "admin-key-5d1e0a"
    with proxy_for(
        mock, upstream_api_key="sk-upstream-key", client_keys=[CLIENT_KEY], admin_keys=[admin_key]
    ) as proxy:
        page.goto(f"{proxy.url}/ui")
        page.wait_for_selector('[data-role="admin-auth"]:not([hidden])', timeout=WAIT_MS)
        assert page.get_attribute('[data-role="connection"]', "data-state") == "auth"
        page.fill('[data-role="admin-key"]', CLIENT_KEY)  # a client key is not an admin key
        page.click('[data-role="admin-login"]')
        page.wait_for_selector('[data-role="admin-error"]:has-text("refused")', timeout=WAIT_MS)
        assert page.query_selector_all('[data-role="request"]') == []
        page.fill('[data-role="admin-key"]', admin_key)
        page.click('[data-role="admin-login"]')
        page.wait_for_selector('[data-role="connection"][data-state="live"]', timeout=WAIT_MS)
        assert page.is_hidden('[data-role="admin-auth"]')
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=10,
        )
        assert r.status_code == 200
        page.wait_for_selector('[data-role="request"]', timeout=WAIT_MS)
        html = page.content()
        assert admin_key not in html and CLIENT_KEY not in html and "sk-upstream-key" not in html
        page.goto("about:blank")


def test_language_follows_the_browser_and_toggles(proxy: BackgroundServer, browser: Any) -> None:
    context = browser.new_context(locale="zh-CN")
    page = context.new_page()
    try:
        page.goto(f"{proxy.url}/ui")
        assert page.inner_text('[data-panel-link="live"]') == "实时"
        assert page.get_attribute("html", "lang") == "zh-CN"
        page.click('[data-role="lang"]')
        assert page.inner_text('[data-panel-link="live"]') == "Live"
        assert page.get_attribute("html", "lang") == "en"
    finally:
        context.close()


# -- review cards (human review of tool calls) ------------------------------------------------------


def held_weather_call(url: str, results: list[Any]) -> Any:
    """A client whose get_weather call is held for review; runs on a thread until released."""
    import threading

    def run() -> None:
        body = {
            "model": "deepseek-flash",
            "messages": [{"role": "user", "content": PROMPT}],
            "tools": [WEATHER_TOOL],
        }
        results.append(httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("decision", ["approve", "modify", "reject"])
def test_review_cards_decide_a_held_call(mock: BackgroundServer, page: Any, decision: str) -> None:
    overrides = {"review_tools": ["get_weather"], "reviewer_keys": ["ann:rk-ann-77"], "review_timeout": 20.0}
    with proxy_for(mock, **overrides) as server:
        page.goto(f"{server.url}/ui#reviews")
        page.fill('[data-role="reviewer-key"]', "sk-not-a-reviewer")
        page.click('[data-role="reviewer-login"]')
        page.wait_for_selector('[data-role="reviewer-error"]:has-text("not a reviewer")', timeout=WAIT_MS)
        page.fill('[data-role="reviewer-key"]', "rk-ann-77")
        page.click('[data-role="reviewer-login"]')
        results: list[Any] = []
        thread = held_weather_call(server.url, results)
        card = page.wait_for_selector('[data-role="review"]', timeout=WAIT_MS)
        assert "get_weather" in card.inner_text()
        if decision == "approve":
            card.query_selector('[data-role="review-approve"]').click()
        elif decision == "modify":
            card.query_selector('[data-role="review-edit"]').click()
            area = page.wait_for_selector('[data-role="review-arguments"]:not([hidden])', timeout=WAIT_MS)
            area.fill('{"city": "Lyon"}')
            card.query_selector('[data-role="review-modify"]').click()
        else:
            card.query_selector('[data-role="review-comment"]').fill("not now")
            card.query_selector('[data-role="review-reject"]').click()
        thread.join(timeout=30)
        page.wait_for_selector('[data-role="reviews-empty"]:not([hidden])', timeout=WAIT_MS)
    (response,) = results
    choice = response.json()["choices"][0]
    if decision == "reject":
        assert choice["finish_reason"] == "stop"
        said = "The call to get_weather was rejected by a reviewer: not now."
        assert choice["message"]["content"].endswith(said)
    else:
        assert choice["finish_reason"] == "tool_calls"
        arguments = choice["message"]["tool_calls"][0]["function"]["arguments"]
        if decision == "modify":
            assert arguments == '{"city":"Lyon"}'
