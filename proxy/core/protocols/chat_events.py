"""The internal event stream: what the response pipeline writes for a chat answer, read once as
small typed events that every bridged front door's encoder consumes (the h11 idea: a pure state
machine between the bytes and the protocol).

The pipeline's output is normalized chat-completion SSE (one reasoning field, tags out of the
content, the trace as comments) or, for a non-stream answer, one completion body. Both bridged
doors (Responses: proxy.core.protocols.responses.events; Messages:
proxy.core.protocols.messages.events) need the same facts from it, in the same order, and nothing
else; this module reads them, so the chunk-reading skeleton exists once:

- a `data:` chunk → `Error` (an `error` that is not null: nothing else of that chunk), else `Usage`
  (when it carries a usage object), then from its choice 0 only: `ReasoningDelta`
  (`reasoning_content`, else `reasoning`), `ReasoningDetails`, `TextDelta` (`content`),
  `ToolCallDelta` per `tool_calls` fragment, `Finish`; empty texts are no events;
- `data: [DONE]` → `Done`; data that is not a JSON object → nothing;
- an event of comment lines only (the trace's `: trace {…}`, keep-alives) → `Comment` with its
  lines as they came (a door passes them on; comments beside data are not kept).

Tool call fragments are passed on as fragments (their fields checked, nothing paired): how a
fragment finds its call differs by protocol (a Responses stream starts a new call for a chat index
seen before other output; an Anthropic block never reopens, and more arguments for a stopped one
end the stream), so each encoder pairs them itself.

The run fast path: most of a stream is runs of chunks of more of the same (the next piece of
reasoning or of the answer), which differ from a chunk already read only in that one string.
`ChatEventReader` learns such a chunk's shape once (proxy.core.stream.chunk_template) and reads the
run that follows from its bytes without decoding each chunk, or takes a run the pipeline hands over
with its texts (StreamPipeline.feed_runs → KnownRun) without scanning it again: either way the run
is ONE `TextDelta` / `ReasoningDelta` carrying its list of texts, exactly the texts (and the events)
that reading the chunks one by one gives. An encoder can then write a run's frames in one go.

Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeAlias

from proxy.core import jsonio
from proxy.core.protocols.responses.output import error_facts, first_choice
from proxy.core.stream import chunk_template
from proxy.core.stream.chunk_template import ChunkTemplate, DoorPiece, KnownEvent, KnownRun, template_of_run
from proxy.core.stream.sse import SSEDecoder

__all__ = [
    "DONE",
    "MATCHED_STOP_FIELDS",
    "NO_CHOICE",
    "ChatEvent",
    "ChatEventReader",
    "Comment",
    "Done",
    "Error",
    "Finish",
    "ReasoningDelta",
    "ReasoningDetails",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "call_index",
    "chunk_events",
    "completion_events",
]

# Where an upstream names the stop string that ended the answer, on the choice: vLLM's
# `stop_reason` (a string, or a stop token's id), SGLang's `matched_stop`.
MATCHED_STOP_FIELDS: Final = ("stop_reason", "matched_stop")
NO_CHOICE: Final = "the upstream's answer has no choice"
_DONE_DATA: Final = b"[DONE]"
# The pipeline bounds events itself; this decoder only re-reads what the pipeline wrote.
_MAX_EVENT_BYTES: Final = 64 * 1024 * 1024


class ReasoningDelta(NamedTuple):
    """The next pieces of reasoning (one per chunk; a run's many), none empty."""

    texts: list[str]


class TextDelta(NamedTuple):
    """The next pieces of the answer's text (one per chunk; a run's many), none empty."""

    texts: list[str]


class ReasoningDetails(NamedTuple):
    """A chunk's `reasoning_details` entries, as sent (signatures, encrypted reasoning)."""

    details: list[Any]


class ToolCallDelta(NamedTuple):
    """One `tool_calls[i]` fragment: its `index` in the chat stream (`chat_index`; None when it has
    no integer one), its id, function name and arguments piece ("" for each one it does not carry),
    and its `extra_content` (Gemini's thought signature; None when absent)."""

    chat_index: int | None
    call_id: str
    name: str
    arguments: str
    extra: Any


class Usage(NamedTuple):
    """The chunk's usage object (the last one seen counts)."""

    usage: Mapping[str, Any]


class Finish(NamedTuple):
    """Choice 0's finish reason, and the strings the choice names as the stop that matched
    (MATCHED_STOP_FIELDS, in that order; a door decides whether one is a stop sequence asked for)."""

    reason: str
    matched: tuple[str, ...]


class Error(NamedTuple):
    """An error chunk (the pipeline's own mid-stream failure event, an upstream's error), or a
    completion that cannot be used: its message and code ("" when it has none)."""

    message: str
    code: str


class Comment(NamedTuple):
    """An event of comment lines only, each line as it came (without its line end)."""

    lines: list[bytes]


class Done(NamedTuple):
    """`data: [DONE]`: the stream ended (a non-stream answer's end too)."""


DONE: Final = Done()

ChatEvent: TypeAlias = (
    ReasoningDelta | TextDelta | ReasoningDetails | ToolCallDelta | Usage | Finish | Error | Comment | Done
)


def chunk_events(chunk: Mapping[str, Any], out: list[ChatEvent] | None = None) -> list[ChatEvent]:
    """The events of one chat chunk (added to `out` when given), in the order a door reads them."""
    if out is None:
        out = []
    error = chunk.get("error")
    if error is not None:  # (a null `error` beside an answer is none)
        message, code = error_facts(error)
        out.append(Error(message, code))
        return out
    usage = chunk.get("usage")
    if usage is not None and isinstance(usage, Mapping):
        out.append(Usage(usage))
    choice = first_choice(chunk.get("choices"))
    if choice is None:
        return out
    delta = choice.get("delta")
    if type(delta) is dict or isinstance(delta, Mapping):
        _delta_events(delta, out)
    finish = choice.get("finish_reason")
    if finish is not None and isinstance(finish, str) and finish:
        out.append(Finish(finish, _matched(choice)))
    return out


def completion_events(completion: Mapping[str, Any]) -> list[ChatEvent]:
    """The events of a whole chat completion (the non-stream form): choice 0's message as one
    chunk's delta (reasoning, then text, then the tool calls, numbered in order), its finish reason
    ("stop" when it names none: the body arrived whole), then `Done`. An `error` body, or one without
    a choice, is one `Error`."""
    error = completion.get("error")
    if error is not None:
        message, code = error_facts(error)
        return [Error(message, code)]
    choice = first_choice(completion.get("choices"))
    if choice is None:
        return [Error(NO_CHOICE, "")]
    out: list[ChatEvent] = []
    usage = completion.get("usage")
    if isinstance(usage, Mapping):
        out.append(Usage(usage))
    reply = choice.get("message")
    delta = dict(reply) if isinstance(reply, Mapping) else {}
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(calls) if isinstance(c, Mapping)]
    _delta_events(delta, out)
    finish = choice.get("finish_reason")
    out.append(Finish(finish if isinstance(finish, str) and finish else "stop", _matched(choice)))
    out.append(DONE)
    return out


def _delta_events(delta: Mapping[str, Any], out: list[ChatEvent]) -> None:
    reasoning = delta.get("reasoning_content")
    if not (isinstance(reasoning, str) and reasoning):
        reasoning = delta.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        out.append(ReasoningDelta([reasoning]))
    details = delta.get("reasoning_details")
    if details is not None and isinstance(details, list):
        out.append(ReasoningDetails(details))
    content = delta.get("content")
    if isinstance(content, str) and content:
        out.append(TextDelta([content]))
    calls = delta.get("tool_calls")
    if calls is not None and isinstance(calls, list):
        for fragment in calls:
            if isinstance(fragment, Mapping):
                out.append(_tool_call(fragment))


def _tool_call(fragment: Mapping[str, Any]) -> ToolCallDelta:
    index = fragment.get("index")
    call_id = fragment.get("id")
    function = fragment.get("function")
    name: Any = None
    arguments: Any = None
    if isinstance(function, Mapping):
        name, arguments = function.get("name"), function.get("arguments")
    return ToolCallDelta(
        index if type(index) is int else None,
        call_id if isinstance(call_id, str) else "",
        name if isinstance(name, str) else "",
        arguments if isinstance(arguments, str) else "",
        fragment.get("extra_content"),
    )


def call_index(call_id: str, calls: Mapping[int, str], last: int | None) -> int:
    """The chat index of a tool call fragment that has none (ToolCallDelta.chat_index None), among the
    open calls (`calls`: their ids by index) and the last one a fragment continued: the call with
    its id, else a new call for a new id; without an id, the last call, else a new one."""
    if call_id:
        for index, known in calls.items():
            if known == call_id:
                return index
    elif last is not None:
        return last
    return max(calls, default=-1) + 1


def _matched(choice: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple([value for name in MATCHED_STOP_FIELDS if isinstance(value := choice.get(name), str)])


class ChatEventReader:
    """The events of one streamed answer, from the pipeline's output in any split: `feed(bytes)`,
    `feed_pieces` (StreamPipeline.feed_runs' pieces), then `close()` for an unterminated tail.

    `templates=False` (the tests' reference) never reads a run by its shape: every event decoded.
    `taken` counts the chunks read from a run's bytes by their shape, `handed` the texts taken from
    runs handed over (neither decoded)."""

    __slots__ = ("_adopted", "_decoded", "_decoder", "_template", "_templates", "handed", "taken")

    def __init__(self, *, templates: bool = True) -> None:
        self._decoder = SSEDecoder(_MAX_EVENT_BYTES)
        # The shape of the last plain text chunk decoded (or of the last run handed over).
        self._template: ChunkTemplate | None = None
        self._templates = templates
        # True once a run handed over brought its template (feed_pieces): the runs bring their own
        # from then on, and the chunks decoded between them need not teach one.
        self._adopted = False
        self._decoded = 0  # chunks decoded
        self.taken = 0
        self.handed = 0

    def feed(self, data: bytes, out: list[ChatEvent] | None = None) -> list[ChatEvent]:
        """The events `data` completes (added to `out` when given)."""
        if out is None:
            out = []
        pos, size = 0, len(data)
        decoder = self._decoder
        while pos < size:
            template = self._template
            if (
                template is not None
                and template.event_prefix is not None
                and decoder.idle
                and data.startswith(template.event_prefix, pos)
                and data.startswith(b'"', text := pos + len(template.event_prefix))
                and not data.startswith(b'"', text + 1)  # (an empty text is no run: decoded)
            ):
                end, texts = template.take_texts(data, pos, _MAX_EVENT_BYTES, False)
                if end > pos:
                    out.append(ReasoningDelta(texts) if template.reasoning else TextDelta(texts))
                    self.taken += len(texts)
                    pos = end
                    continue
            cut = data.find(b"\n\n", pos)
            end = size if cut < 0 else cut + 2
            for event in decoder.feed(data[pos:end] if pos or end < size else data):
                self._event(event.raw, event.data, out)
            pos = end
        return out

    def feed_pieces(self, pieces: Sequence[DoorPiece]) -> list[ChatEvent]:
        """`feed` of the pieces joined: a run whose chunks are of this reader's shape (or of the
        shape the run brings) is taken from its texts, its bytes not scanned again; an event
        handed over with its value (KnownEvent) is read from the value, not decoded."""
        out: list[ChatEvent] = []
        for piece in pieces:
            if isinstance(piece, bytes):
                self.feed(piece, out)
                continue
            if isinstance(piece, KnownEvent):
                self._known(piece, out)
                continue
            template = self.take_run(piece)
            if template is None:
                self.feed(piece.data, out)
            else:
                texts = piece.texts
                out.append(ReasoningDelta(texts) if template.reasoning else TextDelta(texts))
        return out

    def take_run(self, run: KnownRun) -> ChunkTemplate | None:
        """The shape a run handed over is read by, its texts then taken (`handed` counts them): this
        reader's, or the one the run brings. None: its bytes are to be read (`feed`) instead."""
        template = None
        if self._templates:
            brought = run.template
            self._adopted |= brought is not None  # (from now on the runs bring theirs)
            # The shape this reader took from the runs before (a paced stream's every read): its
            # own, at once (a run's prefix and suffix are those of the template it brings).
            template = brought if brought is not None and brought is self._template else None
            if template is None:
                template = template_of_run(self._template, run)
        if template is None or not self._decoder.idle:
            return None
        self._template = template
        self.handed += len(run.texts)
        return template

    def _known(self, event: KnownEvent, out: list[ChatEvent]) -> None:
        """The events of one whole event from its value: what decoding its bytes gives (the
        reference, and a reader still to learn its template from decoded chunks, decode them)."""
        chunk = event.chunk
        if not self._decoder.idle or not self._templates or (chunk is not None and not self._adopted):
            self.feed(event.data, out)
        elif chunk is not None:
            chunk_events(chunk, out)
        elif event.comments is not None:
            out.append(Comment(event.comments))
        else:
            out.append(DONE)

    def close(self) -> list[ChatEvent]:
        """The events of what is left: an event the stream did not end with its blank line."""
        out: list[ChatEvent] = []
        for event in self._decoder.flush():
            self._event(event.raw, event.data, out)
        return out

    def _event(self, raw: bytes, data: bytes | None, out: list[ChatEvent]) -> None:
        if data is None:
            lines = [line for line in raw.splitlines() if line.startswith(b":")]
            if lines:
                out.append(Comment(lines))
            return
        if data == _DONE_DATA:
            out.append(DONE)
            return
        try:
            chunk = jsonio.loads(data)
        except ValueError:
            return
        if isinstance(chunk, dict):
            chunk_events(chunk, out)
            if self._templates and not self._adopted:
                self._learn(data, chunk)

    def _learn(self, data: bytes, chunk: dict[str, Any]) -> None:
        """The shape of a plain text chunk of choice 0 (more of the same may follow). Not the
        stream's first chunk: it usually carries what no later chunk does (`role`)."""
        self._decoded += 1
        template = self._template
        if self._decoded == 1:
            return
        if chunk.get("error") is None and (template is None or template.text_of(data) is None):
            learned = chunk_template.learn(data, chunk)
            if learned is not None and learned.index == 0:
                self._template = learned
