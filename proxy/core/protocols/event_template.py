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

Finding an event's holes takes a few byte searches and one orjson call per run, not one per
event. (A regular expression of the parts would be faster per event, but it would have to be
compiled for every response, whose item ids differ, at ~200 µs each: more than a stream's decoding.)

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import orjson

from proxy.core.stream.chunk_template import KnownRun, value_span

# The values that change between two delta events of the same text: the text itself, the event
# counter, and OpenAI's side-channel pad (`stream_options.include_obfuscation`, on by default).
TEXT_KEY: Final = "delta"
COUNTER_KEY: Final = "sequence_number"
PAD_KEY: Final = "obfuscation"


@dataclass(frozen=True, slots=True)
class EventTemplate:
    """The fixed bytes of a learned event around its holes, and the holes' keys in their order."""

    parts: tuple[bytes, ...]  # one more than the holes; the last ends with the blank line
    keys: tuple[str, ...]  # each hole's key (TEXT_KEY, COUNTER_KEY or PAD_KEY)

    def take_run(self, data: bytes, start: int, max_event_bytes: int) -> tuple[int, list[bytes], list[str]]:
        """The run of events of this template starting at `start`: where it ends, each event's
        text token (quotes included, as received) and its text.

        Each event is checked in place: its first part at its start, then each hole up to the
        first occurrence of the part after it (a fixed part cannot occur inside a JSON string,
        whose quotes would be escaped), the last part ending it. Only for data whose line ends
        are LF and where an event starts at `start` (an idle SSE decoder's view). A counter must
        be digits without a leading zero; the texts and pads of the run are each read in one
        orjson call, and a run ends before the first one that is not one JSON string (nor, for a
        text, an empty one: the decoder sends nothing for it), as it does before an event that
        is not whole yet: the ordinary decoding then decides what it is."""
        if len(self.keys) == 3 and TEXT_KEY in self.keys and PAD_KEY in self.keys:
            return self._take_run3(data, start, max_event_bytes)
        return self._take_run_generic(data, start, max_event_bytes)

    def _take_run3(self, data: bytes, start: int, max_event_bytes: int) -> tuple[int, list[bytes], list[str]]:
        """take_run for the usual template, OpenAI's: three holes (text, counter, pad) in some
        order. The same checks as _take_run_generic, unrolled: about 40% less time per event,
        pure (its loop over the holes was most of it)."""
        keys = self.keys
        head, first, second, tail = self.parts
        at_text, at_pad, at_counter = keys.index(TEXT_KEY), keys.index(PAD_KEY), keys.index(COUNTER_KEY)
        skip_head, skip_first, skip_second, keep_tail = len(head), len(first), len(second), len(tail)
        find, startswith = data.find, data.startswith
        tokens: list[bytes] = []
        pads: list[bytes] = []
        ends: list[int] = []
        pos, size = start, len(data)
        while pos < size and startswith(head, pos):
            cur = pos + skip_head
            stop = find(first, cur)
            if stop < 0:
                break
            next_cur = stop + skip_first
            stop2 = find(second, next_cur)
            if stop2 < 0:
                break
            last_cur = stop2 + skip_second
            end = find(b"\n\n", last_cur) + 2
            stop3 = end - keep_tail
            if end < 2 or stop3 < last_cur or not startswith(tail, stop3) or end - pos > max_event_bytes:
                break
            values = (data[cur:stop], data[next_cur:stop2], data[last_cur:stop3])
            token, counter = values[at_text], values[at_counter]
            if (
                len(token) <= 2
                or token[0] != 0x22
                or token[-1] != 0x22
                or not counter.isdigit()
                or (counter[0] == 0x30 and len(counter) > 1)
            ):
                break
            tokens.append(token)
            pads.append(values[at_pad])
            ends.append(end)
            pos = end
        return self._texts_of(start, tokens, pads, ends)

    def _take_run_generic(
        self, data: bytes, start: int, max_event_bytes: int
    ) -> tuple[int, list[bytes], list[str]]:
        parts, keys = self.parts, self.keys
        head, tail, inner = parts[0], parts[-1], parts[1:]
        last = len(inner) - 1
        find, startswith = data.find, data.startswith
        tokens: list[bytes] = []
        pads: list[bytes] = []
        ends: list[int] = []
        pos, size = start, len(data)
        while pos < size and startswith(head, pos):
            cur = pos + len(head)
            token = b""
            for i, key in enumerate(keys):
                part = inner[i]
                stop = find(part, cur) if i < last else _last_stop(data, cur, tail)
                if stop < 0:
                    break
                value = data[cur:stop]
                if key == TEXT_KEY:
                    token = value
                elif key == PAD_KEY:
                    pads.append(value)
                elif not value.isdigit() or (value[0] == 0x30 and len(value) > 1):
                    break
                cur = stop + len(part)
            else:
                if cur - pos <= max_event_bytes and len(token) > 2 and token[0] == token[-1] == 0x22:
                    tokens.append(token)
                    ends.append(cur)
                    pos = cur
                    continue
            break
        del pads[len(tokens) :]
        return self._texts_of(start, tokens, pads, ends)

    @staticmethod
    def _texts_of(
        start: int, tokens: list[bytes], pads: list[bytes], ends: list[int]
    ) -> tuple[int, list[bytes], list[str]]:
        good = _strings(tokens, pads)
        if not good:
            return start, [], []
        texts: list[str] = orjson.loads(b"[" + b",".join(tokens) + b"]")
        return ends[good - 1], tokens, texts


Key = TypeVar("Key")


class Run(Generic[Key]):
    """A template in use: its events' texts recorded in `texts`, and each event's output written
    as `frame` (the bytes before and after the text in what the consumer writes for one event)
    around its text token, copied as it came (a valid JSON string: take_run only takes one).
    `key`: what the consumer's state calls the text (the Responses decoder: its slot)."""

    __slots__ = ("hits", "key", "prefix", "suffix", "template", "texts")

    def __init__(
        self, template: EventTemplate, key: Key, frame: tuple[bytes, bytes], texts: list[str]
    ) -> None:
        self.template, self.key, self.texts = template, key, texts
        self.prefix, self.suffix = frame
        self.hits = 0

    def take(self, data: bytes, start: int, max_event_bytes: int, out: list[bytes | KnownRun]) -> int:
        """Where the run from `start` ends, its output added to `out` with its texts (a consumer
        that knows the frame's shape then need not read the texts from the bytes again)."""
        end, tokens, texts = self.template.take_run(data, start, max_event_bytes)
        if tokens:
            self.texts += texts
            prefix, suffix = self.prefix, self.suffix
            out.append(KnownRun(prefix + (suffix + prefix).join(tokens) + suffix, prefix, suffix, texts))
            self.hits += len(tokens)
        return end


def _last_stop(data: bytes, cur: int, tail: bytes) -> int:
    """Where the last part starts: before the first blank line after `cur`, which ends the event
    (a JSON string holds no raw line end), when the event ends with that part."""
    end = data.find(b"\n\n", cur)
    if end < 0:
        return -1
    stop = end + 2 - len(tail)
    return stop if stop >= cur and data.startswith(tail, stop) else -1


def _strings(tokens: list[bytes], pads: list[bytes]) -> int:
    """How many of the run's events, from the first, have a text and a pad that are each exactly
    one JSON string (`pads` has one per event when the template has a pad, else none); both lists
    are cut to that many."""
    for group in (tokens, pads) if pads else (tokens,):
        try:
            if len(orjson.loads(b"[" + b",".join(group) + b"]")) == len(group):
                continue
        except orjson.JSONDecodeError:
            pass
        for i, token in enumerate(group):  # (rare: the run is cut before the first that is not)
            try:
                if type(orjson.loads(token)) is str:
                    continue
            except orjson.JSONDecodeError:
                pass
            del tokens[i:], pads[i:]
            break
    return len(tokens)


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
    spans: list[tuple[int, int, str]] = []  # start, end, the key
    for key, kind in ((TEXT_KEY, str), (COUNTER_KEY, int), (PAD_KEY, str)):
        if key not in event:
            continue
        value = event[key]
        if type(value) is not kind:
            return None
        span = value_span(raw, key) if kind is str else _digits_span(raw, key)
        if span is None or orjson.loads(raw[span[0] : span[1]]) != value:
            return None
        spans.append((*span, key))
    spans.sort()
    parts, at = [], 0
    for begin, finish, _ in spans:
        if begin < at:
            return None
        parts.append(raw[at:begin])
        at = finish
    parts.append(raw[at:])
    if any(b"\\u" in part for part in parts) or b"\n\n" in b"".join(parts[:-1]):
        return None
    if parts[0].count(b"\n") > 1:
        return None  # (lines before the data line other than `event:`: _pattern allows one)
    return EventTemplate(tuple(parts), tuple(span[2] for span in spans))


def _digits_span(raw: bytes, key: str) -> tuple[int, int] | None:
    """Where the non-negative integer value of `key` lies in `raw`, when the key occurs once."""
    name = b'"' + key.encode() + b'":'
    if raw.count(b'"' + key.encode() + b'"') != 1 or (at := raw.find(name)) < 0:
        return None
    start = end = at + len(name)
    while end < len(raw) and 0x30 <= raw[end] <= 0x39:
        end += 1
    return (start, end) if end > start else None
