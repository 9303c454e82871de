"""Wire habits several providers share, so each provider module states only what is its own."""

from __future__ import annotations

from proxy.mock.dialects.base import JSON, Dialect, Turn, split_text
from proxy.mock.scenarios import Script


class PairedReasoning(Dialect):
    """While thinking, reasoning chunks say `content: null` and answer chunks say
    `reasoning_content: null` (DeepSeek, Qwen); without thinking, plain content chunks."""

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON:
        return {"content": None, "reasoning_content": text}

    def content_delta(self, turn: Turn, text: str) -> JSON:
        return {"content": text, "reasoning_content": None} if turn.thinking else {"content": text}

    def finish_delta(self, turn: Turn) -> JSON:
        return self.content_delta(turn, "")


class RoleOnEveryDelta(Dialect):
    """No role-only first chunk: every delta repeats `role` and carries `content` (Ollama, OpenRouter)."""

    def role_delta(self, turn: Turn) -> None:
        return None

    def content_delta(self, turn: Turn, text: str) -> JSON:
        return {"role": "assistant", "content": text}

    def tool_delta(self, turn: Turn, items: list[JSON]) -> JSON:
        return {"role": "assistant", "content": "", "tool_calls": items}

    def finish_delta(self, turn: Turn) -> JSON:
        return {"role": "assistant", "content": ""}


def inline_think_pieces(
    script: Script, turn: Turn, open_tag: tuple[str, ...], close_tag: tuple[str, ...]
) -> list[str]:
    """Content pieces of a model that writes its reasoning into `content` between think tags.

    Each tag is streamed in the pieces given, cut where the real server cuts it (a parser that
    looks for a whole tag in one chunk fails on these); `open_tag` is empty when the server's chat
    template has already opened the block.
    """
    answer = split_text(script.content, turn.chunk_chars)
    if not script.reasoning:
        return answer
    return [*open_tag, *split_text(script.reasoning, turn.chunk_chars), *close_tag, *answer]


def inline_think_text(script: Script, open_tag: tuple[str, ...], close_tag: tuple[str, ...]) -> str:
    """The non-stream `content` matching `inline_think_pieces`: the same text, unsplit."""
    if not script.reasoning:
        return script.content
    return "".join(open_tag) + script.reasoning + "".join(close_tag) + script.content
