"""A model without a reasoning knob that thinks in `<think>` tags only when its system prompt asks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Counts, Dialect, Turn, tool_call_items
from proxy.mock.dialects.shapes import inline_think_pieces, inline_think_text
from proxy.mock.scenarios import Depth, Script, text_of


class Prompted(Dialect):
    """An instruction-following model without a reasoning knob (vLLM-style server): it writes
    `<think>…</think>` before its answer only when a system message asks for it."""

    name = "prompted"
    default_model = "llama-3.1-8b-instruct"
    models = (default_model,)
    owned_by = "vllm"
    sample_400 = (
        "This model's maximum context length is 8192 tokens. Please reduce the length of the messages."
    )
    open_tag = ("<th", "ink>\n")
    close_tag = ("\n</thi", "nk>\n\n")
    # How the simulated model tells a deep instruction from a standard one (English and Chinese).
    deep_words = ("thorough", "in depth", "in-depth", "in detail", "extensive", "exhaustive", "全面", "细致")

    def depth(self, body: Mapping[str, Any]) -> Depth:
        messages = body.get("messages")
        for message in messages if isinstance(messages, list) else []:
            if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
                continue
            text = text_of(message.get("content"))
            if "<think>" in text:
                lowered = text.lower()
                return Depth.DEEP if any(w in lowered for w in self.deep_words) else Depth.STANDARD
        return Depth.NONE

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
        )

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> None:
        return None  # the reasoning is streamed as content, see content_pieces

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        return inline_think_pieces(script, turn, self.open_tag, self.close_tag)

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        choice = {**self.choice({"content": ""}, script.finish_reason), "stop_reason": None}
        return self.envelope(turn, [choice])

    def usage(self, counts: Counts) -> JSON:
        return {
            "prompt_tokens": counts.prompt,
            "total_tokens": counts.total,
            "completion_tokens": counts.completion,
            "prompt_tokens_details": None,
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        content = inline_think_text(script, self.open_tag, self.close_tag)
        calls = tool_call_items(script.tool_calls) if script.tool_calls else []
        return {"role": "assistant", "reasoning_content": None, "content": content, "tool_calls": calls}

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        body = super().completion(script, turn, counts)
        body["choices"][0]["stop_reason"] = None
        return {**body, "prompt_logprobs": None}
