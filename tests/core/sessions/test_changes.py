"""What the proxy changed in a body, as sessions and the console show it: knob names with short
values, injected and changed messages by role and key — never their text."""

from __future__ import annotations

import orjson

from proxy.core.sessions.changes import body_changes

SECRET = "the user's private words"


def test_knobs_set_changed_removed_with_short_values_only() -> None:
    before = {
        "model": "m",
        "reasoning_effort": "low",
        "temperature": 0.2,
        "tools": [{"name": SECRET}],
        "n": 1,
    }
    after = {
        "model": "m",
        "reasoning_effort": "high",
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "other"}],
        "n": 1,
    }
    changes = body_changes(before, after)
    assert {"field": "reasoning_effort", "change": "changed", "from": "low", "to": "high"} in changes
    assert {"field": "thinking", "change": "set", "summary": "type=enabled, budget_tokens=1024"} in changes
    assert {"field": "temperature", "change": "removed", "from": 0.2} in changes
    assert {"field": "tools", "change": "changed"} in changes
    assert SECRET not in orjson.dumps(changes).decode()


def test_injected_and_changed_messages_by_role_never_their_text() -> None:
    user = {"role": "user", "content": SECRET}
    assistant = {"role": "assistant", "content": "answer", "reasoning_content": SECRET}
    before = {"messages": [assistant, user]}
    stripped = {"role": "assistant", "content": "answer"}
    after = {"messages": [{"role": "system", "content": SECRET}, stripped, user]}
    changes = body_changes(before, after)
    assert changes == [
        {"field": "messages", "change": "injected", "summary": "1 system message"},
        {"field": "messages", "change": "changed", "summary": "reasoning_content removed in 1 message(s)"},
    ]
    assert SECRET not in orjson.dumps(changes).decode()


def test_nothing_changed_is_an_empty_list() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert body_changes(body, dict(body)) == []
