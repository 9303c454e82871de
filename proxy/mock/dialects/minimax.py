"""MiniMax's wire shape, in its two reasoning modes (inline `<think>` or `reasoning_details`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from proxy.mock.dialects.base import JSON, Counts, Dialect, Turn, hex_id, split_text, tool_call_items
from proxy.mock.dialects.knobs import thinking_type
from proxy.mock.dialects.shapes import inline_think_pieces, inline_think_text
from proxy.mock.scenarios import Depth, Script


class MiniMax(Dialect):
    """MiniMax: `<think>` inline in content (tags split across chunks), or `reasoning_details` when split."""

    name = "minimax"
    default_model = "MiniMax-M2"
    models = ("MiniMax-M2", "MiniMax-M2.1")
    owned_by = "minimax"
    sample_400 = "invalid params, reasoning_split must be a boolean (2013)"
    error_code = "2013"
    logprobs = False
    always_split = False
    # Deliberately cut inside the tags: a parser that looks for "<think>" per chunk fails here.
    open_tag = ("<thi", "nk>\n")
    close_tag = ("\n</th", "ink>\n\n")
    detail_head: ClassVar[JSON] = {
        "type": "reasoning.text",
        "id": "reasoning-text-1",
        "format": "MiniMax-response-v1",
        "index": 0,
    }

    def split(self, turn: Turn) -> bool:
        return self.always_split or turn.body.get("reasoning_split") is True

    def depth(self, body: Mapping[str, Any]) -> Depth:
        # M2.x cannot turn thinking off; later models take thinking:{type:"disabled"} (secondary source).
        can_disable = "m2" not in str(body.get("model", "")).lower()
        if can_disable and thinking_type(body) == "disabled":
            return Depth.NONE
        return Depth.STANDARD

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        return {
            "id": turn.id,
            "choices": choices,
            "created": turn.created,
            "model": turn.model,
            "object": "chat.completion.chunk",
            "usage": usage,
            "input_sensitive": False,
            "output_sensitive": False,
        }

    def new_id(self, created: int) -> str:
        return hex_id()

    def role_delta(self, turn: Turn) -> JSON:
        return {"content": "", "role": "assistant", "name": "MiniMax AI", "audio_content": ""}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON | None:
        if not self.split(turn):
            return None
        return {"reasoning_details": [{**self.detail_head, "text": text}]}

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        if self.split(turn):
            return split_text(script.content, turn.chunk_chars)
        return inline_think_pieces(script, turn, self.open_tag, self.close_tag)

    def finish_delta(self, turn: Turn) -> JSON:
        return {"content": ""}

    def usage(self, counts: Counts) -> JSON:
        return {
            "total_tokens": counts.total,
            "total_characters": 0,
            "prompt_tokens": counts.prompt,
            "completion_tokens": counts.completion,
            "completion_tokens_details": {"reasoning_tokens": counts.reasoning},
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        split = self.split(turn)
        content = script.content if split else inline_think_text(script, self.open_tag, self.close_tag)
        message: JSON = {"content": content, "role": "assistant", "name": "MiniMax AI", "audio_content": ""}
        if split and script.reasoning:
            message["reasoning_details"] = [{**self.detail_head, "text": script.reasoning}]
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        choice = {"finish_reason": script.finish_reason, "index": 0, "message": self.message(script, turn)}
        return {
            "id": turn.id,
            "choices": [choice],
            "created": turn.created,
            "model": turn.model,
            "object": "chat.completion",
            "usage": self.usage(counts),
            "input_sensitive": False,
            "output_sensitive": False,
            "base_resp": {"status_code": 0, "status_msg": ""},
        }


class MiniMaxSplit(MiniMax):
    """MiniMax as a providers entry that sends `reasoning_split: true` sees it: reasoning_details always."""

    name = "minimax-split"
    always_split = True
