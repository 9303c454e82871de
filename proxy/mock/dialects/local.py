"""A local llama.cpp server: a Qwen3-style template that opens the think block itself, and gpt-oss.

gpt-oss speaks OpenAI's harmony format (https://github.com/openai/harmony/blob/main/docs/format.md).
By default llama.cpp's gpt-oss parser splits it (common/chat.cpp, common_chat_parse_gpt_oss):
the analysis channel in `reasoning_content`, function calls in `tool_calls`. With the reasoning
format `none` — the server's `--reasoning-format none` ("leaves thoughts unparsed in
message.content", https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md), or a
request's own `reasoning_format` field, which the server reads per request — the harmony text
reaches `content` raw, as `--skip-chat-parsing` also leaves it: channel markers, the commentary
channel's `to=functions.NAME` calls and the stop tokens, cut anywhere across chunks, and the
finish reason is the server's `stop` (it parsed no call). gpt-oss's chat template refuses such text
back in an assistant message ("You have passed a message containing <|channel|> tags in the
content field", a 500: https://github.com/ggml-org/llama.cpp/pull/15091), so a client must get it
split before its next turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Counts, Dialect, Rejection, Turn, split_text, tool_call_items
from proxy.mock.dialects.knobs import effort_depth, lower
from proxy.mock.dialects.shapes import inline_think_pieces, inline_think_text
from proxy.mock.scenarios import Depth, Script

GPT_OSS = "gpt-oss-20b-mxfp4.gguf"  # (ggml-org/gpt-oss-20b-GGUF, as llama-server names it)
# What gpt-oss's chat template checks an assistant message's content for, and says when found.
HARMONY_IN_CONTENT = ("<|channel|>analysis<|message|>", "<|channel|>final<|message|>")
HARMONY_REFUSAL = (
    "You have passed a message containing <|channel|> tags in the content field. Instead of doing "
    "this, you should pass analysis messages (the string between '<|message|>' and '<|end|>') in the "
    "'thinking' field, and final messages (the string between '<|message|>' and '<|end|>') in the "
    "'content' field."
)


def gpt_oss(model: object) -> bool:
    return "gpt-oss" in str(model).lower()


def harmony_text(script: Script) -> str:
    """What gpt-oss samples for `script`, in harmony: analysis, then the answer or the calls."""
    text = f"<|channel|>analysis<|message|>{script.reasoning}<|end|>" if script.reasoning else ""
    if script.content or not script.tool_calls:
        text += f"<|start|>assistant<|channel|>final<|message|>{script.content}<|return|>"
    for call in script.tool_calls:
        text += (
            f"<|start|>assistant<|channel|>commentary to=functions.{call.name} <|constrain|>json"
            f"<|message|>{call.arguments}<|call|>"
        )
    return text


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
    models = (default_model, GPT_OSS)
    owned_by = "llamacpp"
    sample_400 = "Assistant response prefill is incompatible with enable_thinking."
    fingerprint = "b6710-74b8fc17f"
    close_tag = ("\n</", "think>\n\n")

    def depth(self, body: Mapping[str, Any]) -> Depth:
        if gpt_oss(body.get("model")):  # (it always reasons; `reasoning_effort` says how much)
            return Depth.DEEP if lower(body.get("reasoning_effort")) == "high" else Depth.STANDARD
        kwargs = body.get("chat_template_kwargs")
        kwargs = kwargs if isinstance(kwargs, dict) else {}
        if kwargs.get("enable_thinking") is False:
            return Depth.NONE
        effort = effort_depth(kwargs.get("reasoning_effort", body.get("reasoning_effort")))
        return effort or Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        if not gpt_oss(body.get("model")):
            return None
        messages = body.get("messages")
        for message in messages if isinstance(messages, list) else []:
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            content = message.get("content")
            if isinstance(content, str) and any(marker in content for marker in HARMONY_IN_CONTENT):
                error = {"code": 500, "message": HARMONY_REFUSAL, "type": "server_error"}
                return Rejection(500, orjson.dumps({"error": error}))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"code": 400, "message": message, "type": "invalid_request_error"}})

    @staticmethod
    def _raw(turn: Turn) -> bool:
        """gpt-oss with the reasoning format `none`: harmony left in content."""
        return gpt_oss(turn.model) and lower(turn.body.get("reasoning_format")) == "none"

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

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON | None:
        if gpt_oss(turn.model) and not self._raw(turn):
            return {"reasoning_content": text}
        return None  # the reasoning is streamed as content, see content_pieces

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        if self._raw(turn):
            return split_text(harmony_text(script), turn.chunk_chars)
        if gpt_oss(turn.model):
            return super().content_pieces(script, turn)
        return inline_think_pieces(script, turn, (), self.close_tag)

    def deltas(self, script: Script, turn: Turn) -> list[JSON]:
        if self._raw(turn):  # (the calls too are in the content)
            return [
                self.role_delta(turn),
                *(self.content_delta(turn, p) for p in self.content_pieces(script, turn)),
            ]
        return super().deltas(script, turn)

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        if self._raw(turn):
            script = Script(script.reasoning, script.content)
        return {**super().final_chunk(turn, script, counts), "timings": _timings(counts)}

    def message(self, script: Script, turn: Turn) -> JSON:
        if self._raw(turn):
            return {"role": "assistant", "content": harmony_text(script)}
        if gpt_oss(turn.model):
            return super().message(script, turn)
        message: JSON = {"role": "assistant", "content": inline_think_text(script, (), self.close_tag)}
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        finish = "stop" if self._raw(turn) else script.finish_reason
        choice = {"finish_reason": finish, "index": 0, "message": self.message(script, turn)}
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
