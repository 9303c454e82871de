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

from collections.abc import Mapping
from typing import Any, Final

from proxy.core.protocols.chat_events import Error, completion_events
from proxy.core.protocols.door_stream import DoorTranscoder
from proxy.core.protocols.messages.events import IdFactory, MessagesEncoder, ThinkingSeal, error_event
from proxy.core.protocols.responses.output import frames

__all__ = ["MessagesTranscoder", "message_from_completion"]

KEEPALIVE: Final = b": keep-alive"
PING: Final = b'event: ping\ndata: {"type":"ping"}\n\n'


class MessagesTranscoder(DoorTranscoder):
    """One message's translation (stream or non-stream, not both): DoorTranscoder's reading and
    batching through a MessagesEncoder, which also writes the deltas that continue the open block
    directly.

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
        self._messages = MessagesEncoder(
            message_id,
            model,
            seal=seal,
            new_id=new_id,
            show_thinking=show_thinking,
            stop_sequences=stop_sequences,
        )
        super().__init__(self._messages, templates=templates)
        self._final: dict[str, Any] | None = None
        self._whole = False  # the stream reached message_stop

    @property
    def final(self) -> dict[str, Any] | None:
        """The Message once whole (a stream that reached message_stop, or a completion)."""
        if self._final is None and self._whole:
            self._final = self._messages.message()
        return self._final

    def start(self) -> bytes:
        """`message_start` and a `ping`, once."""
        events = self._encoder.start()
        return frames(events) + PING if events else b""

    def _frames(self, events: list[dict[str, Any]]) -> bytes:
        if events and events[-1]["type"] == "message_stop":
            self._whole = True  # (the Message is built only when asked for: `final`)
        return frames(events)

    def _comment(self, lines: list[bytes], out: list[bytes]) -> None:
        """The proxy's keep-alives (written while a reviewer decides) become Anthropic's `ping`;
        other comment lines (the trace's) pass as they are: the Anthropic SDKs skip comments."""
        comments = [line + b"\n" for line in lines if line != KEEPALIVE]
        if comments:
            out.append(b"".join(comments) + b"\n")
        if len(comments) < len(lines) and not self._encoder.finished:
            out.append(PING)

    def _completion(self, completion: Mapping[str, Any]) -> dict[str, Any]:
        """The `Message`, or an Anthropic error object (its encoder, unused by a stream, writes it)."""
        message = message_from_completion(completion, self._messages)
        if message.get("type") == "message":
            self._final = message
        return message


def message_from_completion(completion: Mapping[str, Any], encoder: MessagesEncoder) -> dict[str, Any]:
    """The `Message` object of a whole chat completion (the non-stream form), written by a fresh
    `encoder`: choice 0's message as one chunk through it (reasoning, then text, then the tool
    calls); an error body as an Anthropic error object. A completion without a finish reason
    counts as finished ("stop"): its body arrived whole."""
    events = completion_events(completion)
    first = events[0]
    if isinstance(first, Error):  # (the completion's error as it is: no type read from its code)
        return error_event(first.message)
    written = encoder.feed(events)
    if written and written[-1]["type"] == "error":
        return written[-1]
    return encoder.message()
