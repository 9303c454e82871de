"""Streamed chunks of more of the same, recognized without parsing them.

Most of a model's stream is chunks that differ from the one before only in one delta string: the
next piece of reasoning or of the answer. Every field around it (id, model, created, fingerprint,
index, the other delta keys, `finish_reason: null`…) repeats byte for byte. Parsing each such chunk
whole is most of what the proxy spends per chunk, so the pipeline learns the shape once, from a
chunk it did parse, as the bytes before and after that one string.

A later event whose data is exactly `prefix + <one JSON string> + suffix` has the same structure as
the learned chunk, with only that string changed: the prefix ends where a string token began and
the suffix starts right after one ended, and orjson accepts the middle only as exactly one complete
string. Its text is then all that is needed; whether it needs any processing is for each consumer
to say (see StreamReasoningExtractor.text_rule, TraceBuilder.text_rule).

Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import orjson

from proxy.core.stream import run_texts

# The delta fields that carry text. A chunk is a template only when exactly one of them is set.
TEXT_FIELDS = ("content", "reasoning_content", "reasoning")
REASONING_FIELDS = frozenset({"reasoning_content", "reasoning"})
_BLANKS = b" \t\r\n"


class KnownRun(NamedTuple):
    """Chunks of more of the same that another decoder wrote and already read (the Responses
    upstream's decoder, proxy.core.protocols.responses.upstream_decode): whole SSE events, each `prefix` +
    one non-empty JSON string + `suffix`, and those strings' texts in order. The pipeline takes
    such a run from its texts when it is of its own template (StreamPipeline.feed_known), instead
    of scanning bytes whose texts are already known."""

    data: bytes
    prefix: bytes  # `data: ` and the chunk's bytes before its text
    suffix: bytes  # the chunk's bytes after its text, and the blank line
    texts: list[str]
    # The template these chunks are of, when the pipeline hands the run on (StreamPipeline.feed_runs):
    # a front door takes it rather than learning the same shape again from a chunk it decodes.
    template: ChunkTemplate | None = None


class KnownEvent(NamedTuple):
    """One whole SSE event the pipeline wrote (`data`, its bytes as the client would get them) with
    what a front door would otherwise decode them again for (StreamPipeline.feed_runs): a chunk as
    parsed (`chunk`: equal to what reading the JSON of its data gives), or a comment-only event's
    lines without their line ends (`comments`: the trace's `: trace {…}`), or neither: `data: [DONE]`.
    The chunk is the pipeline's own: readers must not change it."""

    data: bytes
    chunk: dict[str, Any] | None = None
    comments: list[bytes] | None = None


# What the pipeline hands a front door: bytes, runs of more of the same, and events with their values.
DoorPiece: TypeAlias = bytes | KnownRun | KnownEvent


def pieces_of(out: list[bytes | KnownRun]) -> list[bytes | KnownRun]:
    """A decoder's output as few pieces: the bytes between runs joined, each KnownRun apart."""
    pieces: list[bytes | KnownRun] = []
    plain: list[bytes] = []
    for piece in out:
        if isinstance(piece, KnownRun):
            if plain:
                pieces.append(b"".join(plain))
                plain = []
            pieces.append(piece)
        else:
            plain.append(piece)
    if plain:
        pieces.append(b"".join(plain))
    return pieces


def joined(out: Sequence[DoorPiece]) -> bytes:
    """A decoder's (or the pipeline's, StreamPipeline.feed_runs) output as one piece of bytes."""
    return b"".join([piece if isinstance(piece, bytes) else piece.data for piece in out])


@dataclass(frozen=True, slots=True)
class ChunkTemplate:
    """The bytes of a learned chunk around its one text field, and which field and choice that is."""

    prefix: bytes
    suffix: bytes
    field: str
    index: int  # the choice's index
    reasoning: bool  # field is a reasoning field
    # `data: ` + prefix: the start of the SSE event's one line (None when the chunk's data holds
    # a line end: it then came in more than one line); suffix + the blank line after it.
    event_prefix: bytes | None = None
    event_suffix: bytes = b""
    # The chunk's id, object, created and model (the same in every match), if it has an id.
    last: dict[str, Any] | None = None

    def text_of(self, data: bytes) -> str | None:
        """The text when `data` is this template with a non-empty string in the field, else None."""
        return _text_between(data, self.prefix, self.suffix)

    def text_of_event(self, read: bytes) -> str | None:
        """The text when `read` is exactly one SSE event, `data: ` + this template with a non-empty
        string in the field + a blank line, else None. (The prefix and suffix hold no line end,
        and a JSON string cannot hold a raw one: such a read is one event of one data line.)"""
        if self.event_prefix is None or read.find(b"\n") != len(read) - 2:
            return None  # (several events, as a busy proxy finds them in one read: no decode tried)
        return _text_between(read, self.event_prefix, self.event_suffix)

    def take_run(
        self,
        data: bytes,
        start: int,
        max_event_bytes: int,
        unless_lt: bool,
        tell: tuple[Callable[[str], None], ...],
    ) -> int:
        """take_texts, each text told to every `tell`: where the run ends."""
        end, texts = self.take_texts(data, start, max_event_bytes, unless_lt)
        for hear in tell:
            for text in texts:
                hear(text)
        return end

    def take_texts(
        self, data: bytes, start: int, max_event_bytes: int, unless_lt: bool
    ) -> tuple[int, list[str]]:
        """Where the run of events of this template starting at `start` ends, and their texts
        (proxy.core.stream.run_texts.take_texts)."""
        return run_texts.take_texts(self, data, start, max_event_bytes, unless_lt)


def template_of_run(current: ChunkTemplate | None, run: KnownRun) -> ChunkTemplate | None:
    """The template a front door reads `run` by: its own (`current`) when the run's chunks are of
    it, else the one the run came with (the pipeline's: the same chunks taught it) when that is of
    choice 0; None: neither."""
    for template in (current, run.template):
        if (
            template is not None
            and template.index == 0
            and run.prefix == template.event_prefix
            and run.suffix == template.event_suffix
        ):
            return template
    return None


def _text_between(data: bytes, prefix: bytes, suffix: bytes) -> str | None:
    head, tail = len(prefix), len(suffix)
    # The string token exactly, quotes included: JSON would allow blanks around it, and a line
    # end among them would make a one-event read two events.
    if (
        len(data) < head + tail + 2
        or data[head] != 0x22
        or data[-tail - 1] != 0x22
        or not data.startswith(prefix)
        or not data.endswith(suffix)
    ):
        return None
    try:
        text = orjson.loads(data[head : len(data) - tail])
    except orjson.JSONDecodeError:
        return None
    return text if type(text) is str and text else None


def learn(data: bytes, chunk: dict[str, Any]) -> ChunkTemplate | None:
    """The template of a parsed chunk (`data`: its JSON bytes as received), or None when the chunk is
    not more-of-the-same material: it must carry one choice, no usage, no finish_reason, no tool
    calls and no reasoning_details, and exactly one text field, set to a non-empty string."""
    if chunk.get("usage") is not None:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or delta.get("tool_calls") or delta.get("reasoning_details"):
        return None
    field: str | None = None
    for name in TEXT_FIELDS:
        value = delta.get(name)
        if value is None:
            continue
        if field is not None or type(value) is not str or not value:
            return None
        field = name
    if field is None:
        return None
    span = value_span(data, field)
    if span is None:
        return None
    start, end = span
    try:
        if orjson.loads(data[start:end]) != delta[field]:
            return None
    except orjson.JSONDecodeError:
        return None
    index = choice.get("index", 0)
    if type(index) is not int:
        return None  # (consumers disagree on what a malformed index means: the ordinary path decides)
    prefix, suffix = data[:start], data[end:]
    if b"\\u" in prefix or b"\\u" in suffix:
        # A key spelled with escapes could be the text field again, unseen by the count above.
        return None
    return ChunkTemplate(
        prefix=prefix,
        suffix=suffix,
        field=field,
        index=index,
        reasoning=field in REASONING_FIELDS,
        # (Only when neither holds a line end, which would make the event more than one line.)
        event_prefix=b"data: " + prefix if _one_line(prefix) and _one_line(suffix) else None,
        event_suffix=suffix + b"\n\n",
        last=_meta(chunk),
    )


def _meta(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """What the reasoning extractor remembers of the last chunk with an id (for `flush`)."""
    if "id" not in chunk:
        return None
    return {key: chunk[key] for key in ("id", "object", "created", "model") if key in chunk}


def _one_line(part: bytes) -> bool:
    return part.find(b"\n") < 0 and part.find(b"\r") < 0


def value_span(data: bytes, field: str) -> tuple[int, int] | None:
    """Where the string value of the key `field` lies in `data`, when the key occurs exactly once.

    A key inside a JSON string would have its quotes escaped, so `"field"` (quotes included) can
    only be a key or a whole string value; once is required so that it is the delta's."""
    key = b'"' + field.encode() + b'"'
    if data.count(key) != 1:
        return None
    pos = _skip_blanks(data, data.index(key) + len(key))
    if pos >= len(data) or data[pos] != 0x3A:  # ':'
        return None
    start = _skip_blanks(data, pos + 1)
    if start >= len(data) or data[start] != 0x22:  # '"'
        return None
    end = _string_end(data, start)
    return None if end is None else (start, end)


def _skip_blanks(data: bytes, pos: int) -> int:
    while pos < len(data) and data[pos] in _BLANKS:
        pos += 1
    return pos


def _string_end(data: bytes, start: int) -> int | None:
    """The index just past the string token opening at `start` (its closing quote is the first one
    preceded by an even number of backslashes)."""
    pos = start + 1
    while (quote := data.find(b'"', pos)) >= 0:
        backslashes = 0
        while data[quote - 1 - backslashes] == 0x5C:  # '\\'
            backslashes += 1
        if backslashes % 2 == 0:
            return quote + 1
        pos = quote + 1
    return None
