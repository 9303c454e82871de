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

Most of a stream is runs of chunks of more of the same (the next piece of reasoning or of the
answer; the pipeline passes them on as the upstream's bytes). A run is read the pipeline's way, by
the ChunkTemplate of the last such chunk decoded (proxy.core.stream.chunk_template), without
decoding each chunk: while the matching block is open, each text joins it and its
`content_block_delta` is written as fixed bytes around the text's JSON string (nothing for thinking
not shown), byte for byte what decoding it would write.

The first bytes of the stream are `message_start` and a `ping`, as Anthropic's API sends them.
`close()` ends a stream that stopped without `[DONE]` with an `error` event (never one that looks
complete). `completion(body)` is the non-stream form: the chat completion → the `Message` JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from proxy.core import jsonio
from proxy.core.protocols.messages.events import (
    MATCHED_STOP_FIELDS,
    IdFactory,
    MessagesEncoder,
    ThinkingSeal,
    error_event,
)
from proxy.core.protocols.messages.runs import take_run
from proxy.core.protocols.responses.output import error_facts, first_choice, frames
from proxy.core.stream import chunk_template
from proxy.core.stream.chunk_template import ChunkTemplate, KnownRun, template_of_run
from proxy.core.stream.sse import SSEDecoder

__all__ = ["CUT_SHORT", "MessagesTranscoder", "message_from_completion"]

DONE: Final = b"[DONE]"
CUT_SHORT: Final = "the answer ended before it was complete (the stream stopped without its end)"
KEEPALIVE: Final = b": keep-alive"
PING: Final = b'event: ping\ndata: {"type":"ping"}\n\n'
# The pipeline bounds events itself; this decoder only re-reads what the pipeline wrote.
_MAX_EVENT_BYTES: Final = 64 * 1024 * 1024


class MessagesTranscoder:
    """One message's translation (stream or non-stream, not both)."""

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
        self._decoder = SSEDecoder(_MAX_EVENT_BYTES)
        # The shape of the last plain text chunk decoded; `templates=False` (the tests' reference:
        # every event decoded) never learns one.
        self._template: ChunkTemplate | None = None
        self._templates = templates
        # True once a template came with a run handed over (feed_pieces): the runs bring their own
        # from then on, and the chunks decoded between them need not teach one.
        self._adopted = False
        self._decoded = 0  # chunks decoded
        self.hits = 0  # chunks read by their template, not decoded
        self._final: dict[str, Any] | None = None
        self._whole = False  # the stream reached message_stop

    @property
    def final(self) -> dict[str, Any] | None:
        """The Message once whole (a stream that reached message_stop, or a completion)."""
        if self._final is None and self._whole:
            self._final = self._encoder.message()
        return self._final

    def start(self) -> bytes:
        """`message_start` and a `ping`, once."""
        events = self._encoder.start()
        return frames(events) + PING if events else b""

    def feed(self, data: bytes) -> bytes:
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
            ):
                end = self._run(template, data, pos, out)
                if end > pos:
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
        transcoder's template reads is taken from its texts, its bytes not scanned again."""
        out: list[bytes] = [self.start()]
        for piece in pieces:
            if isinstance(piece, bytes):
                out.append(self.feed(piece))
            elif not self._known(piece, out):
                out.append(self.feed(piece.data))
        return b"".join(out)

    def _known(self, run: KnownRun, out: list[bytes]) -> bool:
        """A run of the chunks of this transcoder's template, taken from its texts (as `_run` takes
        them from the bytes); False: not such a run, or not at a point where its texts are enough."""
        if not self._templates:
            return False
        self._adopted |= run.template is not None  # (from now on the runs bring their templates)
        template = template_of_run(self._template, run)
        if template is None or not self._decoder.idle:
            return False
        self._template = template
        frame = self._encoder.delta_frame(template.reasoning)
        if frame is None:
            return False
        texts = run.texts
        self._encoder.extend(texts)
        self.hits += len(texts)
        head, tail = frame
        if head:  # (as the encoder writes each text)
            inside = jsonio.string_insides(texts)
            out.append(head + b'"' + (b'"' + tail + head + b'"').join(inside) + b'"' + tail)
        return True

    def _run(self, template: ChunkTemplate, data: bytes, start: int, out: list[bytes]) -> int:
        """Where the run of `template`'s chunks from `start` ends (`start`: none taken), their
        events added to `out`."""
        frame = self._encoder.delta_frame(template.reasoning)
        if frame is None:
            return start
        assert template.event_prefix is not None
        end, tokens, texts, canonical = take_run(data, start, template.event_prefix, template.suffix)
        if not tokens:
            return start
        self._encoder.extend(texts)
        self.hits += len(tokens)
        head, tail = frame
        if head:
            if not canonical:
                tokens = [orjson.dumps(text) for text in texts]  # (as the encoder writes each one)
            out.append(head + (tail + head).join(tokens) + tail)
        return end

    def close(self) -> bytes:
        out: list[bytes] = [self.start()]
        for event in self._decoder.flush():
            self._event(event.raw, event.data, out)
        if not self._encoder.finished:
            out.append(frames(self._encoder.fail(CUT_SHORT)))
        return b"".join(out)

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

    def _event(self, raw: bytes, data: bytes | None, out: list[bytes]) -> None:
        if data is None:
            lines = [line for line in raw.splitlines() if line.startswith(b":")]
            comments = [line + b"\n" for line in lines if line != KEEPALIVE]
            if comments:
                out.append(b"".join(comments) + b"\n")
            if len(comments) < len(lines) and not self._encoder.finished:
                out.append(PING)
            return
        if data == DONE:
            events = self._encoder.end()
        else:
            try:
                chunk = jsonio.loads(data)
            except ValueError:
                chunk = None
            events = []
            if isinstance(chunk, dict):
                events = self._encoder.feed(chunk)
                if self._templates and not self._adopted:
                    self._learn(data, chunk)
        if events and events[-1]["type"] == "message_stop":
            self._whole = True  # (the Message is built only when asked for: `final`)
        out.append(frames(events))

    def _learn(self, data: bytes, chunk: dict[str, Any]) -> None:
        """The template of a plain text chunk of choice 0 (the shape of more of the same). Not
        the stream's first chunk: it usually carries what no later chunk does (`role`)."""
        self._decoded += 1
        template = self._template
        if self._decoded == 1:
            return
        if chunk.get("error") is None and (template is None or template.text_of(data) is None):
            learned = chunk_template.learn(data, chunk)
            if learned is not None and learned.index == 0:
                self._template = learned


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
    error = completion.get("error")
    if error is not None:
        return error_event(error_facts(error)[0])
    choice = first_choice(completion.get("choices"))
    if choice is None:
        return error_event("the upstream's answer has no choice")
    message = choice.get("message")
    delta = dict(message) if isinstance(message, Mapping) else {}
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(calls) if isinstance(c, Mapping)]
    finish = choice.get("finish_reason")
    finish = finish if isinstance(finish, str) and finish else "stop"
    reported = {name: choice[name] for name in MATCHED_STOP_FIELDS if name in choice}
    chunk = {
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **reported}],
        "usage": completion.get("usage"),
    }
    events = encoder.feed(chunk) + encoder.end()
    if events and events[-1]["type"] == "error":
        return events[-1]
    return encoder.message()
