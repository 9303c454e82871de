"""Regenerates docs/console-live.png, console-sessions.png, console-charts.png,
console-playground.png and console-reviews.png: the proxy with its console against the simulated
upstream, a few requests from another client (one agent session among them), then each view in
the Debian chromium (Playwright). Run from the repository root: `python docs/screenshots.py`."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import sync_playwright

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.settings import Settings

DOCS = Path(__file__).parent
TITLES = "kb_search:\n  zh: 调用知识库\n  en: Searching the knowledge base\n"
KB_TOOL = {
    "type": "function",
    "function": {
        "name": "kb_search",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "minimum": 5}},
            "required": ["query", "top_k"],
        },
    },
}


def traffic(proxy: str, mock: str) -> None:
    """What another application might send through the proxy."""

    usage = {"include_usage": True}  # token counts on streamed answers, as agents ask for them
    session = {"x-session-id": "refund-agent-42"}  # one agent session: a tool call and its answer

    def chat(provider: str, model: str, level: str, text: str, **extra: Any) -> httpx.Response:
        body = {
            "model": model,
            "stream": True,
            "stream_options": usage,
            "messages": [{"role": "user", "content": text}],
            **extra,
        }
        headers = {"x-thinking-level": level, "x-upstream-base-url": f"{mock}/{provider}/v1"}
        if extra.get("tools"):
            headers.update(session)
        return httpx.post(f"{proxy}/v1/chat/completions", json=body, headers=headers, timeout=60)

    chat("deepseek", "deepseek-v4-pro", "off", "Summarise this paragraph in one line.")
    chat("qwen", "qwen-plus", "standard", "Translate 'good morning' into French.")
    chat("prompted", "gpt-4o-mini", "standard", "Plan a 3-day trip to Kyoto.")
    first = chat("minimax", "MiniMax-M2", "deep", "What is our refund policy for EU orders?", tools=[KB_TOOL])
    call = re.search(rb'"id":"(call_[0-9a-f]+)"', first.content)
    if call:
        call_id = call.group(1).decode()
        messages = [
            {"role": "user", "content": "What is our refund policy for EU orders?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "kb_search", "arguments": '{"query": "refund EU", "top_k": 5}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": '[{"doc": "refunds-eu"}, {"doc": "faq"}]'},
        ]
        body = {
            "model": "MiniMax-M2",
            "stream": True,
            "stream_options": usage,
            "messages": messages,
            "tools": [KB_TOOL],
        }
        headers = {"x-thinking-level": "deep", "x-upstream-base-url": f"{mock}/minimax/v1", **session}
        httpx.post(f"{proxy}/v1/chat/completions", json=body, headers=headers, timeout=60)
    chat("kimi", "kimi-k2-thinking", "deep", "Is 1,000,003 a prime number?")


EMAIL_TOOL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "parameters": {
            "type": "object",
            "properties": {
                "to": {"type": "string"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
            "required": ["to", "subject", "body"],
        },
    },
}


def held_email(proxy: str) -> threading.Thread:
    """An agent whose send_email call the proxy holds for a reviewer (on its own thread)."""

    def run() -> None:
        body = {
            "model": "deepseek-v4-pro",
            "messages": [{"role": "user", "content": "Email the Q3 numbers to the whole company"}],
            "tools": [EMAIL_TOOL],
        }
        httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=60)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def main() -> int:
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        titles = Path(tmp) / "titles.yaml"
        titles.write_text(TITLES, encoding="utf-8")
        with BackgroundServer(create_mock_app(MockOptions(pace_ms=12.0))) as mock:
            settings = Settings(  # type: ignore[call-arg]
                _env_file=None,
                upstream_base_url=f"{mock.url}/deepseek/v1",
                allowed_upstreams=[f"127.0.0.1:{mock.port}"],
                ui=True,
                tool_titles_file=titles,
                review_tools=["send_email"],
                reviewer_keys=["ann:rk-demo"],
            )
            with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
                traffic(proxy.url, mock.url)
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                    page = browser.new_page(viewport={"width": 1440, "height": 820}, locale="en-US")
                    page.goto(f"{proxy.url}/ui")
                    page.wait_for_selector('[data-role="session-row"]')
                    page.locator('[data-role="session-row"]').first.click()  # the agent session, opened
                    page.locator('[data-role="request"]', has_text="Searching").first.click()
                    page.wait_for_selector('[data-role="timeline"] [data-kind="done"]')
                    page.screenshot(path=str(DOCS / "console-live.png"))
                    page.goto(f"{proxy.url}/ui#sessions")
                    page.locator('[data-role="session"][data-session="refund-agent-42"]').click()
                    page.wait_for_selector('[data-role="session-timeline"] [data-role="call-answer"]')
                    page.screenshot(path=str(DOCS / "console-sessions.png"))
                    page.goto(f"{proxy.url}/ui#charts")
                    page.wait_for_selector('[data-chart="requests"] canvas')
                    page.screenshot(path=str(DOCS / "console-charts.png"))
                    page.goto(f"{proxy.url}/ui#playground")
                    page.fill('[data-role="api-key"]', "sk-demo")
                    page.select_option('[data-role="level"]', "deep")
                    page.fill('[data-role="prompt"]', "Is 1,000,003 a prime number?")
                    page.click('[data-role="send"]')
                    page.wait_for_selector('[data-role="pg-timeline"] [data-kind="done"]', timeout=60_000)
                    page.screenshot(path=str(DOCS / "console-playground.png"))
                    held = held_email(proxy.url)
                    page.goto(f"{proxy.url}/ui#reviews")
                    page.fill('[data-role="reviewer-key"]', "rk-demo")
                    page.click('[data-role="reviewer-login"]')
                    page.wait_for_selector('[data-role="review"]')
                    page.click('[data-role="review-edit"]')
                    page.wait_for_selector('[data-role="review-arguments"]:not([hidden])')
                    page.fill('[data-role="review-comment"]', "only to the finance team, please")
                    page.screenshot(path=str(DOCS / "console-reviews.png"))
                    page.click('[data-role="review-approve"]')
                    held.join(timeout=30)
                    page.goto("about:blank")
                    browser.close()
    print("wrote docs/console-{live,sessions,charts,playground,reviews}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
