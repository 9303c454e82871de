"""How each provider shapes a chat-completion answer: its knobs, stream chunks, messages and errors.

Pure: a request body and a `Script` (what the model says) in, JSON-ready dicts and SSE frames out.
Each `Dialect` reproduces one provider's structure as it is seen on the wire (key order, null
fields, where reasoning goes, where usage goes, id style), because the proxy must cope with exactly
those shapes. Facts come from the providers' public documentation and examples (the sources
providers.yaml cites); where those do not pin a detail down, the shape is kept minimal.

A dialect honours only the thinking knobs its provider honours, so a wrong rewrite shows up as
"no effect" in the mock just as it would upstream.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from proxy.mock.scenarios import Depth, Script, ToolCall, text_of

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

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@dataclass(frozen=True)
class Rejection:
    """An error the provider answers instead of a completion: status and body bytes as it sends them."""

    status: int
    body: bytes


def frame(chunk: Mapping[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def split_text(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def split_arguments(arguments: str, size: int) -> list[str]:
    """Arguments arrive in several pieces (three at least, when long enough), as real models send them."""
    piece = max(1, min(size, -(-len(arguments) // 3)))
    return split_text(arguments, piece) or [""]


def tokens(text: str) -> int:
    return (len(text) + 3) // 4


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


# --- knob readers shared by several dialects ---------------------------------------------------


def _lower(value: Any) -> str | None:
    return value.strip().lower() if isinstance(value, str) else None


def _effort_depth(value: Any) -> Depth | None:
    effort = _lower(value)
    if effort is None:
        return None
    if effort == "none":
        return Depth.NONE
    if effort in ("high", "xhigh", "max"):
        return Depth.DEEP
    return Depth.STANDARD


def _thinking_type(body: Mapping[str, Any]) -> str | None:
    thinking = body.get("thinking")
    return _lower(thinking.get("type")) if isinstance(thinking, dict) else None


def _missing_replay(body: Mapping[str, Any]) -> int | None:
    """Index of the first assistant tool-call message that does not carry its reasoning_content back."""
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if (
            isinstance(message, dict)
            and message.get("role") == "assistant"
            and message.get("tool_calls")
            and message.get("reasoning_content") is None
        ):
            return index
    return None


def _hex_id() -> str:
    return uuid.uuid4().hex


_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _alnum(length: int) -> str:
    """A random mixed-case alphanumeric id, as OpenAI's are."""
    number = uuid.uuid4().int << 64 | uuid.uuid4().int
    out = []
    for _ in range(length):
        number, digit = divmod(number, len(_ALNUM))
        out.append(_ALNUM[digit])
    return "".join(out)


def _tool_call_items(calls: tuple[ToolCall, ...]) -> list[JSON]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls
    ]


# --- the base shape (OpenAI-compatible) and one subclass per provider --------------------------


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
    # Where usage goes in a stream: a `choices: []` chunk when include_usage is asked, and/or
    # on the finish chunk whatever the request says (some providers always do that).
    usage_chunk: ClassVar[bool] = True

    # request side
    def depth(self, body: Mapping[str, Any]) -> Depth:
        return Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
        )

    def sample_rejection(self) -> Rejection:
        """The 400 served by `X-Mock-Fault: 400`: this provider's real error shape."""
        return Rejection(400, self.error_body(self.sample_400))

    def new_id(self, created: int) -> str:
        return "chatcmpl-" + _hex_id()

    # stream
    def preamble(self) -> list[bytes]:
        return []

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        chunk: JSON = {
            "id": turn.id,
            "object": "chat.completion.chunk",
            "created": turn.created,
            "model": turn.model,
            "choices": choices,
        }
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

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
            message["tool_calls"] = _tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        return {
            "id": turn.id,
            "object": "chat.completion",
            "created": turn.created,
            "model": turn.model,
            "choices": [
                {
                    "index": 0,
                    "message": self.message(script, turn),
                    "logprobs": None,
                    "finish_reason": script.finish_reason,
                }
            ],
            "usage": self.usage(counts),
        }


class DeepSeek(Dialect):
    """api.deepseek.com: `reasoning_content` next to `content: null`, a system_fingerprint, cache usage."""

    name = "deepseek"
    default_model = "deepseek-chat"
    models = ("deepseek-chat", "deepseek-reasoner")
    owned_by = "deepseek"
    fingerprint = "fp_ffc7281d48_prod0820_fp8_kvcache"
    replay_message = "The reasoning_content in the thinking mode must be passed back to the API."
    sample_400 = replay_message

    def depth(self, body: Mapping[str, Any]) -> Depth:
        if _thinking_type(body) == "disabled":
            return Depth.NONE
        effort = _effort_depth(body.get("reasoning_effort"))
        return Depth.DEEP if effort is Depth.DEEP else Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        if depth is not Depth.NONE and _missing_replay(body) is not None:
            return Rejection(400, self.error_body(self.replay_message))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": param,
                    "code": code or "invalid_request_error",
                }
            }
        )

    def new_id(self, created: int) -> str:
        return str(uuid.uuid4())

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        chunk: JSON = {
            "id": turn.id,
            "object": "chat.completion.chunk",
            "created": turn.created,
            "model": turn.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        }
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def role_delta(self, turn: Turn) -> JSON:
        if turn.thinking:
            return {"role": "assistant", "content": None, "reasoning_content": ""}
        return {"role": "assistant", "content": ""}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON:
        return {"content": None, "reasoning_content": text}

    def content_delta(self, turn: Turn, text: str) -> JSON:
        return {"content": text, "reasoning_content": None} if turn.thinking else {"content": text}

    def finish_delta(self, turn: Turn) -> JSON:
        return self.content_delta(turn, "")

    def usage(self, counts: Counts) -> JSON:
        return {
            "prompt_tokens": counts.prompt,
            "completion_tokens": counts.completion,
            "total_tokens": counts.total,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": counts.reasoning},
            "prompt_cache_hit_tokens": 0,
            "prompt_cache_miss_tokens": counts.prompt,
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": script.content}
        if turn.thinking:
            message["reasoning_content"] = script.reasoning
        if script.tool_calls:
            message["tool_calls"] = _tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        return {**super().completion(script, turn, counts), "system_fingerprint": self.fingerprint}


class Qwen(Dialect):
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
        budget = body.get("thinking_budget")
        if isinstance(budget, int) and budget >= DEEP_BUDGET_TOKENS:
            return Depth.DEEP
        return Depth.STANDARD

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

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON:
        return {"content": None, "reasoning_content": text}

    def content_delta(self, turn: Turn, text: str) -> JSON:
        return {"content": text, "reasoning_content": None} if turn.thinking else {"content": text}

    def finish_delta(self, turn: Turn) -> JSON:
        return self.content_delta(turn, "")

    def usage(self, counts: Counts) -> JSON:
        return {
            "prompt_tokens": counts.prompt,
            "completion_tokens": counts.completion,
            "total_tokens": counts.total,
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


class Kimi(Dialect):
    """Moonshot: `reasoning_content`, no logprobs key, usage inside the finishing choice (documented)."""

    name = "kimi"
    default_model = "kimi-k2.5"
    models = ("kimi-k2.5", "kimi-k2-thinking")
    owned_by = "moonshot"
    sample_400 = (
        "thinking is enabled but reasoning_content is missing in assistant tool call message at index 4"
    )

    def depth(self, body: Mapping[str, Any]) -> Depth:
        always = "thinking" in str(body.get("model", "")).lower()
        if _thinking_type(body) == "disabled" and not always:
            return Depth.NONE
        effort = _effort_depth(body.get("reasoning_effort"))
        return Depth.DEEP if effort is Depth.DEEP else Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        index = _missing_replay(body) if depth is not Depth.NONE else None
        if index is None:
            return None
        message = (
            "thinking is enabled but reasoning_content is missing in assistant tool call message "
            f"at index {index}"
        )
        return Rejection(400, self.error_body(message))

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "finish_reason": finish}

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        choice = {**self.choice({}, script.finish_reason), "usage": self.usage(counts)}
        return self.envelope(turn, [choice])

    def usage(self, counts: Counts) -> JSON:
        return {**super().usage(counts), "cached_tokens": 0}

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        body = super().completion(script, turn, counts)
        del body["choices"][0]["logprobs"]
        return body


class MiniMax(Dialect):
    """MiniMax: `<think>` inline in content (tags split across chunks), or `reasoning_details` when split."""

    name = "minimax"
    default_model = "MiniMax-M2"
    models = ("MiniMax-M2", "MiniMax-M2.1")
    owned_by = "minimax"
    sample_400 = "invalid params, reasoning_split must be a boolean (2013)"
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
        if can_disable and _thinking_type(body) == "disabled":
            return Depth.NONE
        return Depth.STANDARD

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": param,
                    "code": code or "2013",
                }
            }
        )

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
        return _hex_id()

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "finish_reason": finish}

    def role_delta(self, turn: Turn) -> JSON:
        return {"content": "", "role": "assistant", "name": "MiniMax AI", "audio_content": ""}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON | None:
        if not self.split(turn):
            return None
        return {"reasoning_details": [{**self.detail_head, "text": text}]}

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        answer = split_text(script.content, turn.chunk_chars)
        if self.split(turn) or not script.reasoning:
            return answer
        reasoning = split_text(script.reasoning, turn.chunk_chars)
        return [*self.open_tag, *reasoning, *self.close_tag, *answer]

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
        content = script.content
        details = None
        if script.reasoning and self.split(turn):
            details = [{**self.detail_head, "text": script.reasoning}]
        elif script.reasoning:
            content = "<think>\n" + script.reasoning + "\n</think>\n\n" + script.content
        message: JSON = {"content": content, "role": "assistant", "name": "MiniMax AI", "audio_content": ""}
        if details:
            message["reasoning_details"] = details
        if script.tool_calls:
            message["tool_calls"] = _tool_call_items(script.tool_calls)
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


class Ollama(Dialect):
    """Ollama /v1: `delta.reasoning`, role and content on every delta, `fp_ollama`."""

    name = "ollama"
    default_model = "qwen3:8b"
    models = ("qwen3:8b", "gpt-oss:20b", "deepseek-r1:8b")
    owned_by = "library"
    accepted_efforts = ("high", "medium", "low", "none")

    @staticmethod
    def _effort(body: Mapping[str, Any]) -> Any:
        reasoning = body.get("reasoning")
        if isinstance(reasoning, dict) and "effort" in reasoning:
            return reasoning["effort"]
        return body.get("reasoning_effort")

    sample_400 = 'invalid reasoning value: \'x\' (must be "high", "medium", "low", or "none")'

    @staticmethod
    def _invalid_effort(value: Any) -> str:
        return f'invalid reasoning value: \'{value}\' (must be "high", "medium", "low", or "none")'

    def depth(self, body: Mapping[str, Any]) -> Depth:
        return _effort_depth(self._effort(body)) or Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        effort = self._effort(body)
        if effort is not None and _lower(effort) not in self.accepted_efforts:
            return Rejection(400, self.error_body(self._invalid_effort(effort)))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": "invalid_request_error", "param": param}})

    def new_id(self, created: int) -> str:
        return f"chatcmpl-{uuid.uuid4().int % 1000}"

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        chunk: JSON = {
            "id": turn.id,
            "object": "chat.completion.chunk",
            "created": turn.created,
            "model": turn.model,
            "system_fingerprint": "fp_ollama",
            "choices": choices,
        }
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "finish_reason": finish}

    def role_delta(self, turn: Turn) -> None:
        return None  # every Ollama delta carries the role itself

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON:
        return {"role": "assistant", "content": "", "reasoning": text}

    def content_delta(self, turn: Turn, text: str) -> JSON:
        return {"role": "assistant", "content": text}

    def tool_delta(self, turn: Turn, items: list[JSON]) -> JSON:
        return {"role": "assistant", "content": "", "tool_calls": items}

    def finish_delta(self, turn: Turn) -> JSON:
        return {"role": "assistant", "content": ""}

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": script.content}
        if turn.thinking and script.reasoning:
            message["reasoning"] = script.reasoning
        if script.tool_calls:
            message["tool_calls"] = _tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        body = super().completion(script, turn, counts)
        del body["choices"][0]["logprobs"]
        return {**body, "system_fingerprint": "fp_ollama"}


class OpenRouter(Dialect):
    """OpenRouter: a keep-alive comment, `reasoning` + `reasoning_details`; the last reasoning chunk
    carries a signature and an encrypted item."""

    name = "openrouter"
    default_model = "deepseek/deepseek-r1"
    models = ("deepseek/deepseek-r1", "z-ai/glm-4.5", "anthropic/claude-sonnet-4.5")
    owned_by = "openrouter"
    sample_400 = "Only one of reasoning and reasoning_effort may be provided"

    @staticmethod
    def _reasoning(body: Mapping[str, Any]) -> Mapping[str, Any]:
        reasoning = body.get("reasoning")
        return reasoning if isinstance(reasoning, dict) else {}

    def depth(self, body: Mapping[str, Any]) -> Depth:
        reasoning = self._reasoning(body)
        if reasoning.get("enabled") is False:
            return Depth.NONE
        effort = _effort_depth(reasoning.get("effort", body.get("reasoning_effort")))
        if effort is not None:
            return effort
        budget = reasoning.get("max_tokens")
        if isinstance(budget, int) and budget >= DEEP_BUDGET_TOKENS:
            return Depth.DEEP
        return Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        if "reasoning" in body and "reasoning_effort" in body:
            return Rejection(400, self.error_body(self.sample_400))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "code": 400}})

    def new_id(self, created: int) -> str:
        return f"gen-{created}-{_hex_id()[:20]}"

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

    def role_delta(self, turn: Turn) -> None:
        return None  # every OpenRouter delta carries the role itself

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON | None:
        if not self._shown(turn):
            return None
        details: list[JSON] = [{"type": "reasoning.text", "text": text, "format": "unknown", "index": 0}]
        if last:
            # What a client must send back unchanged on a tool-call turn: a signature and an opaque blob.
            details[0]["signature"] = _signature(turn.id)
            details.append(_encrypted(turn.id))
        return {"role": "assistant", "content": "", "reasoning": text, "reasoning_details": details}

    def content_delta(self, turn: Turn, text: str) -> JSON:
        return {"role": "assistant", "content": text}

    def tool_delta(self, turn: Turn, items: list[JSON]) -> JSON:
        return {"role": "assistant", "content": "", "tool_calls": items}

    def finish_delta(self, turn: Turn) -> JSON:
        return {"role": "assistant", "content": ""}

    def usage(self, counts: Counts) -> JSON:
        return {
            "prompt_tokens": counts.prompt,
            "completion_tokens": counts.completion,
            "total_tokens": counts.total,
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
            message["tool_calls"] = _tool_call_items(script.tool_calls)
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


def _signature(seed: str) -> str:
    return base64.b64encode(hashlib.sha256(b"sig:" + seed.encode()).digest()).decode()


def _encrypted(seed: str) -> JSON:
    blob = base64.b64encode(hashlib.sha512(b"enc:" + seed.encode()).digest()).decode()
    return {"type": "reasoning.encrypted", "data": "gAAAAA" + blob, "format": "unknown", "index": 1}


class Mistral(Dialect):
    """Mistral (Magistral): thinking as content arrays of `thinking` parts, then plain strings;
    usage on the last chunk."""

    name = "mistral"
    default_model = "magistral-medium-latest"
    models = ("magistral-medium-latest", "magistral-small-latest", "mistral-medium-latest")
    owned_by = "mistralai"
    sample_400 = "Invalid reasoning_effort: expected 'none' or 'high'."
    usage_chunk = False  # Mistral always puts usage on its final chunk instead

    def depth(self, body: Mapping[str, Any]) -> Depth:
        # Magistral always thinks; newer models take reasoning_effort as a switch: "high" turns
        # thinking on (there is no deeper setting), "none" or nothing leaves it off.
        if str(body.get("model", self.default_model)).lower().startswith("magistral"):
            return Depth.STANDARD
        return Depth.STANDARD if _lower(body.get("reasoning_effort")) == "high" else Depth.NONE

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {
                "object": "error",
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": code,
            }
        )

    def new_id(self, created: int) -> str:
        return _hex_id()

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "finish_reason": finish}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON:
        return {"content": [_thinking_part(text)]}

    def finish_delta(self, turn: Turn) -> JSON:
        return {"content": ""}

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        return {**super().final_chunk(turn, script, counts), "usage": self.usage(counts)}

    def usage(self, counts: Counts) -> JSON:
        return {
            "prompt_tokens": counts.prompt,
            "total_tokens": counts.total,
            "completion_tokens": counts.completion,
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        content: Any = script.content
        if turn.thinking and script.reasoning:
            content = [_thinking_part(script.reasoning), {"type": "text", "text": script.content}]
        calls = _tool_call_items(script.tool_calls) if script.tool_calls else None
        return {"role": "assistant", "tool_calls": calls, "content": content}

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        body = super().completion(script, turn, counts)
        del body["choices"][0]["logprobs"]
        return body


def _thinking_part(text: str) -> JSON:
    return {"type": "thinking", "thinking": [{"type": "text", "text": text}]}


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
        effort = _effort_depth(kwargs.get("reasoning_effort", body.get("reasoning_effort")))
        return effort or Depth.STANDARD

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"code": 400, "message": message, "type": "invalid_request_error"}})

    def new_id(self, created: int) -> str:
        return "chatcmpl-" + _hex_id()

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
        return None

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        answer = split_text(script.content, turn.chunk_chars)
        if not script.reasoning:
            return answer
        return [*split_text(script.reasoning, turn.chunk_chars), *self.close_tag, *answer]

    def final_chunk(self, turn: Turn, script: Script, counts: Counts) -> JSON:
        return {**super().final_chunk(turn, script, counts), "timings": _timings(counts)}

    def message(self, script: Script, turn: Turn) -> JSON:
        content = script.content
        if script.reasoning:
            content = script.reasoning + "\n</think>\n\n" + script.content
        message: JSON = {"role": "assistant", "content": content}
        if script.tool_calls:
            message["tool_calls"] = _tool_call_items(script.tool_calls)
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


def _timings(counts: Counts) -> JSON:
    return {
        "prompt_n": counts.prompt,
        "prompt_ms": counts.prompt * 0.5,
        "predicted_n": counts.completion,
        "predicted_ms": counts.completion * 20.0,
    }


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
        return None

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        answer = split_text(script.content, turn.chunk_chars)
        if not script.reasoning:
            return answer
        return [*self.open_tag, *split_text(script.reasoning, turn.chunk_chars), *self.close_tag, *answer]

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
        content = script.content
        if script.reasoning:
            content = "<think>\n" + script.reasoning + "\n</think>\n\n" + script.content
        calls = _tool_call_items(script.tool_calls) if script.tool_calls else []
        return {"role": "assistant", "reasoning_content": None, "content": content, "tool_calls": calls}

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        body = super().completion(script, turn, counts)
        body["choices"][0]["stop_reason"] = None
        return {**body, "prompt_logprobs": None}


class OpenAI(Dialect):
    """OpenAI: no reasoning text at all, only `usage.completion_tokens_details.reasoning_tokens`;
    `usage: null` on every chunk when include_usage is on; an `obfuscation` pad on stream chunks."""

    name = "openai"
    default_model = "gpt-5.1"
    models = ("gpt-5.1", "gpt-5", "o4-mini", "gpt-4.1-mini")
    owned_by = "system"
    sample_400 = (
        "Unsupported value: 'minimal' is not supported with the 'gpt-5.1' model. "
        "Supported values are: 'none', 'low', 'medium', and 'high'."
    )

    @staticmethod
    def _efforts(model: str) -> tuple[str, ...]:
        """Accepted `reasoning_effort` values per model family; () = not a reasoning model."""
        if model.startswith("gpt-5.1"):
            return ("none", "low", "medium", "high")
        if model.startswith("gpt-5."):
            return ("none", "minimal", "low", "medium", "high", "xhigh")
        if model.startswith("gpt-5"):
            return ("minimal", "low", "medium", "high")
        if model.startswith(("o1", "o3", "o4")):
            return ("low", "medium", "high")
        return ()

    def sample_rejection(self) -> Rejection:
        return Rejection(
            400, self.error_body(self.sample_400, param="reasoning.effort", code="unsupported_value")
        )

    def depth(self, body: Mapping[str, Any]) -> Depth:
        if not self._efforts(str(body.get("model", self.default_model))):
            return Depth.NONE
        return _effort_depth(body.get("reasoning_effort")) or Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        model = str(body.get("model", self.default_model))
        accepted = self._efforts(model)
        effort = body.get("reasoning_effort")
        if effort is not None and not accepted:
            message = "Unsupported parameter: 'reasoning_effort' is not supported with this model."
            return Rejection(
                400, self.error_body(message, param="reasoning_effort", code="unsupported_parameter")
            )
        if effort is not None and effort not in accepted:
            listed = ", ".join(f"'{v}'" for v in accepted[:-1]) + f", and '{accepted[-1]}'"
            message = (
                f"Unsupported value: '{effort}' is not supported with the '{model}' model. "
                f"Supported values are: {listed}."
            )
            return Rejection(
                400, self.error_body(message, param="reasoning_effort", code="unsupported_value")
            )
        if accepted and "max_tokens" in body:
            message = (
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead."
            )
            return Rejection(400, self.error_body(message, param="max_tokens", code="unsupported_parameter"))
        return None

    def new_id(self, created: int) -> str:
        return "chatcmpl-" + _alnum(29)

    def _fingerprint(self, turn: Turn) -> str | None:
        return None if self._efforts(turn.model) else "fp_f33640a400"

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        chunk: JSON = {
            "id": turn.id,
            "object": "chat.completion.chunk",
            "created": turn.created,
            "model": turn.model,
            "service_tier": "default",
            "system_fingerprint": self._fingerprint(turn),
            "choices": choices,
        }
        if turn.include_usage:
            chunk["usage"] = usage
        options = turn.body.get("stream_options")
        if not (isinstance(options, dict) and options.get("include_obfuscation") is False):
            # OpenAI pads chunks so that their length does not reveal the token; clients ignore it.
            chunk["obfuscation"] = "0123456789abcdef"[: 1 + len(orjson.dumps(choices)) % 16]
        return chunk

    def role_delta(self, turn: Turn) -> JSON:
        return {"role": "assistant", "content": "", "refusal": None}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> None:
        return None  # reasoning stays hidden; only its token count is reported

    def usage(self, counts: Counts) -> JSON:
        return {
            "prompt_tokens": counts.prompt,
            "completion_tokens": counts.completion,
            "total_tokens": counts.total,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": counts.reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {
            "role": "assistant",
            "content": script.content or None,
            "refusal": None,
            "annotations": [],
        }
        if script.tool_calls:
            message["tool_calls"] = _tool_call_items(script.tool_calls)
        return message

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        body = super().completion(script, turn, counts)
        return {**body, "service_tier": "default", "system_fingerprint": self._fingerprint(turn)}


_ALL: tuple[Dialect, ...] = (
    DeepSeek(),
    Qwen(),
    Kimi(),
    MiniMax(),
    MiniMaxSplit(),
    Ollama(),
    OpenRouter(),
    Mistral(),
    Local(),
    Prompted(),
    OpenAI(),
)
REGISTRY: Mapping[str, Dialect] = {d.name: d for d in _ALL}
DIALECTS: tuple[str, ...] = tuple(REGISTRY)


def dialect_named(name: str) -> Dialect | None:
    return REGISTRY.get(name.lower())


def models_payload(dialect: Dialect) -> JSON:
    models = dialect.models or (dialect.default_model,)
    return {
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": MODELS_CREATED, "owned_by": dialect.owned_by}
            for m in models
        ],
    }
