"""The console's request detail shows the answer's token reading in a real headless Chromium:
cached prompt tokens, and reasoning tokens with "(estimated)" when the proxy estimated them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.demo import simulated_table
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.console.test_ui import WAIT_MS, mock, open_live, page, pytestmark  # noqa: F401
from tests.helpers import make_settings


@pytest.fixture
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:  # noqa: F811
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        allowed_upstreams=[f"http://127.0.0.1:{mock.port}"],
        ui=True,
    )
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
        yield server


def detail_of_newest(page: Any) -> str:  # noqa: F811
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-role="request"]')]
             .filter(r => r.dataset.status === "200").length === 1""",
        timeout=WAIT_MS,
    )
    page.locator('[data-role="request"]').nth(0).click()
    page.wait_for_selector('[data-role="detail"]:not([hidden])')
    text: str = page.inner_text('[data-role="detail-facts"]')
    page.goto("about:blank")  # its live connection ends before the server stops
    return text


@pytest.mark.parametrize(("dialect", "estimated"), [("vllm", True), ("deepseek", False)])
def test_the_detail_shows_reasoning_tokens_and_whether_they_are_estimated(
    proxy: BackgroundServer,
    mock: BackgroundServer,  # noqa: F811
    page: Any,  # noqa: F811
    dialect: str,
    estimated: bool,
) -> None:
    open_live(page, proxy.url)
    headers = {"x-thinking-level": "deep", "x-upstream-base-url": f"{mock.url}/{dialect}/v1"}
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    usage = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers).json()["usage"]
    count = usage["completion_tokens_details"]["reasoning_tokens"]
    facts = detail_of_newest(page)
    assert "Reasoning tokens" in facts and str(count) in facts
    assert ("(estimated)" in facts) is estimated
    assert ("Cached prompt tokens" in facts) is (dialect == "deepseek")  # DeepSeek reports its cache
