"""Qwen's wire shape (Alibaba DashScope, OpenAI-compatible mode)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Counts, Rejection, Turn
from proxy.mock.dialects.knobs import budget_depth
from proxy.mock.dialects.shapes import PairedReasoning
from proxy.mock.scenarios import Depth, Script


class Qwen(PairedReasoning):
    """DashScope compatible mode: its own key order, `usage: null` on every chunk, `reasoning_content`."""

    name = "qwen"
    default_model = "qwen-plus"
    models = ("qwen-plus", "qwen3-max", "qwq-plus")
    owned_by = "alibaba"
    sample_400 = "parameter.enable_thinking must be set to false for non-streaming calls"
    always_thinking_message = "The value of the enable_thinking parameter is restricted to True."

    def depth(self, body: Mapping[str, Any]) -> Depth:
        if body.get("enable_thinking") is False and not self._always_thinks(body):
            return Depth.NONE
        return budget_depth(body.get("thinking_budget"))

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        if body.get("enable_thinking") is False and self._always_thinks(body):
            return Rejection(400, self.error_body(self.always_thinking_message))
        return None

    @staticmethod
    def _always_thinks(body: Mapping[str, Any]) -> bool:
        model = str(body.get("model", "")).lower()
        return model.startswith("qwq") or model.endswith("-thinking")

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {
                "error": {
                    "code": code or "invalid_parameter_error",
                    "param": param,
                    "message": message,
                    "type": "invalid_request_error",
                },
                "id": "chatcmpl-" + str(uuid.uuid4()),
                "request_id": str(uuid.uuid4()),
            }
        )

    def new_id(self, created: int) -> str:
        return "chatcmpl-" + str(uuid.uuid4())

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        return {
            "choices": choices,
            "object": "chat.completion.chunk",
            "usage": usage,
            "created": turn.created,
            "system_fingerprint": None,
            "model": turn.model,
            "id": turn.id,
        }

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"delta": delta, "finish_reason": finish, "index": 0, "logprobs": None}

    def role_delta(self, turn: Turn) -> JSON:
        if turn.thinking:
            return {"content": None, "role": "assistant", "reasoning_content": ""}
        return {"content": "", "role": "assistant"}

    def usage(self, counts: Counts) -> JSON:
        return {
            **super().usage(counts),
            "completion_tokens_details": {"reasoning_tokens": counts.reasoning},
            "prompt_tokens_details": {"cached_tokens": 0},
        }

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        message = self.message(script, turn)
        choice = {"message": message, "finish_reason": script.finish_reason, "index": 0, "logprobs": None}
        return {
            "choices": [choice],
            "object": "chat.completion",
            "usage": self.usage(counts),
            "created": turn.created,
            "system_fingerprint": None,
            "model": turn.model,
            "id": turn.id,
        }
