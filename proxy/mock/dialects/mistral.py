"""Mistral's wire shape (Magistral reasoning models and the newer reasoning_effort switch)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Counts, Dialect, Turn, hex_id, tool_call_items
from proxy.mock.dialects.knobs import lower
from proxy.mock.scenarios import Depth, Script


def _thinking_part(text: str) -> JSON:
    return {"type": "thinking", "thinking": [{"type": "text", "text": text}]}


class Mistral(Dialect):
    """Mistral (Magistral): thinking as content arrays of `thinking` parts, then plain strings;
    usage on the last chunk."""

    name = "mistral"
    default_model = "magistral-medium-latest"
    models = ("magistral-medium-latest", "magistral-small-latest", "mistral-medium-latest")
    owned_by = "mistralai"
    sample_400 = "Invalid reasoning_effort: expected 'none' or 'high'."
    logprobs = False
    usage_chunk = False  # Mistral always puts usage on its final chunk instead

    def depth(self, body: Mapping[str, Any]) -> Depth:
        # Magistral always thinks; newer models take reasoning_effort as a switch: "high" turns
        # thinking on (there is no deeper setting), "none" or nothing leaves it off.
        if str(body.get("model", self.default_model)).lower().startswith("magistral"):
            return Depth.STANDARD
        return Depth.STANDARD if lower(body.get("reasoning_effort")) == "high" else Depth.NONE

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {
                "object": "error",
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": code,
            }
        )

    def new_id(self, created: int) -> str:
        return hex_id()

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON:
        return {"content": [_thinking_part(text)]}

    def finish_delta(self, turn: Turn) -> JSON:
        return {"content": ""}

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        return {**super().final_chunk(turn, script, counts), "usage": self.usage(counts)}

    def usage(self, counts: Counts) -> JSON:
        return {
            "prompt_tokens": counts.prompt,
            "total_tokens": counts.total,
            "completion_tokens": counts.completion,
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        content: Any = script.content
        if turn.thinking and script.reasoning:
            content = [_thinking_part(script.reasoning), {"type": "text", "text": script.content}]
        calls = tool_call_items(script.tool_calls) if script.tool_calls else None
        return {"role": "assistant", "tool_calls": calls, "content": content}
