"""The Responses front door's response side, bridged: what the response pipeline writes for a chat
answer (normalized chat-completion SSE, or one completion body) → what a Responses client reads.

Pure and incremental. The bridge runs the chat path unchanged (reasoning normalization, trace,
replay capture, the review gate) and translates its output last, so every feature of the chat
path holds here by construction (docs/architecture.md: one internal exchange, one adapter pair
per front door). `ResponsesTranscoder.feed(bytes)` takes the pipeline's output as written, in any
split, and returns the Responses events it completes. The output is read once into typed events
(proxy.core.protocols.chat_events.ChatEventReader), which the encoder
(proxy.core.protocols.responses.events.ResponsesEncoder) turns into Responses events:

- a `data:` chunk → its events (reasoning and text deltas, tool call fragments, usage, finish);
- `data: [DONE]` → the terminal event (`response.completed` / `incomplete`, or `failed` when no
  finish reason came); an error chunk (the pipeline's own mid-stream failure event, an upstream's
  error) → `response.failed`;
- comment lines (the trace's `: trace {…}`, keep-alives) → forwarded as they are: every Responses
  SDK skips comments, and no `response.*` event type is invented for the trace.

`close()` ends a stream that stopped without `[DONE]` (`response.failed`: never a stream that looks
complete). `completion(body)` is the non-stream form: the chat completion body → the `Response`
object's JSON. `final` holds the terminal `Response` object once there is one (for the edge to
store it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core import jsonio
from proxy.core.protocols.chat_events import (
    ChatEvent,
    ChatEventReader,
    Comment,
    ReasoningDelta,
    TextDelta,
    completion_events,
)
from proxy.core.protocols.responses.events import ResponsesEncoder, frames
from proxy.core.protocols.responses.output import IdFactory, ResponseFrame, Seal
from proxy.core.protocols.responses.tools import ToolName
from proxy.core.stream.chunk_template import KnownRun

__all__ = ["CUT_SHORT", "ResponsesTranscoder", "response_from_completion"]

CUT_SHORT = "the answer ended before it was complete (the stream stopped without its end)"
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class ResponsesTranscoder:
    """One response's translation (stream or non-stream, not both).

    `templates=False` (the tests' reference) reads every chunk alone and writes every event through
    the encoder's general path: no run read by its shape, no delta frame written directly."""

    def __init__(
        self,
        frame: ResponseFrame,
        *,
        seal: Seal,
        new_id: IdFactory,
        tool_names: Mapping[str, ToolName] | None = None,
        templates: bool = True,
    ) -> None:
        self._frame = frame
        self._seal = seal
        self._new_id = new_id
        self._tool_names = tool_names
        self._encoder = ResponsesEncoder(frame, seal=seal, new_id=new_id, tool_names=tool_names)
        self._reader = ChatEventReader(templates=templates)
        self._direct = templates
        self.final: dict[str, Any] | None = None

    @property
    def response_id(self) -> str:
        return self._frame.id

    def start(self) -> bytes:
        """`response.created` and `response.in_progress`, at once (the first bytes a client sees)."""
        return frames(self._encoder.start())

    def feed(self, data: bytes) -> bytes:
        """The events the pipeline's next output completes; the first call opens the response
        (`response.created`, `response.in_progress`) whatever it carries. Runs of chunks of more of
        the same (most of a stream) come from the reader as one event each, written in one go."""
        return self._write(self._reader.feed(data))

    def feed_pieces(self, pieces: Sequence[bytes | KnownRun]) -> bytes:
        """`feed` of the pieces joined (StreamPipeline.feed_runs): a run of the chunks the reader
        reads by their shape is written from its texts, its bytes not scanned again."""
        return self._write(self._reader.feed_pieces(pieces))

    def close(self) -> bytes:
        """The end of the pipeline's output: what is left, and `response.failed` if it never ended."""
        out = self._write(self._reader.close())
        if not self._encoder.finished:
            out += self._emit(self._encoder.fail(CUT_SHORT))
        return out

    def completion(self, body: bytes) -> bytes:
        """A whole chat completion (as the pipeline wrote it) → the `Response` object's JSON."""
        try:
            parsed = jsonio.loads(body)
        except ValueError:
            parsed = None
        if not isinstance(parsed, Mapping):
            parsed = {"error": {"message": "the upstream's answer is not a JSON object"}}
        response = response_from_completion(
            parsed, self._frame, seal=self._seal, new_id=self._new_id, tool_names=self._tool_names
        )
        self.final = response
        return jsonio.dumps(response)

    def _write(self, events: list[ChatEvent]) -> bytes:
        """The bytes of `events`, after the opening ones (once). Comment lines (the trace's, keep-
        alives) pass as they are: every Responses SDK skips comments."""
        encoder = self._encoder
        out: list[bytes] = [self.start()]
        batch: list[ChatEvent] = []  # (events the encoder takes in one call)
        for event in events:
            if type(event) is TextDelta or type(event) is ReasoningDelta:
                if batch:
                    out.append(self._emit(encoder.feed(batch)))
                    batch = []
                self._texts(type(event) is ReasoningDelta, event.texts, out)
            elif type(event) is Comment:
                if batch:
                    out.append(self._emit(encoder.feed(batch)))
                    batch = []
                out.append(b"".join([line + b"\n" for line in event.lines]) + b"\n")
            else:
                batch.append(event)
        if batch:
            out.append(self._emit(encoder.feed(batch)))
        return b"".join(out)

    def _texts(self, reasoning: bool, texts: list[str], out: list[bytes]) -> None:
        """Text deltas: those that continue the item streaming written directly, in one go; the
        one that opens an item (or every one, in the reference) through the encoder."""
        encoder = self._encoder
        done = 0
        while done < len(texts):
            rest = texts[done:] if done else texts
            written = encoder.text_delta_frames(reasoning, rest) if self._direct else None
            if written is not None:
                out.append(written)
                return
            one = [texts[done]]
            out.append(frames(encoder.feed((ReasoningDelta(one) if reasoning else TextDelta(one),))))
            done += 1

    def _emit(self, events: list[dict[str, Any]]) -> bytes:
        if events and events[-1]["type"] in _TERMINAL:
            self.final = events[-1]["response"]
        return frames(events)


def response_from_completion(
    completion: Mapping[str, Any],
    frame: ResponseFrame,
    *,
    seal: Seal,
    new_id: IdFactory,
    tool_names: Mapping[str, ToolName] | None = None,
) -> dict[str, Any]:
    """The `Response` object of a whole chat completion (the non-stream form): choice 0's message
    as one chunk through the encoder (reasoning, then text, then the tool calls). A completion
    without a finish reason counts as finished ("stop"): its body arrived whole."""
    encoder = ResponsesEncoder(frame, seal=seal, new_id=new_id, tool_names=tool_names)
    events = encoder.feed(completion_events(completion))
    return dict(events[-1]["response"])
