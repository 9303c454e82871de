"""The texts of a run of a learned template's events, read in place (ChunkTemplate.take_texts).

A fast upstream's read holds hundreds of chunks of more of the same (proxy.core.stream
.chunk_template): each `data: ` + the template's prefix + one JSON string + its suffix + a blank
line. The pipeline (and the chat events' reader of a front door) takes such a run from its texts
alone; this finds where the run ends and reads its texts — with no Python step per event where
that can say exactly what the loop over the events would (`take_at_once`), else by that loop
(`take_in_steps`, and `take_each`, one text at a time), which the tests hold it to.

Pure.
"""

from __future__ import annotations

from itertools import repeat, takewhile
from operator import and_, itemgetter
from types import FunctionType
from typing import TYPE_CHECKING, Final

import orjson

if TYPE_CHECKING:
    from proxy.core.stream.chunk_template import ChunkTemplate

# How much of a template's prefix a run read at once looks for to bound the run (the bytes where
# templates of one stream differ; take_at_once).
PREFIX_END = 40


def take_texts(
    template: ChunkTemplate, data: bytes, start: int, max_event_bytes: int, unless_lt: bool
) -> tuple[int, list[str]]:
    """Where the run of events of `template` starting at `start` ends, and their texts: each
    `data: ` + the template with a non-empty string in the field + a blank line, at most
    `max_event_bytes`, its text without `<` when `unless_lt`.

    Only for data where an event starts at `start` and whose line ends are LF (an idle SSE
    decoder's view): a match is then one whole event, ended by the first "\\n\\n" after it, since
    it holds no line end (the prefix and suffix hold none, and a JSON string cannot hold a raw
    one). The same test as `ChunkTemplate.text_of`, on the events in place: the hot loop of a fast
    upstream's read, which holds hundreds of them.

    The run is read with no Python step per event (`take_at_once`) where that can say exactly what
    the loop would; else (a token that could mislead it, a `<` to look at, a run longer than
    `max_event_bytes`) by the loop (`take_in_steps`), which stops exactly where the run does."""
    if AT_ONCE:
        taken = take_at_once(template, data, start, max_event_bytes, unless_lt)
        if taken is not None:
            return taken
    return take_in_steps(template, data, start, max_event_bytes, unless_lt)


def take_at_once(
    template: ChunkTemplate, data: bytes, start: int, max_event_bytes: int, unless_lt: bool
) -> tuple[int, list[str]] | None:
    """take_texts in a fixed number of calls into C whatever the run's length, or None when
    that cannot tell the run exactly (the loop then reads it).

    The events from `start` are the pieces between blank lines, as the loop finds them (each ends
    at the first "\\n\\n"). The run's candidates are the leading pieces of the template's shape,
    prefix + token + suffix; their tokens, joined by ",\\n", are read as one JSON array. That is
    exact when each token starts and ends with a quote and holds no line end (the separators' are
    then the only ones): no string can reach across a separator (it would hold the separator's raw
    line end, which JSON refuses in a string), nor can a number or a literal (the comma ends it).
    An array or an object can (`"x",["a"` · `"b"` · `"c"],"d"` reads as `["x", ["a", "b", "c"],
    "d"]`: as many elements as tokens, one of them no text), so every element must also be a
    string: then each token is exactly one string. The run then ends before the first empty text,
    as the loop's does. (About 3/5 of the loop's instructions for a burst stream's runs, pure:
    bench/README.md, "A run read without a loop per event".)"""
    prefix, suffix = template.event_prefix, template.suffix
    if prefix is None or not suffix:
        return None
    # The loop's test of the first event (a lone one, or none: not worth the calls below).
    end = data.find(b"\n\n", start)
    first, last = start + len(prefix), end - len(suffix)
    if (
        end < 0
        or end + 2 - start > max_event_bytes
        or last - first < 3
        or data[first] != 0x22
        or data[last - 1] != 0x22
        or not data.startswith(prefix, start)
        or not data.endswith(suffix, start, end)
    ):
        return start, []
    # No event of the run lies past the last one that holds the prefix's end (where
    # templates differ: the text field's name and what precedes it), so the read is split no
    # further: a run of reasoning is not split again with the answer after it.
    marked = data.rfind(prefix[-PREFIX_END:], start)
    bound = data.find(b"\n\n", marked)
    events = data[start : len(data) if bound < 0 else bound + 2].split(b"\n\n")
    events.pop()  # (what follows the last blank line is no whole event)
    shaped = map(
        and_, map(bytes.startswith, events, repeat(prefix)), map(bytes.endswith, events, repeat(suffix))
    )
    count = len(list(takewhile(bool, shaped)))
    if count == 0:
        return start, []  # (the first event is not of the template's shape, or there is none)
    del events[count:]
    tokens = b",\n".join(map(itemgetter(slice(len(prefix), -len(suffix))), events))
    separators = count - 1
    if (
        tokens[:1] != b'"'
        or tokens[-1:] != b'"'
        or tokens.count(b"\n") != separators
        or tokens.count(b'\n"') != separators
        or tokens.count(b'",\n') != separators
    ):
        return None
    try:
        texts: list[str] = orjson.loads(b"[" + tokens + b"]")
    except orjson.JSONDecodeError:
        return None
    if len(texts) != count:
        return None
    try:  # (every element a string, in one call: a container across tokens keeps the count)
        joined = "".join(texts)
    except TypeError:
        return None
    if "" in texts:  # (not a text: the run ends before it)
        count = texts.index("")
        del texts[count:]
        del events[count:]
    if unless_lt and "<" in joined:  # (past an empty text too: the loop then reads the run)
        return None
    size = sum(map(len, events)) + 2 * count
    if size > max_event_bytes:
        return None
    return start + size, texts


def take_in_steps(
    template: ChunkTemplate, data: bytes, start: int, max_event_bytes: int, unless_lt: bool
) -> tuple[int, list[str]]:
    """take_texts one event at a time, the texts of the run read in one orjson call, not one
    per event (about 16% of this loop's time, pure). That is exact because each token starts
    with a quote and ends with one no backslash precedes: no string can run from one token
    into the next, so the array has as many elements as there are tokens only when each
    token is one value. Anything else (a token that is not one string, a `<` to look at)
    goes event by event (`take_each`), which stops exactly where the run does."""
    prefix, suffix = template.event_prefix, template.suffix
    if prefix is None:
        return start, []
    head, tail = len(prefix), len(suffix)
    find, startswith, endswith = data.find, data.startswith, data.endswith
    tokens: list[bytes] = []
    pos = start
    while (end := find(b"\n\n", pos)) >= 0:
        first, last = pos + head, end - tail  # the string token, quotes included
        if (
            end + 2 - pos > max_event_bytes
            or last - first < 3  # (2: the empty string, which is not a text)
            or data[first] != 0x22
            or data[last - 1] != 0x22
            or not startswith(prefix, pos)
            or not endswith(suffix, pos, end)
        ):
            break
        if data[last - 2] == 0x5C:  # ('\\"': an escaped quote, or an escaped backslash)
            return take_each(template, data, start, max_event_bytes, unless_lt)
        tokens.append(data[first:last])
        pos = end + 2
    if not tokens:
        return take_each(template, data, start, max_event_bytes, unless_lt)
    try:
        texts = orjson.loads(b"[" + b",".join(tokens) + b"]")
    except orjson.JSONDecodeError:
        return take_each(template, data, start, max_event_bytes, unless_lt)
    if (
        len(texts) != len(tokens)
        or not all(type(text) is str for text in texts)
        or (unless_lt and any("<" in text for text in texts))
    ):
        return take_each(template, data, start, max_event_bytes, unless_lt)
    return pos, texts


def take_each(
    template: ChunkTemplate, data: bytes, start: int, max_event_bytes: int, unless_lt: bool
) -> tuple[int, list[str]]:
    """take_texts one event at a time: each text read and judged alone."""
    prefix, suffix = template.event_prefix, template.suffix
    if prefix is None:
        return start, []
    head, tail = len(prefix), len(suffix)
    find, startswith, endswith, loads = data.find, data.startswith, data.endswith, orjson.loads
    texts: list[str] = []
    pos = start
    while (end := find(b"\n\n", pos)) >= 0:
        first, last = pos + head, end - tail  # the string token, quotes included
        if (
            end + 2 - pos > max_event_bytes
            or last - first < 2
            or data[first] != 0x22
            or data[last - 1] != 0x22
            or not startswith(prefix, pos)
            or not endswith(suffix, pos, end)
        ):
            break
        try:
            text = loads(data[first:last])
        except orjson.JSONDecodeError:
            break
        if type(text) is not str or not text or (unless_lt and "<" in text):
            break
        texts.append(text)
        pos = end + 2
    return pos, texts


# Which build reads a run at once. Paired in time (bench/README.md, "A run read without a loop per
# event", its last table), take_at_once costs 3.1% less CPU per burst stream than the loop in the
# pure build, and 3.2% more in the compiled one, where mypyc makes the loop C and take_at_once's
# passes over the read (split, slices, joins, counts) are what is left: the compiled build keeps the
# loop. (This module's functions are Python functions only in the pure build: mypyc makes them
# built-ins.) Both paths run in both builds' tests.
AT_ONCE: Final = isinstance(take_in_steps, FunctionType)
