"""The usage of an answer the proxy relays as it came, read from its bytes as they go by.

Pure. A native Responses answer, a native Messages answer and every other route that reaches a
model (`/v1/responses/compact`, `/v1/completions`, …) travel back byte for byte, without the chat
pipeline that reads a chat answer's usage. Budgets (proxy.policy) and the usage book must count
them all the same, so the relay hands each piece to a `UsageReader` on its way out and asks it
for the answer's `TokenUsage` (proxy.core.usage) at the end:

- a JSON body (its first byte is `{`) is kept, up to `limit` bytes, and read once at the end: its
  `usage` (Responses, Messages or chat shape);
- an SSE stream is read a line at a time, and only the events that matter are parsed: Responses'
  `response.completed` (or `.incomplete` / `.failed`: any event whose `response` has a usage),
  Anthropic's `message_start` and `message_delta` (the later counts replace the earlier ones), a
  chat chunk's `usage`, and the reasoning text an estimate needs (`response.reasoning_text.delta`,
  Anthropic's `thinking_delta`). A line longer than `limit` is skipped; the next ones still count.

Reasoning tokens: the upstream's count when it gives one (Responses'
`output_tokens_details.reasoning_tokens`, chat's `completion_tokens_details.reasoning_tokens`);
else estimated from the reasoning text the answer showed, as the chat path estimates it (never
above the answer's output tokens). Anthropic never reports a thinking count, and the thinking it
shows may be a summary or nothing (`redacted_thinking`): an answer that thought counts the larger
of its thinking text's estimate and its output tokens minus the estimate of its visible text and
tool inputs. Responses' reasoning summaries are not the reasoning and are not counted; an answer
that shows no reasoning text and reports no count has an unknown count (None), not 0. An answer
whose usage never came (a stream cut before its last event) but that showed reasoning text gets a
usage with only that estimate.

Reasoning the upstream dropped: Anthropic lists in the answer's `input_transformations` (the
`Message` object: a JSON body, or a stream's `message_start`) each thinking block of the request
it left out — a block whose prefix changed, with `thinking.block_binding.prefix_mismatch_behavior:
drop_block` (platform.claude.com/docs/build-with-claude/preserved-thinking). `thinking_dropped`
counts the entries of type `thinking_dropped`: reasoning the client paid for and the model did not
see (proxy.server.relayed_usage turns it into a trace warning and a console flag).

Anthropic's `input_tokens` leaves out what the prompt cache read and wrote; the input counted here
is all three (`cache_read_input_tokens` is the cached part), as every other shape counts it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.policy.budgets import output_cap
from proxy.core.usage import ReasoningTally, TokenUsage, account, count

# A `usage` that is an object (a chat chunk's `"usage": null` is not worth parsing).
_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_REASONING_DELTAS = (b"thinking_delta", b"reasoning_text.delta")
# Anthropic's events that say what it showed besides its thinking (and whether it thought at all).
_MESSAGES_MARKERS = (b"text_delta", b"input_json_delta", b"content_block_start")
_THINKING_BLOCKS = ("thinking", "redacted_thinking")


def _loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def anthropic_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """Anthropic's usage in the shape `account` reads: the input with the cache's parts in it."""
    own = count(usage.get("input_tokens"))
    read = count(usage.get("cache_read_input_tokens"))
    written = count(usage.get("cache_creation_input_tokens"))
    out: dict[str, Any] = {
        "input_tokens": None if own is None else own + (read or 0) + (written or 0),
        "output_tokens": count(usage.get("output_tokens")),
    }
    if read is not None:
        out["cache_read_input_tokens"] = read
    return out


class UsageReader:
    """Give it every piece of an answer's body (`feed`), then ask for its `usage()` and `model`."""

    __slots__ = (
        "_anthropic",
        "_body",
        "_done",
        "_json",
        "_kept",
        "_rest",
        "_skipping",
        "_tally",
        "_thought",
        "_usage",
        "_visible",
        "limit",
        "model",
        "thinking_dropped",
    )

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self.model: str | None = None  # the answer's model, when it names one
        self.thinking_dropped = 0  # thinking blocks the upstream left out (Anthropic's input_transformations)
        self._json: bool | None = None  # None: not known until the first byte that is not space
        self._body: list[bytes] = []  # a JSON body's pieces (empty again once it passed the limit)
        self._kept = 0  # their length
        self._rest = b""  # a stream's line not ended yet
        self._skipping = False  # in a line longer than the limit, until its end
        self._usage: Mapping[str, Any] | None = None  # the last usage seen (Responses or chat shape)
        self._anthropic: dict[str, Any] = {}  # Anthropic's counts, later ones replacing earlier ones
        self._tally = ReasoningTally()
        self._visible = ReasoningTally()  # Anthropic's text and tool inputs: what is not thinking
        self._thought = False  # an Anthropic thinking (or redacted_thinking) block was seen
        self._done = False

    def feed(self, piece: bytes) -> None:
        if not piece or self._done:
            return
        if self._json is None:
            start = piece.lstrip()
            if not start:
                return
            self._json = start[:1] == b"{"
        if self._json:
            self._keep(piece)
        else:
            self._lines(piece)

    def _keep(self, piece: bytes) -> None:
        self._body.append(piece)
        self._kept += len(piece)
        if self._kept > self.limit:
            self._body.clear()
            self._done = True

    def _lines(self, piece: bytes) -> None:
        lines = piece.split(b"\n")
        last = lines.pop()  # (not ended yet: b"" when the piece ends a line)
        for line in lines:
            if self._skipping:
                self._skipping = False
                self._rest = b""
                continue
            if self._rest:
                line, self._rest = self._rest + line, b""
            self._line(line)
        if self._skipping:
            return
        self._rest += last
        if len(self._rest) > self.limit:
            self._rest, self._skipping = b"", True

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:]
        if not (
            _USAGE.search(data)
            or any(marker in data for marker in _REASONING_DELTAS)
            or any(marker in data for marker in _MESSAGES_MARKERS)
        ):
            return
        event = _loads(data)
        if isinstance(event, dict):
            self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict):
                return
            shown = delta.get("type")
            if shown == "thinking_delta":
                self._text(delta.get("thinking"))
            elif shown == "text_delta":
                self._shown(delta.get("text"))
            elif shown == "input_json_delta":
                self._shown(delta.get("partial_json"))
            return
        if kind == "content_block_start":
            block = event.get("content_block")
            self._thought |= isinstance(block, dict) and block.get("type") in _THINKING_BLOCKS
            return
        if kind == "response.reasoning_text.delta":
            self._text(event.get("delta"))
            return
        for holder in ("response", "message"):  # Responses' final events, Anthropic's message_start
            inner = event.get(holder)
            if isinstance(inner, dict) and isinstance(inner.get("usage"), dict):
                self._answer(inner, anthropic=holder == "message")
                return
        usage = event.get("usage")
        if isinstance(usage, dict):
            if kind == "message_delta":
                self._anthropic.update({k: v for k, v in usage.items() if count(v) is not None})
            else:  # a chat chunk's usage
                self._usage = usage
                self._name(event.get("model"))

    def _answer(self, answer: Mapping[str, Any], *, anthropic: bool) -> None:
        usage = answer["usage"]
        self._transformations(answer.get("input_transformations"))
        if anthropic:
            self._anthropic.update({k: v for k, v in usage.items() if count(v) is not None})
        else:
            self._usage = usage
        self._name(answer.get("model"))

    def _transformations(self, entries: Any) -> None:
        if isinstance(entries, list):
            self.thinking_dropped += sum(
                1 for entry in entries if isinstance(entry, dict) and entry.get("type") == "thinking_dropped"
            )

    def _name(self, model: Any) -> None:
        if isinstance(model, str) and model:
            self.model = model

    def _text(self, text: Any) -> None:
        self._thought = True
        if isinstance(text, str) and text:
            self._tally.add(text)

    def _shown(self, text: Any) -> None:
        if isinstance(text, str) and text:
            self._visible.add(text)

    def _whole(self, body: Any) -> None:
        """A JSON body: its reasoning text, then its usage."""
        if not isinstance(body, dict) or not isinstance(body.get("usage"), dict):
            return
        anthropic = body.get("type") == "message"
        blocks = body.get("content") if anthropic else None
        for block in blocks if isinstance(blocks, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in _THINKING_BLOCKS:
                self._text(block.get("thinking"))
            elif kind == "text":
                self._shown(block.get("text"))
            elif kind == "tool_use":
                self._shown(orjson.dumps(block.get("input")).decode())
        items = body.get("output")
        for item in items if isinstance(items, list) and not anthropic else ():
            parts = (
                item.get("content") if isinstance(item, dict) and item.get("type") == "reasoning" else None
            )
            for part in parts if isinstance(parts, list) else ():
                if isinstance(part, dict) and part.get("type") == "reasoning_text":
                    self._text(part.get("text"))
        self._answer(body, anthropic=anthropic)

    def usage(self) -> TokenUsage | None:
        """The answer's token counts; None when it gave none the reader could read."""
        if self._json and self._body:
            self._whole(_loads(b"".join(self._body)))
            self._body.clear()
        self._done = True
        estimate = self._tally.estimate()
        if self._anthropic:
            usage = anthropic_usage(self._anthropic)
            return account(usage, self._thinking(estimate, usage["output_tokens"]))
        if self._usage is not None:
            return account(self._usage, estimate)
        # No usage came (a stream cut before its last event, a stream that was not asked for
        # one): what reasoning it showed is still counted, as an estimate.
        return None if estimate is None else account(None, estimate)

    def _thinking(self, estimate: int | None, output: int | None) -> int | None:
        """Anthropic's thinking: it reports no count, and what it shows may be a summary (Claude 4
        bills the whole thinking) or nothing (`redacted_thinking`). An answer that thought counts
        the output its visible text and tool inputs do not account for, never less than the
        estimate of the thinking text it showed."""
        if not self._thought or output is None:
            return estimate
        unexplained = output - (self._visible.estimate() or 0)
        return max(estimate or 0, unexplained) if unexplained > 0 else estimate


# The routes relayed as they came whose answers a model writes, thinking as it goes: the thinking
# policy's budget applies to them (a native Responses or Messages request relayed as it came, a
# native compaction, legacy completions). Embeddings, moderations, audio, images and every other
# route: no reasoning is written, no budget is set aside or refused.
GENERATION_PATHS = frozenset(
    {"/v1/completions", "/v1/responses", "/v1/responses/compact", "/v1/messages", "/v1/chat/completions"}
)


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request relayed as it came asks: its model, and its own output cap (for the
    reservation: proxy.core.policy.budgets.output_cap)."""

    model: str
    output_cap: int | None
    body: Mapping[str, Any] = field(default_factory=dict, compare=False)  # (parsed: its knobs)


def model_asked(method: str, path: str, body: bytes) -> Asked | None:
    """What a request relayed as it came asks of a model (a POST to a generation path whose JSON
    body names one: the thinking policy's budget applies to it); None for any other request. The
    path is judged first: only a generation path's body is parsed."""
    if method != "POST" or path.rstrip("/") not in GENERATION_PATHS:
        return None
    if b'"model"' not in body or body.lstrip()[:1] != b"{":
        return None
    parsed = _loads(body)
    model = parsed.get("model") if isinstance(parsed, dict) else None
    if not isinstance(model, str) or not isinstance(parsed, dict):
        return None
    return Asked(model, output_cap(parsed), parsed)
