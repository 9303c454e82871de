"""Ollama's wire shape (its OpenAI-compatible /v1 endpoints)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Rejection, ResponsesTraits, Turn, tool_call_items
from proxy.mock.dialects.knobs import effort_depth, lower
from proxy.mock.dialects.shapes import RoleOnEveryDelta
from proxy.mock.scenarios import Depth, Script


def _invalid_effort(value: Any) -> str:
    return f'invalid reasoning value: \'{value}\' (must be "high", "medium", "low", or "none")'


class Ollama(RoleOnEveryDelta):
    """Ollama /v1: `delta.reasoning`, role and content on every delta, `fp_ollama`."""

    name = "ollama"
    default_model = "qwen3:8b"
    models = ("qwen3:8b", "gpt-oss:20b", "deepseek-r1:8b")
    owned_by = "library"
    responses_api = ResponsesTraits(reasoning_text=True)  # Ollama serves /v1/responses (stateless)
    sample_400 = _invalid_effort("x")
    logprobs = False
    accepted_efforts = ("high", "medium", "low", "none")

    @staticmethod
    def _effort(body: Mapping[str, Any]) -> Any:
        reasoning = body.get("reasoning")
        if isinstance(reasoning, dict) and "effort" in reasoning:
            return reasoning["effort"]
        return body.get("reasoning_effort")

    def depth(self, body: Mapping[str, Any]) -> Depth:
        return effort_depth(self._effort(body)) or Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        effort = self._effort(body)
        if effort is not None and lower(effort) not in self.accepted_efforts:
            return Rejection(400, self.error_body(_invalid_effort(effort)))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": "invalid_request_error", "param": param}})

    def new_id(self, created: int) -> str:
        return f"chatcmpl-{uuid.uuid4().int % 1000}"

    def server_fields(self, turn: Turn) -> JSON:
        return {"system_fingerprint": "fp_ollama"}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON:
        return {"role": "assistant", "content": "", "reasoning": text}

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": script.content}
        if turn.thinking and script.reasoning:
            message["reasoning"] = script.reasoning
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message
