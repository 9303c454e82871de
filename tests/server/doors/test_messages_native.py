"""The Messages door to a native Anthropic Messages upstream (providers.yaml `messages: {mode:
native}`), end to end: a real proxy in front of the simulated Messages API (proxy/mock/messages.py),
which enforces Anthropic's rules (a key, a version, thinking blocks only with signatures it minted).
The shipped table's own rules (Anthropic's, DeepSeek's), with their base URLs pointed at it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from proxy.core.config.providers import ProvidersTable, default_providers_path
from proxy.core.config.yamlfile import load_config
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

VERSION = {"anthropic-version": "2023-06-01"}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
INVALID = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "messages.1.content.0: Invalid `signature` in `thinking` block",
    },
}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def native_table(port: int) -> ProvidersTable:
    """The shipped table with DeepSeek's Messages door turned native (it ships bridged), Anthropic's
    and DeepSeek's native Messages bases on the simulated upstream
    (`/anthropic` and `/ds-anthropic`), their chat bases matched by `/claude` and `/dsnative`."""
    data = load_config(default_providers_path().read_text(), "providers.yaml")
    for entry, chat, messages in (
        ("anthropic", "claude", "anthropic"),
        ("deepseek", "dsnative", "ds-anthropic"),
    ):
        rules = data["providers"][entry]
        rules["match"].append(f"127.0.0.1:{port}/{chat}")
        for holder in (rules, *rules.get("models", ())):
            if "messages" in holder:
                holder["messages"]["base_url"] = f"http://127.0.0.1:{port}/{messages}"
                holder["messages"]["mode"] = "native"  # (DeepSeek's ships bridged: an operator's choice)
    return ProvidersTable.from_text(json.dumps(data, default=str))


def proxy_for(mock: BackgroundServer, chat: str = "claude", **overrides: Any) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{mock.url}/{chat}/v1", **overrides)
    return BackgroundServer(create_app(settings, table=native_table(mock.port)))


def upstream_log(mock: BackgroundServer) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = httpx.get(f"{mock.url}/_mock/requests").json()
    return log


def last_upstream(mock: BackgroundServer) -> dict[str, Any]:
    record: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()
    return record


def ask(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
        **extra,
    }


@pytest.fixture(scope="module")
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:
    with proxy_for(mock) as server:
        yield server


# -- levels -------------------------------------------------------------------------------------------

CLIENT_THINKING = {"thinking": {"type": "enabled", "budget_tokens": 2048}, "output_config": {"effort": "low"}}


@pytest.mark.parametrize(
    ("model", "level", "sent"),
    [
        ("claude-sonnet-4-5", "off", {"thinking": {"type": "disabled"}}),
        # (the client's own budget replaces the level's number, as on the bridge)
        ("claude-sonnet-4-5", "standard", {"thinking": {"type": "enabled", "budget_tokens": 2048}}),
        ("claude-sonnet-4-5", "deep", {"thinking": {"type": "enabled", "budget_tokens": 2048}}),
        ("claude-opus-4-7", "off", {"thinking": {"type": "disabled"}}),
        ("claude-opus-4-7", "standard", {"thinking": {"type": "adaptive"}}),
        (
            "claude-opus-4-7",
            "deep",
            {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}},
        ),
    ],
)
def test_the_level_is_sent_as_anthropic_s_own_thinking_fields(
    mock: BackgroundServer, proxy: BackgroundServer, model: str, level: str, sent: dict[str, Any]
) -> None:
    headers = {**VERSION, "x-api-key": "sk-ant-client", "x-thinking-level": level}
    r = httpx.post(f"{proxy.url}/v1/messages", json=ask(model=model, **CLIENT_THINKING), headers=headers)
    assert r.status_code == 200, r.text
    record = last_upstream(mock)
    assert record["path"] == "/anthropic/v1/messages"
    body = record["body"]
    assert {k: body[k] for k in ("thinking", "output_config") if k in body} == sent
    assert body["messages"] == ask()["messages"] and body["max_tokens"] == 32000
    assert r.headers["x-thinking-level-applied"] == level
    assert r.headers["x-thinking-provider"] == "anthropic"
    assert r.headers["x-thinking-upstream-api"] == "messages"
    kinds = [b["type"] for b in r.json()["content"]]
    assert kinds == (["text"] if level == "off" else ["thinking", "text"])


@pytest.mark.parametrize(
    ("level", "sent"),
    [
        ("off", {"thinking": {"type": "disabled"}}),
        ("standard", {"thinking": {"type": "enabled"}}),
        ("deep", {"thinking": {"type": "enabled"}, "output_config": {"effort": "max"}}),
    ],
)
def test_deepseek_s_anthropic_endpoint_gets_its_own_levels(
    mock: BackgroundServer, level: str, sent: dict[str, Any]
) -> None:
    """DeepSeek ignores budget_tokens and reads only output_config.effort: its levels are its chat
    levels in Anthropic's fields, at its own base (https://api.deepseek.com/anthropic)."""
    with proxy_for(mock, chat="dsnative") as proxy:
        headers = {**VERSION, "x-api-key": "sk-ds", "x-thinking-level": level}
        r = httpx.post(f"{proxy.url}/v1/messages", json=ask(model="deepseek-v4-pro"), headers=headers)
    record = last_upstream(mock)
    assert record["path"] == "/ds-anthropic/v1/messages"
    assert {k: record["body"][k] for k in ("thinking", "output_config") if k in record["body"]} == sent
    assert r.headers["x-thinking-provider"] == "deepseek"


def test_without_the_header_the_client_s_thinking_stands(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    body = ask(**CLIENT_THINKING)
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={**VERSION, "x-api-key": "k"})
    assert r.status_code == 200
    assert last_upstream(mock)["body"] == body
    assert r.headers["x-thinking-level-applied"] == "standard"  # (a 2,048-token budget)


def test_between_tools_thinking_passes_as_it_came(mock: BackgroundServer, proxy: BackgroundServer) -> None:
    body = ask(model="claude-sonnet-5-5", thinking={"type": "between_tools"}, output_config={"effort": "low"})
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={**VERSION, "x-api-key": "k"})
    assert r.status_code == 200, r.text
    assert last_upstream(mock)["body"] == body
    assert r.headers["x-thinking-level-applied"] == "standard"  # (thinking on, a low effort)


def test_without_any_thinking_the_default_level_is_sent(mock: BackgroundServer) -> None:
    with proxy_for(mock, default_thinking_level="deep") as proxy:
        r = httpx.post(f"{proxy.url}/v1/messages", json=ask(), headers={**VERSION, "x-api-key": "k"})
    assert r.status_code == 200
    assert last_upstream(mock)["body"]["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert r.headers["x-thinking-level-applied"] == "deep"
    # The level's own numbers when the client sends none: standard, the API's minimum.
    with proxy_for(mock) as proxy:
        headers = {**VERSION, "x-api-key": "k", "x-thinking-level": "standard"}
        r = httpx.post(f"{proxy.url}/v1/messages", json=ask(), headers=headers)
    assert last_upstream(mock)["body"]["thinking"] == {"type": "enabled", "budget_tokens": 1024}


# -- signatures ---------------------------------------------------------------------------------------


def proxy_signed_turn(mock: BackgroundServer) -> list[dict[str, Any]]:
    """An assistant turn answered through the bridge (the simulated DeepSeek's chat API): its
    thinking block carries the proxy's sealed signature."""
    with BackgroundServer(
        create_app(
            make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", state="off"),
            table=simulated_table(mock.port),
        )
    ) as bridge:
        client = anthropic.Anthropic(base_url=bridge.url, api_key="k", max_retries=0, timeout=20)
        message = client.messages.create(
            model="deepseek-v4-pro",
            max_tokens=1024,
            thinking={"type": "enabled", "budget_tokens": 2048},
            tools=[WEATHER],  # type: ignore[list-item]
            messages=[{"role": "user", "content": "What's the weather in Paris? Use get_weather."}],
        )
    blocks = [b.model_dump(exclude_none=True) for b in message.content]
    assert blocks[0]["type"] == "thinking" and blocks[0]["signature"].startswith("tp1.")
    return blocks


def native_turn(proxy: BackgroundServer) -> list[dict[str, Any]]:
    """A first turn on the native upstream: its own signed thinking block and a tool_use."""
    body = ask(thinking={"type": "enabled", "budget_tokens": 2048}, tools=[WEATHER])
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={**VERSION, "x-api-key": "k"})
    content: list[dict[str, Any]] = r.json()["content"]
    assert [b["type"] for b in content] == ["thinking", "tool_use"]
    return content


def second_turn(assistant: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    return ask(
        thinking={"type": "enabled", "budget_tokens": 2048},
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": assistant},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "sunny"}],
            },
        ],
    )


def test_genuine_signatures_pass_untouched(mock: BackgroundServer, proxy: BackgroundServer) -> None:
    first = native_turn(proxy)
    body = second_turn(first, first[1]["id"])
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={**VERSION, "x-api-key": "k"})
    assert r.status_code == 200, r.text
    assert last_upstream(mock)["body"]["messages"][1]["content"] == first
    assert [b["type"] for b in r.json()["content"]] == ["thinking", "text"]


def test_thinking_blocks_the_proxy_signed_are_left_out_before_the_hop(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    """A conversation that began on a bridged upstream goes on natively: the proxy's `tp1.` blocks
    would fail the upstream's signature check, so they stay behind; the rest goes as it came."""
    bridged = proxy_signed_turn(mock)
    call = next(b for b in bridged if b["type"] == "tool_use")
    body = second_turn(bridged, call["id"])
    # The rule, straight to the simulated upstream: it refuses the proxy's signature.
    direct = httpx.post(f"{mock.url}/anthropic/v1/messages", json=body, headers={**VERSION, "x-api-key": "k"})
    assert (direct.status_code, direct.json()) == (400, INVALID)
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={**VERSION, "x-api-key": "k"})
    assert r.status_code == 200, r.text
    sent = last_upstream(mock)["body"]["messages"][1]["content"]
    assert sent == [b for b in bridged if b["type"] != "thinking"]
    # A native block beside a proxy one: only the proxy's goes.
    genuine = native_turn(proxy)
    mixed = second_turn([bridged[0], *genuine], genuine[1]["id"])
    r = httpx.post(f"{proxy.url}/v1/messages", json=mixed, headers={**VERSION, "x-api-key": "k"})
    assert r.status_code == 200, r.text
    assert last_upstream(mock)["body"]["messages"][1]["content"] == genuine


def test_a_signature_the_upstream_did_not_make_is_its_400_unchanged(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    first = native_turn(proxy)
    forged = [{**first[0], "signature": "RXJyb3I="}, first[1]]
    r = httpx.post(
        f"{proxy.url}/v1/messages",
        json=second_turn(forged, first[1]["id"]),
        headers={**VERSION, "x-api-key": "k"},
    )
    assert (r.status_code, r.json()) == (400, INVALID)


# -- keys, headers, errors, streams ------------------------------------------------------------------


def test_the_key_goes_as_x_api_key_with_the_anthropic_headers(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    beta = "interleaved-thinking-2025-05-14"
    headers = {**VERSION, "authorization": "Bearer sk-from-bearer", "anthropic-beta": beta}
    r = httpx.post(f"{proxy.url}/v1/messages?beta=true", json=ask(), headers=headers)
    assert r.status_code == 200
    record = last_upstream(mock)
    assert record["headers"]["x-api-key"] == "sk-…arer"
    assert "authorization" not in record["headers"]
    assert record["headers"]["anthropic-version"] == "2023-06-01"
    assert record["headers"]["anthropic-beta"] == beta
    assert record["query"] == "beta=true"


def test_gateway_mode_sends_the_upstream_key(mock: BackgroundServer) -> None:
    with proxy_for(mock, client_keys=["alice:ck-alice-1"], upstream_api_key="sk-upstream-key") as proxy:
        r = httpx.post(f"{proxy.url}/v1/messages", json=ask(), headers={**VERSION, "x-api-key": "ck-alice-1"})
    assert r.status_code == 200
    assert last_upstream(mock)["headers"]["x-api-key"] == "sk-…-key"


@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        ({"x-api-key": "k"}, 400, ("invalid_request_error", "anthropic-version: header is required")),
        (VERSION, 401, ("authentication_error", "x-api-key header is required")),
    ],
)
def test_upstream_errors_come_back_unchanged(
    mock: BackgroundServer,
    proxy: BackgroundServer,
    headers: dict[str, str],
    status: int,
    error: tuple[str, str],
) -> None:
    r = httpx.post(f"{proxy.url}/v1/messages", json=ask(), headers=headers)
    direct = httpx.post(f"{mock.url}/anthropic/v1/messages", json=ask(), headers=headers)
    assert r.status_code == direct.status_code == status
    assert r.content == direct.content
    assert r.json() == {"type": "error", "error": {"type": error[0], "message": error[1]}}


def test_a_stream_is_relayed_as_the_upstream_sent_it(proxy: BackgroundServer) -> None:
    client = anthropic.Anthropic(
        base_url=proxy.url,
        api_key="k",
        max_retries=0,
        timeout=20,
        default_headers={"x-thinking-level": "deep"},
    )
    with client.messages.stream(**ask(tools=[WEATHER])) as stream:  # type: ignore[arg-type]
        types = [event.type for event in stream]
        final = stream.get_final_message()
    assert types[:2] == ["message_start", "content_block_start"] and types[-1] == "message_stop"
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    thinking = final.content[0]
    assert thinking.type == "thinking" and not thinking.signature.startswith("tp1.")
    assert final.stop_reason == "tool_use"


def test_with_a_review_policy_a_native_call_is_refused(mock: BackgroundServer) -> None:
    """The review gate reads chat answers; a native answer would go around it."""
    with proxy_for(mock, review_tools=["get_weather"], reviewer_keys=["rev:rk-1"]) as proxy:
        r = httpx.post(
            f"{proxy.url}/v1/messages", json=ask(tools=[WEATHER]), headers={**VERSION, "x-api-key": "k"}
        )
    assert r.status_code == 403
    assert r.json()["type"] == "error"


# -- preserved thinking: Fable 5.1 and Opus 5.5 bind a thinking block to its prefix --------------------

FABLE = "claude-fable-5-1"
ADMIN = "ak-ops-46"
BINDING_BETA = "thinking-binding-controls-2026-08-01"


def member(raw: bytes, name: str) -> str:
    """A top-level member's value exactly as the body spells it."""
    text, decoder = raw.decode(), json.JSONDecoder()
    i = text.index("{") + 1
    while True:
        i = len(text) - len(text[i:].lstrip())
        key, i = decoder.raw_decode(text, i)
        i = text.index(":", i) + 1
        i = len(text) - len(text[i:].lstrip())
        end = decoder.raw_decode(text, i)[1]
        if key == name:
            return text[i:end]
        i = text.index(",", end) + 1


def fable_history(
    proxy: BackgroundServer, system: str = "Caf\u00e9 rules: answer in one line."
) -> dict[str, Any]:
    """A Fable 5.1 tool loop's second request: the first answer (its bound thinking block and a
    tool_use) sent back with the tool's result."""
    asked = "What's the weather in Paris? \u2014 briefly"
    first = {"model": FABLE, "max_tokens": 32000, "system": system, "tools": [WEATHER],
             "messages": [{"role": "user", "content": asked}]}  # fmt: skip
    r = httpx.post(f"{proxy.url}/v1/messages", json=first, headers={**VERSION, "x-api-key": "k"})
    assert r.status_code == 200, r.text
    content = r.json()["content"]
    assert [b["type"] for b in content] == ["thinking", "tool_use"]
    result = {"type": "tool_result", "tool_use_id": content[1]["id"], "content": "sunny"}
    return {**first, "messages": [*first["messages"], {"role": "assistant", "content": content},
                                  {"role": "user", "content": [result]}]}  # fmt: skip


def test_a_thinking_history_s_prefix_reaches_the_upstream_byte_for_byte(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    """The level changes `thinking` and `output_config`; `system`, `tools` and `messages` go as the
    client spelled them (its escapes, its spacing, its field order), not encoded anew."""
    body = fable_history(proxy)
    raw = json.dumps({"thinking": {"type": "adaptive"}, **body}, indent=2, ensure_ascii=True).encode()
    headers = {**VERSION, "x-api-key": "k", "x-thinking-level": "deep", "content-type": "application/json"}
    r = httpx.post(f"{proxy.url}/v1/messages", content=raw, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-applied"] == "deep"
    sent = httpx.get(f"{mock.url}/_mock/messages/raw").content
    assert json.loads(sent)["output_config"] == {"effort": "max"}
    for name in ("system", "tools", "messages"):
        assert member(sent, name) == member(raw, name)
    assert list(json.loads(sent)) == [*json.loads(raw), "output_config"]


def test_a_level_suffix_leaves_every_other_byte_as_it_came(
    mock: BackgroundServer, proxy: BackgroundServer
) -> None:
    """The model's `(level)` suffix is taken off the model alone: `system`, `tools` and `messages`
    go as the client spelled them, as with the level's header."""
    body = fable_history(proxy)
    raw = json.dumps({**body, "model": f"{FABLE}(deep)"}, indent=2, ensure_ascii=True).encode()
    headers = {**VERSION, "x-api-key": "k", "content-type": "application/json"}
    r = httpx.post(f"{proxy.url}/v1/messages", content=raw, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-source"] == "suffix"
    sent = httpx.get(f"{mock.url}/_mock/messages/raw").content
    assert json.loads(sent)["model"] == FABLE
    assert json.loads(sent)["output_config"] == {"effort": "max"}
    for name in ("system", "tools", "messages"):
        assert member(sent, name) == member(raw, name)
    assert member(sent, "model") == f'"{FABLE}"'


def test_the_simulated_upstream_enforces_the_binding(mock: BackgroundServer, proxy: BackgroundServer) -> None:
    """A changed prefix: Anthropic's 400 by default; with `drop_block` (and its beta) the block is
    dropped and listed in `input_transformations`."""
    body = fable_history(proxy)
    direct = f"{mock.url}/anthropic/v1/messages"
    assert httpx.post(direct, json=body, headers={**VERSION, "x-api-key": "k"}).status_code == 200
    changed = {**body, "system": "Rules rewritten by a harness."}
    r = httpx.post(direct, json=changed, headers={**VERSION, "x-api-key": "k"})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith(
        "messages.1.content.0: Invalid `signature` in `thinking` block. "
        "The block is bound to a different conversation."
    )
    dropping = {
        **changed,
        "thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
    }
    assert (
        httpx.post(direct, json=dropping, headers={**VERSION, "x-api-key": "k"}).status_code == 400
    )  # (no beta)
    r = httpx.post(
        direct, json=dropping, headers={**VERSION, "x-api-key": "k", "anthropic-beta": BINDING_BETA}
    )
    assert r.status_code == 200, r.text
    assert [t["type"] for t in r.json()["input_transformations"]] == ["thinking_dropped"]


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_the_upstream_dropped_is_a_warning_and_a_console_flag(
    mock: BackgroundServer, stream: bool
) -> None:
    """`thinking.block_binding` and the beta go on as they came; the answer's
    `input_transformations` come back untouched, and the blocks dropped are counted on the
    request's console row and told in a `warning` trace event (code `thinking_dropped`)."""
    with proxy_for(mock, ui=True, admin_keys=[ADMIN]) as proxy:
        body = fable_history(proxy)
        binding = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
        changed = {**body, "system": "Rules rewritten by a harness.", "thinking": binding, "stream": stream}
        headers = {**VERSION, "x-api-key": "k", "anthropic-beta": BINDING_BETA}
        r = httpx.post(f"{proxy.url}/v1/messages", json=changed, headers=headers)
        assert r.status_code == 200, r.text
        assert (b'"type":"thinking_dropped"' in r.content) is True
        record = last_upstream(mock)
        assert record["body"]["thinking"] == binding and record["headers"]["anthropic-beta"] == BINDING_BETA
        listing = httpx.get(f"{proxy.url}/thinkproxy/requests", headers={"authorization": f"Bearer {ADMIN}"})
    entry = listing.json()["data"][0]
    assert entry["route"] == "messages" and entry["thinking_dropped"] == 1
    warning = next(e for e in entry["events"] if e["type"] == "warning")
    assert warning["code"] == "thinking_dropped" and warning["count"] == 1


# -- DeepSeek's Anthropic endpoint: Claude Code's sub-agents ----------------------------------------------

DEEPSEEK_400 = {
    "error": {
        "message": "thinking options type cannot be disabled when reasoning_effort is set",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
}


def test_claude_code_s_sub_agent_request_reaches_deepseek_as_off(mock: BackgroundServer) -> None:
    """Claude Code ≥ 2.1.166 sends its sub-agents `thinking: {type: disabled}` beside the session's
    effort; DeepSeek refuses the pair (DeepSeek-V3#1397). The request means off: one knob goes,
    the effort stays behind (the rest of `output_config` goes on)."""
    schema = {"type": "json_schema", "schema": {"type": "object"}}
    body = ask(model="deepseek-v4-pro", thinking={"type": "disabled"},
               output_config={"effort": "max", "format": schema})  # fmt: skip
    headers = {**VERSION, "x-api-key": "sk-ds"}
    direct = httpx.post(f"{mock.url}/ds-anthropic/v1/messages", json=body, headers=headers)
    assert (direct.status_code, direct.json()) == (400, DEEPSEEK_400)
    with proxy_for(mock, chat="dsnative") as proxy:
        r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers)
        assert r.status_code == 200, r.text
        sent = last_upstream(mock)["body"]
        assert sent["thinking"] == {"type": "disabled"} and sent["output_config"] == {"format": schema}
        assert r.headers["x-thinking-level-applied"] == "off"
        # With the level header the entry's own off goes, as before.
        r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={**headers, "x-thinking-level": "off"})
        assert r.status_code == 200, r.text
        assert "effort" not in last_upstream(mock)["body"].get("output_config", {})


# -- Claude Opus 5.5 and Fable 5.1: thinking always on ---------------------------------------------------

OPUS_55 = "claude-opus-5-5"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"headers": {"x-thinking-level": "off"}}, "off not applied"),
        ({"thinking": {"type": "disabled"}}, "off not applied"),
        ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "budget_tokens not applied"),
    ],
)
def test_an_off_or_a_budget_asked_of_a_model_that_always_thinks_is_said_not_applied(
    mock: BackgroundServer, proxy: BackgroundServer, extra: dict[str, Any], reason: str
) -> None:
    """Opus 5.5 refuses thinking off and a budget (its 400, straight from the simulated upstream);
    through the proxy the request goes with adaptive thinking and the response says what was not
    applied and why — never silently."""
    headers = {**VERSION, "x-api-key": "k", **extra.pop("headers", {})}
    body = ask(model=OPUS_55, **extra)
    if "thinking" in extra:
        direct = httpx.post(f"{mock.url}/anthropic/v1/messages", json=body, headers=headers)
        assert (
            direct.status_code == 400
            and "is not supported for this model" in direct.json()["error"]["message"]
        )
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-reason"].startswith(reason)
    sent = last_upstream(mock)["body"]
    assert sent.get("thinking", {"type": "adaptive"}) == {"type": "adaptive"}
    # (the header's off: nothing sent, the model's default; the client's own: adaptive, sent as such)
    applied = "none" if "x-thinking-level" in headers else "standard"
    assert r.headers["x-thinking-level-applied"] == applied


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_forced_tool_use_on_a_model_that_always_thinks_is_refused_before_the_upstream(
    mock: BackgroundServer, proxy: BackgroundServer, choice: dict[str, Any]
) -> None:
    body = ask(model=OPUS_55, tools=[WEATHER], tool_choice=choice)
    headers = {**VERSION, "x-api-key": "k"}
    assert httpx.post(f"{mock.url}/anthropic/v1/messages", json=body, headers=headers).status_code == 400
    before = upstream_log(mock)
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers)
    assert r.status_code == 400
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "forces tool use" in error["error"]["message"] and "tool_choice auto" in error["error"]["message"]
    assert upstream_log(mock) == before  # (nothing went upstream)
    # Auto is the model's own choice: it goes.
    r = httpx.post(
        f"{proxy.url}/v1/messages", json={**body, "tool_choice": {"type": "auto"}}, headers=headers
    )
    assert r.status_code == 200, r.text
