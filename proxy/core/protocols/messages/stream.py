"""The Messages front door's response side, bridged: what the response pipeline writes for a chat
answer (normalized chat-completion SSE, or one completion body) → what an Anthropic client reads.

Pure and incremental, like the Responses door's transcoder (proxy.core.protocols.responses.stream):
the chat path runs unchanged (normalization, trace, replay capture, the review gate) and its output
is translated last. `MessagesTranscoder.feed(bytes)` takes the pipeline's output in any split and
returns the events it completes (proxy.core.protocols.messages.events):

- a `data:` chunk → the encoder; `data: [DONE]` → message_delta + message_stop (an `error` event
  when no finish reason came); an error chunk (the pipeline's own mid-stream failure event, an
  upstream's error) → an `error` event;
- comment lines: the proxy's keep-alives (`: keep-alive`, written while a reviewer decides) become
  Anthropic's `ping` event; every other comment (the trace's `: trace {…}`) passes as it is: the
  Anthropic SDKs skip comments, and no event type is invented for the trace.

The output is read once into typed events (proxy.core.protocols.chat_events.ChatEventReader): most
of a stream is runs of chunks of more of the same (the next piece of reasoning or of the answer),
which the reader gives as one event carrying its texts, read by their shape without decoding each
chunk, or taken as the pipeline hands them over. While the matching block is open, each text joins
it and its `content_block_delta` is written as fixed bytes around the text's JSON string (nothing
for thinking not shown), byte for byte what the encoder's general path writes.

The first bytes of the stream are `message_start` and a `ping`, as Anthropic's API sends them.
`close()` ends a stream that stopped without `[DONE]` with an `error` event (never one that looks
complete). `completion(body)` is the non-stream form: the chat completion → the `Message` JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.core import jsonio
from proxy.core.protocols.chat_events import (
    ChatEvent,
    ChatEventReader,
    Comment,
    Error,
    ReasoningDelta,
    TextDelta,
    completion_events,
)
from proxy.core.protocols.messages.events import IdFactory, MessagesEncoder, ThinkingSeal, error_event
from proxy.core.protocols.responses.output import frames
from proxy.core.stream.chunk_template import KnownRun

__all__ = ["CUT_SHORT", "MessagesTranscoder", "message_from_completion"]

CUT_SHORT: Final = "the answer ended before it was complete (the stream stopped without its end)"
KEEPALIVE: Final = b": keep-alive"
PING: Final = b'event: ping\ndata: {"type":"ping"}\n\n'


class MessagesTranscoder:
    """One message's translation (stream or non-stream, not both).

    `templates=False` (the tests' reference) reads every chunk alone and writes every event through
    the encoder's general path: no run read by its shape, no delta written directly."""

    def __init__(
        self,
        message_id: str,
        model: str,
        *,
        seal: ThinkingSeal,
        new_id: IdFactory,
        show_thinking: bool = True,
        stop_sequences: tuple[str, ...] = (),
        templates: bool = True,
    ) -> None:
        self._args = (message_id, model)
        self._seal, self._new_id, self._show = seal, new_id, show_thinking
        self._stops = stop_sequences
        self._encoder = MessagesEncoder(
            message_id,
            model,
            seal=seal,
            new_id=new_id,
            show_thinking=show_thinking,
            stop_sequences=stop_sequences,
        )
        self.reader = ChatEventReader(templates=templates)
        self._direct = templates
        self._final: dict[str, Any] | None = None
        self._whole = False  # the stream reached message_stop

    @property
    def final(self) -> dict[str, Any] | None:
        """The Message once whole (a stream that reached message_stop, or a completion)."""
        if self._final is None and self._whole:
            self._final = self._encoder.message()
        return self._final

    @property
    def hits(self) -> int:
        """Chunks read as runs (by their shape, or handed over with their texts), not decoded."""
        return self.reader.taken + self.reader.handed

    def start(self) -> bytes:
        """`message_start` and a `ping`, once."""
        events = self._encoder.start()
        return frames(events) + PING if events else b""

    def feed(self, data: bytes) -> bytes:
        return self._write(self.reader.feed(data))

    def feed_pieces(self, pieces: Sequence[bytes | KnownRun]) -> bytes:
        """`feed` of the pieces joined (StreamPipeline.feed_runs): a run of the chunks the reader
        reads by their shape is taken from its texts, its bytes not scanned again."""
        return self._write(self.reader.feed_pieces(pieces))

    def close(self) -> bytes:
        out = self._write(self.reader.close())
        if not self._encoder.finished:
            out += frames(self._encoder.fail(CUT_SHORT))
        return out

    def completion(self, body: bytes) -> bytes:
        try:
            parsed = jsonio.loads(body)
        except ValueError:
            parsed = None
        if not isinstance(parsed, Mapping):
            parsed = {"error": {"message": "the upstream's answer is not a JSON object"}}
        message = message_from_completion(
            parsed,
            *self._args,
            seal=self._seal,
            new_id=self._new_id,
            show_thinking=self._show,
            stop_sequences=self._stops,
        )
        if message.get("type") == "message":
            self._final = message
        return jsonio.dumps(message)

    def _write(self, events: list[ChatEvent]) -> bytes:
        """The bytes of `events`, after the opening ones (once). The proxy's keep-alives (written
        while a reviewer decides) become Anthropic's `ping`; other comment lines (the trace's) pass
        as they are: the Anthropic SDKs skip comments."""
        encoder = self._encoder
        out: list[bytes] = [self.start()]
        batch: list[ChatEvent] = []  # (events the encoder takes in one call)
        for event in events:
            if type(event) is TextDelta or type(event) is ReasoningDelta:
                if batch:
                    out.append(self._frames(encoder.feed(batch)))
                    batch = []
                self._texts(type(event) is ReasoningDelta, event.texts, out)
            elif type(event) is Comment:
                if batch:
                    out.append(self._frames(encoder.feed(batch)))
                    batch = []
                comments = [line + b"\n" for line in event.lines if line != KEEPALIVE]
                if comments:
                    out.append(b"".join(comments) + b"\n")
                if len(comments) < len(event.lines) and not encoder.finished:
                    out.append(PING)
            else:
                batch.append(event)
        if batch:
            out.append(self._frames(encoder.feed(batch)))
        return b"".join(out)

    def _frames(self, written: list[dict[str, Any]]) -> bytes:
        if written and written[-1]["type"] == "message_stop":
            self._whole = True  # (the Message is built only when asked for: `final`)
        return frames(written)

    def _texts(self, reasoning: bool, texts: list[str], out: list[bytes]) -> None:
        """Text deltas: while their block is open, each text joins it and its delta is written as
        the fixed bytes around the text's JSON string; the one that opens a block (or every one,
        in the reference) through the encoder."""
        encoder = self._encoder
        done = 0
        while done < len(texts):
            frame = encoder.delta_frame(reasoning) if self._direct else None
            if frame is not None:
                rest = texts[done:] if done else texts
                encoder.extend(rest)
                head, tail = frame
                if not head:  # (thinking not shown: nothing written)
                    pass
                elif len(rest) == 1:
                    out.append(head + jsonio.dumps(rest[0]) + tail)
                else:  # (as the encoder writes each text)
                    inside = jsonio.string_insides(rest)
                    out.append(head + b'"' + (b'"' + tail + head + b'"').join(inside) + b'"' + tail)
                return
            one = [texts[done]]
            out.append(frames(encoder.feed((ReasoningDelta(one) if reasoning else TextDelta(one),))))
            done += 1


def message_from_completion(
    completion: Mapping[str, Any],
    message_id: str,
    model: str,
    *,
    seal: ThinkingSeal,
    new_id: IdFactory,
    show_thinking: bool = True,
    stop_sequences: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The `Message` object of a whole chat completion (the non-stream form): choice 0's message as
    one chunk through the encoder (reasoning, then text, then the tool calls); an error body as an
    Anthropic error object. A completion without a finish reason counts as finished ("stop"): its
    body arrived whole."""
    encoder = MessagesEncoder(
        message_id,
        model,
        seal=seal,
        new_id=new_id,
        show_thinking=show_thinking,
        stop_sequences=stop_sequences,
    )
    events = completion_events(completion)
    first = events[0]
    if isinstance(first, Error):  # (the completion's error as it is: no type read from its code)
        return error_event(first.message)
    written = encoder.feed(events)
    if written and written[-1]["type"] == "error":
        return written[-1]
    return encoder.message()
