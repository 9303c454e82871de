"""What both bridged front doors' response sides share, written once: an encoder's reading of the
internal event stream (proxy.core.protocols.chat_events) and a transcoder's batching of it into the
bytes a client reads. Each door (Responses: proxy.core.protocols.responses.{events,stream}; Messages:
proxy.core.protocols.messages.{events,stream}) keeps only what its protocol says differently.

`DoorEncoder.feed(events)` is the template every door's encoder runs: the opening events once, then
per event a hook — `_text` / `_reasoning` per text (a run's many), `_tool_call` per fragment,
`_details` for `reasoning_details`, `_finished_by` once the finish reason is recorded, `_error`,
and `end()` at `Done`; a usage is recorded whenever it comes. Output after the finish reason is not
carried (a later usage still counts); after the terminal event nothing is.

`DoorTranscoder` reads the pipeline's output (`feed` in any split, `feed_pieces` with the runs it
hands over, `close` at its end) through one `ChatEventReader` and writes the encoder's events:
text deltas that continue the open item or block directly (the encoder's `text_delta_frames`, most
of a stream, a run's texts in one go), comments through the door's `_comment`, everything else in
batches through `feed`. `completion(body)` parses a whole answer once for the door's `_completion`.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from proxy.core import jsonio
from proxy.core.protocols.chat_events import (
    ChatEvent,
    ChatEventReader,
    Comment,
    Done,
    Error,
    Finish,
    ReasoningDelta,
    ReasoningDetails,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from proxy.core.protocols.responses.output import frames
from proxy.core.stream.chunk_template import DoorPiece, KnownRun

__all__ = ["CUT_SHORT", "NOT_AN_OBJECT", "DoorEncoder", "DoorTranscoder", "Event", "comment_event"]

CUT_SHORT: Final = "the answer ended before it was complete (the stream stopped without its end)"
NOT_AN_OBJECT: Final = "the upstream's answer is not a JSON object"

Event = dict[str, Any]


def comment_event(lines: list[bytes]) -> bytes:
    """Comment lines as one SSE event: each line ended, then the blank line."""
    return b"\n".join(lines) + b"\n\n" if lines else b"\n"


class DoorEncoder:
    """One answer's events in a door's protocol, from the internal event stream (`feed`); `start`,
    `end` and `fail` and the hooks are the door's."""

    def __init__(self) -> None:
        self._started = False
        self._finished = False  # the terminal event was produced: nothing more
        self._finish: str | None = None  # choice 0's finish reason, once it came
        # True when `finish_frames` may write the finish directly (the transcoder then asks it).
        self.writes_finish = False
        self._usage: Any = None  # the last usage object seen

    @property
    def started(self) -> bool:
        """True once the opening events were produced."""
        return self._started

    @property
    def finished(self) -> bool:
        """True once the terminal event (the answer's end, or its failure) was produced."""
        return self._finished

    def feed(self, events: Iterable[ChatEvent]) -> list[Event]:
        """The events the next events of the internal stream produce (after the opening ones, once).
        Output after the finish reason is not carried (a later usage still counts)."""
        if self._finished:
            return []
        out = self.start()
        for event in events:
            if self._finished:
                break
            open_ = self._finish is None
            if type(event) is TextDelta:
                if open_:
                    for text in event.texts:
                        self._text(text, out)
            elif type(event) is ReasoningDelta:
                if open_:
                    for text in event.texts:
                        self._reasoning(text, out)
            elif type(event) is ToolCallDelta:
                if open_:
                    self._tool_call(event, out)
            elif type(event) is ReasoningDetails:
                if open_:
                    self._details(event.details)
            elif type(event) is Usage:
                self._usage = event.usage
            elif type(event) is Finish:
                if open_:
                    self._finish = event.reason
                    self._finished_by(event, out)
            elif type(event) is Error:
                out += self._error(event.message, event.code)
            elif type(event) is Done:
                out += self.end()
        return out

    def take_usage(self, usage: Any) -> None:
        """A usage, recorded as `feed` records it (whenever it comes, until the terminal event);
        it writes nothing. The opening events must have been produced already."""
        if not self._finished:
            self._usage = usage

    def text_delta_frames(self, reasoning: bool, texts: list[str]) -> bytes | None:
        """Text deltas that continue the open item or block, written directly: byte for byte what
        `feed` writes for each text in turn (b"" when it writes nothing), their texts kept. None:
        not that case (nothing of that kind open), `feed` them instead."""
        return None

    def text_delta_parts(self, reasoning: bool, texts: list[str], out: list[bytes]) -> bool:
        """`text_delta_frames` added to `out` as parts for the caller's one join (a read's bytes are
        joined once, so a run's bytes are not copied into a run's own bytes first). False: not
        that case, nothing added."""
        written = self.text_delta_frames(reasoning, texts)
        if written is None:
            return False
        out.append(written)
        return True

    def opening_frames(self, reasoning: bool, texts: list[str]) -> bytes | None:
        """Text deltas that open a new item or block (`text_delta_frames` is None for them), written
        directly: byte for byte what `feed` writes for each text in turn. None: not that case."""
        return None

    def finish_frames(self, finish: Finish) -> bytes | None:
        """`feed([finish])` written directly, byte for byte: what ends with the finish reason.
        None: not that case, `feed` it instead."""
        return None

    # -- the door's part ---------------------------------------------------------------------------
    def start(self) -> list[Event]:
        """The opening events (once; later calls: none)."""
        raise NotImplementedError

    def end(self) -> list[Event]:
        """The stream ended: the terminal events (a failure when no usable finish reason came)."""
        raise NotImplementedError

    def fail(self, message: str) -> list[Event]:
        """The exchange broke: the door's failure event (after the opening ones; a door may take
        what kind of failure as well)."""
        raise NotImplementedError

    def _text(self, text: str, out: list[Event]) -> None:
        raise NotImplementedError

    def _reasoning(self, text: str, out: list[Event]) -> None:
        raise NotImplementedError

    def _tool_call(self, fragment: ToolCallDelta, out: list[Event]) -> None:
        raise NotImplementedError

    def _details(self, details: list[Any]) -> None:
        """`reasoning_details` of the reasoning open (before the finish reason)."""
        raise NotImplementedError

    def _finished_by(self, finish: Finish, out: list[Event]) -> None:
        """The finish reason came (recorded in `_finish`): what is open ends."""
        raise NotImplementedError

    def _error(self, message: str, code: str) -> list[Event]:
        """An error event of the stream: the door's failure, at once."""
        raise NotImplementedError


class DoorTranscoder:
    """One answer's translation (stream or non-stream, not both) through `encoder`.

    `templates=False` (the tests' reference) reads every chunk alone and writes every event through
    the encoder's general path: no run read by its shape, no delta written directly."""

    def __init__(self, encoder: DoorEncoder, *, templates: bool = True) -> None:
        self._encoder = encoder
        self.reader = ChatEventReader(templates=templates)
        self._direct = templates

    @property
    def hits(self) -> int:
        """Chunks read as runs (by their shape, or handed over with their texts), not decoded."""
        return self.reader.taken + self.reader.handed

    def feed(self, data: bytes) -> bytes:
        """The bytes the pipeline's next output completes; the first call opens the answer whatever
        it carries. Runs of chunks of more of the same (most of a stream) come from the reader as
        one event each, written in one go."""
        return self._write(self.reader.feed(data))

    def feed_pieces(self, pieces: Sequence[DoorPiece]) -> bytes:
        """`feed` of the pieces joined (StreamPipeline.feed_runs): a run of the chunks the reader
        reads by their shape is written from its texts, its bytes not scanned again, and an event
        handed over with its value is read from it."""
        if len(pieces) == 1 and self._encoder.started:
            run = pieces[0]
            if type(run) is KnownRun:  # (a paced stream's every read: its delta, no layer between)
                template = self.reader.take_run(run)
                if template is None:
                    return self._write(self.reader.feed(run.data))
                if self._direct:  # (more of the item open: written at once)
                    written = self._encoder.text_delta_frames(template.reasoning, run.texts)
                    if written is not None:
                        return written
                out: list[bytes] = []
                self._texts(template.reasoning, run.texts, out)
                return out[0] if len(out) == 1 else b"".join(out)
        return self._write(self.reader.feed_pieces(pieces))

    def close(self) -> bytes:
        """The end of the pipeline's output: what is left, and the door's failure if it never
        ended (never an answer that looks complete)."""
        out = self._write(self.reader.close())
        if not self._encoder.finished:
            out += self._frames(self._encoder.fail(CUT_SHORT))
        return out

    def completion(self, body: bytes) -> bytes:
        """A whole chat completion (as the pipeline wrote it) → the door's answer's JSON (a body
        that is not a JSON object: the upstream's error). The transcoder's encoder writes it."""
        try:
            parsed = jsonio.loads(body)
        except ValueError:
            parsed = None
        if not isinstance(parsed, Mapping):
            parsed = {"error": {"message": NOT_AN_OBJECT}}
        return jsonio.dumps(self._completion(parsed))

    def _write(self, events: list[ChatEvent]) -> bytes:
        """The bytes of `events`, after the opening ones (once)."""
        encoder = self._encoder
        out: list[bytes] = [] if encoder.started else [self.start()]
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
                self._comment(event.lines, out)
            elif type(event) is Usage and not batch:  # (it writes nothing: no batch for it)
                encoder.take_usage(event.usage)
            elif type(event) is Finish and self._direct and encoder.writes_finish:
                if batch:
                    out.append(self._frames(encoder.feed(batch)))
                    batch = []
                written = encoder.finish_frames(event)
                if written is None:
                    batch.append(event)
                else:
                    out.append(written)
            else:
                batch.append(event)
        if batch:
            out.append(self._frames(encoder.feed(batch)))
        return b"".join(out)

    def _texts(self, reasoning: bool, texts: list[str], out: list[bytes]) -> None:
        """Text deltas: those that continue the open item or block written directly, in one go, and
        so those that open one when the encoder writes that directly too; else the one that opens
        it (and every one, in the reference) through the encoder."""
        encoder = self._encoder
        done = 0
        while done < len(texts):
            if self._direct:
                rest = texts[done:] if done else texts
                if encoder.text_delta_parts(reasoning, rest, out):
                    return
                written = encoder.opening_frames(reasoning, rest)
                if written is not None:
                    out.append(written)
                    return
            one = [texts[done]]
            out.append(self._frames(encoder.feed((ReasoningDelta(one) if reasoning else TextDelta(one),))))
            done += 1

    # -- the door's part ---------------------------------------------------------------------------
    def start(self) -> bytes:
        """The opening bytes (once; later calls: none)."""
        raise NotImplementedError

    def _frames(self, events: list[Event]) -> bytes:
        """The encoder's events as SSE (and what the door keeps of them)."""
        return frames(events)

    def _comment(self, lines: list[bytes], out: list[bytes]) -> None:
        """Comment lines (the trace's, keep-alives) pass as they are: the SDKs skip comments."""
        out.append(comment_event(lines))

    def _completion(self, completion: Mapping[str, Any]) -> dict[str, Any]:
        """The door's whole answer (or its error object) for a completion."""
        raise NotImplementedError
