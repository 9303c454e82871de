"""The Messages front door's encoder: the internal event stream (the typed events read from the
pipeline's chat chunks, proxy.core.protocols.chat_events) as the events an Anthropic Messages client
reads.

Pure and incremental. `MessagesEncoder` takes the events, `feed(events)` as they come (`Done`, or
`end()`: `[DONE]`), or `fail(message)` (the exchange broke); each call returns the events it
produced, as dicts shaped like the Anthropic SDK's types
(`anthropic.types.RawMessageStreamEvent`, plus `ping` and `error`). `message()` is the `Message`
object as the stream stands (the non-stream answer is built by the same encoder, so both agree).

One message's stream:

    message_start (id msg_…, model, role, empty content, usage)
    per content block, in order (a block stops before the next one starts):
      thinking  content_block_start {thinking: "", signature: ""}, thinking_delta…, signature_delta
                (the proxy's sealed blob: proxy.core.protocols.messages.state), content_block_stop
      text      content_block_start {text: ""}, text_delta…, content_block_stop
      tool_use  content_block_start {id, name, input: {}}, input_json_delta…, content_block_stop
    message_delta (stop_reason, usage with output_tokens), message_stop
    or, whenever the exchange breaks: error (never a message_stop after it)

A thinking block is stopped only when the next output begins, so its signature can be bound to
the `tool_use` right after it (its id is known then). Parallel calls stream one block each, in
the order they start; arguments for a call whose block has already stopped cannot be carried
(Anthropic's blocks do not reopen): the stream then ends with an error rather than a wrong input.
With `show_thinking` False (`thinking.display: omitted`) thinking blocks carry no text, only the
signature, as Anthropic's own API does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.core import jsonio
from proxy.core.protocols.chat_events import Finish, ToolCallDelta, call_index
from proxy.core.protocols.door_stream import DoorEncoder, Event
from proxy.core.protocols.responses.output import count

__all__ = ["STOP_REASONS", "IdFactory", "MessagesEncoder", "ThinkingFacts", "ThinkingSeal", "error_event"]

# Chat finish reasons → Anthropic stop reasons. Chat says `stop` for a stop sequence too, and
# leaves the matched string out of the text: it is `stop_sequence` only when the upstream names the
# match (`matched_stop`) and it is one of the sequences asked for; otherwise end_turn.
STOP_REASONS: Final[Mapping[str, str]] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
NO_FINISH_MESSAGE: Final = "the upstream stream ended without a finish reason"
# Error types by the chat error's code (anything else is api_error).
_ERROR_TYPES: Final[Mapping[str, str]] = {
    "upstream_timeout": "timeout_error",
    "rate_limit_exceeded": "rate_limit_error",
    "overloaded": "overloaded_error",
}

IdFactory = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class ThinkingFacts:
    """What the sealing callback gets for one thinking block as it stops; it returns the block's
    signature (None: none). `next_call_id`: the tool_use block right after it, if any."""

    text: str
    model: str
    next_call_id: str | None
    details: tuple[Any, ...] = ()
    block_id: str = ""  # unique per block (a key for a payload too large to seal inline)


ThinkingSeal = Callable[[ThinkingFacts], str | None]


@dataclass(slots=True)
class _Block:
    kind: str  # "thinking" | "text" | "tool_use"
    index: int
    text: list[str] = field(default_factory=list)
    signature: str = ""
    details: list[Any] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    stopped: bool = False
    frame: tuple[bytes, bytes] | None = None  # a plain delta's bytes around its text (text_delta_frames)


def error_event(message: str, type_: str = "api_error") -> Event:
    return {"type": "error", "error": {"type": type_, "message": message}}


def matched_stop(matched: tuple[str, ...], stop_sequences: tuple[str, ...]) -> str | None:
    """The requested stop sequence the upstream says ended the answer (Finish.matched), if any."""
    for value in matched:
        if value in stop_sequences:
            return value
    return None


class MessagesEncoder(DoorEncoder):
    """The events of one message, from the internal event stream (`feed`, DoorEncoder's); after
    `message_stop` or `error` every call returns no events."""

    def __init__(
        self,
        message_id: str,
        model: str,
        *,
        seal: ThinkingSeal,
        new_id: IdFactory,
        show_thinking: bool = True,
        stop_sequences: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self._id = message_id
        self._stops = stop_sequences
        self._stop_sequence: str | None = None
        self._model = model
        self._seal = seal
        self._new_id = new_id
        self._show = show_thinking
        self._blocks: list[_Block] = []
        self._current: _Block | None = None
        self._calls: dict[int, _Block] = {}  # tool calls by chat index (a block once named)
        self._last_call: int | None = None
        self.failed: str | None = None  # the error message, once the stream ended in error

    def start(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        message = self.message()
        message["content"], message["stop_reason"] = [], None
        return [{"type": "message_start", "message": message}]

    def text_delta_frames(self, reasoning: bool, texts: list[str]) -> bytes | None:
        """Plain text deltas of this kind while its block is open (the text block for content, the
        thinking block for reasoning), their texts joining it: byte for byte what `feed` writes for
        each in turn, each a `content_block_delta` as fixed bytes around the text's JSON string (b""
        for thinking not shown). None when such a delta would do more than continue the open
        block."""
        block = self._current
        if block is None or self._finished or self._finish is not None:
            return None
        if block.kind != ("thinking" if reasoning else "text"):
            return None
        frame = block.frame
        if frame is None:
            if reasoning and not self._show:
                frame = (b"", b"")
            else:
                kind = b'"thinking_delta","thinking":' if reasoning else b'"text_delta","text":'
                head = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
                frame = (head + str(block.index).encode() + b',"delta":{"type":' + kind, b"}}\n\n")
            block.frame = frame
        block.text += texts
        head, tail = frame
        if not head:  # (thinking not shown: nothing written)
            return b""
        if len(texts) == 1:
            return head + jsonio.dumps(texts[0]) + tail
        # (as `feed` writes each text; the texts' JSON from one orjson call)
        inside = jsonio.string_insides(texts)
        return head + b'"' + (b'"' + tail + head + b'"').join(inside) + b'"' + tail

    def end(self) -> list[Event]:
        """`[DONE]`: message_delta and message_stop, or an error when no finish reason came."""
        if self._finished:
            return []
        out = self.start()
        finish = self._finish
        if finish is None or finish not in STOP_REASONS:
            message = NO_FINISH_MESSAGE if finish is None else f"the upstream stopped: {finish}"
            return out + self._fail(message, "api_error")
        self._finished = True
        delta = {"stop_reason": self._stop_reason(finish), "stop_sequence": self._stop_sequence}
        out.append({"type": "message_delta", "delta": delta, "usage": self._delta_usage()})
        out.append({"type": "message_stop"})
        return out

    def fail(self, message: str, type_: str = "api_error") -> list[Event]:
        if self._finished:
            return []
        return self.start() + self._fail(message, type_)

    def message(self) -> dict[str, Any]:
        """The `Message` object as the stream stands."""
        finish = self._finish
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [self._block_dict(b) for b in self._blocks],
            "stop_reason": self._stop_reason(finish) if finish is not None else None,
            "stop_sequence": self._stop_sequence,
            "usage": self._usage_dict(),
        }

    # ----------------------------------------------------------------------------------------------
    def _stop_reason(self, finish: str) -> str | None:
        return "stop_sequence" if self._stop_sequence is not None else STOP_REASONS.get(finish)

    # -- DoorEncoder.feed's hooks ------------------------------------------------------------------
    def _reasoning(self, text: str, out: list[Event]) -> None:
        block = self._open("thinking", out)
        block.text.append(text)
        if self._show:
            self._delta_event(out, block, {"type": "thinking_delta", "thinking": text})

    def _text(self, text: str, out: list[Event]) -> None:
        block = self._open("text", out)
        block.text.append(text)
        self._delta_event(out, block, {"type": "text_delta", "text": text})

    def _details(self, details: list[Any]) -> None:
        current = self._current
        if current is not None and current.kind == "thinking":
            current.details.extend(details)

    def _finished_by(self, finish: Finish, out: list[Event]) -> None:
        if finish.reason == "stop":
            self._stop_sequence = matched_stop(finish.matched, self._stops)
        self._stop_current(out, None)
        self._stop_unnamed(out)

    def _error(self, message: str, code: str) -> list[Event]:
        return self._fail(message, _ERROR_TYPES.get(code, "api_error"))

    def _open(self, kind: str, out: list[Event]) -> _Block:
        current = self._current
        if current is not None and current.kind == kind:
            return current
        self._stop_current(out, None)
        block = self._current = _Block(kind, len(self._blocks))
        self._blocks.append(block)
        start = (
            {"type": "thinking", "thinking": "", "signature": ""}
            if kind == "thinking"
            else {"type": "text", "text": ""}
        )
        out.append({"type": "content_block_start", "index": block.index, "content_block": start})
        return block

    def _tool_call(self, fragment: ToolCallDelta, out: list[Event]) -> None:
        index = fragment.chat_index
        if index is None:
            index = call_index(
                fragment.call_id, {i: b.call_id for i, b in self._calls.items()}, self._last_call
            )
        name, arguments = fragment.name, fragment.arguments
        block = self._calls.get(index)
        if block is None:
            block = _Block("tool_use", -1)
            block.call_id = fragment.call_id or self._new_id("toolu")
            self._calls[index] = block
        elif block.stopped:
            if arguments:
                self._finished_with(out, "the upstream interleaved the arguments of parallel tool calls")
            return
        self._last_call = index
        if name and not block.name:
            block.name = name
        if arguments:
            block.text.append(arguments)
            if block.index >= 0:
                self._delta_event(out, block, {"type": "input_json_delta", "partial_json": arguments})
        if block.index < 0 and block.name:
            self._begin_call(block, out)

    def _begin_call(self, block: _Block, out: list[Event]) -> None:
        self._stop_current(out, block.call_id)
        block.index = len(self._blocks)
        self._blocks.append(block)
        self._current = block
        start = {"type": "tool_use", "id": block.call_id, "name": block.name, "input": {}}
        out.append({"type": "content_block_start", "index": block.index, "content_block": start})
        if block.text:
            self._delta_event(out, block, {"type": "input_json_delta", "partial_json": "".join(block.text)})

    def _stop_current(self, out: list[Event], next_call_id: str | None) -> None:
        """The open block stopped (a thinking block sealed, bound to the call that follows it)."""
        block, self._current = self._current, None
        if block is not None:
            self._stop(block, next_call_id, out)

    def _stop_unnamed(self, out: list[Event]) -> None:
        """At the finish: calls whose name never came are still calls the model made."""
        for call in self._calls.values():
            if call.index < 0:
                call.name = call.name or "unknown"
                self._begin_call(call, out)
                self._stop_current(out, None)

    def _stop(self, block: _Block, next_call_id: str | None, out: list[Event]) -> None:
        if block.kind == "thinking":
            facts = ThinkingFacts(
                "".join(block.text),
                self._model,
                next_call_id,
                tuple(block.details),
                block_id=f"{self._id}.{block.index}",
            )
            block.signature = self._seal(facts) or ""
            if block.signature:
                self._delta_event(out, block, {"type": "signature_delta", "signature": block.signature})
        block.stopped = True
        out.append({"type": "content_block_stop", "index": block.index})

    def _delta_event(self, out: list[Event], block: _Block, delta: dict[str, Any]) -> None:
        out.append({"type": "content_block_delta", "index": block.index, "delta": delta})

    def _finished_with(self, out: list[Event], message: str) -> None:
        out.extend(self._fail(message, "api_error"))

    def _fail(self, message: str, type_: str) -> list[Event]:
        """An `error` event at once: no open block is stopped (a half-received call must never look
        complete), and no message_stop follows."""
        self._finished = True
        self.failed = message
        self._current = None
        return [error_event(message, type_)]

    # ----------------------------------------------------------------------------------------------
    def _block_dict(self, block: _Block) -> dict[str, Any]:
        text = "".join(block.text)
        if block.kind == "thinking":
            return {"type": "thinking", "thinking": text if self._show else "", "signature": block.signature}
        if block.kind == "text":
            return {"type": "text", "text": text}
        return {"type": "tool_use", "id": block.call_id, "name": block.name, "input": tool_input(text)}

    def _usage_dict(self) -> dict[str, Any]:
        usage = self._usage
        details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else None
        cached = count(details, "cached_tokens") or count(usage, "prompt_cache_hit_tokens")
        return {
            "input_tokens": max(count(usage, "prompt_tokens") - cached, 0),
            "output_tokens": count(usage, "completion_tokens"),
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        }

    def _delta_usage(self) -> dict[str, Any]:
        usage = self._usage_dict()
        return {k: usage[k] for k in ("input_tokens", "output_tokens", "cache_read_input_tokens")}


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the `input` object (empty arguments: {}). Arguments that are not
    a JSON object are kept whole under `arguments`, so nothing the model wrote is lost."""
    if not arguments.strip():
        return {}
    try:
        parsed = jsonio.loads(arguments.encode())
    except ValueError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


# The proxy's own errors by HTTP status, as Anthropic's error types (anthropic.types.shared.ErrorType).
_STATUS_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",  # Anthropic's own status for it
}
# The status of an answer that failed, by the Anthropic error type its code maps to (_ERROR_TYPES).
_TYPE_STATUSES: Final[Mapping[str, int]] = {
    "timeout_error": 504,
    "rate_limit_error": 429,
    "overloaded_error": 529,
}
# An answer the upstream gave as a success that cannot be used: the upstream's failure.
FAILED_ANSWER_STATUS: Final = 502


def failed_answer_status(completion: Any) -> int:
    """The HTTP status of a 2xx chat answer that failed (an `error` body, no choice, not JSON), as
    the Messages door answers it: the status its error names (a numeric `code` or `status`, as
    OpenRouter sends), or the one of the Anthropic type its code maps to (a timeout 504, a rate
    limit 429, overload 529), else 502: the upstream's answer could not be used."""
    error = completion.get("error") if isinstance(completion, Mapping) else None
    if not isinstance(error, Mapping):
        return FAILED_ANSWER_STATUS
    for key in ("code", "status"):
        named = error.get(key)
        if type(named) is int and 400 <= named <= 599:
            return named
    code = error.get("code")
    kind = _ERROR_TYPES.get(code) if isinstance(code, str) else None
    return _TYPE_STATUSES.get(kind, FAILED_ANSWER_STATUS) if kind is not None else FAILED_ANSWER_STATUS


def error_body(status: int, message: str) -> bytes:
    """A proxy error in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`."""
    return jsonio.dumps(error_event(message, _STATUS_TYPES.get(status, "api_error")))
