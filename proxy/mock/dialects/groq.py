"""Groq's wire shape (api.groq.com/openai/v1), and its strict reading of assistant messages.

Groq's reasoning models answer with `message.reasoning` / `delta.reasoning` (`reasoning_format:
parsed`, the default for gpt-oss: https://console.groq.com/docs/reasoning). Its request schema
allows no property it does not know on an assistant message, reasoning fields included, and says
so with a 400 naming the message. The bodies, as clients report them:

- `reasoning_content`: `{"error":{"message":"'messages.4' : for 'role:assistant' the following
  must be satisfied[('messages.4' : property 'reasoning_content' is unsupported)]","type":
  "invalid_request_error"}}` (github.com/NousResearch/hermes-agent/issues/11089, with gpt-oss and
  llama-4-scout; github.com/janhq/jan/issues/8136);
- `reasoning`: the same sentence with `property 'reasoning' is unsupported, did you mean 'role'?`
  (github.com/karthink/gptel/issues/774).

`reasoning_details` gets the first form (no report of its exact wording was found: the schema
rule is the same). The first offending message is named, as the schema check stops there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Dialect, Rejection, Turn, tool_call_items
from proxy.mock.scenarios import Depth, Script

# What Groq suggests for a property it does not know (its schema check's "did you mean").
_SUGGESTION = {"reasoning": "role"}
_REFUSED = ("reasoning_content", "reasoning", "reasoning_details")


def unsupported(index: int, name: str) -> str:
    hint = f", did you mean '{_SUGGESTION[name]}'?" if name in _SUGGESTION else ""
    where = f"'messages.{index}'"
    return (
        f"{where} : for 'role:assistant' the following must be satisfied"
        f"[({where} : property '{name}' is unsupported{hint})]"
    )


class Groq(Dialect):
    """Groq: `reasoning` next to content, and a 400 for any reasoning field in the history."""

    name = "groq"
    default_model = "openai/gpt-oss-120b"
    models = ("openai/gpt-oss-120b", "openai/gpt-oss-20b", "qwen/qwen3-32b")
    owned_by = "Groq"
    sample_400 = unsupported(1, "reasoning_content")

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        messages = body.get("messages")
        for index, message in enumerate(messages if isinstance(messages, list) else ()):
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            for name in _REFUSED:
                if name in message:
                    return Rejection(400, self.error_body(unsupported(index, name)))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON:
        return {"reasoning": text}

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": script.content or None}
        if turn.thinking and script.reasoning:
            message["reasoning"] = script.reasoning
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message
