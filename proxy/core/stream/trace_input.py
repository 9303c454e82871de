"""What the trace builder reads out of a request and a completion besides the stream itself: the
first choice, the tool results a request answers, a whole completion as the chunks its stream
would have carried, and the upstream's usage as it can be written.

Separate from the trace builder (proxy.core.stream.trace), whose state machine sees only chunks:
these read whole OpenAI bodies, leniently (any field may be missing or of another type).
"""

from __future__ import annotations

from typing import Any

from proxy.core.jsonio import deeper_than
from proxy.core.stream.tool_args import MAX_NAME_CHARS

# Entries of the upstream's `usage` nested deeper than this (no real usage is) are left out of `done`.
MAX_USAGE_DEPTH = 16


def first_choice(choices: Any) -> dict[str, Any] | None:
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


def writable_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """The upstream's usage, minus entries nested deeper than any real usage (the encoder's limit)."""
    if _two_levels(usage) or not deeper_than(usage, MAX_USAGE_DEPTH):
        return usage
    return {k: v for k, v in usage.items() if not deeper_than(v, MAX_USAGE_DEPTH - 1)}


def _two_levels(usage: dict[str, Any]) -> bool:
    """Whether `usage` nests no deeper than its details objects (every real usage): the quick
    answer before the general walk."""
    for value in usage.values():
        if type(value) is dict:
            for inner in value.values():
                if type(inner) is dict or type(inner) is list:
                    return False
        elif type(value) is list:
            return False
    return True


def answered_tool_calls(messages: Any) -> list[tuple[str, str, Any]]:
    """(id, name, content) for each `role: tool` message answering the last assistant tool call turn."""
    if not isinstance(messages, list):
        return []
    last = -1
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "assistant" and message.get("tool_calls"):
            last = i
    if last < 0:
        return []
    names: dict[str, str] = {}
    calls = messages[last].get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict) and isinstance(call.get("id"), str):
            function = call.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            names[call["id"]] = name[:MAX_NAME_CHARS] if isinstance(name, str) and name else "unknown"
    answered = []
    for message in messages[last + 1 :]:
        if not isinstance(message, dict) or message.get("role") != "tool":
            continue
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str) and call_id in names:
            answered.append((call_id, names[call_id], message.get("content")))
    return answered


def completion_as_chunks(body: dict[str, Any], reasoning: bool) -> list[tuple[dict[str, Any], bool]]:
    """The chunk sequence a stream of this completion would carry: reasoning, content, tools, end."""
    choice = first_choice(body.get("choices"))
    message = choice.get("message") if choice is not None else None
    if not isinstance(message, dict):
        message = {}
    chunks: list[tuple[dict[str, Any], bool]] = []
    if reasoning or message.get("reasoning_content") or message.get("reasoning"):
        chunks.append(({"choices": [{"index": 0, "delta": {}}]}, True))
    if message.get("content"):
        chunks.append(({"choices": [{"index": 0, "delta": {"content": message["content"]}}]}, False))
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list) and tool_calls:
        fragments = [
            {"index": i, **call} if isinstance(call, dict) and "index" not in call else call
            for i, call in enumerate(tool_calls)
        ]
        chunks.append(({"choices": [{"index": 0, "delta": {"tool_calls": fragments}}]}, False))
    finish_reason = choice.get("finish_reason") if choice is not None else None
    end: dict[str, Any] = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]}
    if isinstance(body.get("usage"), dict):
        end["usage"] = body["usage"]
    chunks.append((end, False))
    return chunks
