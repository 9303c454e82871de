"""A local llama.cpp-style server whose chat template opens the think block itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Counts, Dialect, Turn, tool_call_items
from proxy.mock.dialects.knobs import effort_depth
from proxy.mock.dialects.shapes import inline_think_pieces, inline_think_text
from proxy.mock.scenarios import Depth, Script


def _timings(counts: Counts) -> JSON:
    return {
        "prompt_n": counts.prompt,
        "prompt_ms": counts.prompt * 0.5,
        "predicted_n": counts.completion,
        "predicted_ms": counts.completion * 20.0,
    }


class Local(Dialect):
    """llama.cpp-style server whose chat template opens `<think>` itself: content starts inside the
    reasoning and only `</think>` appears; `timings` on the last chunk."""

    name = "local"
    default_model = "qwen3-8b-q4_k_m.gguf"
    models = (default_model,)
    owned_by = "llamacpp"
    sample_400 = "Assistant response prefill is incompatible with enable_thinking."
    fingerprint = "b6710-74b8fc17f"
    close_tag = ("\n</", "think>\n\n")

    def depth(self, body: Mapping[str, Any]) -> Depth:
        kwargs = body.get("chat_template_kwargs")
        kwargs = kwargs if isinstance(kwargs, dict) else {}
        if kwargs.get("enable_thinking") is False:
            return Depth.NONE
        effort = effort_depth(kwargs.get("reasoning_effort", body.get("reasoning_effort")))
        return effort or Depth.STANDARD

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"code": 400, "message": message, "type": "invalid_request_error"}})

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        chunk: JSON = {
            "choices": choices,
            "created": turn.created,
            "id": turn.id,
            "model": turn.model,
            "system_fingerprint": self.fingerprint,
            "object": "chat.completion.chunk",
        }
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"finish_reason": finish, "index": 0, "delta": delta}

    def role_delta(self, turn: Turn) -> JSON:
        return {"role": "assistant", "content": None}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> None:
        return None  # the reasoning is streamed as content, see content_pieces

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        return inline_think_pieces(script, turn, (), self.close_tag)

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        return {**super().final_chunk(turn, script, counts), "timings": _timings(counts)}

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": inline_think_text(script, (), self.close_tag)}
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        choice = {"finish_reason": script.finish_reason, "index": 0, "message": self.message(script, turn)}
        return {
            "choices": [choice],
            "created": turn.created,
            "model": turn.model,
            "system_fingerprint": self.fingerprint,
            "object": "chat.completion",
            "usage": self.usage(counts),
            "id": turn.id,
            "timings": _timings(counts),
        }
