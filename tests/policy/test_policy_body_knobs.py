"""The thinking policy judges the body, not only the header (issue 41, items 3 and 4), through the
real doors: a gateway with named client keys in front of the simulated upstream, with entries of
the shipped table mapped onto it (tests.helpers.routed_table).

- A key's ceiling applies to the level the body's own knobs ask (chat's `reasoning_effort` /
  `thinking` / …, Responses' `reasoning`, Messages' `thinking` / `output_config.effort`): a body
  above it is sent at the ceiling, said in `X-Thinking-Policy`; a numeric budget is capped at the
  ceiling level's number.
- Where the policy needs thinking off and the entry cannot turn it off (no `off` level: OpenAI's
  o-series and gpt-5 before 5.1, Azure, always-thinking self-hosted families), the request is
  refused and nothing is forwarded: 403 for `max_level: off`, 429 with Retry-After for a spent
  budget with `on_exhausted: off`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings, routed_table

POLICY = """\
default: {max_level: deep}
keys:
  alice: {max_level: standard}
  olga: {max_level: "off"}
  carol: {reasoning_tokens: {limit: 1, per: day}, on_exhausted: "off"}
"""
KEYS = ["alice:ck-alice", "olga:ck-olga", "carol:ck-carol"]
CHAT_ROUTES = {
    "deepseek": "deepseek",
    "openai": "openai",
    "openrouter": "openrouter",
    "": "anthropic",  # (its chat: the simulated upstream's own /v1, DeepSeek's shape)
    "vllm": "self-hosted",
    "azure": "azure",
}
VERSION = {"anthropic-version": "2023-06-01"}
QUESTION = [{"role": "user", "content": "Why is the sky blue?"}]


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(POLICY)
    return path


def gateway(
    mock: BackgroundServer, policy_file: Path, prefix: str, *, native_messages: bool = False
) -> BackgroundServer:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/{prefix}/v1" if prefix else f"{mock.url}/v1",
        upstream_api_key="sk-operator",
        client_keys=KEYS,
        policy_file=policy_file,
        trace="brief",
    )
    table = routed_table(mock.port, CHAT_ROUTES, {"anthropic": "anthropic"} if native_messages else None)
    return BackgroundServer(create_app(settings, table=table))


def post(
    proxy: BackgroundServer, path: str, key: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    sent = {"authorization": f"Bearer {key}", **VERSION, **headers}
    return httpx.post(f"{proxy.url}{path}", json=body, headers=sent, timeout=20)


def upstream_count(mock: BackgroundServer) -> int:
    return len(httpx.get(f"{mock.url}/_mock/requests").json())


def last_sent(mock: BackgroundServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    return body


def knobs(body: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: body[name] for name in names if name in body}


def policy_notes(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len(": trace ") :])
        for line in text.splitlines()
        if line.startswith(": trace ") and '"code":"thinking_policy"' in line
    ]


CHAT_KNOBS = ("thinking", "reasoning_effort", "enable_thinking", "thinking_budget", "reasoning")


# -- item 3: the ceiling reads the body's own knobs -----------------------------------------------


def test_deepseek_s_deep_knobs_in_a_chat_body_are_sent_at_the_ceiling(
    mock: BackgroundServer, policy_file: Path
) -> None:
    body = {"model": "deepseek-v4-pro", "messages": QUESTION, "stream": True}
    deep = {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}
    with gateway(mock, policy_file, "deepseek") as proxy:
        r = post(proxy, "/v1/chat/completions", "ck-alice", {**body, **deep})
        assert r.status_code == 200, r.text
        assert knobs(last_sent(mock), *CHAT_KNOBS) == {"thinking": {"type": "enabled"}}
        at_ceiling = post(
            proxy, "/v1/chat/completions", "ck-alice", {**body, "thinking": {"type": "enabled"}}
        )
        assert knobs(last_sent(mock), *CHAT_KNOBS) == {"thinking": {"type": "enabled"}}
    assert r.headers["x-thinking-level-applied"] == "standard"
    assert r.headers["x-thinking-policy"] == "max_level=standard"
    [note] = policy_notes(r.text)
    assert note["message"] == "Thinking policy max_level=standard: asked deep, sent standard"
    # A body at the ceiling is judged and goes as it came: nothing to say.
    assert at_ceiling.status_code == 200 and "x-thinking-policy" not in at_ceiling.headers
    assert at_ceiling.headers["x-thinking-level-applied"] == "none"


def test_a_chat_budget_above_the_ceiling_s_number_is_capped(
    mock: BackgroundServer, policy_file: Path
) -> None:
    """Anthropic's OpenAI-compatible chat: `budget_tokens` above the standard level's 1,024 asks
    more than standard, whether the header names a level or not."""
    body = {
        "model": "claude-sonnet-4-5",
        "messages": QUESTION,
        "max_tokens": 300_000,
        "thinking": {"type": "enabled", "budget_tokens": 200_000},
    }
    with gateway(mock, policy_file, "") as proxy:
        r = post(proxy, "/v1/chat/completions", "ck-alice", body)
        assert r.status_code == 200, r.text
        sent = knobs(last_sent(mock), *CHAT_KNOBS)
    assert sent == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert r.headers["x-thinking-level-applied"] == "standard"
    assert r.headers["x-thinking-policy"] == "max_level=standard"


def test_the_bridged_messages_door_caps_the_client_s_budget(
    mock: BackgroundServer, policy_file: Path
) -> None:
    """On the bridge the client's `budget_tokens` replaces the level's number: under a ceiling it
    is capped at the ceiling level's (Anthropic's compat chat: 1,024 for standard)."""
    ask = {"model": "claude-sonnet-4-5", "max_tokens": 300_000, "messages": QUESTION}
    with gateway(mock, policy_file, "") as proxy:
        r = post(
            proxy,
            "/v1/messages",
            "ck-alice",
            {**ask, "thinking": {"type": "enabled", "budget_tokens": 200_000}},
        )
        assert r.status_code == 200, r.text
        sent = knobs(last_sent(mock), *CHAT_KNOBS)
        # (with X-Thinking-Level the header decides, and the level's own number goes: nothing to cap)
        headed = post(
            proxy,
            "/v1/messages",
            "ck-alice",
            {**ask, "thinking": {"type": "enabled", "budget_tokens": 8_000}},
            **{"x-thinking-level": "standard"},
        )
        assert headed.status_code == 200, headed.text
        headed_sent = knobs(last_sent(mock), *CHAT_KNOBS)
    assert sent == headed_sent == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert r.headers["x-thinking-level-applied"] == "standard"
    assert r.headers["x-thinking-policy"] == "max_level=standard"
    assert r.headers["x-thinking-budget-applied"] == "thinking.budget_tokens=1024"
    assert (
        headed.headers["x-thinking-level-applied"] == "standard" and "x-thinking-policy" not in headed.headers
    )


def test_the_native_messages_door_caps_budget_tokens(mock: BackgroundServer, policy_file: Path) -> None:
    ask = {"model": "claude-sonnet-4-5", "max_tokens": 300_000, "messages": QUESTION}
    deep = {"thinking": {"type": "enabled", "budget_tokens": 200_000}}
    with gateway(mock, policy_file, "", native_messages=True) as proxy:
        bare = post(proxy, "/v1/messages", "ck-alice", {**ask, **deep})
        assert bare.status_code == 200, bare.text
        bare_sent = knobs(last_sent(mock), "thinking", "output_config")
        headed = post(proxy, "/v1/messages", "ck-alice", {**ask, **deep}, **{"x-thinking-level": "standard"})
        assert headed.status_code == 200, headed.text
        headed_sent = knobs(last_sent(mock), "thinking", "output_config")
        within = post(
            proxy, "/v1/messages", "ck-alice", {**ask, "thinking": {"type": "enabled", "budget_tokens": 1024}}
        )
        within_sent = knobs(last_sent(mock), "thinking", "output_config")
    assert bare_sent == headed_sent == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    for response in (bare, headed):
        assert response.headers["x-thinking-level-applied"] == "standard"
        assert response.headers["x-thinking-policy"] == "max_level=standard"
    assert within.status_code == 200 and "x-thinking-policy" not in within.headers
    assert within_sent == {"thinking": {"type": "enabled", "budget_tokens": 1024}}


def test_the_native_messages_door_reads_output_config_effort(
    mock: BackgroundServer, policy_file: Path
) -> None:
    ask = {"model": "claude-opus-4-7", "max_tokens": 32_000, "messages": QUESTION}
    with gateway(mock, policy_file, "", native_messages=True) as proxy:
        r = post(proxy, "/v1/messages", "ck-alice", {**ask, "output_config": {"effort": "max"}})
        assert r.status_code == 200, r.text
        sent = knobs(last_sent(mock), "thinking", "output_config")
    assert sent == {"thinking": {"type": "adaptive"}}
    assert r.headers["x-thinking-level-applied"] == "standard"
    assert r.headers["x-thinking-policy"] == "max_level=standard"


def test_the_native_responses_door_reads_every_reasoning_knob(
    mock: BackgroundServer, policy_file: Path
) -> None:
    """OpenRouter's `reasoning.max_tokens` (one of its entry's knobs) is a level too."""
    ask = {"model": "deepseek/deepseek-r1", "input": "Why is the sky blue?"}
    with gateway(mock, policy_file, "openrouter") as proxy:
        r = post(proxy, "/v1/responses", "ck-alice", {**ask, "reasoning": {"max_tokens": 50_000}})
        assert r.status_code == 200, r.text
        sent = last_sent(mock).get("reasoning")
        effort = post(proxy, "/v1/responses", "ck-alice", {**ask, "reasoning": {"effort": "xhigh"}})
        effort_sent = last_sent(mock).get("reasoning")
    assert sent is None and effort_sent is None  # (standard is the upstream's default: no knob)
    for response in (r, effort):
        assert response.headers["x-thinking-policy"] == "max_level=standard"


def test_the_bridged_responses_door_caps_reasoning_effort(mock: BackgroundServer, policy_file: Path) -> None:
    ask = {"model": "deepseek-v4-pro", "input": "Why is the sky blue?", "reasoning": {"effort": "max"}}
    with gateway(mock, policy_file, "deepseek") as proxy:
        r = post(proxy, "/v1/responses", "ck-alice", ask)
        assert r.status_code == 200, r.text
        sent = knobs(last_sent(mock), *CHAT_KNOBS)
    assert sent == {"thinking": {"type": "enabled"}}
    assert r.headers["x-thinking-level-applied"] == "standard"
    assert r.headers["x-thinking-policy"] == "max_level=standard"


# -- item 4: off where the entry cannot turn thinking off ------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "model"),
    [
        ("openai", "o3"),  # o-series: no `none` effort
        ("openai", "gpt-5"),  # gpt-5 before 5.1
        ("azure", "gpt-5-mini"),  # Azure: the same models
        ("vllm", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"),  # an always-thinking family
    ],
)
def test_max_level_off_on_an_entry_that_cannot_turn_thinking_off_is_refused(
    mock: BackgroundServer, policy_file: Path, prefix: str, model: str
) -> None:
    body = {"model": model, "messages": QUESTION, "reasoning_effort": "high"}
    with gateway(mock, policy_file, prefix) as proxy:
        before = upstream_count(mock)
        refused = post(proxy, "/v1/chat/completions", "ck-olga", body)
        headed = post(proxy, "/v1/chat/completions", "ck-olga", body, **{"x-thinking-level": "off"})
        bare = post(proxy, "/v1/chat/completions", "ck-olga", {"model": model, "messages": QUESTION})
        assert upstream_count(mock) == before  # nothing was forwarded
    for r in (refused, headed, bare):
        assert r.status_code == 403, r.text
        error = r.json()["error"]
        assert error["type"] == error["code"] == "thinking_off_unavailable"
        assert "'olga'" in error["message"] and "cannot turn thinking off" in error["message"]
        assert r.headers["x-thinking-policy"] == "max_level=off"


def test_max_level_off_where_the_entry_can_turn_it_off_sends_off(
    mock: BackgroundServer, policy_file: Path
) -> None:
    body = {"model": "gpt-5.1", "messages": QUESTION, "reasoning_effort": "high"}
    with gateway(mock, policy_file, "openai") as proxy:
        r = post(proxy, "/v1/chat/completions", "ck-olga", body)
        assert r.status_code == 200, r.text
        sent = knobs(last_sent(mock), *CHAT_KNOBS)
    assert sent == {"reasoning_effort": "none"}
    assert r.headers["x-thinking-level-applied"] == "off"
    assert r.headers["x-thinking-policy"] == "max_level=off"


def test_max_level_off_is_refused_on_the_native_responses_door_too(
    mock: BackgroundServer, policy_file: Path
) -> None:
    ask = {"model": "o3", "input": "Why is the sky blue?", "reasoning": {"effort": "high"}}
    with gateway(mock, policy_file, "openai") as proxy:
        before = upstream_count(mock)
        r = post(proxy, "/v1/responses", "ck-olga", ask)
        assert upstream_count(mock) == before
        off = post(proxy, "/v1/responses", "ck-olga", {**ask, "model": "gpt-5.1"})
        sent = last_sent(mock).get("reasoning")
    assert r.status_code == 403 and r.json()["error"]["code"] == "thinking_off_unavailable"
    assert off.status_code == 200, off.text
    assert sent == {"effort": "none"} and off.headers["x-thinking-level-applied"] == "off"


def test_a_spent_budget_with_off_is_refused_where_off_is_impossible(
    mock: BackgroundServer, policy_file: Path
) -> None:
    body = {"model": "o3", "messages": QUESTION, "reasoning_effort": "high"}
    with gateway(mock, policy_file, "openai") as proxy:
        first = post(proxy, "/v1/chat/completions", "ck-carol", body)
        assert first.status_code == 200, first.text
        assert first.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
        before = upstream_count(mock)
        refused = post(proxy, "/v1/chat/completions", "ck-carol", body)  # (its budget is spent now)
        assert upstream_count(mock) == before
        off = post(proxy, "/v1/chat/completions", "ck-carol", {**body, "model": "gpt-5.1"})
        sent = knobs(last_sent(mock), *CHAT_KNOBS)
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "reasoning_budget_exceeded" and "cannot turn thinking off" in error["message"]
    assert 0 < int(refused.headers["retry-after"]) <= 86_400
    assert refused.headers["x-thinking-policy"] == "reasoning_tokens=1/day; on_exhausted=off"
    # Where off is possible, the spent budget sends thinking off, as before.
    assert off.status_code == 200 and sent == {"reasoning_effort": "none"}
    assert off.headers["x-thinking-policy"] == "reasoning_tokens=1/day; on_exhausted=off"
