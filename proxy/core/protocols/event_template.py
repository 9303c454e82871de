"""Upstream Responses events of more of the same, recognized without parsing them.

The chat path's ChunkTemplate (proxy.core.stream.chunk_template) learns a chunk as the bytes
around its one text string. A Responses API delta event has more than one value that changes from
event to event: the text (`delta`), a `sequence_number` that counts up, and on OpenAI an
`obfuscation` pad of random length. So an `EventTemplate` is the event's bytes as fixed parts
around those holes, learned from an event that was parsed:

    event: response.output_text.delta\\ndata: {"type":"response.output_text.delta",
    "sequence_number":<int>,"item_id":"msg_1","output_index":1,"content_index":0,
    "delta":<string>,"logprobs":[],"obfuscation":<string>}\\n\\n

A later event whose bytes are exactly the fixed parts with a value of the hole's kind in each hole
(digits; one complete JSON string) has the same structure as the learned one, with only those
values changed: the same type, item, output and part indexes, so it means the same to the decoder
but for its text. The argument is ChunkTemplate's: each hole starts where a value token began and
the next part starts right after one ended, and a fixed part cannot hide inside a JSON string (its
quotes would be escaped there). The hole keys are each found exactly once, and fixed parts with a
`\\u` escape are refused, since a key spelled with escapes could be a hole's key again.

Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from proxy.core.stream.chunk_template import value_span

# The values that change between two delta events of the same text: the text itself, the event
# counter, and OpenAI's side-channel pad (`stream_options.include_obfuscation`, on by default).
TEXT_KEY: Final = "delta"
COUNTER_KEY: Final = "sequence_number"
PAD_KEY: Final = "obfuscation"


@dataclass(frozen=True, slots=True)
class EventTemplate:
    """The fixed bytes of a learned event around its holes, and which hole holds the text."""

    parts: tuple[bytes, ...]  # one more than the holes; the last ends with the blank line
    strings: tuple[bool, ...]  # per hole: a JSON string (else digits)
    text_hole: int  # which hole is the text
    # The event as one pattern: the parts literally, digits for a counter, a string token for the
    # text (group 1; orjson then checks it whole), and a pad of plain ASCII without escapes.
    pattern: re.Pattern[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pieces = [re.escape(self.parts[0])]
        for hole, string in enumerate(self.strings):
            if hole == self.text_hole:
                pieces.append(_TEXT)
            else:
                pieces.append(_PAD if string else _COUNTER)
            pieces.append(re.escape(self.parts[hole + 1]))
        object.__setattr__(self, "pattern", re.compile(b"".join(pieces)))

    def take_run(
        self, data: bytes, start: int, max_event_bytes: int, tell: Callable[[bytes, str], None]
    ) -> int:
        """Where the run of events of this template starting at `start` ends. Each event's text
        token (quotes included, as received) and text go to `tell`.

        Only for data whose line ends are LF and where an event starts at `start` (an idle SSE
        decoder's view): a match is then one whole event, since the last part ends with the blank
        line and a hole holds no raw line end. A text that is empty ends the run (the decoder
        sends nothing for it), and so does a pad that is not plain ASCII: the event is then
        decoded the ordinary way, which decides what it is."""
        match, loads = self.pattern.match, orjson.loads
        pos = start
        while (found := match(data, pos)) is not None:
            end = found.end()
            if end - pos > max_event_bytes:
                break
            token = found.group(1)
            try:
                text = loads(token)
            except orjson.JSONDecodeError:
                break
            if type(text) is not str or not text:
                break
            tell(token, text)
            pos = end
        return pos


# A hole's pattern. Possessive (`*+`): a string token ends at its first unescaped quote, never
# later, so no match backtracks. A text token with a raw line end or a bad escape may match here
# but not in orjson, which then ends the run.
_TEXT: Final = rb'("(?:[^"\\\n]|\\.)*+")'
_PAD: Final = rb'"[\x20\x21\x23-\x5b\x5d-\x7e]*+"'
_COUNTER: Final = rb"(?:0|[1-9][0-9]*+)"


def learn(raw: bytes, event: dict[str, Any]) -> EventTemplate | None:
    """The template of a parsed delta event (`raw`: its bytes as received, `event:` line and blank
    line included), or None when it cannot be one: line ends other than LF, a data line that is
    not its only one, a text that is not a non-empty string, or a hole key not found exactly once."""
    text = event.get(TEXT_KEY)
    if type(text) is not str or not text or raw.find(b"\r") >= 0 or not raw.endswith(b"\n\n"):
        return None
    data_at = raw.find(b"data: ")
    if data_at < 0 or raw.count(b"\n") != raw[:data_at].count(b"\n") + 2:
        return None  # (the JSON must be one line, the last before the blank line)
    spans: list[tuple[int, int, bool, bool]] = []  # start, end, a string, the text
    for key, kind in ((TEXT_KEY, str), (COUNTER_KEY, int), (PAD_KEY, str)):
        if key not in event:
            continue
        value = event[key]
        if type(value) is not kind:
            return None
        span = value_span(raw, key) if kind is str else _digits_span(raw, key)
        if span is None or orjson.loads(raw[span[0] : span[1]]) != value:
            return None
        spans.append((*span, kind is str, key == TEXT_KEY))
    spans.sort()
    parts, at = [], 0
    for begin, finish, _, _ in spans:
        if begin < at:
            return None
        parts.append(raw[at:begin])
        at = finish
    parts.append(raw[at:])
    if any(b"\\u" in part for part in parts) or b"\n\n" in b"".join(parts[:-1]):
        return None
    text_hole = next(i for i, span in enumerate(spans) if span[3])
    return EventTemplate(tuple(parts), tuple(span[2] for span in spans), text_hole)


def _digits_span(raw: bytes, key: str) -> tuple[int, int] | None:
    """Where the non-negative integer value of `key` lies in `raw`, when the key occurs once."""
    name = b'"' + key.encode() + b'":'
    if raw.count(b'"' + key.encode() + b'"') != 1 or (at := raw.find(name)) < 0:
        return None
    start = end = at + len(name)
    while end < len(raw) and 0x30 <= raw[end] <= 0x39:
        end += 1
    return (start, end) if end > start else None
