"""Readers for the thinking knobs several providers share: effort words, `thinking.type`, budgets,
and the reasoning-replay rule on earlier tool-call turns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.mock.dialects.base import DEEP_BUDGET_TOKENS
from proxy.mock.scenarios import Depth


def lower(value: Any) -> str | None:
    return value.strip().lower() if isinstance(value, str) else None


def effort_depth(value: Any) -> Depth | None:
    """A `reasoning_effort`-style word as a depth; None when no word is given."""
    effort = lower(value)
    if effort is None:
        return None
    if effort == "none":
        return Depth.NONE
    if effort in ("high", "xhigh", "max"):
        return Depth.DEEP
    return Depth.STANDARD


def budget_depth(budget: Any) -> Depth:
    """A thinking token budget as a depth: large budgets think deeply, anything else normally."""
    return Depth.DEEP if isinstance(budget, int) and budget >= DEEP_BUDGET_TOKENS else Depth.STANDARD


def thinking_type(body: Mapping[str, Any]) -> str | None:
    thinking = body.get("thinking")
    return lower(thinking.get("type")) if isinstance(thinking, dict) else None


def last_user_index(messages: list[Any]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return index
    return -1


def missing_replay(body: Mapping[str, Any], *, current_round_only: bool = False) -> int | None:
    """Index of the first assistant tool-call message that does not carry its reasoning_content back
    (absent or null; an empty string counts as carried). `current_round_only`: only messages after
    the last user message count (DeepSeek ignores earlier rounds)."""
    messages = body.get("messages")
    items = messages if isinstance(messages, list) else []
    start = last_user_index(items) + 1 if current_round_only else 0
    for index, message in enumerate(items):
        if index < start:
            continue
        if (
            isinstance(message, dict)
            and message.get("role") == "assistant"
            and message.get("tool_calls")
            and message.get("reasoning_content") is None
        ):
            return index
    return None
