"""Gemini's OpenAI-compatible endpoint (generativelanguage.googleapis.com/v1beta/openai)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Dialect, Rejection, Turn, tool_call_items
from proxy.mock.dialects.knobs import effort_depth, last_user_index
from proxy.mock.scenarios import Depth, Script

DOCS = "https://ai.google.dev/gemini-api/docs/thought-signatures"


def thought_signature(call_id: str) -> str:
    """The opaque signature the mock attaches to a function call (deterministic per call id)."""
    return base64.b64encode(hashlib.sha256(b"gemini-thought:" + call_id.encode()).digest()).decode()


def _missing_signature_message(name: str, position: int) -> str:
    return (
        "Function call is missing a thought_signature in functionCall parts. This is required for "
        "tools to work correctly, and missing thought_signature may lead to degraded model "
        f"performance. Additional data, function call `default_api:{name}` , position {position}. "
        f"Please refer to {DOCS} for more details."
    )


# The reasoning_effort values each Gemini 3 model takes through this endpoint, and how it refuses
# another, as seen on the live API: gemini-3-flash refuses `minimal` although the compatibility
# page lists it (discuss.ai.google.dev/t/117875, /118724); gemini-3-pro takes low and high only
# ("Thinking level MEDIUM is not supported", discuss.ai.google.dev/t/112648).
_FLASH_EFFORTS = ("high", "low", "medium", "none")
_PRO_EFFORTS = ("low", "high")


def _effort_refusal(model: str, effort: str) -> str | None:
    name = model.lower()
    if name.startswith("gemini-3") and "flash" in name and effort not in _FLASH_EFFORTS:
        return f"Invalid reasoning_effort: {effort}. Valid values are: {', '.join(_FLASH_EFFORTS)}"
    if name.startswith("gemini-3") and "pro" in name and effort not in _PRO_EFFORTS:
        return (
            f"Thinking level {effort.upper()} is not supported for this model. "
            "Please retry with other thinking level"
        )
    return None


def _signature_of(call: Any) -> Any:
    extra = call.get("extra_content") if isinstance(call, dict) else None
    google = extra.get("google") if isinstance(extra, dict) else None
    return google.get("thought_signature") if isinstance(google, dict) else None


class Gemini(Dialect):
    """Gemini 3 through the OpenAI-compatible API: thoughts stay hidden (no reasoning text), the
    first function call of each step carries `extra_content.google.thought_signature`, and that
    signature must come back on every function call of the current turn's steps (400 otherwise,
    the body wrapped in a list as this endpoint sends it; a history Gemini did not produce passes
    with the documented `skip_thought_signature_validator` in its place). Each Gemini 3 model
    takes only its own reasoning_effort values (`_effort_refusal`)."""

    name = "gemini"
    default_model = "gemini-3-flash-preview"
    models = ("gemini-3-flash-preview", "gemini-3-pro-preview", "gemini-2.5-flash")
    owned_by = "google"
    sample_400 = _missing_signature_message("get_weather", 2)
    logprobs = False

    def depth(self, body: Mapping[str, Any]) -> Depth:
        effort = effort_depth(body.get("reasoning_effort"))
        return effort if effort is not None else Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        effort = body.get("reasoning_effort")
        if isinstance(effort, str):
            refusal = _effort_refusal(str(body.get("model") or self.default_model), effort)
            if refusal is not None:
                return Rejection(400, self.error_body(refusal))
        messages = body.get("messages")
        items = messages if isinstance(messages, list) else []
        for index in range(last_user_index(items) + 1, len(items)):
            message = items[index]
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            calls = message.get("tool_calls")
            first = calls[0] if isinstance(calls, list) and calls else None
            if isinstance(first, dict) and not _signature_of(first):
                function = first.get("function")
                name = function.get("name") if isinstance(function, dict) else None
                message_text = _missing_signature_message(str(name or "unknown"), index + 1)
                return Rejection(400, self.error_body(message_text))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps([{"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}])

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON | None:
        return None  # thoughts are not returned unless include_thoughts is asked for

    def tool_delta(self, turn: Turn, items: list[JSON]) -> JSON:
        out = []
        for item in items:
            if item.get("index") == 0 and isinstance(item.get("id"), str):
                item = {
                    **item,
                    "extra_content": {"google": {"thought_signature": thought_signature(item["id"])}},
                }
            out.append(item)
        return {"tool_calls": out}

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": script.content or None}
        if script.tool_calls:
            calls = tool_call_items(script.tool_calls)
            calls[0]["extra_content"] = {"google": {"thought_signature": thought_signature(calls[0]["id"])}}
            message["tool_calls"] = calls
        return message
