"""The thinking policy's visible side in a real headless Chromium: a request whose reasoning ate
its answer (a max_tokens the reasoning used up) carries a badge on its row and in its detail,
each request shows its cost by the policy's price table, and the Clients panel lists each client
key's requests, reasoning tokens, spend and budget left — in English and in Chinese."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.demo import simulated_table
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.console.test_ui import WAIT_MS, mock, page, pytestmark  # noqa: F401
from tests.helpers import make_settings

POLICY = """\
keys:
  alice: {max_level: deep}
  bob: {reasoning_tokens: {limit: 1, per: hour}}
prices:
  "deepseek-*": {input: 0.27, output: 1.10}
"""
ADMIN = "ak-console-admin-77e1"
ASK = {"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": "Why is the sky blue?"}]}


@pytest.fixture
def gateway(mock: BackgroundServer, tmp_path: Path) -> Iterator[BackgroundServer]:  # noqa: F811
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        upstream_api_key="sk-operator",
        client_keys=["alice:ck-alice", "bob:ck-bob"],
        admin_keys=[ADMIN],
        policy_file=policy,
        ui=True,
    )
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
        yield server


def ask(proxy: BackgroundServer, key: str, **extra: Any) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {key}", "x-thinking-level": "deep"}
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json={**ASK, **extra}, headers=headers, timeout=20)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def log_in(page: Any, url: str, hash_: str = "") -> None:  # noqa: F811
    page.goto(f"{url}/ui{hash_}")
    form = "admin-auth" if not hash_ else "clients-auth"
    page.wait_for_selector(f'[data-role="{form}"]:not([hidden])', timeout=WAIT_MS)
    page.fill(f'[data-role="{form.replace("auth", "key")}"]', ADMIN)
    page.click(f'[data-role="{form.replace("auth", "login")}"]')


def test_a_starved_answer_has_a_badge_and_every_request_its_cost(
    gateway: BackgroundServer,
    page: Any,  # noqa: F811
) -> None:
    starved = ask(gateway, "ck-alice", max_tokens=8)
    assert (
        starved["choices"][0]["finish_reason"] == "length" and not starved["choices"][0]["message"]["content"]
    )
    ask(gateway, "ck-alice")
    log_in(page, gateway.url)
    rows = '[data-role="request"][data-status="200"]'
    page.wait_for_function(f"() => document.querySelectorAll('{rows}').length === 2", timeout=WAIT_MS)
    newest, oldest = page.locator(rows).nth(0), page.locator(rows).nth(1)
    assert newest.locator('[data-role="starved"]').count() == 0
    assert oldest.locator('[data-role="starved"]').inner_text() == "reasoning ate the answer"
    for row in (newest, oldest):
        assert row.locator('[data-role="cost"]').inner_text().startswith("$")
    oldest.click()
    page.wait_for_selector('[data-role="detail"]:not([hidden])')
    facts = page.inner_text('[data-role="detail-facts"]')
    assert "Cost\n$" in facts and "Client key\nalice" in facts
    assert "raise max_tokens or lower the thinking level" in facts
    assert "warning" in [
        i.get_attribute("data-kind") for i in page.query_selector_all('[data-role="trace-item"]')
    ]
    page.click('[data-role="detail-mode"] button[data-mode="brief"]')  # the brief view keeps it
    assert page.locator('[data-role="trace-item"][data-kind="warning"]').count() == 1
    page.goto("about:blank")  # its live connection ends before the server stops


def test_the_clients_panel_shows_requests_reasoning_spend_and_budget_left(
    gateway: BackgroundServer,
    page: Any,  # noqa: F811
) -> None:
    for key in ("ck-alice", "ck-alice", "ck-bob"):
        ask(gateway, key)
    report = httpx.get(f"{gateway.url}/thinkproxy/usage", headers={"authorization": f"Bearer {ADMIN}"}).json()
    log_in(page, gateway.url, "#clients")
    page.wait_for_selector('[data-role="client"][data-client="bob"]', timeout=WAIT_MS)
    alice = page.locator('[data-role="client"][data-client="alice"]')
    bob = page.locator('[data-role="client"][data-client="bob"]')
    assert alice.locator('[data-role="client-requests"]').inner_text() == "2"
    assert alice.locator('[data-role="client-reasoning"]').inner_text() == str(
        report["clients"]["alice"]["reasoning_tokens"]
    )
    assert alice.locator('[data-role="client-spend"]').inner_text().startswith("$")
    assert alice.locator('[data-role="client-budget"]').inner_text() == "no budget"
    assert bob.locator('[data-role="client-budget"]').inner_text().startswith("0 of 1 per hour")
    assert "refused (429)" in bob.locator('[data-role="client-budget"]').inner_text()
    page.click('[data-role="lang"]')
    page.wait_for_function(
        """() => document.querySelector('[data-client="bob"] [data-role="client-budget"]')
             .textContent.startsWith("每小时 1，剩余 0")""",
        timeout=WAIT_MS,
    )
    assert page.inner_text('[data-panel="clients"] thead').count("花费") == 1
    assert page.locator('[data-role="clients-off"]').is_hidden()


def test_without_a_policy_the_panel_says_so(mock: BackgroundServer, page: Any) -> None:  # noqa: F811
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", ui=True)
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
        page.goto(f"{proxy.url}/ui#clients")
        page.wait_for_selector('[data-role="clients-off"]:not([hidden])', timeout=WAIT_MS)
        assert "THINKPROXY_POLICY_FILE" in page.inner_text('[data-role="clients-off"]')
        page.goto("about:blank")
