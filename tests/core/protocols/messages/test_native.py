"""The native Messages door's values: the level in Anthropic's own fields, the proxy's thinking
blocks left out, the key as x-api-key; and providers.yaml's `messages:` rule."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.config.front_door_rules import MessagesRule
from proxy.core.config.providers import ProvidersTable
from proxy.core.controls import Level
from proxy.core.errors import BadRequest, ConfigError
from proxy.core.protocols.messages.native import (
    LEVEL_REASON_HEADER,
    model_rules,
    native_body,
    native_headers,
    strip_proxy_thinking,
)

RULE = MessagesRule(
    mode="native",
    docs="https://platform.claude.com/docs/en/build-with-claude/adaptive-thinking",
    levels={
        "off": {"thinking": {"type": "disabled"}},
        "standard": {"thinking": {"type": "adaptive"}},
        "deep": {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}},
    },
)
BODY: dict[str, Any] = {
    "model": "claude-opus-4-7",
    "max_tokens": 100,
    "thinking": {"type": "enabled", "budget_tokens": 20000},
    "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {}}},
    "messages": [],
}


def test_the_header_s_level_replaces_the_client_s_thinking_and_effort() -> None:
    out, applied = native_body(BODY, Level.DEEP, RULE, header=True)
    assert applied is Level.DEEP and out is not None
    assert out["thinking"] == {"type": "adaptive"}
    assert out["output_config"] == {"format": BODY["output_config"]["format"], "effort": "max"}
    off, applied = native_body(BODY, Level.OFF, RULE, header=True)
    assert applied is Level.OFF and off is not None
    assert off["thinking"] == {"type": "disabled"} and off["output_config"] == {
        "format": {"type": "json_schema", "schema": {}}
    }
    assert BODY["thinking"]["type"] == "enabled"  # (the client's body is not changed in place)


def test_the_client_s_budget_replaces_the_level_s_number_where_it_has_one() -> None:
    rule = MessagesRule(
        mode="native",
        docs="https://x.example/docs",
        levels={"deep": {"thinking": {"type": "enabled", "budget_tokens": 16384}}},
    )
    out, _ = native_body(BODY, Level.DEEP, rule, header=True)
    assert out is not None and out["thinking"] == {"type": "enabled", "budget_tokens": 20000}
    out, _ = native_body(BODY, Level.DEEP, RULE, header=True)
    assert out is not None and out["thinking"] == {"type": "adaptive"}  # (never invented)


def test_a_level_the_entry_does_not_offer_removes_the_client_s_fields_and_applies_none() -> None:
    rule = MessagesRule(
        mode="native", docs="https://x.example/docs", levels={"deep": {"thinking": {"type": "adaptive"}}}
    )
    out, applied = native_body(
        {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}, Level.OFF, rule, header=True
    )
    assert (out, applied) == ({}, None)


def test_without_the_header_the_client_s_thinking_names_the_level() -> None:
    assert native_body(BODY, Level.OFF, RULE, header=False) == (None, Level.DEEP)
    adaptive = {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}
    assert native_body(adaptive, None, RULE, header=False) == (None, Level.STANDARD)
    assert native_body({"thinking": {"type": "odd"}}, None, RULE, header=False) == (None, None)
    # No thinking sent: the default level applies.
    out, applied = native_body({"model": "m"}, Level.STANDARD, RULE, header=False)
    assert out == {"model": "m", "thinking": {"type": "adaptive"}} and applied is Level.STANDARD
    assert native_body({"model": "m"}, None, RULE, header=False) == (None, None)


DEEPSEEK = RULE.model_copy(update={"effort_needs_thinking": True})
ALWAYS = MessagesRule(
    mode="native",
    docs="https://platform.claude.com/docs/en/models/opus-5-5/whats-new-opus-5-5",
    always_thinks=True,
    levels={"standard": {"thinking": {"type": "adaptive"}}},
)


def test_thinking_off_goes_without_an_effort_where_the_upstream_refuses_the_pair() -> None:
    body = {**BODY, "thinking": {"type": "disabled"}}
    out, applied = native_body(body, None, DEEPSEEK, header=False)
    assert applied is Level.OFF and out is not None
    assert (
        out["output_config"] == {"format": BODY["output_config"]["format"]}
        and out["messages"] is BODY["messages"]
    )
    assert native_body(body, None, RULE, header=False) == (None, Level.OFF)  # (Anthropic takes the pair)
    out, _ = native_body({**body, "output_config": {"effort": "max"}}, None, DEEPSEEK, header=False)
    assert out is not None and "output_config" not in out


def test_a_model_that_always_thinks_gets_adaptive_thinking_and_says_what_was_not_applied() -> None:
    binding = {"prefix_mismatch_behavior": "drop_block"}
    body = {**BODY, "model": "claude-opus-5-5", "thinking": {"type": "disabled", "block_binding": binding}}
    out, applied = native_body(body, None, ALWAYS, header=False)
    assert out is not None and out["thinking"] == {"type": "adaptive", "block_binding": binding}
    assert applied is Level.STANDARD  # (adaptive at the client's low effort)
    [(name, reason)] = model_rules(body, None, ALWAYS, header=False)
    assert name == LEVEL_REASON_HEADER and reason.startswith("off not applied: claude-opus-5-5 always thinks")
    assert model_rules({**body, "thinking": {"type": "adaptive"}}, None, ALWAYS, header=False) == []
    assert model_rules(body, Level.OFF, ALWAYS, header=True)[0][1].startswith("off not applied")
    assert model_rules(body, None, RULE, header=False) == []  # (a model that can turn it off)


def test_forced_tool_use_on_a_model_that_always_thinks_is_refused() -> None:
    body = {**BODY, "model": "claude-fable-5-1", "tool_choice": {"type": "tool", "name": "w"}}
    with pytest.raises(BadRequest) as refused:
        model_rules(body, None, ALWAYS, header=False)
    assert refused.value.param == "tool_choice" and "claude-fable-5-1 refuses" in str(refused.value)


def test_only_thinking_blocks_the_proxy_signed_are_left_out() -> None:
    ours = {"type": "thinking", "thinking": "", "signature": "tp1.AAAA"}
    theirs = {"type": "thinking", "thinking": "t", "signature": "RXJyb3I="}
    call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [ours, theirs, call]},
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "tp1.x"}]},
        ]
    }
    out, removed = strip_proxy_thinking(body)
    assert removed == 1 and out is not None
    assert out["messages"][1]["content"] == [theirs, call]
    assert out["messages"][0] == body["messages"][0] and out["messages"][2] == body["messages"][2]
    assert strip_proxy_thinking({"messages": [{"role": "assistant", "content": [theirs]}]}) == (None, 0)


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ([("x-api-key", "sk-a"), ("authorization", "Bearer other")], "sk-a"),
        ([("Authorization", "Bearer sk-b")], "sk-b"),
        ([("authorization", "sk-c")], "sk-c"),
    ],
)
def test_the_key_goes_as_x_api_key(headers: list[tuple[str, str]], key: str) -> None:
    out = native_headers([*headers, ("anthropic-version", "2023-06-01")])
    assert out == [("x-api-key", key), ("anthropic-version", "2023-06-01")]


def test_the_endpoint_is_the_base_url_s_or_the_chat_base_s() -> None:
    assert RULE.url("https://api.example.com/v1") == "https://api.example.com/v1/messages"
    assert RULE.url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1/messages"
    based = MessagesRule(
        mode="native", docs="https://d.example", base_url="https://api.deepseek.com/anthropic/"
    )
    assert based.url("https://api.deepseek.com/v1") == "https://api.deepseek.com/anthropic/v1/messages"


ENTRY = (
    "providers:\n  fallback: {docs: 'https://f.example', match: ['*'], levels: {}, conflicts: [],"
    " reasoning: {tags: []}, replay: {mode: strip}, messages: %s}\n"
)


@pytest.mark.parametrize(
    ("rule", "fault"),
    [
        ("{mode: native}", "mode native needs docs"),
        ("{mode: native, docs: 'https://d.example', base_url: 'ftp://x'}", "is not an http\\(s\\) URL"),
        (
            "{mode: native, docs: 'https://d.example', levels: {deep: {reasoning_effort: high}}}",
            "writes only",
        ),
        (
            "{mode: native, docs: 'https://d.example', levels: {deep: {output_config: {format: 1}}}}",
            "writes only",
        ),
        ("{mode: native, docs: 'https://d.example', effort: {deep: high}}", "extra"),
    ],
)
def test_the_rule_is_checked_at_load(rule: str, fault: str) -> None:
    with pytest.raises(ConfigError, match=fault):
        ProvidersTable.from_text(ENTRY % rule)


def test_the_shipped_table_marks_anthropic_native_and_the_rest_bridged() -> None:
    """DeepSeek's native endpoint is configured but bridged: bridged, its Messages clients keep the
    trace, the review gate and normalized reasoning (one word makes it native)."""
    table = ProvidersTable.load()
    native = {
        s.name for s in table.summaries() for d in (s.dialect, *s.overrides) if d.messages.mode == "native"
    }
    assert native == {"anthropic"}
    deepseek = table.match("https://api.deepseek.com", "deepseek-v4-pro").messages
    assert deepseek.mode == "bridge"
    assert deepseek.url("https://api.deepseek.com") == "https://api.deepseek.com/anthropic/v1/messages"
    claude = table.match("https://api.anthropic.com/v1", "claude-opus-4-7").messages
    assert claude.url("https://api.anthropic.com/v1") == "https://api.anthropic.com/v1/messages"
    assert claude.fields_for(Level.DEEP) == {
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "max"},
    }
    assert table.with_messages_bridged("deepseek").match("https://api.deepseek.com").messages.mode == "bridge"
