"""Issue 44: a headless Claude Code run and a headless Codex run through a real `thinkproxy serve`
land as ONE session each in GET /thinkproxy/sessions, named by the id the client sends
(`X-Claude-Code-Session-Id`, Codex's `session-id`), with as many requests as reached the
simulated upstream, token sums equal to the usage it reported, its cache-hit ratio, and a cost
equal to genai-prices' for those counts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from genai_prices import Usage, calc_price

from tests.clients import test_claude_code
from tests.clients.conftest import ADMIN_KEY, MODEL, Proxy, Upstream
from tests.clients.test_claude_code import COMMAND as CLAUDE_COMMAND
from tests.clients.test_claude_code import claude_print, result_of
from tests.clients.test_codex_cli import COMMAND as CODEX_COMMAND
from tests.clients.test_codex_cli import codex_exec, events_of

pytestmark = pytest.mark.spawns
claude = test_claude_code.claude  # (the fixture: the Claude Code binary, checked)


def reported(upstream: Upstream) -> list[dict[str, Any]]:
    """The usage the simulated upstream reported for each chat request, in order."""
    entries = [e for e in upstream.requests() if e["path"].endswith("/chat/completions")]
    assert entries and all("reported_usage" in e for e in entries), upstream.describe()
    return [e["reported_usage"] for e in entries]


def assert_one_session(
    proxy: Proxy, session_id: str, client: str, door: str, usages: list[dict[str, Any]]
) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    found = httpx.get(f"{proxy.url}/thinkproxy/sessions?client={client}", headers=admin, timeout=10)
    listing = found.json()["sessions"]
    mine = [s for s in listing if s["id"] == session_id]
    assert len(mine) == 1, listing
    r = httpx.get(f"{proxy.url}/thinkproxy/sessions/{session_id}", headers=admin, timeout=10)
    assert r.status_code == 200, r.text
    session = r.json()
    assert (session["source"], session["client"], session["doors"]) == (client, client, [door])
    assert session["requests"] == len(usages) == len(session["details"])
    prompt = sum(u["prompt_tokens"] for u in usages)
    cached = sum(u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usages)
    completion = sum(u["completion_tokens"] for u in usages)
    reasoning = sum(u["completion_tokens_details"]["reasoning_tokens"] for u in usages)
    assert session["tokens"] == {
        "input": prompt,
        "cached": cached,
        "reasoning": reasoning,
        "output": completion,
    }
    assert session["cache_hit_ratio"] == round(cached / prompt, 3)
    # The tool loop's second request repeats the first one's messages: the simulated DeepSeek's
    # context cache (proxy.mock.prompt_cache) reports them, and the session sums the hits.
    assert cached > 0, usages
    expected = 0.0
    for usage, detail in zip(usages, session["details"], strict=True):
        counts = Usage(
            input_tokens=usage["prompt_tokens"],
            cache_read_tokens=usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
            output_tokens=usage["completion_tokens"],
        )
        when = datetime.fromtimestamp(detail["at"] / 1000, UTC)
        price = calc_price(counts, MODEL, provider_id="deepseek", genai_request_timestamp=when).total_price
        assert detail["cost_usd"] == pytest.approx(float(price), rel=1e-9)
        expected += float(price)
    # (the summary rounds the sum to 8 places: 0.01 µ$)
    assert session["cost_usd"] == pytest.approx(expected, abs=1e-8) and session["cost_complete"] is True
    assert expected > 0


def test_a_claude_code_run_is_one_session(
    claude: Path, proxy_state_off: Proxy, upstream: Upstream, tmp_path: Path
) -> None:
    done = claude_print(claude, proxy_state_off, tmp_path, CLAUDE_COMMAND)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    session_id = result_of(done.stdout)["session_id"]
    assert_one_session(proxy_state_off, session_id, "claude-code", "messages", reported(upstream))


def test_a_codex_run_is_one_session(
    node: str, proxy_state_off: Proxy, upstream: Upstream, tmp_path: Path
) -> None:
    home, workdir = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    done = codex_exec(node, proxy_state_off, home, workdir, CODEX_COMMAND)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    (started,) = [e for e in events_of(done.stdout) if e["type"] == "thread.started"]
    assert_one_session(proxy_state_off, started["thread_id"], "codex", "responses", reported(upstream))
