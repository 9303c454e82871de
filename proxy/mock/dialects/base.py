"""The OpenAI-compatible base shape every provider dialect starts from, and the values it works on.

`Turn` (ids and request flags), `Counts` (usage) and `Rejection` (an error answer) are what the
mock app hands a dialect; `frame`, `split_text` and friends build the SSE body. `ResponsesTraits`
says whether and how the provider serves the Responses API (`proxy.mock.responses.routes`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from proxy.mock.scenarios import Depth, Script, ToolCall, text_of
from proxy.mock.scenarios import tokens as tokens  # (the dialects read it here)

JSON = dict[str, Any]

DONE_FRAME = b"data: [DONE]\n\n"
MODELS_CREATED = 1_730_000_000
DEEP_BUDGET_TOKENS = 8192  # a thinking budget at least this large counts as "deep"


@dataclass(frozen=True)
class Turn:
    """Everything about one answer that is not the script: ids, echoed model, request flags."""

    id: str
    created: int
    model: str
    body: Mapping[str, Any]
    depth: Depth
    include_usage: bool
    chunk_chars: int

    @property
    def thinking(self) -> bool:
        return self.depth is not Depth.NONE


@dataclass(frozen=True)
class Counts:
    """Token counts for `usage` (deterministic estimates: about four characters a token)."""

    prompt: int
    completion: int
    reasoning: int
    cached: int = 0  # prompt tokens read from the provider's prompt cache (proxy.mock.prompt_cache)

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@dataclass(frozen=True)
class Rejection:
    """An error the provider answers instead of a completion: status and body bytes as it sends them."""

    status: int
    body: bytes
    media_type: str = "application/json"


@dataclass(frozen=True)
class ResponsesTraits:
    """How a provider's native Responses endpoint (`POST /v1/responses`) differs from OpenAI's.

    A dialect without one (`Dialect.responses_api is None`) answers that path as any unknown one.
    """

    # Raw reasoning as `reasoning_text` content (self-hosted servers show their model's thinking);
    # OpenAI shows only a summary, and only when `reasoning.summary` asks for one.
    reasoning_text: bool = False
    # Reasoning sealed in `encrypted_content` (when `include` asks), and the stateless rule that a
    # tool call sent back must come with the reasoning item that preceded it.
    sealed: bool = False
    # An `obfuscation` pad on delta events, as on OpenAI's chat chunks.
    obfuscation: bool = False
    # The Responses API's WebSocket mode (`GET /v1/responses` upgraded: proxy.mock.responses.socket).
    websocket: bool = False


def frame(chunk: Mapping[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def split_text(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def split_arguments(arguments: str, size: int) -> list[str]:
    """Arguments arrive in several pieces (three at least, when long enough), as real models send them."""
    piece = max(1, min(size, -(-len(arguments) // 3)))
    return split_text(arguments, piece) or [""]


def count_tokens(body: Mapping[str, Any], script: Script) -> Counts:
    messages = body.get("messages")
    prompt = 3
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            prompt += 4 + tokens(text_of(message.get("content")))
    arguments = sum(tokens(c.name) + tokens(c.arguments) for c in script.tool_calls)
    reasoning = tokens(script.reasoning)
    return Counts(
        prompt=prompt, completion=reasoning + tokens(script.content) + arguments, reasoning=reasoning
    )


def hex_id() -> str:
    return uuid.uuid4().hex


def tool_call_items(calls: tuple[ToolCall, ...]) -> list[JSON]:
    """`message.tool_calls` of a non-stream answer."""
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls
    ]


class Dialect:
    """One provider's wire shape. Subclasses override only what their provider does differently.

    Contract: `depth(body)` reads the provider's own thinking knobs; `check(body, depth)` returns
    the `Rejection` the provider would answer (knob validation, reasoning replay) or None;
    `frames(...)` is the whole SSE body, ending with `data: [DONE]`; `completion(...)` is the
    non-stream JSON. All deterministic except ids.
    """

    name: ClassVar[str] = "openai-compatible"
    default_model: ClassVar[str] = "mock-model"
    models: ClassVar[tuple[str, ...]] = ()
    owned_by: ClassVar[str] = "system"
    sample_400: ClassVar[str] = "Invalid request."
    # The `code` of an error body when the caller gives none (some providers always fill it in).
    error_code: ClassVar[str | None] = None
    # Whether choices carry `logprobs: null` (stream chunks and the non-stream answer alike).
    logprobs: ClassVar[bool] = True
    # Where usage goes in a stream: a `choices: []` chunk when include_usage is asked, and/or
    # on the finish chunk whatever the request says (some providers always do that).
    usage_chunk: ClassVar[bool] = True
    # Whether the provider caches prompt prefixes by itself and reports the hits (DeepSeek's context
    # caching: proxy.mock.prompt_cache).
    caches_prompts: ClassVar[bool] = False
    # The provider's native Responses API, if it has one (see `ResponsesTraits`).
    responses_api: ClassVar[ResponsesTraits | None] = None

    # request side
    def depth(self, body: Mapping[str, Any]) -> Depth:
        return Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        return None

    def check_responses(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        """`check` for a Responses request, given as the chat body it maps to (`reasoning.effort`
        becomes `reasoning_effort`); a provider that names the Responses parameter overrides it."""
        return self.check(body, depth)

    def unknown_route(self, method: str, path: str) -> Rejection:
        """What the provider answers on a path it does not serve. By default the mock's own answer
        to an unknown route (Starlette's plain-text 404); a provider with a known body overrides it."""
        return Rejection(404, b"Not Found", "text/plain; charset=utf-8")

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": param,
                    "code": code or self.error_code,
                }
            }
        )

    def sample_rejection(self) -> Rejection:
        """The 400 served by `X-Mock-Fault: 400`: this provider's real error shape."""
        return Rejection(400, self.error_body(self.sample_400))

    def new_id(self, created: int) -> str:
        return "chatcmpl-" + hex_id()

    # both sides
    def server_fields(self, turn: Turn) -> JSON:
        """Fields such as `system_fingerprint` that the provider puts on every chunk (just before
        `choices`) and on the non-stream answer (at its end), as the providers order them."""
        return {}

    # stream
    def preamble(self) -> list[bytes]:
        return []

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        chunk: JSON = {
            "id": turn.id,
            "object": "chat.completion.chunk",
            "created": turn.created,
            "model": turn.model,
            **self.server_fields(turn),
            "choices": choices,
        }
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        choice: JSON = {"index": 0, "delta": delta}
        if self.logprobs:
            choice["logprobs"] = None
        choice["finish_reason"] = finish
        return choice

    def role_delta(self, turn: Turn) -> JSON | None:
        return {"role": "assistant", "content": ""}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON | None:
        return {"reasoning_content": text}

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        return split_text(script.content, turn.chunk_chars)

    def content_delta(self, turn: Turn, text: str) -> JSON:
        return {"content": text}

    def tool_delta(self, turn: Turn, items: list[JSON]) -> JSON:
        return {"tool_calls": items}

    def finish_delta(self, turn: Turn) -> JSON:
        return {}

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        return self.envelope(turn, [self.choice(self.finish_delta(turn), script.finish_reason)])

    def usage(self, counts: Counts) -> JSON:
        return {
            "prompt_tokens": counts.prompt,
            "completion_tokens": counts.completion,
            "total_tokens": counts.total,
        }

    def deltas(self, script: Script, turn: Turn) -> list[JSON]:
        out: list[JSON] = []
        role = self.role_delta(turn)
        if role is not None:
            out.append(role)
        pieces = split_text(script.reasoning, turn.chunk_chars)
        for i, piece in enumerate(pieces):
            delta = self.reasoning_delta(turn, piece, last=i == len(pieces) - 1)
            if delta is not None:
                out.append(delta)
        out += [self.content_delta(turn, p) for p in self.content_pieces(script, turn)]
        for index, call in enumerate(script.tool_calls):
            head = {"index": index, "id": call.id, "type": "function"}
            out.append(self.tool_delta(turn, [{**head, "function": {"name": call.name, "arguments": ""}}]))
            for piece in split_arguments(call.arguments, turn.chunk_chars):
                out.append(self.tool_delta(turn, [{"index": index, "function": {"arguments": piece}}]))
        return out

    def frames(self, script: Script, turn: Turn, counts: Counts) -> list[bytes]:
        out = self.preamble()
        out += [frame(self.envelope(turn, [self.choice(d, None)])) for d in self.deltas(script, turn)]
        out.append(frame(self.final_chunk(turn, script, counts)))
        if turn.include_usage and self.usage_chunk:
            out.append(frame(self.envelope(turn, [], usage=self.usage(counts))))
        out.append(DONE_FRAME)
        return out

    def content_frame(self, turn: Turn, text: str) -> bytes:
        """One ordinary content chunk (the faults use it for the huge and broken lines)."""
        return frame(self.envelope(turn, [self.choice(self.content_delta(turn, text), None)]))

    # non-stream
    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": script.content or None}
        if turn.thinking and script.reasoning:
            message["reasoning_content"] = script.reasoning
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        choice: JSON = {"index": 0, "message": self.message(script, turn)}
        if self.logprobs:
            choice["logprobs"] = None
        choice["finish_reason"] = script.finish_reason
        return {
            "id": turn.id,
            "object": "chat.completion",
            "created": turn.created,
            "model": turn.model,
            "choices": [choice],
            "usage": self.usage(counts),
            **self.server_fields(turn),
        }
