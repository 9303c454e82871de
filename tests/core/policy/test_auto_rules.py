"""The auto rules (proxy.core.policy.auto_rules): each condition, first match wins, the built-in
rules, and the rules' view of a request — the last *user* message in each door's shape, so a
tool-result request of a turn gets the level of the turn's first request."""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy.core.controls import Level
from proxy.core.policy.auto_rules import (
    BUILT_IN,
    SCAN_CHARS,
    Features,
    choose,
    client_kind,
    features_of,
    last_user_text,
    make_rule,
)

DEEP, STANDARD, OFF = Level.DEEP, Level.STANDARD, Level.OFF


@pytest.mark.parametrize(
    ("when", "holds", "fails"),
    [
        ({"last_user_chars": {"over": 5}}, Features("123456"), Features("12345")),
        ({"last_user_chars": {"under": 5}}, Features("1234"), Features("12345")),
        ({"last_user_chars": {"over": 2, "under": 5}}, Features("123"), Features("12")),
        ({"contains": ["prove", r"\bwhy\b"]}, Features("Why not?"), Features("anywhy")),
        ({"tools": True}, Features(tools=True), Features(tools=False)),
        ({"tools": False}, Features(tools=False), Features(tools=True)),
        ({"model": "deepseek-*"}, Features(model="deepseek-v4-pro"), Features(model="kimi-k3")),
        ({"door": ["responses", "messages"]}, Features(door="messages"), Features(door="chat")),
        ({"client": "claude-*"}, Features(client="claude-code"), Features(client="codex")),
        # Every condition must hold.
        (
            {"tools": True, "model": "k*"},
            Features(tools=True, model="kimi"),
            Features(tools=True, model="ds"),
        ),
    ],
)
def test_each_condition(when: dict[str, Any], holds: Features, fails: Features) -> None:
    rule = make_rule(1, DEEP, when)
    assert rule.holds(holds)
    assert not rule.holds(fails)


def test_the_first_rule_that_holds_chooses_and_is_named() -> None:
    rules = (
        make_rule(1, DEEP, {"contains": ["prove"]}),
        make_rule(2, OFF, {"last_user_chars": {"under": 10}}),
        make_rule(3, STANDARD, None),
    )
    assert choose(rules, Features("prove it")) == (DEEP, "auto[1]: contains prove -> deep")
    assert choose(rules, Features("hi")) == (OFF, "auto[2]: last_user_chars under 10 -> off")
    assert choose(rules, Features("a longer question")) == (STANDARD, "auto[3]: otherwise -> standard")
    # A file whose rules all have conditions, none holding: standard.
    assert choose(rules[:1], Features("hi")) == (STANDARD, "auto: no rule held -> standard")


def test_contains_searches_a_bounded_head_of_the_message() -> None:
    rule = make_rule(1, DEEP, {"contains": ["needle"]})
    assert rule.holds(Features("x" * (SCAN_CHARS - 6) + "needle"))
    assert not rule.holds(Features("x" * SCAN_CHARS + "needle"))


def test_a_pattern_that_does_not_compile_is_named() -> None:
    with pytest.raises(ValueError, match=r"'\(' is not a regular expression"):
        make_rule(1, DEEP, {"contains": ["("]})


@pytest.mark.parametrize("pattern", [r"(\w+\s?)+$", r"(a+)+", r"(a|aa)*b", r"(a)\1"])
def test_a_pattern_that_could_backtrack_without_bound_is_refused(pattern: str) -> None:
    r"""SCAN_CHARS bounds the text, not a backtracking pattern's time (`(\w+\s?)+$` against 22
    letters and a `!` takes most of a second, twice that per letter more)."""
    with pytest.raises(ValueError, match=re.escape(f"{pattern!r} could take unbounded time on a message: ")):
        make_rule(1, DEEP, {"contains": ["ordinary", pattern]})
    assert make_rule(1, DEEP, {"contains": [r"\bprove\b", r"(foo|bar)+", r"(?:\w++\s?)+"]}).contains


@pytest.mark.parametrize(
    ("text", "tools", "level"),
    [
        ("Please refactor the parser", True, DEEP),  # words that ask for careful work
        ("Why does this deadlock? Find the root cause.", False, DEEP),
        ("x" * 2001, True, DEEP),  # a long, detailed request
        ("thanks!", False, OFF),  # a short remark with no tools: no thinking
        ("fix the tests", True, STANDARD),  # short, but an agent's task (tools)
        ("Summarise this paragraph about the weather in Paris in three lines, please. " * 3, False, STANDARD),
    ],
)
def test_the_built_in_rules(text: str, tools: bool, level: Level) -> None:
    assert choose(BUILT_IN, Features(text, tools))[0] is level


# -- the last user message, per shape: a tool loop keeps its turn's level ----------------------------

TOOLS = [{"type": "function", "function": {"name": "read"}}]
ASK = "Please refactor the parser"


def test_chat_a_tool_result_turn_reads_the_users_message() -> None:
    first = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": ASK}]}
    loop = {
        "messages": [
            *first["messages"],
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "x" * 5000},
        ]
    }
    assert last_user_text("chat", first) == last_user_text("chat", loop) == ASK
    content = [{"type": "text", "text": "a"}, {"type": "image_url"}]
    parts = {"messages": [{"role": "user", "content": content}]}
    assert last_user_text("chat", parts) == "a"


def test_responses_a_function_call_output_is_not_the_user() -> None:
    assert last_user_text("responses", {"input": ASK}) == ASK
    first = {"input": [{"role": "user", "content": [{"type": "input_text", "text": ASK}]}]}
    loop = {
        "input": [
            *first["input"],
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x" * 5000},
        ]
    }
    assert last_user_text("responses", first) == last_user_text("responses", loop) == ASK
    typed = {"input": [{"role": "user", "content": ASK, "type": "message"}]}
    assert last_user_text("responses", typed) == ASK


def test_messages_a_tool_result_message_is_not_the_user() -> None:
    first = {"messages": [{"role": "user", "content": ASK}]}
    loop = {
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x" * 50}]},
        ]
    }
    assert last_user_text("messages", first) == last_user_text("messages", loop) == ASK
    # A user message with a tool result and words of its own is the user speaking.
    content = [{"type": "tool_result"}, {"type": "text", "text": "b"}]
    mixed = {"messages": [{"role": "user", "content": content}]}
    assert last_user_text("messages", mixed) == "b"


def test_features_read_tools_and_carry_the_rest() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    assert features_of("chat", "messages", body, "m", "claude-code") == Features(
        "hi", True, "m", "messages", "claude-code"
    )
    assert not features_of("chat", "chat", {"tools": []}, "m", "").tools


@pytest.mark.parametrize(
    ("headers", "kind"),
    [
        ([("X-Claude-Code-Session-Id", "s"), ("user-agent", "x")], "claude-code"),
        ([("user-agent", "claude-cli/2.1.332 (external, sdk-cli)")], "claude-code"),
        ([("originator", "codex_exec"), ("user-agent", "codex_exec/0.171.0")], "codex"),
        ([("user-agent", "codex_cli_rs/0.1")], "codex"),
        ([("user-agent", "OpenAI/Python 3.63.0")], "openai"),
        ([("user-agent", "curl/7.88.1")], "curl"),
        ([], ""),
    ],
)
def test_client_kind(headers: list[tuple[str, str]], kind: str) -> None:
    assert client_kind(headers) == kind
