"""Thinking levels where agent users can set them (proxy.server.levels), end to end on every door:
the `model(level)` suffix taken off before routing, the providers table's model overrides and the
upstream; the sources' precedence (X-Thinking-Level > suffix > the client's own field > the key's
default_level > the upstream's default) said in X-Thinking-Level-Source; `auto` chosen by the policy
file's rules, pinned through a tool loop, and bounded by the key's ceiling. A real proxy with a
routes file in front of the simulated providers (chat DeepSeek and Mistral, OpenAI's Responses
API, Anthropic's Messages API), which record what they received."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import Ended, make_settings, routed_table

POLICY = """\
default: {default_level: deep}
auto:
  - when: {contains: ["weather"]}
    level: "off"
  - level: deep
"""
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "sk-test"}
OPENAI = {"authorization": "Bearer sk-test"}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def routes_file(directory: Path, mock: BackgroundServer) -> Path:
    base = mock.url
    path = directory / "routes.yaml"
    path.write_text(
        f"""
routes:
  - {{name: ds, models: ["deepseek-v4-pro"], upstream: "{base}/deepseek/v1"}}
  - {{name: openai, models: ["gpt-5.4"], upstream: "{base}/openai/v1"}}
  - {{name: claude, models: ["claude-sonnet-4-5"], upstream: "{base}/claude/v1"}}
  - {{name: mistral, models: ["mistral-small-latest"], upstream: "{base}/mistral/v1"}}
  - {{name: ds-prefix, prefix: "ds/", upstream: "{base}/deepseek/v1"}}
"""
    )
    return path


def start(mock: BackgroundServer, directory: Path, policy: str | None = POLICY, **overrides: Any) -> Any:
    policy_path = None
    if policy is not None:
        policy_path = directory / "policy.yaml"
        policy_path.write_text(policy)
    settings = make_settings(
        upstream_base_url=None,
        routes_file=routes_file(directory, mock),
        policy_file=policy_path,
        state="off",
        **overrides,
    )
    table = routed_table(
        mock.port,
        {"deepseek": "deepseek", "openai": "openai", "claude": "anthropic", "mistral": "mistral"},
        messages={"anthropic": "anthropic"},
    )
    kept = Ended()
    return BackgroundServer(create_app(settings, table=table, listeners=[kept])), kept


@pytest.fixture(scope="module")
def proxy(mock: BackgroundServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    server, _ = start(mock, tmp_path_factory.mktemp("levels"))
    with server:
        yield server


def last_upstream(mock: BackgroundServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    return body


# -- the doors -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Door:
    name: str
    path: str
    model: str
    body: Callable[[str, bool], dict[str, Any]]  # (model, with the client's own field) -> body
    headers: dict[str, str]
    client_applied: str  # what X-Thinking-Level-Applied says when the client's field applies


def chat(model: str, own: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "Name a colour."}]}
    return {**body, "reasoning_effort": "high"} if own else body


def responses(model: str, own: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "input": "Name a colour.", "store": False}
    return {**body, "reasoning": {"effort": "high"}} if own else body


def messages(model: str, own: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 30000,
        "messages": [{"role": "user", "content": "Name a colour."}],
    }
    return {**body, "thinking": {"type": "enabled", "budget_tokens": 20000}} if own else body


DOORS = [
    # (chat completions: the client's own knobs go as they came, so no level is applied by the proxy)
    Door("chat", "/v1/chat/completions", "deepseek-v4-pro", chat, OPENAI, "none"),
    Door("responses (bridged)", "/v1/responses", "deepseek-v4-pro", responses, OPENAI, "deep"),
    Door("responses (native)", "/v1/responses", "gpt-5.4", responses, OPENAI, "deep"),
    Door("messages (bridged)", "/v1/messages", "deepseek-v4-pro", messages, ANTHROPIC, "deep"),
    Door("messages (native)", "/v1/messages", "claude-sonnet-4-5", messages, ANTHROPIC, "deep"),
]


@pytest.mark.parametrize(
    ("suffix", "own", "header", "applied", "source"),
    [
        ("(deep)", True, "off", "off", "header"),  # the header over the suffix and the client's field
        ("(none)", True, None, "off", "suffix"),  # the suffix over the client's field
        ("", True, None, None, "client"),  # the client's field over the key's default
        ("", False, None, "deep", "default"),  # the key's default_level
    ],
)
@pytest.mark.parametrize("door", DOORS, ids=lambda d: d.name)
def test_the_precedence_on_every_door(
    mock: BackgroundServer,
    proxy: BackgroundServer,
    door: Door,
    suffix: str,
    own: bool,
    header: str | None,
    applied: str | None,
    source: str,
) -> None:
    headers = {**door.headers, **({"x-thinking-level": header} if header else {})}
    r = httpx.post(f"{proxy.url}{door.path}", json=door.body(door.model + suffix, own), headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-source"] == source
    assert r.headers["x-thinking-level-applied"] == (applied or door.client_applied)
    assert last_upstream(mock)["model"] == door.model  # (routed by, and sent as, the stripped name)


@pytest.mark.parametrize("door", DOORS, ids=lambda d: d.name)
def test_without_any_source_the_upstreams_default_applies(
    mock: BackgroundServer, tmp_path: Path, door: Door
) -> None:
    server, _ = start(mock, tmp_path, policy=None)
    with server:
        r = httpx.post(f"{server.url}{door.path}", json=door.body(door.model, False), headers=door.headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-source"] == "none"
    assert r.headers["x-thinking-level-applied"] == "none"


def test_the_upstream_receives_the_suffixs_level_in_its_own_dialect(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    r = httpx.post(
        f"{proxy.url}/v1/chat/completions", json=chat("deepseek-v4-pro(OFF)", True), headers=OPENAI
    )
    assert r.status_code == 200
    sent = last_upstream(mock)
    assert sent["thinking"] == {"type": "disabled"} and "reasoning_effort" not in sent
    r = httpx.post(f"{proxy.url}/v1/responses", json=responses("gpt-5.4(xhigh)", False), headers=OPENAI)
    assert r.status_code == 200 and r.headers["x-thinking-level-applied"] == "deep"
    assert last_upstream(mock)["reasoning"]["effort"] in ("high", "xhigh")
    off = messages("claude-sonnet-4-5(off)", True)
    r = httpx.post(f"{proxy.url}/v1/messages", json=off, headers=ANTHROPIC)
    assert r.status_code == 200 and r.headers["x-thinking-level-applied"] == "off"
    assert last_upstream(mock)["thinking"] == {"type": "disabled"}


def test_routes_and_model_overrides_match_the_stripped_name(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    # A prefix route: the prefix and the suffix both off the name the upstream receives.
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=chat("ds/deepseek-v4-pro(deep)", False))
    assert r.status_code == 200 and r.headers["x-thinking-level-applied"] == "deep"
    assert last_upstream(mock)["model"] == "deepseek-v4-pro"
    # providers.yaml's override for exactly `mistral-small-latest` (its levels) applies.
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=chat("mistral-small-latest(deep)", False))
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-applied"] == "deep"
    assert last_upstream(mock)["model"] == "mistral-small-latest"
    # A word that is not a level is part of the name: no route takes it.
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=chat("deepseek-v4-pro(v2)", False))
    assert r.status_code == 404
    assert "deepseek-v4-pro(v2)" in r.json()["error"]["message"]


def test_the_record_keeps_the_stripped_model_the_suffix_and_the_source(
    mock: BackgroundServer, tmp_path: Path
) -> None:
    server, kept = start(mock, tmp_path)
    with server:
        httpx.post(f"{server.url}/v1/chat/completions", json=chat("deepseek-v4-pro(High)", False))
        httpx.post(
            f"{server.url}/v1/messages",
            json=messages("claude-sonnet-4-5(auto)", False),
            headers=ANTHROPIC,
        )
    first, second = kept.records
    assert (first.model, first.model_suffix, first.level_source, first.level) == (
        "deepseek-v4-pro",
        "High",
        "suffix",
        "deep",
    )
    assert (second.model, second.model_suffix, second.level_source) == ("claude-sonnet-4-5", "auto", "suffix")
    assert second.level_rule == "auto[2]: otherwise -> deep"


def test_a_suffix_on_a_websocket_turn(mock: BackgroundServer) -> None:
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", state="off")
    app = create_app(settings, table=simulated_table(mock.port))
    with TestClient(app) as client, client.websocket_connect("/v1/responses", headers=dict(OPENAI)) as ws:
        for model, reasoning, thinking in (
            ("deepseek-v4-pro(off)", {"effort": "high"}, {"type": "disabled"}),  # the suffix over the field
            ("deepseek-v4-pro(deep)", None, {"type": "enabled"}),
        ):
            create = {"type": "response.create", "model": model, "input": "Name a colour.", "store": False}
            ws.send_text(json.dumps({**create, **({"reasoning": reasoning} if reasoning else {})}))
            while json.loads(ws.receive_text())["type"] not in ("response.completed", "error"):
                pass
            sent = last_upstream(mock)
            assert sent["model"] == "deepseek-v4-pro"
            assert sent["thinking"] == thinking


# -- auto: pinned per user turn, bounded by the ceiling --------------------------------------------------

ASK = "What's the weather in Paris? Use get_weather."
RESULT = "Sunny, 21 C, light wind from the west."  # (were the rules to read it: no "weather", deep)


def chat_turns() -> list[dict[str, Any]]:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    user = {"role": "user", "content": ASK}
    first = {"model": "deepseek-v4-pro(auto)", "messages": [user], "tools": [tool]}
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    loop = {
        **first,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
        ],
    }
    return [first, loop]


def responses_turns() -> list[dict[str, Any]]:
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    user = {"role": "user", "content": [{"type": "input_text", "text": ASK}]}
    first = {"model": "deepseek-v4-pro(auto)", "input": [user], "tools": [tool], "store": False}
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": RESULT}
    return [first, {**first, "input": [user, call, output]}]


def messages_turns() -> list[dict[str, Any]]:
    tool = {"name": "get_weather", "input_schema": {"type": "object"}}
    first = {
        "model": "deepseek-v4-pro(auto)",
        "max_tokens": 2000,
        "messages": [{"role": "user", "content": ASK}],
        "tools": [tool],
    }
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": RESULT}
    loop = {
        **first,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ],
    }
    return [first, loop]


@pytest.mark.parametrize(
    ("path", "turns", "headers"),
    [
        ("/v1/chat/completions", chat_turns, OPENAI),
        ("/v1/responses", responses_turns, OPENAI),
        ("/v1/messages", messages_turns, ANTHROPIC),
    ],
    ids=["chat", "responses", "messages"],
)
def test_auto_keeps_one_level_through_a_tool_loop(
    mock: BackgroundServer,
    proxy: BackgroundServer,
    path: str,
    turns: Callable[[], list[dict[str, Any]]],
    headers: dict[str, str],
) -> None:
    seen = []
    for body in turns():
        r = httpx.post(f"{proxy.url}{path}", json=body, headers=headers)
        assert r.status_code == 200, r.text
        seen.append((r.headers["x-thinking-level-applied"], r.headers["x-thinking-level-rule"]))
        assert last_upstream(mock)["thinking"] == {"type": "disabled"}
    assert seen == [("off", "auto[1]: contains weather -> off")] * 2


def test_auto_is_held_through_a_native_tool_loop_continued_by_id(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    """A native Responses tool loop continued with `previous_response_id` sends only the tool's
    output: no user text for the rules to read, so the level the response it continues was given
    (and the rule that chose it) is kept, not the fallback's."""
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    user = {"role": "user", "content": [{"type": "input_text", "text": ASK}]}
    first = {"model": "gpt-5.4(auto)", "input": [user], "tools": [tool]}
    r = httpx.post(f"{proxy.url}/v1/responses", json=first, headers=OPENAI)
    assert r.status_code == 200, r.text
    seen = [(r.headers["x-thinking-level-applied"], r.headers["x-thinking-level-rule"])]
    sent = [last_upstream(mock)["reasoning"]]
    output = {"type": "function_call_output", "call_id": "call_1", "output": RESULT}
    loop = {**first, "input": [output], "previous_response_id": r.json()["id"]}
    r = httpx.post(f"{proxy.url}/v1/responses", json=loop, headers=OPENAI)
    assert r.status_code == 200, r.text
    seen.append((r.headers["x-thinking-level-applied"], r.headers["x-thinking-level-rule"]))
    sent.append(last_upstream(mock)["reasoning"])
    assert seen == [("off", "auto[1]: contains weather -> off")] * 2
    assert sent[1] == sent[0]


def test_auto_is_bounded_by_the_keys_ceiling(mock: BackgroundServer, tmp_path: Path) -> None:
    policy = "default: {max_level: standard, default_level: auto}\nauto:\n  - {level: deep}\n"
    server, kept = start(mock, tmp_path, policy=policy)
    with server:
        r = httpx.post(f"{server.url}/v1/chat/completions", json=chat("deepseek-v4-pro", False))
    assert r.status_code == 200
    assert r.headers["x-thinking-level-source"] == "default"
    assert r.headers["x-thinking-level-rule"] == "auto[1]: otherwise -> deep"
    assert r.headers["x-thinking-level-applied"] == "standard"
    assert r.headers["x-thinking-policy"] == "max_level=standard"
    assert kept.records[0].level_rule == "auto[1]: otherwise -> deep"


def test_the_header_says_auto(mock: BackgroundServer, proxy: BackgroundServer) -> None:
    r = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json=chat("deepseek-v4-pro(off)", False),
        headers={"x-thinking-level": "Auto"},
    )
    assert r.status_code == 200
    assert r.headers["x-thinking-level-source"] == "header"
    assert r.headers["x-thinking-level-applied"] == "deep"  # (auto[2]: "Name a colour." has no "weather")
    wrong = {"x-thinking-level": "hi"}
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=chat("deepseek-v4-pro", False), headers=wrong)
    assert r.status_code == 400
    assert "off, standard, deep, auto" in r.json()["error"]["message"]


def test_the_trace_names_the_auto_rule(mock: BackgroundServer, proxy: BackgroundServer) -> None:
    body = {**chat("deepseek-v4-pro(auto)", False), "stream": True}
    r = httpx.post(
        f"{proxy.url}/v1/chat/completions", json=body, headers={"x-trace": "brief", "x-trace-format": "event"}
    )
    assert r.status_code == 200
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    notes = [c["trace"] for c in chunks if c.get("trace", {}).get("type") == "note"]
    assert [(n["code"], n["rule"]) for n in notes] == [("auto_level", "auto[2]: otherwise -> deep")]
    assert notes[0]["message"] == "Thinking level auto: auto[2]: otherwise -> deep"


def test_each_key_has_its_own_default_level(mock: BackgroundServer, tmp_path: Path) -> None:
    policy = 'default: {default_level: standard}\nkeys:\n  alice: {default_level: "off"}\n'
    server, _ = start(
        mock, tmp_path, policy=policy, client_keys=["alice:ck-alice", "bob:ck-bob"], upstream_api_key="sk-op"
    )
    with server:
        seen = {}
        for key in ("alice", "bob"):
            headers = {"authorization": f"Bearer ck-{key}"}
            r = httpx.post(
                f"{server.url}/v1/chat/completions", json=chat("deepseek-v4-pro", False), headers=headers
            )
            assert r.status_code == 200, r.text
            seen[key] = (r.headers["x-thinking-level-source"], r.headers["x-thinking-level-applied"])
            # A key's default never goes before a level the request names.
            r = httpx.post(
                f"{server.url}/v1/chat/completions",
                json=chat("deepseek-v4-pro(deep)", False),
                headers=headers,
            )
            assert r.headers["x-thinking-level-applied"] == "deep"
    assert seen == {"alice": ("default", "off"), "bob": ("default", "standard")}


def test_the_record_keeps_the_level_the_clients_own_field_asked(
    mock: BackgroundServer, tmp_path: Path
) -> None:
    server, kept = start(mock, tmp_path, policy=None)
    with server:
        httpx.post(f"{server.url}/v1/chat/completions", json=chat("deepseek-v4-pro", True))
    (record,) = kept.records
    assert (record.level_source, record.level_requested, record.level) == ("client", "deep", "none")
