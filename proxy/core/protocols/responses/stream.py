"""The Responses front door's response side, bridged: what the response pipeline writes for a chat
answer (normalized chat-completion SSE, or one completion body) → what a Responses client reads.

Pure and incremental. The bridge runs the chat path unchanged (reasoning normalization, trace,
replay capture, the review gate) and translates its output last, so every feature of the chat
path holds here by construction (docs/architecture.md: one internal exchange, one adapter pair
per front door). `ResponsesTranscoder.feed(bytes)` takes the pipeline's output as written, in any
split, and returns the Responses events it completes:

- a `data:` chunk → proxy.core.protocols.responses.events.ResponsesEncoder;
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
from proxy.core.protocols.responses.events import ResponsesEncoder, first_choice, frames
from proxy.core.protocols.responses.output import IdFactory, ResponseFrame, Seal
from proxy.core.protocols.responses.tools import ToolName
from proxy.core.stream import chunk_template
from proxy.core.stream.chunk_template import ChunkTemplate, KnownRun, template_of_run
from proxy.core.stream.sse import SSEDecoder

__all__ = ["CUT_SHORT", "ResponsesTranscoder", "response_from_completion"]

DONE = b"[DONE]"
CUT_SHORT = "the answer ended before it was complete (the stream stopped without its end)"
# The pipeline bounds events itself; this decoder only re-reads what the pipeline wrote.
_MAX_EVENT_BYTES = 64 * 1024 * 1024


class ResponsesTranscoder:
    """One response's translation (stream or non-stream, not both)."""

    def __init__(
        self,
        frame: ResponseFrame,
        *,
        seal: Seal,
        new_id: IdFactory,
        tool_names: Mapping[str, ToolName] | None = None,
    ) -> None:
        self._frame = frame
        self._seal = seal
        self._new_id = new_id
        self._tool_names = tool_names
        self._encoder = ResponsesEncoder(frame, seal=seal, new_id=new_id, tool_names=tool_names)
        self._decoder = SSEDecoder(_MAX_EVENT_BYTES)
        self._template: ChunkTemplate | None = None  # of the last plain text delta decoded
        self._adopted = False  # a run handed over brought its template: runs bring their own since
        self.final: dict[str, Any] | None = None

    @property
    def response_id(self) -> str:
        return self._frame.id

    def start(self) -> bytes:
        """`response.created` and `response.in_progress`, at once (the first bytes a client sees)."""
        return frames(self._encoder.start())

    def feed(self, data: bytes) -> bytes:
        """The events the pipeline's next output completes; the first call opens the response
        (`response.created`, `response.in_progress`) whatever it carries.

        Runs of chunks of more of the same (most of a stream: the pipeline passes them on as the
        upstream's bytes) are read the pipeline's way, by their ChunkTemplate, without decoding:
        each text becomes its delta frame directly. Everything else is decoded event by event."""
        out: list[bytes] = [self.start()]
        pos, size = 0, len(data)
        decoder = self._decoder
        while pos < size:
            template = self._template
            if (
                template is not None
                and template.event_prefix is not None
                and decoder.idle
                and data.startswith(template.event_prefix, pos)
                and self._encoder.streaming(template.reasoning)
            ):
                end, texts = template.take_texts(data, pos, _MAX_EVENT_BYTES, False)
                if end > pos:
                    written = self._encoder.text_delta_frames(template.reasoning, texts)
                    assert written is not None  # (the item streams this kind of text; none is empty)
                    out.append(written)
                    pos = end
                    continue
            cut = data.find(b"\n\n", pos)
            end = size if cut < 0 else cut + 2
            for event in decoder.feed(data[pos:end] if pos or end < size else data):
                self._event(event.raw, event.data, out)
            pos = end
        return b"".join(out)

    def feed_pieces(self, pieces: Sequence[bytes | KnownRun]) -> bytes:
        """`feed` of the pieces joined (StreamPipeline.feed_runs): a run of the chunks this
        transcoder's template reads is written from its texts, its bytes not scanned again."""
        out: list[bytes] = [self.start()]
        for piece in pieces:
            if isinstance(piece, bytes):
                out.append(self.feed(piece))
                continue
            self._adopted |= piece.template is not None  # (from now on the runs bring their templates)
            template = template_of_run(self._template, piece)
            written = None
            if template is not None and self._decoder.idle:
                self._template = template
                written = self._encoder.text_delta_frames(template.reasoning, piece.texts)
            out.append(self.feed(piece.data) if written is None else written)
        return b"".join(out)

    def close(self) -> bytes:
        """The end of the pipeline's output: what is left, and `response.failed` if it never ended."""
        out: list[bytes] = [self.start()]
        for event in self._decoder.flush():
            self._event(event.raw, event.data, out)
        if not self._encoder.finished:
            out.append(self._emit(self._encoder.fail(CUT_SHORT)))
        return b"".join(out)

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

    def _event(self, raw: bytes, data: bytes | None, out: list[bytes]) -> None:
        if data is None:
            comments = b"".join(line + b"\n" for line in raw.splitlines() if line.startswith(b":"))
            if comments:
                out.append(comments + b"\n")
            return
        if data == DONE:
            out.append(self._emit(self._encoder.end()))
            return
        try:
            chunk = jsonio.loads(data)
        except ValueError:
            chunk = None
        if isinstance(chunk, dict):
            fast = self._text_delta(chunk)
            out.append(fast if fast is not None else self._emit(self._encoder.feed(chunk)))
            if (
                fast is not None
                and not self._adopted
                and (self._template is None or self._template.text_of(data) is None)
            ):
                self._template = chunk_template.learn(data, chunk)  # the shape of more of the same

    def _text_delta(self, chunk: dict[str, Any]) -> bytes | None:
        """Most chunks carry one piece of text of the item already streaming: their frame is
        written at once (ResponsesEncoder.text_delta_frame), not through the general path."""
        choices = chunk.get("choices")
        if "usage" in chunk or "error" in chunk or type(choices) is not list or len(choices) != 1:
            return None
        choice = choices[0]
        if type(choice) is not dict or choice.get("finish_reason") is not None or choice.get("index", 0) != 0:
            return None
        delta = choice.get("delta")
        if type(delta) is not dict or "tool_calls" in delta or "reasoning_details" in delta:
            return None
        content, reasoning = delta.get("content"), delta.get("reasoning_content") or delta.get("reasoning")
        if type(content) is str and content and not reasoning:
            return self._encoder.text_delta_frame(False, content)
        if type(reasoning) is str and not content:
            return self._encoder.text_delta_frame(True, reasoning)
        return None

    def _emit(self, events: list[dict[str, Any]]) -> bytes:
        if events and events[-1]["type"] in ("response.completed", "response.incomplete", "response.failed"):
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
    choice = first_choice(completion.get("choices"))
    if completion.get("error") is not None:  # (a null `error` beside an answer is none, as in a stream)
        events = encoder.feed(completion)
    elif choice is None:
        events = encoder.fail("the upstream's answer has no choice")
    else:
        message = choice.get("message")
        delta = dict(message) if isinstance(message, Mapping) else {}
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(calls) if isinstance(c, Mapping)]
        finish = choice.get("finish_reason")
        finish = finish if isinstance(finish, str) and finish else "stop"
        chunk = {
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": completion.get("usage"),
        }
        events = encoder.feed(chunk) + encoder.end()
    return dict(events[-1]["response"])
