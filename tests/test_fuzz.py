"""Property-based fuzzing of the pure core: SSE decoding, reasoning extraction, the stream pipeline,
the trace builder, the request rewrite, the replay restore and capture, control headers and the
upstream policy.

Each target is fed generated input (arbitrary bytes, JSON of any shape built around the real field
names, header strings with any characters) and checked against its contract: no exception other
than the documented ones, pass-through of what it does not understand, no mutation of its input,
well-formed output.

Every bug these targets found is kept as a deterministic regression test at the end of this file.
A newly found bug goes there first, marked `xfail(strict=True)` with an entry in `KNOWN_BUGS`: while
it is open the property tests count an example that trips it (`hypothesis.event`) instead of
failing, so the search goes on for other bugs; once fixed, the marker and the entry go.

Budget: derandomized, a few hundred examples per test: 16 s for the file on a 2-core machine with
other work running (measured; a machine saturated by other suites has taken a minute).
THINKPROXY_FUZZ_SCALE=10 runs ten times the examples with fresh randomness each time.
bench/fuzz_atheris.py drives the same targets under coverage-guided fuzzing.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
import os
import re
import socket
import traceback
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import jsonschema
import orjson
import pytest
import yarl
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import proxy
from proxy.core.config.providers import Dialect, ProvidersTable, ReplayPolicy
from proxy.core.controls import (
    Level,
    ReasoningField,
    ReasoningVisibility,
    TraceFormat,
    TraceMode,
    parse_level,
    parse_reasoning_visibility,
    parse_trace_format,
    parse_trace_mode,
)
from proxy.core.errors import BadRequest, ConfigError, Forbidden, ProxyError, UnreadableAnswer
from proxy.core.plan.rewrite import fit_history, rewrite_body
from proxy.core.replay.keys import plan_lookups
from proxy.core.replay.rules import Remembered, apply_restore, capture_records, decode_record
from proxy.core.replay.signatures import with_skipped_signatures
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.completion import process_completion
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.pipeline_end import WITHHELD_COMMENT
from proxy.core.stream.reasoning import (
    ReasoningOptions,
    StreamReasoningExtractor,
    normalize_completion,
    normalize_message,
)
from proxy.core.stream.sse import EventTooLarge, SSEDecoder, SSEEvent
from proxy.core.stream.trace import TraceBuilder
from proxy.core.stream.trace_format import ChunkMeta, comment_frames, event_frames
from proxy.server.upstream.policy import UpstreamPolicy, host_is_sensitive, parse_allowed
from tests.core.stream.test_sse import canonical

T = TypeVar("T")

SCALE = max(1, int(os.environ.get("THINKPROXY_FUZZ_SCALE", "1")))


def budget(examples: int) -> settings:
    """Bounded, deterministic by default (the suite must be stable); randomized when scaled up."""
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        derandomize=SCALE == 1,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# --------------------------------------------------------------------------------------------------
# Known bugs: the innermost proxy frame (file, function) and exception type of each open bug
# --------------------------------------------------------------------------------------------------

KNOWN_BUGS: dict[tuple[str, str, type[BaseException]], str] = {
    # none open: every bug these tests found has a regression test below
}

_PROXY_DIR = str(Path(proxy.__file__).parent) + os.sep


def note(text: str) -> None:
    """Count `text` in hypothesis' statistics; a no-op outside a hypothesis test (bench/fuzz_atheris.py)."""
    with contextlib.suppress(InvalidArgument):
        event(text)


def known_bug(exc: BaseException) -> str | None:
    """The KNOWN_BUGS entry an exception comes from, judged by the innermost frame in proxy/."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(_PROXY_DIR)]
    if not frames:
        return None
    where = (Path(frames[-1].filename).name, frames[-1].name)
    for (file, function, kind), bug in KNOWN_BUGS.items():
        if (file, function) == where and isinstance(exc, kind):
            return bug
    return None


def guarded(call: Callable[[], T]) -> tuple[bool, T | None]:
    """(True, result), or (False, None) when `call` tripped a known bug; any other exception propagates."""
    try:
        return True, call()
    except Exception as exc:
        bug = known_bug(exc)
        if bug is None:
            raise
        note(f"known bug: {bug}")
        return False, None


# --------------------------------------------------------------------------------------------------
# Strategies: JSON built around the real field names, text full of tags and partial tags
# --------------------------------------------------------------------------------------------------

FIELD_NAMES = (
    "choices",
    "delta",
    "message",
    "content",
    "reasoning_content",
    "reasoning",
    "reasoning_details",
    "tool_calls",
    "finish_reason",
    "index",
    "type",
    "text",
    "thinking",
    "usage",
)
OTHER_WORDS = (
    "id",
    "object",
    "model",
    "created",
    "function",
    "name",
    "arguments",
    "summary",
    "signature",
    "role",
    "data",
    "error",
    "reasoning.text",
    "reasoning.summary",
    "reasoning.encrypted",
    "stop",
    "tool",
    "assistant",
)
TAG_NAMES = ("think", "thinking", "reasoning", "thought")
TAG_PIECES = (
    "<think>",
    "</think>",
    "<thinking>",
    "</thinking>",
    "<reasoning>",
    "</reasoning>",
    "<thought>",
    "</thought>",
    "<",
    "</",
    ">",
    "<th",
    "<thi",
    "ink>",
    "nk>",
    "/think>",
    "<think",
    "</think",
    "<<",
    "\n",
)


def unit(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """`strategy` as one branch: `st.one_of` flattens nested one_ofs into equally likely branches, so
    without this a many-branched alternative would crowd out the one it sits beside."""
    return st.tuples(strategy).map(lambda one: one[0])  # (a mapped one_of would still be flattened)


small_text = st.text(max_size=6)
tag_soup = st.lists(st.one_of(st.sampled_from(TAG_PIECES), small_text), max_size=8).map("".join)
words = st.sampled_from(FIELD_NAMES + OTHER_WORDS)
strings = unit(st.one_of(words, tag_soup, st.text(max_size=10)))
keys = unit(st.one_of(words, st.text(max_size=6)))
# orjson.loads yields integers in [-2**63, 2**64) (larger ones become floats): the same range here.
scalars = unit(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        strings,
    )
)


def json_containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5))


json_values = unit(st.recursive(scalars, json_containers, max_leaves=10))
# Values of the wrong type where a field expects something else: cheap to draw, one level deep (enough
# for unhashable and non-iterable values); the fully recursive values go in at the top level.
wrong = unit(st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(keys, scalars, max_size=3)))


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` three times in four, else `bad`: well-shaped input reaches deeper code."""
    return st.one_of(unit(good), unit(good), unit(good), unit(bad))


def with_extras(base: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """`base`, sometimes with random extra keys (the known ones win on a clash)."""
    extras = st.dictionaries(keys, wrong, max_size=1)
    return st.tuples(base, extras).map(lambda pair: {**pair[1], **pair[0]})


content_parts = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "thinking", "image_url", "reasoning"])},
            optional={
                "text": st.one_of(tag_soup, wrong),
                "thinking": st.one_of(
                    tag_soup,
                    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": tag_soup}), max_size=2),
                    wrong,
                ),
            },
        ),
        tag_soup,
        wrong,
    ),
    max_size=4,
)
contents = st.one_of(tag_soup, content_parts, wrong)
details = st.one_of(
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "type": st.one_of(
                        st.sampled_from(["reasoning.text", "reasoning.summary", "reasoning.encrypted"]), wrong
                    )
                },
                optional={
                    "text": st.one_of(tag_soup, wrong),
                    "summary": st.one_of(tag_soup, wrong),
                    "signature": st.one_of(st.just("sig"), wrong),
                    "data": st.just("opaque"),
                },
            ),
            wrong,
        ),
        max_size=3,
    ),
    wrong,
)
arguments = st.one_of(
    st.sampled_from(['{"city": "Paris"', '{"city": "Paris"}', "{}", "[1, 2]", "{", "}", '"x"', "", "  "]),
    strings,
)
tool_call_fragments = st.one_of(
    st.lists(
        with_extras(
            st.fixed_dictionaries(
                {},
                optional={
                    "index": st.one_of(st.integers(0, 3), st.integers(-2, -1), st.booleans(), wrong),
                    "id": st.one_of(st.sampled_from(["call_1", "call_2"]), wrong),
                    "type": st.just("function"),
                    "function": st.one_of(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "name": st.one_of(
                                    st.sampled_from(["get_weather", "get_", "weather"]), strings, wrong
                                ),
                                "arguments": st.one_of(arguments, wrong),
                            },
                        ),
                        wrong,
                    ),
                },
            )
        ),
        max_size=3,
    ),
    wrong,
)
deltas = with_extras(
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.one_of(st.just("assistant"), wrong),
            "content": mostly(tag_soup, contents),
            "reasoning_content": mostly(tag_soup, wrong),
            "reasoning": mostly(tag_soup, wrong),
            "reasoning_details": details,
            "tool_calls": tool_call_fragments,
        },
    )
)
finish_reasons = st.one_of(st.none(), st.sampled_from(["stop", "length", "tool_calls"]), wrong)
choices = mostly(
    with_extras(
        st.fixed_dictionaries(
            {},
            optional={
                "index": mostly(st.integers(0, 2), wrong),
                "delta": mostly(deltas, wrong),
                "message": st.one_of(deltas, wrong),
                "finish_reason": finish_reasons,
            },
        )
    ),
    wrong,
)
usages = st.one_of(
    st.fixed_dictionaries({"prompt_tokens": st.integers(0, 99), "completion_tokens": st.integers(0, 99)}),
    wrong,
)
chunk_dicts = with_extras(
    st.fixed_dictionaries(
        {"choices": mostly(st.lists(choices, min_size=1, max_size=3), json_values)},
        optional={
            "id": st.one_of(st.just("chatcmpl-1"), wrong),
            "object": st.just("chat.completion.chunk"),
            "created": st.one_of(st.integers(0, 2**31), wrong),
            "model": strings,
            "usage": usages,
        },
    )
)
any_chunks = mostly(chunk_dicts, st.dictionaries(keys, json_values, max_size=5))

reasoning_options = st.builds(
    ReasoningOptions,
    tags=st.lists(st.sampled_from((*TAG_NAMES, "x.y", "a-b")), max_size=3, unique=True).map(tuple),
    implicit_open=st.booleans(),
    output_field=st.sampled_from(list(ReasoningField)),
    hide=st.booleans(),
)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def plain_fields(field: ReasoningField) -> tuple[str, ...]:
    return ("reasoning_content", "reasoning") if field is ReasoningField.BOTH else (field.value,)


def dict_deltas(chunk: dict[str, Any], key: str = "delta") -> Iterator[dict[str, Any]]:
    """The deltas (or messages) the extractor is meant to look at: dicts in dict choices in a list."""
    found = chunk.get("choices")
    if type(found) is not list:
        return
    for choice in found:
        if type(choice) is dict and type(choice.get(key)) is dict:
            yield choice[key]


# --------------------------------------------------------------------------------------------------
# 1. SSEDecoder
# --------------------------------------------------------------------------------------------------

SSE_PIECES = (
    b"data: ",
    b"data:",
    b"data",
    b"event: x",
    b"id: 1",
    b"id: \x00",
    b"retry: 10",
    b"retry: x",
    b": comment",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"\r\r",
    b"\r\n\r\n",
    b'{"a": 1}',
    b"[DONE]",
    b"\xff\xfe",
)
sse_soup = st.lists(st.one_of(st.sampled_from(SSE_PIECES), st.binary(max_size=6)), max_size=24).map(b"".join)
sse_bytes = st.one_of(sse_soup, st.binary(max_size=120))


@st.composite
def split_bytes(draw: st.DrawFn, source: st.SearchStrategy[bytes]) -> tuple[bytes, list[bytes]]:
    data = draw(source)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    bounds = [0, *cuts, len(data)]
    return data, [data[a:b] for a, b in pairwise(bounds)]


def spec_fields(raw: bytes) -> tuple[bytes | None, bytes | None, bytes | None, int | None]:
    """(data, event, id, retry) of one event's bytes, read line by line as the SSE spec says."""
    data: list[bytes] = []
    event_: bytes | None = None
    id_: bytes | None = None
    retry: int | None = None
    for line in re.split(rb"\r\n|\r|\n", raw):
        if not line or line.startswith(b":"):
            continue
        name, colon, value = line.partition(b":")
        value = value[1:] if colon and value.startswith(b" ") else value
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event_ = value
        elif name == b"id" and b"\0" not in value:
            id_ = value
        elif name == b"retry" and value and all(48 <= c <= 57 for c in value):
            retry = int(value)
    return (b"\n".join(data) if data else None), event_, id_, retry


def decode_all(pieces: list[bytes], max_event_bytes: int = 1 << 30) -> list[SSEEvent]:
    decoder = SSEDecoder(max_event_bytes)
    events: list[SSEEvent] = []
    for piece in pieces:
        events += decoder.feed(piece)
    return events + decoder.flush()


@budget(300)
@given(split_bytes(sse_bytes))
def test_sse_decoder_passes_every_byte_through_identically_for_any_split(
    sample: tuple[bytes, list[bytes]],
) -> None:
    data, pieces = sample
    events = decode_all(pieces)
    assert b"".join(e.raw for e in events) == data
    # the same events however the stream is split (runs of blank lines may be grouped differently)
    assert canonical(events) == canonical(decode_all([data]))
    for e in events:
        assert (e.data, e.event, e.id, e.retry) == spec_fields(e.raw)
    for e in events[:-1]:
        assert e.raw.endswith((b"\n\n", b"\r\r", b"\r\n\r\n", b"\n\r\n", b"\r\n\n", b"\n\r", b"\r\r\n"))


@budget(200)
@given(split_bytes(sse_bytes), st.integers(10, 48))
def test_sse_decoder_limit_raises_only_too_large_and_stays_usable(
    sample: tuple[bytes, list[bytes]], limit: int
) -> None:
    data, pieces = sample
    reference = decode_all([data])
    oversized = any(len(e.raw) > limit for e in reference)
    decoder = SSEDecoder(limit)
    raws: list[bytes] = []
    raised = False
    try:
        for piece in pieces:
            raws += [e.raw for e in decoder.feed(piece)]
        raws += [e.raw for e in decoder.flush()]
    except EventTooLarge as exc:
        raised = True
        assert exc.limit == limit
        raws += [e.raw for e in exc.events]
    assert raised == oversized
    assert data.startswith(b"".join(raws))  # the events before the oversized one, in order, intact
    assert all(len(raw) <= limit for raw in raws)
    # After the error the decoder is empty and decodes a new stream correctly.
    assert decoder.feed(b"data: ok\n\n") == [SSEEvent(b"data: ok\n\n", b"ok")]
    assert decoder.flush() == []


# --------------------------------------------------------------------------------------------------
# 2. Reasoning extraction
# --------------------------------------------------------------------------------------------------


def check_reasoning_placement(obj: dict[str, Any], options: ReasoningOptions) -> None:
    """After normalization: reasoning text only in the configured field(s), none at all when hiding."""
    if options.hide:
        for key in ("reasoning_content", "reasoning"):
            assert not obj.get(key), f"{key} left while hiding: {obj!r}"
        details = obj.get("reasoning_details")
        if type(details) is list:
            for item in details:
                if type(item) is dict and item.get("type") == "reasoning.text":
                    assert "text" not in item
                if type(item) is dict and item.get("type") == "reasoning.summary":
                    assert "summary" not in item
        return
    targets = plain_fields(options.output_field)
    text_fields = [k for k in ("reasoning_content", "reasoning") if type(obj.get(k)) is str and obj[k]]
    if text_fields:
        # Whatever reasoning the object carries sits in the configured field(s), not in the other one.
        assert set(text_fields) <= set(targets), f"reasoning outside {targets}: {obj!r}"


@budget(100)
@given(reasoning_options, st.lists(any_chunks, max_size=5))
def test_stream_extractor_never_raises_and_unchanged_means_unchanged(
    options: ReasoningOptions, chunks: list[dict[str, Any]]
) -> None:
    extractor = StreamReasoningExtractor(options)
    for chunk in chunks:
        before = copy.deepcopy(chunk)
        before_bytes = dumps(chunk)
        ok, outcome = guarded(lambda chunk=chunk: extractor.process_chunk(chunk))
        if not ok:
            return
        assert outcome is not None
        if not outcome.changed:
            assert chunk == before
            assert dumps(chunk) == before_bytes  # same bytes: the original event can be forwarded
        dumps(chunk)  # still serializable
        for delta in dict_deltas(chunk):
            check_reasoning_placement(delta, options)
    for tail in extractor.flush():
        assert type(tail.get("choices")) is list and tail["choices"]
        dumps(tail)
        for delta in dict_deltas(tail):
            check_reasoning_placement(delta, options)


completions = st.one_of(
    with_extras(
        st.fixed_dictionaries(
            {},
            optional={
                "choices": st.one_of(
                    st.lists(
                        st.one_of(
                            with_extras(
                                st.fixed_dictionaries(
                                    {},
                                    optional={
                                        "index": st.integers(0, 2),
                                        "message": st.one_of(deltas, wrong),
                                        "finish_reason": finish_reasons,
                                    },
                                )
                            ),
                            wrong,
                        ),
                        max_size=3,
                    ),
                    wrong,
                ),
                "usage": usages,
            },
        )
    ),
    st.dictionaries(keys, json_values, max_size=4),
)


@budget(120)
@given(reasoning_options, completions)
def test_normalize_completion_never_raises_and_unchanged_means_unchanged(
    options: ReasoningOptions, body: dict[str, Any]
) -> None:
    before = copy.deepcopy(body)
    before_bytes = dumps(body)
    ok, changed = guarded(lambda: normalize_completion(body, options))
    if not ok:
        return
    if not changed:
        assert body == before
        assert dumps(body) == before_bytes
    dumps(body)
    for message in dict_deltas(body, "message"):
        check_reasoning_placement(message, options)


@budget(150)
@given(reasoning_options, deltas)
def test_normalize_message_never_raises_and_unchanged_means_unchanged(
    options: ReasoningOptions, message: dict[str, Any]
) -> None:
    before = copy.deepcopy(message)
    ok, changed = guarded(lambda: normalize_message(message, options))
    if not ok:
        return
    if not changed:
        assert message == before and dumps(message) == dumps(before)
    dumps(message)
    check_reasoning_placement(message, options)


@st.composite
def tagged_answers(draw: st.DrawFn) -> tuple[tuple[str, ...], bool, list[str], str, str]:
    """A well-formed tagged text (tags open and close in turn; the text between them has no `<`),
    cut into stream pieces anywhere, even inside a tag. → (tags, implicit_open, pieces, reasoning,
    answer)."""
    names = tuple(draw(st.lists(st.sampled_from(TAG_NAMES), min_size=1, max_size=3, unique=True)))
    implicit = draw(st.booleans())
    inside = implicit
    plain = st.text(
        alphabet=st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=6
    )
    parts: list[str] = []
    reasoning: list[str] = []
    answer: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        text = draw(plain)
        parts.append(text)
        (reasoning if inside else answer).append(text)
        name = draw(st.sampled_from(names))
        parts.append(f"</{name}>" if inside else f"<{name}>")
        inside = not inside
    tail = draw(plain)
    parts.append(tail)
    (reasoning if inside else answer).append(tail)
    full = "".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(full)), max_size=10)))
    bounds = [0, *cuts, len(full)]
    pieces = [full[a:b] for a, b in pairwise(bounds)]
    return names, implicit, pieces, "".join(reasoning), "".join(answer)


def stream_text(
    options: ReasoningOptions, pieces: list[str], end_with_finish: bool
) -> tuple[list[dict[str, Any]], str, str]:
    """Run content pieces through a stream extractor → (output deltas, content, reasoning)."""
    extractor = StreamReasoningExtractor(options)
    chunks: list[dict[str, Any]] = [
        {"id": "c", "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces
    ]
    if end_with_finish:
        chunks.append({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    for chunk in chunks:
        extractor.process_chunk(chunk)
    chunks += extractor.flush()
    out = [d for c in chunks for d in dict_deltas(c)]
    field = "reasoning" if options.output_field is ReasoningField.REASONING else "reasoning_content"
    content = "".join(d["content"] for d in out if type(d.get("content")) is str)
    reasoning = "".join(d[field] for d in out if type(d.get(field)) is str)
    return out, content, reasoning


@budget(200)
@given(tagged_answers(), st.sampled_from(list(ReasoningField)), st.booleans(), st.booleans())
def test_well_formed_tags_never_reach_content_whatever_the_split(
    sample: tuple[tuple[str, ...], bool, list[str], str, str],
    field: ReasoningField,
    hide: bool,
    end_with_finish: bool,
) -> None:
    names, implicit, pieces, reasoning, answer = sample
    options = ReasoningOptions(tags=names, implicit_open=implicit, output_field=field, hide=hide)
    out, content, got_reasoning = stream_text(options, pieces, end_with_finish)
    for delta in out:
        text = delta.get("content")
        # The text between tags has no `<`: any `<` in the output is (part of) a tag that leaked.
        assert not (isinstance(text, str) and "<" in text), f"tag text in content: {text!r}"
        check_reasoning_placement(delta, options)
    assert content == answer
    assert got_reasoning == ("" if hide else reasoning)
    # The non-stream path gives the same split.
    message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
    normalize_message(message, options)
    assert message["content"] == answer
    fields = plain_fields(field)
    assert [message.get(f) for f in fields] == [None if hide or not reasoning else reasoning] * len(fields)


@budget(150)
@given(reasoning_options, st.lists(tag_soup, max_size=8), st.booleans())
def test_stream_split_matches_the_whole_message_for_any_tag_soup(
    options: ReasoningOptions, pieces: list[str], end_with_finish: bool
) -> None:
    """However content is cut into chunks (partial tags, stray closers, `<` everywhere), the stream
    gives the same content and reasoning as the non-stream normalization of the whole text."""
    _, content, reasoning = stream_text(options, pieces, end_with_finish)
    message: dict[str, Any] = {"content": "".join(pieces)}
    normalize_message(message, options)
    field = "reasoning" if options.output_field is ReasoningField.REASONING else "reasoning_content"
    assert content == message["content"]
    assert reasoning == (message.get(field) or "")


# --------------------------------------------------------------------------------------------------
# 3. StreamPipeline
# --------------------------------------------------------------------------------------------------

line_ends = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def sse_events(draw: st.DrawFn) -> bytes:
    """One SSE event as an upstream might send it (or almost: junk lines, broken JSON)."""
    end = draw(line_ends)
    kind = draw(st.integers(0, 5))
    lines: list[bytes] = []
    if draw(st.booleans()):
        lines.append(
            draw(st.sampled_from([b"event: message", b"id: 3", b": keep-alive", b"retry: 100", b"x-y: z"]))
        )
    if kind <= 2:
        lines.append(b"data: " + dumps(draw(any_chunks)))
    elif kind == 3:
        lines.append(b"data:" + dumps(draw(json_values)))
    elif kind == 4:
        lines.append(
            draw(
                st.sampled_from([b"data: {not json", b"data: ", b'data: {"a":', b"data: nul", b"data: \xff"])
            )
        )
    else:
        lines.append(draw(st.binary(max_size=8)))
    if draw(st.booleans()) and kind <= 2:
        lines.append(draw(st.sampled_from([b"data: ", b": c", b"id: 9"])))
    return end.join(lines) + end + draw(line_ends)


def is_trace_frame(e: SSEEvent) -> bool:
    return e.raw.startswith(b": trace {") or e.event == b"trace"


def trace_events_of(events: list[SSEEvent]) -> list[dict[str, Any]]:
    """The trace events carried by a client stream's frames, checking each frame's shape."""
    found = []
    for e in events:
        if e.raw.startswith(b": trace {"):
            assert e.data is None  # a comment: invisible to SSE clients
            found.append(orjson.loads(e.raw[len(b": trace ") :]))
        elif e.event == b"trace":
            chunk = orjson.loads(e.data or b"")
            # A chunk OpenAI SDKs accept and skip: no choices, no top-level error.
            assert chunk["choices"] == [] and "error" not in chunk
            assert chunk["object"] == "chat.completion.chunk"
            found.append(chunk["trace"])
    return found


def no_trace_lookalikes(data: bytes) -> bool:
    return b": trace {" not in data and b"event: trace" not in data


pipeline_streams = st.lists(sse_events(), max_size=8).map(b"".join).filter(no_trace_lookalikes)
trace_modes = st.sampled_from([None, TraceMode.BRIEF, TraceMode.DETAILED])


def make_pipeline(
    options: ReasoningOptions, mode: TraceMode | None, fmt: TraceFormat, max_event_bytes: int = 1 << 20
) -> StreamPipeline:
    trace = None if mode is None else TraceBuilder(mode=mode, zh=False, level="standard", provider="p")
    return StreamPipeline(reasoning=options, trace=trace, trace_format=fmt, max_event_bytes=max_event_bytes)


def run_pipeline(p: StreamPipeline, pieces: list[bytes]) -> bytes | None:
    """begin, feed each piece, finish (clock advancing); None if a known bug was tripped."""
    out = p.begin({"messages": [{"role": "user", "content": "hi"}]}, 0.0)
    for i, piece in enumerate(pieces):
        ok, chunk = guarded(lambda piece=piece, i=i: p.feed(piece, float(i)))
        if not ok:
            return None
        out += chunk or b""
    ok, tail = guarded(lambda: p.finish(float(len(pieces))))
    if not ok:
        return None
    return out + (tail or b"")


def check_single_done_at_end(out: bytes) -> list[SSEEvent]:
    """The client's stream ends with one complete `data: [DONE]` event and has no other."""
    decoder = SSEDecoder(1 << 30)
    events = decoder.feed(out)
    assert decoder.flush() == [], f"output ends inside an event: {out[-80:]!r}"
    done = [i for i, e in enumerate(events) if e.data == b"[DONE]"]
    assert done == [len(events) - 1], f"[DONE] events at {done} of {len(events)}"
    return events


def terminated(data: bytes) -> bytes:
    """`data` completed so that it ends exactly at an event boundary."""
    for _ in range(3):
        decoder = SSEDecoder(1 << 30)
        decoder.feed(data)
        if not decoder.flush():
            return data
        data += b"\n"
    raise AssertionError("could not terminate the stream")


def passes_through(e: SSEEvent) -> bool:
    """An event the pipeline must forward byte for byte: no data, or data that is not a JSON chunk."""
    if e.data is None:
        return True
    try:
        parsed = orjson.loads(e.data)
    except orjson.JSONDecodeError:
        return True
    return not isinstance(parsed, dict) or "error" in parsed


def non_data_lines(raw: bytes) -> list[bytes]:
    return [line for line in raw.splitlines() if line and line.partition(b":")[0] != b"data"]


@budget(120)
@given(
    split_bytes(st.one_of(pipeline_streams, sse_bytes.filter(no_trace_lookalikes))),
    reasoning_options,
    trace_modes,
    st.sampled_from(list(TraceFormat)),
)
def test_pipeline_never_raises_and_forwards_what_it_does_not_understand(
    sample: tuple[bytes, list[bytes]], options: ReasoningOptions, mode: TraceMode | None, fmt: TraceFormat
) -> None:
    data, pieces = sample
    out = run_pipeline(make_pipeline(options, mode, fmt), pieces)
    if out is None:
        return
    reference = decode_all([data])
    dones = [i for i, e in enumerate(reference) if e.data == b"[DONE]"]
    # A last event without its blank line is not an event (the SSE spec discards it): it must not
    # be forwarded, and unless [DONE] came first the stream ends with upstream_truncated.
    cut = bool(reference) and is_unterminated(reference[-1].raw)
    # A tail of bare line ends (a lone CR, say) is no event either; it carries nothing and is dropped.
    blank_tail = (
        bool(reference) and not reference[-1].raw.strip(b"\r\n") and not ends_event(reference[-1].raw)
    )
    complete = reference[:-1] if cut or blank_tail else reference
    # Every event that is not a JSON chunk appears in the output exactly as received, in order
    # (hiding reasoning, only those without data: the others may not be checked, so are withheld).
    position = 0
    for e in complete:
        if passes_through(e) and not (options.hide and e.data is not None):
            found = out.find(e.raw, position)
            assert found >= 0, f"event not forwarded byte for byte: {e.raw!r}"
            position = found + len(e.raw)
    if cut and not dones:
        assert b'"upstream_truncated"' in out[position:]
    if dones and dones[0] != len(complete) - 1:
        note("known bug: pipeline: events after the upstream's [DONE] forwarded as they come")
    else:
        check_single_done_at_end(out)


def ends_event(raw: bytes) -> bool:
    """Ended by a blank line (two line ends)."""
    return raw.endswith((b"\n\n", b"\r\r", b"\n\r", b"\r\r\n", b"\n\r\n"))


def is_unterminated(raw: bytes) -> bool:
    """Not ended by a blank line (two line ends), and more than line ends."""
    return not ends_event(raw) and bool(raw.strip(b"\r\n"))


@budget(100)
@given(split_bytes(st.one_of(pipeline_streams, sse_bytes.filter(no_trace_lookalikes))), reasoning_options)
def test_replay_capture_changes_no_output_and_never_raises(
    sample: tuple[bytes, list[bytes]], options: ReasoningOptions
) -> None:
    _, pieces = sample
    capture = TurnCollector()
    plain = run_pipeline(make_pipeline(options, None, TraceFormat.COMMENT), pieces)
    captured_pipeline = StreamPipeline(
        reasoning=options,
        trace=None,
        trace_format=TraceFormat.COMMENT,
        max_event_bytes=1 << 20,
        capture=capture,
    )
    captured = run_pipeline(captured_pipeline, pieces)
    if plain is None or captured is None:
        return
    assert captured == plain
    for turn in capture.turns():
        records = capture_records(
            [turn],
            tenant="t",
            provider="p",
            model=None,
            policy=ReplayPolicy(mode="keep", field="inline_think"),
            now_ms=0.0,
        )
        for _, value in records:
            assert decode_record(value) is not None


@budget(100)
@given(
    split_bytes(pipeline_streams.map(terminated)),
    reasoning_options,
    trace_modes,
    st.sampled_from(list(TraceFormat)),
    st.booleans(),
)
def test_pipeline_output_is_the_input_events_then_exactly_one_done(
    sample: tuple[bytes, list[bytes]],
    options: ReasoningOptions,
    mode: TraceMode | None,
    fmt: TraceFormat,
    upstream_done: bool,
) -> None:
    """A complete upstream stream (with or without its own [DONE]): each event comes out once, in
    order, as received or re-encoded (its other lines kept, LF line ends), trace frames in between,
    one [DONE] at the very end."""
    data, pieces = sample
    if upstream_done:
        data += b"data: [DONE]\n\n"
        pieces = [*pieces, b"data: [DONE]\n\n"]
    out = run_pipeline(make_pipeline(options, mode, fmt), pieces)
    if out is None:
        return
    decoded = check_single_done_at_end(out)
    check_trace_events(trace_events_of(decoded))
    events = [e for e in decoded if not is_trace_frame(e)]
    inputs = [e for e in decode_all([data]) if e.data != b"[DONE]"]
    body, closing = events[: len(inputs)], events[len(inputs) : -1]
    assert len(body) == len(inputs)
    for got, sent in zip(body, inputs, strict=True):
        if got.raw == sent.raw:
            continue
        if options.hide and got.raw == WITHHELD_COMMENT:
            continue  # hiding fails closed: what it cannot clean is withheld, never forwarded
        assert options.hide or not passes_through(sent), (
            f"changed an event it does not understand: {sent.raw!r}"
        )
        assert non_data_lines(got.raw) == non_data_lines(sent.raw)
        assert got.raw.endswith(b"\n\n") and b"\r" not in got.raw
        assert isinstance(orjson.loads(got.data or b""), dict)
    # All the pipeline may add before [DONE] is the held-back tail of a tag, as one chunk.
    assert len(closing) <= 1
    for extra in closing:
        assert "choices" in orjson.loads(extra.data or b"")


@budget(100)
@given(
    split_bytes(st.one_of(pipeline_streams.map(terminated), sse_bytes.map(terminated))),
    reasoning_options,
    trace_modes,
    st.sampled_from(list(TraceFormat)),
    st.integers(8, 120),
)
def test_pipeline_with_a_small_event_limit_ends_with_an_error_then_done(
    sample: tuple[bytes, list[bytes]],
    options: ReasoningOptions,
    mode: TraceMode | None,
    fmt: TraceFormat,
    limit: int,
) -> None:
    data, pieces = sample
    p = make_pipeline(options, mode, fmt, max_event_bytes=limit)
    out = run_pipeline(p, pieces)
    if out is None:
        return
    assert p.closed
    events = check_single_done_at_end(out)
    if any(len(e.raw) > limit for e in decode_all([data])):
        error = orjson.loads(events[-2].data or b"")
        assert error["error"]["code"] == "upstream_event_too_large"
    assert p.feed(b"data: {}\n\n", 99.0) == b"" and p.finish(99.0) == b""


@budget(100)
@given(
    st.one_of(completions.map(dumps), st.binary(max_size=60), json_values.map(dumps)),
    reasoning_options,
    trace_modes,
)
def test_process_completion_never_raises_and_keeps_what_it_does_not_understand(
    body: bytes, options: ReasoningOptions, mode: TraceMode | None
) -> None:
    """The non-stream counterpart: any 2xx body in, bytes out; a body that is not a JSON object comes
    back as it was; an object gets its messages normalized and, when tracing, a valid `trace` array."""
    trace = None if mode is None else TraceBuilder(mode=mode, zh=False, level="deep", provider="p")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if options.hide and not isinstance(parsed, dict):
        # Hiding fails closed: an answer it cannot clean is a 502, never forwarded as it came.
        with pytest.raises(UnreadableAnswer):
            process_completion(body, reasoning=options, trace=trace, request_body=None, now_ms=5.0)
        return
    ok, out = guarded(
        lambda: process_completion(
            body, reasoning=options, trace=trace, request_body={"messages": []}, now_ms=5.0
        )
    )
    if not ok:
        return
    assert isinstance(out, bytes)
    if not isinstance(parsed, dict):
        assert out == body
        return
    result = orjson.loads(out)
    if trace is None:
        assert "trace" not in result or result["trace"] == parsed.get("trace")
    else:
        check_trace_events(result["trace"])
    for message in dict_deltas(result, "message"):
        check_reasoning_placement(message, options)


# --------------------------------------------------------------------------------------------------
# 4. TraceBuilder
# --------------------------------------------------------------------------------------------------

SCHEMA = json.loads((Path(__file__).parent.parent / "docs" / "trace-event.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
REASONING_SENTINEL = "RSN-sentinel-7f3a91"
SYSTEM_SENTINEL = "SYS-sentinel-4c2e18"
SECRET_SENTINEL = "sk-secret-sentinel-9d8b77"


def plant_in(obj: Any) -> Any:
    """A delta or message with the reasoning sentinel in each reasoning field it has."""
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    for key in ("reasoning_content", "reasoning"):
        if key in out:
            out[key] = f"thinking about {REASONING_SENTINEL} now"
    if "reasoning_details" in out:
        out["reasoning_details"] = [{"type": "reasoning.text", "text": REASONING_SENTINEL}]
    return out


def plant_reasoning(value: Any) -> Any:
    """A chunk, completion or request body with the reasoning sentinel in every reasoning field of
    its deltas and messages (not elsewhere: `usage` and unknown keys are copied into `done` as sent)."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    if isinstance(out.get("choices"), list):
        out["choices"] = [
            {**c, **{k: plant_in(c[k]) for k in ("delta", "message") if k in c}} if isinstance(c, dict) else c
            for c in out["choices"]
        ]
    if isinstance(out.get("messages"), list):
        out["messages"] = [plant_in(m) for m in out["messages"]]
    return out


call_ids = mostly(st.sampled_from(["call_1", "call_2"]), wrong)
tool_outputs = st.one_of(
    st.sampled_from(
        [
            '{"error": "boom"}',
            '{"error": {"message": "denied"}}',
            '{"status": "failed"}',
            '{"temp": 21, "unit": "C"}',
            "[1, 2, 3]",
            "Error: not found",
            "sunny",
            "",
            f'{{"api_key": "{SECRET_SENTINEL}"}}',
            f"token: {SECRET_SENTINEL}",
            f"Authorization: Bearer {SECRET_SENTINEL}",
        ]
    ),
    tag_soup,
    unit(
        st.lists(
            st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": strings}), wrong), max_size=3
        )
    ),
    # Neither text nor parts: what a client may still send.
    unit(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(allow_nan=False),
            st.dictionaries(keys, scalars, max_size=3),
        )
    ),
)
tool_call_lists = mostly(
    st.lists(
        mostly(
            st.fixed_dictionaries(
                {"id": call_ids},
                optional={
                    "type": st.just("function"),
                    "function": mostly(
                        st.fixed_dictionaries(
                            {}, optional={"name": mostly(st.just("lookup"), strings), "arguments": arguments}
                        ),
                        wrong,
                    ),
                },
            ),
            wrong,
        ),
        min_size=1,
        max_size=3,
    ),
    wrong,
)
assistant_optional = {"content": contents, "reasoning_content": st.just(REASONING_SENTINEL)}
assistant_messages = with_extras(
    st.fixed_dictionaries(
        {"role": st.just("assistant")}, optional={**assistant_optional, "tool_calls": tool_call_lists}
    )
)
tool_messages = with_extras(
    st.fixed_dictionaries(
        {"role": st.just("tool"), "tool_call_id": call_ids, "content": tool_outputs},
        optional={"name": strings},
    )
)
other_messages = with_extras(
    st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["system", "developer", "user", "assistant", "tool"]), wrong)},
        optional={"content": contents},
    )
)
system_messages = st.just({"role": "system", "content": f"You are {SYSTEM_SENTINEL}."})
# A tool turn: an assistant message calling tools, then tool messages answering (some of) them.
tool_turns = st.tuples(
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "tool_calls": tool_call_lists}, optional=assistant_optional
    ),
    st.lists(tool_messages, min_size=1, max_size=3),
).map(lambda turn: [turn[0], *turn[1]])
messages = mostly(
    st.lists(
        st.one_of(
            unit(st.one_of(system_messages, assistant_messages, tool_messages, other_messages, wrong)).map(
                lambda m: [m]
            ),
            tool_turns,
        ),
        max_size=4,
    ).map(lambda blocks: [m for block in blocks for m in block]),
    json_values,
)
request_bodies = mostly(
    with_extras(st.fixed_dictionaries({"messages": messages}, optional={"model": strings})),
    st.one_of(st.none(), st.dictionaries(keys, json_values, max_size=3)),
)
secret_arguments = st.sampled_from(
    [
        f'{{"api_key": "{SECRET_SENTINEL}", "city": "Paris"}}',
        f'{{"auth": {{"token": "{SECRET_SENTINEL}"}}}}',
        f'{{"password": "{SECRET_SENTINEL}"',
        f"api_key={SECRET_SENTINEL}",
    ]
)


def plant_secret_arguments(chunk: dict[str, Any], arguments: str) -> dict[str, Any]:
    """A chunk whose first choice calls a tool with secret-bearing arguments."""
    return {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {"index": 0, "id": "call_s", "function": {"name": "f", "arguments": arguments}}
                    ]
                },
            }
        ],
        **{k: v for k, v in chunk.items() if k != "choices"},
    }


# An action: ("chunk", chunk, reasoning flag) | ("error", message, code) | ("finish",)
trace_actions = st.lists(
    st.one_of(
        st.tuples(st.just("chunk"), any_chunks, st.booleans()),
        st.tuples(
            st.just("chunk"),
            st.tuples(any_chunks, secret_arguments).map(lambda p: plant_secret_arguments(*p)),
            st.booleans(),
        ),
        st.tuples(st.just("error"), st.text(max_size=400), st.one_of(st.none(), st.just("upstream_timeout"))),
        st.tuples(st.just("finish")),
    ),
    max_size=8,
)


def normalize_known_schema_deviations(event_: dict[str, Any]) -> dict[str, Any]:
    """Known bug: tool_call events copy an upstream `index` that is negative or a bool; the rest of
    the event must still validate."""
    index = event_.get("index")
    if event_.get("type", "").startswith("tool_call.") and (type(index) is not int or index < 0):
        note("known bug: trace: tool_call index not a non-negative integer")
        return {**event_, "index": 0}
    return event_


def check_trace_events(events: list[dict[str, Any]]) -> None:
    for e in events:
        errors = list(VALIDATOR.iter_errors(normalize_known_schema_deviations(e)))
        assert not errors, f"{e!r}: {[err.message for err in errors]}"
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(len(events))), seqs
    times = [e["t_ms"] for e in events]
    assert times == sorted(times), f"t_ms went backwards: {times}"  # promised even if readings do
    text = dumps(events).decode()
    assert REASONING_SENTINEL not in text
    assert SYSTEM_SENTINEL not in text
    assert SECRET_SENTINEL not in text
    assert len([e for e in events if e["type"] == "done"]) <= 1
    assert all(e["type"] != "done" for e in events[:-1]), "events after done"
    comment_frames(events)
    event_frames(events, ChunkMeta(id="x", model="m", created=1))


trace_builders = st.builds(
    TraceBuilder,
    mode=st.sampled_from(list(TraceMode)),
    zh=st.booleans(),
    level=st.sampled_from(["none", "standard", "deep"]),
    provider=st.sampled_from(["deepseek", "fallback"]),
    method=st.sampled_from([None, "params", "prompt"]),
    origin_ms=st.floats(0, 1e6),
)
clock_steps = st.lists(st.floats(0, 5000), min_size=12, max_size=12)


@budget(100)
@given(
    st.builds(
        TraceBuilder,
        mode=st.just(TraceMode.DETAILED),
        zh=st.booleans(),
        level=st.just("deep"),
        provider=st.just("p"),
    ),
    request_bodies,
    st.floats(0, 1e7),
)
def test_trace_builder_begin_summarizes_any_history_safely(
    builder: TraceBuilder, body: Any, now: float
) -> None:
    """The request's history (tool calls and their results, in every shape a client may send) gives
    valid tool_result events that carry no reasoning, system prompt or secret."""
    ok, events = guarded(lambda: builder.begin(plant_reasoning(body), now))
    if not ok:
        return
    assert events is not None
    check_trace_events(events)
    assert events[0]["stage"] == "analyzing"


@budget(80)
@given(trace_builders, request_bodies, trace_actions, clock_steps, st.booleans())
def test_trace_builder_stream_events_are_valid_ordered_and_leak_nothing(
    builder: TraceBuilder,
    body: Any,
    actions: list[tuple[Any, ...]],
    steps: list[float],
    jitter: bool,
) -> None:
    # Readings rise by `steps`; with jitter they may also go back (the builder must not).
    readings = [sum(steps[: i + 1]) - (3000.0 if jitter and i % 3 == 2 else 0.0) for i in range(len(steps))]
    events: list[dict[str, Any]] = []
    ok, got = guarded(lambda: builder.begin(plant_reasoning(body), readings[0]))
    if not ok:
        return
    events += got or []
    for i, action in enumerate(actions):
        now = readings[min(i + 1, len(readings) - 1)]
        if action[0] == "chunk":
            ok, got = guarded(
                lambda action=action, now=now: builder.on_chunk(plant_reasoning(action[1]), action[2], now)
            )
        elif action[0] == "error":
            ok, got = guarded(lambda action=action, now=now: builder.on_error(action[1], now, action[2]))
        else:
            ok, got = guarded(lambda now=now: builder.finish(now))
        if not ok:
            return
        events += got or []
    ok, got = guarded(lambda: builder.finish(readings[-1]))
    if not ok:
        return
    events += got or []
    check_trace_events(events)
    assert builder.finish(readings[-1] + 1) == []


@budget(100)
@given(trace_builders, request_bodies, completions, st.booleans(), st.floats(0, 1e7))
def test_trace_builder_completion_events_are_valid_and_leak_nothing(
    builder: TraceBuilder, body: Any, completion: dict[str, Any], reasoning: bool, now: float
) -> None:
    events: list[dict[str, Any]] = []
    ok, got = guarded(lambda: builder.begin(plant_reasoning(body), now))
    if not ok:
        return
    events += got or []
    ok, got = guarded(lambda: builder.on_completion(plant_reasoning(completion), reasoning, now + 1))
    if not ok:
        return
    events += got or []
    check_trace_events(events)


# --------------------------------------------------------------------------------------------------
# 5. Request rewrite, every dialect and level
# --------------------------------------------------------------------------------------------------


@cache
def all_dialects() -> tuple[Dialect, ...]:
    """Every entry's dialect and every model override's, from the shipped providers file."""
    table = ProvidersTable.load()
    return tuple(d for s in table.summaries() for d in (s.dialect, *s.overrides))


@cache
def knob_paths() -> tuple[tuple[str, ...], ...]:
    """Every dotted path any dialect removes or sends: the knobs a client body may carry."""
    paths: set[tuple[str, ...]] = set()

    def walk(prefix: tuple[str, ...], params: Any) -> None:
        if isinstance(params, dict):
            for key, value in params.items():
                paths.add((*prefix, key))
                walk((*prefix, key), value)

    for d in all_dialects():
        paths.update(tuple(p.split(".")) for p in d.conflicts)
        for rule in d.levels.values():
            walk((), rule.params)
    return tuple(sorted(paths))


@cache
def instruction_texts() -> tuple[str, ...]:
    return tuple(sorted({t for d in all_dialects() for t in d.instruction_texts}))


@st.composite
def knob_trees(draw: st.DrawFn) -> dict[str, Any]:
    """Thinking/reasoning knobs at real paths, holding values of any type (dicts where a scalar is
    expected and the other way round)."""
    tree: dict[str, Any] = {}
    for path in draw(st.lists(st.sampled_from(knob_paths()), max_size=4)):
        node = tree
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {} if draw(st.integers(0, 4)) else draw(wrong)
                if not isinstance(child, dict):
                    break
            node = child
        else:
            node[path[-1]] = draw(json_values)
    return tree


@st.composite
def rewrite_messages(draw: st.DrawFn) -> Any:
    texts = instruction_texts()
    instruction = st.sampled_from(texts) if texts else st.just("Think step by step.")
    system = st.one_of(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["system", "developer"]),
                "content": st.one_of(
                    instruction, instruction.map(lambda t: [{"type": "text", "text": f" {t}\n"}])
                ),
            }
        ),
        other_messages,
    )
    assistant = with_extras(
        st.fixed_dictionaries(
            {"role": st.just("assistant")},
            optional={
                "content": contents,
                "reasoning_content": st.one_of(tag_soup, wrong),
                "reasoning": st.one_of(tag_soup, wrong),
                "reasoning_details": details,
                "tool_calls": tool_call_fragments,
            },
        )
    )
    return draw(
        st.one_of(
            st.lists(st.one_of(system, assistant, tool_messages, other_messages, wrong), max_size=6), wrong
        )
    )


rewrite_bodies = st.one_of(
    st.tuples(
        knob_trees(),
        st.fixed_dictionaries(
            {}, optional={"model": strings, "messages": rewrite_messages(), "stream": st.booleans()}
        ),
        st.dictionaries(keys, wrong, max_size=3),
    ).map(lambda parts: {**parts[2], **parts[0], **parts[1]}),
    st.dictionaries(keys, json_values, max_size=5),
)


def containers(value: Any) -> set[int]:
    """The ids of every dict and list in a JSON-like value (mappings and tuples included)."""
    found: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            found.add(id(item))
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            found.add(id(item))
            stack.extend(item)
    return found


def table_containers(dialect: Dialect) -> set[int]:
    """The ids of the dicts and lists in a dialect's level params (the table lives for the session)."""
    return {i for rule in dialect.levels.values() for i in containers(rule.params)}


@budget(100)
@given(rewrite_bodies)
def test_rewrite_never_raises_never_mutates_and_stays_serializable(body: dict[str, Any]) -> None:
    before = copy.deepcopy(body)
    before_bytes = dumps(body)
    for dialect in all_dialects():
        # No level: the same object (the original bytes go), unless the history's reasoning had
        # to move to the field the upstream reads (rewrite.fit_history), or Gemini 3's validator
        # wants a placeholder signature where none came (replay/signatures); then only `messages` differ.
        untouched = rewrite_body(body, None, dialect).body
        if untouched is not body:
            fitted = fit_history(body, dialect)
            messages = fitted.get("messages")
            if dialect.replay.missing_signature == "skip_validator" and isinstance(messages, list):
                fitted = {**fitted, "messages": with_skipped_signatures(messages)}
            assert untouched == fitted and untouched["messages"] != body["messages"]
            assert {k: v for k, v in untouched.items() if k != "messages"} == {
                k: v for k, v in body.items() if k != "messages"
            }
        for level in Level:
            for zh in (False, True):
                try:
                    ok, result = guarded(
                        lambda dialect=dialect, level=level, zh=zh: rewrite_body(body, level, dialect, zh=zh)
                    )
                except BadRequest as exc:
                    assert exc.message and exc.status == 400
                    continue
                if not ok:
                    continue
                assert result is not None
                dumps(result.body)
                assert result.method in (None, "params", "prompt")
                assert (result.level_applied is None) == (result.method is None)
                # Nothing in the result is the providers table's own object (later stages may mutate it).
                assert not containers(result.body) & table_containers(dialect)
        assert body == before, f"{dialect.name} mutated the body"
    assert dumps(body) == before_bytes


# --------------------------------------------------------------------------------------------------
# 6. Control headers and the upstream policy
# --------------------------------------------------------------------------------------------------

HEADER_PARSERS: list[tuple[str, Callable[[str], Any], type[Any], tuple[str, ...]]] = [
    ("X-Thinking-Level", lambda raw: parse_level(raw, None), Level, ("auto",)),
    ("X-Trace", lambda raw: parse_trace_mode(raw, TraceMode.BRIEF), TraceMode, ("auto", "pro")),
    ("X-Trace-Format", lambda raw: parse_trace_format(raw, TraceFormat.COMMENT), TraceFormat, ()),
    (
        "X-Reasoning",
        lambda raw: parse_reasoning_visibility(raw, ReasoningVisibility.SHOW),
        ReasoningVisibility,
        (),
    ),
]
header_values = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec="latin-1"), max_size=12),
    st.sampled_from(
        ["deep", " DEEP\t", "Off", "standard ", "auto", "PRO", "event", "hide", "show\r\n", "", " ", "\x00"]
    ).flatmap(
        lambda core: st.tuples(
            st.text(" \t\r\n\x0b\x0c\u00a0\u2003\x00", max_size=2), st.text(" \t\r\n\x0b\u00a0", max_size=2)
        ).map(lambda ws: ws[0] + core + ws[1])
    ),
)


@budget(200)
@given(header_values)
def test_header_parsers_return_a_member_or_a_400_naming_the_header(raw: str) -> None:
    for header, parse, enum, aliases in HEADER_PARSERS:
        try:
            value = parse(raw)
        except BadRequest as exc:
            assert exc.status == 400
            assert header in exc.message and exc.param == header
            assert all(m.value in exc.message for m in enum)  # the accepted values are named too
            assert raw.strip(" \t").lower() not in {m.value for m in enum} | set(aliases)
            continue
        if value is None:  # X-Thinking-Level: auto, which the policy's auto rules resolve later
            assert header == "X-Thinking-Level" and raw.strip(" \t").lower() == "auto"
            continue
        assert isinstance(value, enum)
        # only HTTP's optional whitespace is trimmed: NBSP, NEL and the like are part of the value
        assert raw.strip(" \t").lower() in {m.value for m in enum} | set(aliases)


HOSTS = (
    "api.example.com",
    "a.b.example.com",
    "example.com",
    "api.deepseek.com",
    "127.0.0.1",
    "127.1",
    "127.0.0.1.",
    "2130706433",
    "0x7f.0.0.1",
    "0177.0.0.1",
    "0",
    "0.0.0.0",
    "localhost",
    "LOCALHOST",
    "localhost.",
    "foo.localhost",
    "169.254.169.254",
    "metadata.google.internal",
    "metadata.google.internal.",
    "metadata",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[0:0:0:0:0:0:0:1]",
    "[fe80::1]",
    "[fd00:ec2::254]",
    "10.0.0.1",
    "127。0。0。1",
    "ｌｏｃａｌｈｏｓｔ",
    "[::1",
    "[abc]",
    "ex\uff03ample.com",
    "exa\tmple.com",
)
PATTERNS = (
    "*",
    "*.example.com",
    "api.example.com",
    "api.deepseek.com/v1",
    "127.0.0.1",
    "127.0.0.1:11434",
    "localhost:8000",
    "*.1",
    "*.internal",
    "metadata.google.internal",
    "169.254.169.254",
    "https://example.com:443/v1",
)
urls = st.one_of(
    st.builds(
        lambda scheme, userinfo, host, port, path: f"{scheme}{userinfo}{host}{port}{path}",
        st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "", "//", "http:/"]),
        st.sampled_from(["", "", "", "u:p@", "u@", "@"]),
        st.one_of(st.sampled_from(HOSTS), st.text(max_size=8)),
        st.sampled_from(["", "", ":443", ":8000", ":11434", ":99999", ":x", ":"]),
        st.sampled_from(["", "/", "/v1", "/v1/", "/v10", "?q=1", "#f", "/%2e%2e/"]),
    ),
    st.text(max_size=30),
)


def canonical_host(host: str) -> str:
    """A host in one spelling: lower case, no brackets or trailing dots, IPs in their standard form
    (including the legacy IPv4 forms `127.1`, `2130706433`, `0x7f.1` that resolvers accept)."""
    h = host.strip("[]").lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(h.split("%", 1)[0])
    except ValueError:
        try:
            ip = (
                ipaddress.IPv4Address(socket.inet_aton(h)) if h and h.isprintable() and " " not in h else None
            )
        except OSError:
            ip = None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip) if ip is not None else h


def reaches_sensitive(host: str) -> bool:
    """What a connection to `host` really reaches: loopback, link-local, metadata, unspecified."""
    h = canonical_host(host)
    if h in ("localhost", "metadata", "metadata.google.internal", "instance-data") or h.endswith(
        ".localhost"
    ):
        return True
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        return False
    return (
        ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip == ipaddress.ip_address("fd00:ec2::254")
    )


def client_hosts(url: str) -> list[str]:
    """The host each HTTP client the proxy may use (httpx, aiohttp's yarl) would connect to."""
    hosts = []
    for parse in (lambda u: httpx.URL(u).host, lambda u: yarl.URL(u).host):
        try:
            host = parse(url)
        except Exception:  # a URL the client refuses is never requested
            continue
        if host:
            hosts.append(host)
    return hosts


@budget(250)
@given(urls, st.lists(st.one_of(st.sampled_from(PATTERNS), st.text(max_size=12)), max_size=3), st.booleans())
def test_upstream_policy_returns_a_url_or_refuses_and_never_reaches_unnamed_sensitive_hosts(
    url: str, pattern_texts: list[str], with_default: bool
) -> None:
    patterns = []
    for text in pattern_texts:
        try:
            patterns.append(parse_allowed(text))
        except (ValueError, ConfigError):  # a bad pattern is a start-up (settings) error, not a request's
            continue
    policy = UpstreamPolicy("https://api.example.com/v1" if with_default else None, tuple(patterns))
    try:
        ok, resolved = guarded(lambda: policy.resolve(url))
    except ProxyError as exc:
        assert isinstance(exc, Forbidden | BadRequest) and exc.message
        return
    if not ok:
        return
    assert isinstance(resolved, str)
    parts = urlsplit(resolved)
    assert parts.scheme.lower() in ("http", "https") and parts.hostname and not parts.username
    named = {canonical_host(".".join(p.labels)) for p in patterns if p.exact}
    for host in client_hosts(resolved):
        if reaches_sensitive(host) and canonical_host(host) not in named:
            # Known bug: the policy judges the host in urlsplit's spelling, which may differ from what
            # the client connects to (127.1, trailing dot, fullwidth/ideographic characters…). Any
            # other way through is a new bug.
            judged = (urlsplit(resolved).hostname or "").lower()
            assert not host_is_sensitive(judged), f"{resolved!r} reaches {host!r} through {patterns!r}"
            note("known bug: policy: sensitive host in a spelling the policy does not recognize")
    if with_default:
        assert policy.resolve(None) == "https://api.example.com/v1"
    else:
        with pytest.raises(BadRequest):
            policy.resolve(None)


# --- replay restore ---------------------------------------------------------------------------


replay_found = st.one_of(
    st.none(),
    st.builds(
        Remembered,
        provider=st.sampled_from(["deepseek", "openrouter", "gemini"]),
        model=st.one_of(st.none(), strings),
        reasoning=st.one_of(st.none(), small_text),
        details=st.one_of(st.none(), st.lists(json_values, max_size=2)),
        signatures=st.dictionaries(strings, json_values, max_size=2),
        at_ms=st.one_of(st.none(), st.floats(0, 1e13)),
    ),
)


@budget(100)
@given(rewrite_bodies, st.data())
def test_replay_restore_never_raises_never_mutates_and_stays_serializable(
    body: dict[str, Any], data: st.DataObject
) -> None:
    before = copy.deepcopy(body)
    # (a policy with `params` holds a dict: unhashable, so told apart by its repr)
    policies = {repr(d.replay): d.replay for d in all_dialects()}
    for policy in [policies[key] for key in sorted(policies)]:
        plan = plan_lookups(body.get("messages"), policy, "tenant")
        found = {key: data.draw(replay_found) for key in plan.keys}
        for placeholders in (True, False):
            result = apply_restore(
                body,
                plan,
                found,
                policy=policy,
                provider="gemini",
                model=None,
                now_ms=1e12,
                placeholders=placeholders,
            )
            dumps(result.body)
            assert result.changed or result.body is body
            counts = result.counts
            assert counts.restored + counts.placeholder + counts.missing <= len(plan.needs)
    assert body == before


# --------------------------------------------------------------------------------------------------
# Regression tests: the bugs these targets found, as deterministic reproductions
# --------------------------------------------------------------------------------------------------


def deepseek() -> Dialect:
    return ProvidersTable.load().match("https://api.deepseek.com/v1")


def test_regression_rewrite_message_role_of_an_unhashable_type() -> None:
    body = {"model": "deepseek-flash", "messages": [{"role": ["user"], "content": "hi"}]}
    result = rewrite_body(body, Level.STANDARD, deepseek())
    assert result.body["messages"] == body["messages"]


def test_regression_rewrite_content_part_type_of_an_unhashable_type() -> None:
    part = {"type": ["text"], "text": "hello"}
    body = {"messages": [{"role": "assistant", "content": [part]}, {"role": "user", "content": "and?"}]}
    result = rewrite_body(body, Level.STANDARD, deepseek())
    assert result.body["messages"][0]["content"] == [part]


def test_regression_reasoning_hide_details_item_type_of_an_unhashable_type() -> None:
    item = {"type": ["reasoning.text"], "text": "x"}
    chunk = {"choices": [{"index": 0, "delta": {"reasoning_details": [item]}}]}
    StreamReasoningExtractor(ReasoningOptions(hide=True)).process_chunk(chunk)
    assert chunk["choices"][0]["delta"]["reasoning_details"] == [item]


def test_regression_reasoning_choice_index_of_an_unhashable_type() -> None:
    chunk = {"choices": [{"index": [0], "delta": {"content": "<think>a</think>b"}}]}
    StreamReasoningExtractor(ReasoningOptions(tags=("think",))).process_chunk(chunk)
    assert chunk["choices"][0]["delta"]["content"] == "b"


@pytest.mark.parametrize("second", [b'{"choices": ["x"]}', b'{"choices": [{"delta": "x"}]}'])
def test_regression_pipeline_non_dict_choice_after_the_answer_started(second: bytes) -> None:
    p = make_pipeline(ReasoningOptions(), TraceMode.BRIEF, TraceFormat.COMMENT)
    out = p.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n', 1.0)
    out += p.feed(b"data: " + second + b"\n\n", 2.0)
    out += p.finish(3.0)
    check_single_done_at_end(out)


def test_regression_trace_begin_with_non_iterable_tool_calls_in_history() -> None:
    builder = TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="none", provider="p")
    events = builder.begin({"messages": [{"role": "assistant", "tool_calls": 5}]}, 0.0)
    assert [e["type"] for e in events] == ["status"]


@pytest.mark.parametrize("content", [5, {}, {"temp": 21}, True])
def test_regression_trace_begin_with_non_string_tool_output(content: Any) -> None:
    builder = TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="none", provider="p")
    history = [
        {"role": "assistant", "tool_calls": [{"id": "call_1", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": content},
    ]
    events = builder.begin({"messages": history}, 0.0)
    check_trace_events(events)
    assert [e["type"] for e in events] == ["status", "tool_result"]


@pytest.mark.parametrize("index", [-1, True])
def test_regression_trace_tool_call_index_outside_the_schema(index: Any) -> None:
    builder = TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="none", provider="p")
    fragment = {"index": index, "id": "c", "function": {"name": "f", "arguments": "{}"}}
    events = builder.on_chunk({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}, False, 1.0)
    events += builder.finish(2.0)
    for e in events:
        assert not list(VALIDATOR.iter_errors(e)), e


@pytest.mark.parametrize("url", ["http://[::1", "http://[abc]/v1", "http://ex\uff03ample.com/v1"])
def test_regression_policy_malformed_url_escapes_as_value_error(url: str) -> None:
    with pytest.raises(Forbidden):
        UpstreamPolicy(None, (parse_allowed("*"),)).resolve(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.1/v1",
        "http://2130706433/v1",
        "http://0x7f.1/v1",
        "http://0/v1",
        "http://127。0。0。1/v1",
        "http://ｌｏｃａｌｈｏｓｔ/v1",
    ],
)
def test_regression_policy_catch_all_reaches_loopback_through_another_spelling(url: str) -> None:
    try:
        resolved = UpstreamPolicy(None, (parse_allowed("*"),)).resolve(url)
    except Forbidden:
        return
    reached = [h for h in client_hosts(resolved) if reaches_sensitive(h)]
    assert not reached, f"{url!r} allowed; the HTTP client connects to {reached}"


@pytest.mark.parametrize("tail", [b'data: {"choices": []}', b'data: {"choices": []}\n', b": ping"])
def test_regression_pipeline_unterminated_last_event_swallows_done(tail: bytes) -> None:
    p = make_pipeline(ReasoningOptions(), None, TraceFormat.COMMENT)
    out = p.feed(tail, 1.0) + p.finish(2.0)
    check_single_done_at_end(out)
    assert tail not in out and b'"upstream_truncated"' in out  # discarded, and said so


@pytest.mark.parametrize("after", [b"data: [DONE]\n\n", b'data: {"choices": []}\n\n'])
def test_regression_pipeline_events_after_upstream_done(after: bytes) -> None:
    p = make_pipeline(ReasoningOptions(), None, TraceFormat.COMMENT)
    out = p.feed(b"data: [DONE]\n\n" + after, 1.0) + p.finish(2.0)
    check_single_done_at_end(out)


DEEP = b"[" * 300 + b"]" * 300  # orjson parses 1024 levels but serializes only 254


@pytest.mark.parametrize("path", ["stream", "completion"])
def test_regression_pipeline_deeply_nested_changed_chunk(path: str) -> None:
    options = ReasoningOptions(tags=("think",))
    if path == "completion":
        body = b'{"choices": [{"message": {"content": "<think>a</think>b"}}], "x": ' + DEEP + b"}"
        out = process_completion(body, reasoning=options, trace=None, request_body=None, now_ms=0.0)
        assert isinstance(out, bytes)
        return
    p = make_pipeline(options, None, TraceFormat.COMMENT)
    out = p.feed(
        b'data: {"choices": [{"delta": {"content": "<think>a</think>b"}}], "x": ' + DEEP + b"}\n\n", 1.0
    )
    check_single_done_at_end(out + p.finish(2.0))
