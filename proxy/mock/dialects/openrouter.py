"""OpenRouter's wire shape: a router that relays many providers under one envelope."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Counts, Rejection, ResponsesTraits, Turn, hex_id, tool_call_items
from proxy.mock.dialects.knobs import budget_depth, effort_depth
from proxy.mock.dialects.shapes import RoleOnEveryDelta
from proxy.mock.scenarios import Depth, Script


def _signature(seed: str) -> str:
    return base64.b64encode(hashlib.sha256(b"sig:" + seed.encode()).digest()).decode()


def _encrypted(seed: str) -> JSON:
    blob = base64.b64encode(hashlib.sha512(b"enc:" + seed.encode()).digest()).decode()
    return {"type": "reasoning.encrypted", "data": "gAAAAA" + blob, "format": "unknown", "index": 1}


class OpenRouter(RoleOnEveryDelta):
    """OpenRouter: a keep-alive comment, `reasoning` + `reasoning_details`; the last reasoning chunk
    carries a signature and an encrypted item."""

    name = "openrouter"
    default_model = "deepseek/deepseek-r1"
    models = ("deepseek/deepseek-r1", "z-ai/glm-4.5", "anthropic/claude-sonnet-4.5")
    owned_by = "openrouter"
    responses_api = ResponsesTraits()  # OpenRouter's /api/v1/responses (beta), OpenAI's shape
    sample_400 = "Only one of reasoning and reasoning_effort may be provided"

    @staticmethod
    def _reasoning(body: Mapping[str, Any]) -> Mapping[str, Any]:
        reasoning = body.get("reasoning")
        return reasoning if isinstance(reasoning, dict) else {}

    def depth(self, body: Mapping[str, Any]) -> Depth:
        reasoning = self._reasoning(body)
        if reasoning.get("enabled") is False:
            return Depth.NONE
        effort = effort_depth(reasoning.get("effort", body.get("reasoning_effort")))
        return effort if effort is not None else budget_depth(reasoning.get("max_tokens"))

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        if "reasoning" in body and "reasoning_effort" in body:
            return Rejection(400, self.error_body(self.sample_400))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "code": 400}})

    def new_id(self, created: int) -> str:
        return f"gen-{created}-{hex_id()[:20]}"

    def preamble(self) -> list[bytes]:
        return [b": OPENROUTER PROCESSING\n\n"]

    @staticmethod
    def _provider(model: str) -> str:
        return model.split("/", 1)[0].replace("-", " ").title().replace(" ", "") if "/" in model else "OpenAI"

    def _shown(self, turn: Turn) -> bool:
        return turn.thinking and self._reasoning(turn.body).get("exclude") is not True

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        chunk: JSON = {
            "id": turn.id,
            "provider": self._provider(turn.model),
            "model": turn.model,
            "object": "chat.completion.chunk",
            "created": turn.created,
            "choices": choices,
        }
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {
            "index": 0,
            "delta": delta,
            "finish_reason": finish,
            "native_finish_reason": finish,
            "logprobs": None,
        }

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON | None:
        if not self._shown(turn):
            return None
        details: list[JSON] = [{"type": "reasoning.text", "text": text, "format": "unknown", "index": 0}]
        if last:
            # What a client must send back unchanged on a tool-call turn: a signature and an opaque blob.
            details[0]["signature"] = _signature(turn.id)
            details.append(_encrypted(turn.id))
        return {"role": "assistant", "content": "", "reasoning": text, "reasoning_details": details}

    def usage(self, counts: Counts) -> JSON:
        return {
            **super().usage(counts),
            "cost": 0,
            "is_byok": False,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": counts.reasoning},
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": script.content, "refusal": None}
        if self._shown(turn) and script.reasoning:
            message["reasoning"] = script.reasoning
            message["reasoning_details"] = [
                {
                    "type": "reasoning.text",
                    "text": script.reasoning,
                    "signature": _signature(turn.id),
                    "format": "unknown",
                    "index": 0,
                },
                _encrypted(turn.id),
            ]
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        finish = script.finish_reason
        choice = {
            "logprobs": None,
            "finish_reason": finish,
            "native_finish_reason": finish,
            "index": 0,
            "message": self.message(script, turn),
        }
        return {
            "id": turn.id,
            "provider": self._provider(turn.model),
            "model": turn.model,
            "object": "chat.completion",
            "created": turn.created,
            "choices": [choice],
            "usage": self.usage(counts),
        }
