"""Thought signatures a history must carry and does not: Gemini 3's `skip_thought_signature_validator`.

Pure. Gemini 3 answers 400 "Function call is missing a thought_signature in functionCall parts"
when the first function call of a step of the current turn (an assistant message after the last
user message) comes back without `extra_content.google.thought_signature`. A history Gemini did
not produce (another provider's turns, a hand-built transcript) has none to give, nor has a client
that dropped it when the replay store remembers none; for those Google documents a value the
validator accepts in place of a signature (ai.google.dev/gemini-api/docs/thought-signatures).
A real signature is never replaced, and only the calls Gemini checks get the placeholder.
"""

from __future__ import annotations

from typing import Any

from proxy.core.replay.policy import SKIP_SIGNATURE


def with_skipped_signatures(messages: list[Any]) -> list[Any]:
    """`messages` with the placeholder signature on the first tool call of each assistant message
    after the last user message that lacks one (the same list when none does)."""
    start = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            start = index + 1
            break
    out: list[Any] | None = None
    for index in range(start, len(messages)):
        message = messages[index]
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            continue
        first = calls[0]
        if _signature(first):
            continue
        if out is None:
            out = list(messages)
        out[index] = {**message, "tool_calls": [_signed(first), *calls[1:]]}
    return messages if out is None else out


def _signature(call: dict[str, Any]) -> Any:
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    return google.get("thought_signature") if isinstance(google, dict) else None


def _signed(call: dict[str, Any]) -> dict[str, Any]:
    extra = call.get("extra_content")
    extra = dict(extra) if isinstance(extra, dict) else {}
    google = extra.get("google")
    extra["google"] = {**(google if isinstance(google, dict) else {}), "thought_signature": SKIP_SIGNATURE}
    return {**call, "extra_content": extra}
