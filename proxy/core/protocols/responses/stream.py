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

`socket=True` writes the same events in the WebSocket mode's form instead of SSE (a socket turn's
door: proxy.server.doors.responses_ws): each event's JSON (the text its SSE `data:` line carries,
byte for byte) then a newline (output.message_frames), comment lines left out (a socket has none),
so the socket sends a write's events as they are, with no SSE to encode and split again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from proxy.core.protocols.chat_events import completion_events
from proxy.core.protocols.door_stream import DoorEncoder, DoorTranscoder, comment_event
from proxy.core.protocols.responses.events import ResponsesEncoder, frames
from proxy.core.protocols.responses.output import IdFactory, ResponseFrame, Seal, message_frames
from proxy.core.protocols.responses.tools import ToolName

__all__ = ["ResponsesTranscoder", "response_from_completion"]

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class ResponsesTranscoder(DoorTranscoder):
    """One response's translation (stream or non-stream, not both): DoorTranscoder's reading and
    batching through a ResponsesEncoder, which also writes the text deltas that continue the item
    streaming directly.

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
        socket: bool = False,
    ) -> None:
        encoder = ResponsesEncoder(frame, seal=seal, new_id=new_id, tool_names=tool_names, socket=socket)
        super().__init__(encoder, templates=templates)
        self._responses = encoder  # (the encoder, as the Responses one it is)
        self._frame = frame
        self._write_events: Callable[[Iterable[Mapping[str, Any]]], bytes] = (
            message_frames if socket else frames
        )
        self.socket = socket
        self.final: dict[str, Any] | None = None

    @property
    def response_id(self) -> str:
        return self._frame.id

    def start(self) -> bytes:
        """`response.created` and `response.in_progress`, at once (the first bytes a client sees)."""
        if self._direct:
            return self._responses.start_frames()
        return self._write_events(self._encoder.start())

    def _frames(self, events: list[dict[str, Any]]) -> bytes:
        if events and events[-1]["type"] in _TERMINAL:
            self.final = events[-1]["response"]
        return self._write_events(events)

    def _comment(self, lines: list[bytes], out: list[bytes]) -> None:
        """Comment lines pass as they are over HTTP; a socket has none (the trace still reaches
        the console, metrics and OpenTelemetry, which read it before the door)."""
        if not self.socket:
            out.append(comment_event(lines))

    def _completion(self, completion: Mapping[str, Any]) -> dict[str, Any]:
        """The `Response` object (its encoder, unused by a stream, writes it)."""
        self.final = response = response_from_completion(completion, self._encoder)
        return response


def response_from_completion(completion: Mapping[str, Any], encoder: DoorEncoder) -> dict[str, Any]:
    """The `Response` object of a whole chat completion (the non-stream form), written by a fresh
    ResponsesEncoder: choice 0's message as one chunk through it (reasoning, then text, then the
    tool calls). A completion without a finish reason counts as finished ("stop"): its body
    arrived whole."""
    events = encoder.feed(completion_events(completion))
    return dict(events[-1]["response"])
