"""Kimi's wire shape (Moonshot AI).

What of the history's reasoning the model reads (and the prompt count shows): kimi-k2.7-code and
kimi-k3 keep every earlier turn's `reasoning_content` (Preserved Thinking always on); kimi-k2.6 only
with `thinking.keep: "all"` (by default "the server ignores reasoning_content from historical
turns"); the others only the current turn's tool-call chain (interleaved thinking)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Counts, Dialect, Rejection, Turn, tokens
from proxy.mock.dialects.knobs import effort_depth, missing_replay, thinking_type
from proxy.mock.scenarios import Depth, Script


def _missing_replay_message(index: int) -> str:
    return (
        "thinking is enabled but reasoning_content is missing in assistant tool call message "
        f"at index {index}"
    )


class Kimi(Dialect):
    """Moonshot: `reasoning_content`, no logprobs key, usage inside the finishing choice (documented)."""

    name = "kimi"
    default_model = "kimi-k2.5"
    models = ("kimi-k2.5", "kimi-k2.6", "kimi-k2-thinking", "kimi-k3")
    owned_by = "moonshot"
    sample_400 = _missing_replay_message(4)
    logprobs = False

    def depth(self, body: Mapping[str, Any]) -> Depth:
        model = str(body.get("model", "")).lower()
        always = "thinking" in model or model.startswith("kimi-k3")  # K3 always reasons (docs)
        if thinking_type(body) == "disabled" and not always:
            return Depth.NONE
        effort = effort_depth(body.get("reasoning_effort"))
        return Depth.DEEP if effort is Depth.DEEP else Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        index = missing_replay(body) if depth is not Depth.NONE else None
        if index is None:
            return None
        return Rejection(400, self.error_body(_missing_replay_message(index)))

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})

    def frames(self, script: Script, turn: Turn, counts: Counts) -> list[bytes]:
        return super().frames(script, turn, _with_kept(turn, counts))

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        return super().completion(script, turn, _with_kept(turn, counts))

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        choice = {**self.choice({}, script.finish_reason), "usage": self.usage(counts)}
        return self.envelope(turn, [choice])

    def usage(self, counts: Counts) -> JSON:
        return {**super().usage(counts), "cached_tokens": 0}


def kept_reasoning(body: Mapping[str, Any]) -> list[str]:
    """The history's reasoning_content the model reads (see the module's docstring)."""
    model = str(body.get("model", "")).lower()
    thinking = body.get("thinking")
    keep_all = model.startswith(("kimi-k2.7-code", "kimi-k3")) or (
        model.startswith("kimi-k2.6") and isinstance(thinking, dict) and thinking.get("keep") == "all"
    )
    messages = body.get("messages")
    items = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    users = [i for i, m in enumerate(items) if m.get("role") == "user"]
    first = 0 if keep_all or not users else users[-1]
    found = []
    for message in items[first:]:
        text = message.get("reasoning_content")
        if message.get("role") == "assistant" and isinstance(text, str) and text:
            found.append(text)
    return found


def _with_kept(turn: Turn, counts: Counts) -> Counts:
    extra = sum(tokens(text) for text in kept_reasoning(turn.body))
    return replace(counts, prompt=counts.prompt + extra) if extra else counts
