"""Compaction on a bridged upstream: Codex's `POST /v1/responses/compact` and a trailing
`compaction_trigger` input item, as values (docs/responses.md, "Compaction").

A chat-only upstream has no compaction of its own, so the proxy asks it for one: the conversation
so far, then `COMPACTION_PROMPT` as the last user message, without tools. The answer's text (never
its reasoning) is the summary; it goes back sealed in one `compaction` item's `encrypted_content`
(proxy.core.protocols.responses.state.seal_compaction), which the client keeps in place of the
history and sends back in later input, where the proxy opens it into one user message
(`expand_compaction`). Nobody but this deployment reads or forges it.

`CompactionTranscoder` has the FrontDoor shape of ResponsesTranscoder (`feed`/`close`/
`completion`/`final`): it reads the chat answer the pipeline writes, shows nothing of it while it
streams, and ends with the compaction item — as a `Response` (the trigger, stream or not) or as
`CompactedResponse` (`/v1/responses/compact`: the input's user messages, then the item).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from proxy.core import jsonio
from proxy.core.protocols.responses.events import first_choice, frames
from proxy.core.protocols.responses.output import (
    IdFactory,
    ResponseFrame,
    error_facts,
    response_error,
    response_object,
    responses_usage,
)
from proxy.core.stream.chunk_template import DoorPiece, joined
from proxy.core.stream.sse import SSEDecoder

__all__ = ["COMPACTION_PROMPT", "CompactionTranscoder", "compaction_request", "is_trigger", "user_messages"]

COMPACTION_PROMPT: Final = (
    "Compact the conversation above into a handoff summary for yourself, to continue the task "
    "with no other context: the user's goal and constraints, decisions made, what was done (files, "
    "commands and their results), what is unresolved, and the next steps. Be complete but concise; "
    "write only the summary."
)
_DONE: Final = b"[DONE]"
_MAX_EVENT_BYTES: Final = 64 * 1024 * 1024


def is_trigger(item: Any) -> bool:
    return isinstance(item, Mapping) and item.get("type") == "compaction_trigger"


def compaction_request(messages: list[dict[str, Any]], body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat body that asks the upstream for the summary: the history and the prompt, no tools."""
    chat: dict[str, Any] = {
        "model": body.get("model"),
        "messages": [*messages, {"role": "user", "content": COMPACTION_PROMPT}],
    }
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def user_messages(items: list[Any]) -> list[dict[str, Any]]:
    """The input's user messages, as `/v1/responses/compact` returns them before its item."""
    out = []
    for item in items:
        if (
            isinstance(item, Mapping)
            and item.get("role") == "user"
            and item.get("type", "message") == "message"
        ):
            content = item.get("content")
            if isinstance(content, str):
                content = [{"type": "input_text", "text": content}]
            out.append({"type": "message", "role": "user", "content": content})
    return out


class CompactionTranscoder:
    """The chat answer → a compaction. `sealer` seals the summary (None: it could not be sealed);
    `kept`: for `/compact`, the user messages its output repeats before the item (None: the
    answer is a `Response`, the trigger's form)."""

    def __init__(
        self,
        frame: ResponseFrame,
        *,
        sealer: Callable[[str], str | None],
        new_id: IdFactory,
        kept: list[dict[str, Any]] | None = None,
    ) -> None:
        self._frame = frame
        self._sealer = sealer
        self._new_id = new_id
        self._kept = kept
        self._decoder = SSEDecoder(_MAX_EVENT_BYTES)
        self._text: list[str] = []
        self._usage: Any = None
        self._finish: str | None = None
        self._error: str | None = None
        self._seq = 0
        self._started = False
        self.final: dict[str, Any] | None = None

    # -- stream -------------------------------------------------------------------------------
    def feed(self, data: bytes) -> bytes:
        out = self._start()
        for event in self._decoder.feed(data):
            out += self._event(event.data)
        return out

    def feed_pieces(self, pieces: Sequence[DoorPiece]) -> bytes:
        """`feed` of the pieces joined: a compaction reads every chunk (its summary is one item)."""
        return self.feed(joined(pieces))

    def close(self) -> bytes:
        out = self._start()
        for event in self._decoder.flush():
            out += self._event(event.data)
        if self.final is None:
            out += self._end(failure="the answer ended before it was complete")
        return out

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        opening = response_object(self._frame, status="in_progress", output=[])
        return frames(
            [
                self._numbered("response.created", response=opening),
                self._numbered("response.in_progress", response=opening),
            ]
        )

    def _event(self, data: bytes | None) -> bytes:
        if data is None or self.final is not None:
            return b""  # (the trace's comments are not shown: a compaction has no visible output)
        if data == _DONE:
            return self._end()
        try:
            chunk = jsonio.loads(data)
        except ValueError:
            return b""
        if isinstance(chunk, Mapping):
            self._chunk(chunk)
        return b""

    def _chunk(self, chunk: Mapping[str, Any]) -> None:
        if chunk.get("error") is not None:
            self._error = error_facts(chunk["error"])[0]
        if isinstance(chunk.get("usage"), Mapping):
            self._usage = chunk["usage"]
        choice = first_choice(chunk.get("choices"))
        if choice is None:
            return
        delta = choice.get("delta")
        if isinstance(delta, Mapping) and isinstance(delta.get("content"), str):
            self._text.append(delta["content"])
        if isinstance(choice.get("finish_reason"), str):
            self._finish = choice["finish_reason"]

    def _end(self, failure: str | None = None) -> bytes:
        failure = failure or self._error or self._problem()
        summary = "".join(self._text).strip()
        blob = None if failure is not None else self._sealer(summary)
        if failure is None and blob is None:
            failure = "the summary was too large to seal"
        if failure is not None:
            response = response_object(
                self._frame,
                status="failed",
                output=[],
                usage=responses_usage(self._usage),
                error=response_error(f"Compaction failed: {failure}", "server_error"),
            )
            self.final = response
            return frames([self._numbered("response.failed", response=response)])
        item = {"id": self._new_id("cmp"), "type": "compaction", "encrypted_content": blob}
        response = response_object(
            self._frame, status="completed", output=[item], usage=responses_usage(self._usage)
        )
        self.final = response
        return frames(
            [
                self._numbered("response.output_item.added", output_index=0, item=item),
                self._numbered("response.output_item.done", output_index=0, item=item),
                self._numbered("response.completed", response=response),
            ]
        )

    def _problem(self) -> str | None:
        if self._finish is None:
            return "the upstream stream ended without a finish reason"
        if self._finish == "length":
            return "the summary was cut at the token limit"
        if not "".join(self._text).strip():
            return "the upstream gave no summary text"
        return None

    def _numbered(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    # -- non-stream -----------------------------------------------------------------------------
    def completion(self, body: bytes) -> bytes:
        """A whole chat completion → the `Response` (trigger) or `CompactedResponse` (/compact)."""
        try:
            parsed = jsonio.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, Mapping):
            choice = first_choice(parsed.get("choices"))
            message = choice.get("message") if choice is not None else None
            if isinstance(message, Mapping) and isinstance(message.get("content"), str):
                self._text.append(message["content"])
            if choice is not None:
                self._finish = choice.get("finish_reason") or "stop"
            self._usage = parsed.get("usage")
            if parsed.get("error") is not None:
                self._chunk(parsed)
        else:
            self._error = "the upstream's answer is not a JSON object"
        self._end()
        response = self.final
        assert response is not None
        if self._kept is None or response["status"] != "completed":
            return jsonio.dumps(response)
        compacted = {
            "id": response["id"],
            "object": "response.compaction",
            "created_at": int(self._frame.created_at),
            "output": [*self._kept, *response["output"]],
            "usage": response["usage"] or responses_usage({}),
        }
        return jsonio.dumps(compacted)
