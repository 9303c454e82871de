"""A run's end and texts, read in place (proxy.core.stream.run_texts).

Read with no Python step per event, a run must be exactly what the loop over its events reads
(take_in_steps, take_each): for any read, wherever take_at_once answers, and take_texts always.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.stream import run_texts
from tests.core.stream.test_chunk_template import chunk, template_of

# Middles that a batched read of a run must not take for what they are not: strings that end in an
# escaped backslash or hold escaped quotes, and forgeries that are several values, or that only
# become strings when joined to their neighbours.
_TRICKY_MIDDLES = [
    b'"plain"',
    b'"a\\\\"',  # a text ending in a backslash
    b'"a\\""',  # an escaped quote and then a stray one
    b'"a\\"',  # an escaped quote: unterminated alone
    b'","',
    b'"a","b"',
    b'"a" ,"b"',
    b'"x\\","',
    b'" , "',
    b'"<think>"',
    b'"\\u003cthink>"',
    b'""',
    b"null",
    b'"\\ud800"',
]


@settings(max_examples=400, deadline=None)
@given(
    middles=st.lists(
        st.one_of(st.sampled_from(_TRICKY_MIDDLES), st.text(min_size=1, max_size=8).map(orjson.dumps)),
        min_size=1,
        max_size=8,
    ),
    unless_lt=st.booleans(),
)
def test_a_run_read_at_once_is_the_run_read_event_by_event(middles: list[bytes], unless_lt: bool) -> None:
    template = template_of(chunk({"content": "seed"}))
    assert template is not None and template.event_prefix is not None
    read = b"".join(template.event_prefix + m + template.event_suffix for m in middles) + b"data: [DONE]\n\n"
    heard: list[str] = []
    taken = template.take_run(read, 0, 1 << 20, unless_lt, (heard.append,))
    assert template.take_texts(read, 0, 1 << 20, unless_lt) == (taken, heard)
    assert run_texts.take_each(template, read, 0, 1 << 20, unless_lt) == (taken, heard)


# What may stand between a run template's prefix and suffix, besides plain strings: whatever
# could make a run read at once (run_texts.take_at_once) take what the loop would not.
_ODD_MIDDLES = [
    *_TRICKY_MIDDLES,
    b'"a\\\\\\""',  # an escaped backslash, then an escaped quote, then the closing one
    b'"\\"',  # one escaped quote: unterminated
    b'"',
    b"",
    b"42",
    b'"a" "b"',
    b' "a"',  # blanks around the token
    b'"a" ',
    b'"a\nb"',  # a raw line end inside: two SSE lines
    b'\n"a"',  # a line end before the token: to JSON, a blank after the separator
    b'"a"\n',
    b'"a\n\nb"',  # a blank line inside: two events
    b'"a\rb"',
    b'"a\tb"',
    '"é ✓"'.encode(),
    b'"\\u00e9"',
    b'"a<b"',
    b'"a","b","c"',
    b'"a",\n"b"',
    # A container reaching across tokens, another token holding two values to make up the count:
    # three events that read at once as ["x", ["a", "b", "c"], "d"] (or an object in the middle).
    b'"x",["a"',
    b'"c"],"d"',
    b'"x",{"k":"a"',
    b'"b":"b"',
    b'"c":"c"},"d"',
]


@settings(max_examples=600, deadline=None)
@given(
    events=st.lists(
        st.one_of(
            st.text(min_size=1, max_size=6).map(lambda t: ("text", orjson.dumps(t))),
            st.sampled_from(_ODD_MIDDLES).map(lambda m: ("text", m)),
            st.sampled_from(["other", "finish", "done", "comment", "no suffix"]).map(lambda k: (k, b"")),
        ),
        max_size=12,
    ),
    cut=st.integers(min_value=0, max_value=40),
    limit=st.sampled_from([1 << 20, 600, 200, 90]),
    unless_lt=st.booleans(),
)
def test_a_run_read_with_no_step_per_event_is_what_the_loop_reads(
    events: list[tuple[str, bytes]], cut: int, limit: int, unless_lt: bool
) -> None:
    # take_texts reads a run with no Python step per event where it can; wherever it answers,
    # it must answer what the loop answers, for any read: a run, then anything (another
    # template, a chunk of the same prefix and another suffix, [DONE], a comment, a token that
    # is not one string, a line end inside one, an event cut short by the end of the read).
    template = template_of(chunk({"content": "seed"}))
    assert template is not None and template.event_prefix is not None
    other = template_of(chunk({"content": None, "reasoning_content": "seed"}))
    assert other is not None and other.event_prefix is not None
    whole = {
        "other": other.event_prefix + b'"x"' + other.event_suffix,
        "finish": chunk({"content": "x"}, finish="stop"),
        "done": b"data: [DONE]\n\n",
        "comment": b": keep-alive\n\n",
        "no suffix": template.event_prefix + b'"x"\n\n',
    }
    read = b"".join(
        template.event_prefix + middle + template.event_suffix if kind == "text" else whole[kind]
        for kind, middle in events
    )
    read = b"xx" + read[: max(0, len(read) - cut)]  # (and the run starts past the read's start)
    taken = template.take_texts(read, 2, limit, unless_lt)
    assert taken == run_texts.take_in_steps(template, read, 2, limit, unless_lt)
    assert taken == run_texts.take_each(template, read, 2, limit, unless_lt)
    at_once = run_texts.take_at_once(template, read, 2, limit, unless_lt)
    assert at_once is None or at_once == taken


@pytest.mark.parametrize("middle", _ODD_MIDDLES)
@pytest.mark.parametrize("at", ["first", "inside", "last", "alone"])
def test_each_odd_token_in_a_run_is_read_as_the_loop_reads_it(middle: bytes, at: str) -> None:
    # (Each of them where the property test above may seldom put it: between texts of the run.)
    template = template_of(chunk({"content": "seed"}))
    assert template is not None and template.event_prefix is not None
    middles = {
        "first": [middle, b'"a"', b'"b"'],
        "inside": [b'"a"', middle, b'"b"'],
        "last": [b'"a"', b'"b"', middle],
        "alone": [middle],
    }[at]
    read = b"".join(template.event_prefix + m + template.event_suffix for m in middles) + b"data: [DONE]\n\n"
    for unless_lt in (False, True):
        taken = run_texts.take_each(template, read, 0, 1 << 20, unless_lt)
        assert template.take_texts(read, 0, 1 << 20, unless_lt) == taken
        at_once = run_texts.take_at_once(template, read, 0, 1 << 20, unless_lt)
        assert at_once is None or at_once == taken


def test_a_plain_run_is_read_with_no_step_per_event() -> None:
    # (Otherwise the test above would pass with the loop reading every run.) A run as a fast
    # upstream sends it: texts, then an empty one, then the answer's template, then its end.
    template = template_of(chunk({"content": None, "reasoning_content": "seed"}))
    assert template is not None
    texts = [f"word {i} " for i in range(50)] + ['é\n"q"\\ ', "a<b"]
    read = b"".join(chunk({"content": None, "reasoning_content": t}) for t in texts)
    after = chunk({"content": None, "reasoning_content": ""}) + chunk(
        {"content": "x", "reasoning_content": None}
    )
    data = (
        read + after + chunk({"content": "", "reasoning_content": None}, finish="stop") + b"data: [DONE]\n\n"
    )
    assert run_texts.take_at_once(template, data, 0, 1 << 20, False) == (len(read), texts)
    assert run_texts.take_at_once(template, data[: len(read) - 5], 0, 1 << 20, False) == (
        len(read) - len(chunk({"content": None, "reasoning_content": "a<b"})),
        texts[:-1],
    )
    # A `<` to look at, and a run past the size limit: the loop says where the run ends.
    assert run_texts.take_at_once(template, data, 0, 1 << 20, True) is None
    assert template.take_texts(data, 0, 1 << 20, True) == (
        len(read) - len(chunk({"content": None, "reasoning_content": "a<b"})),
        texts[:-1],
    )
    assert run_texts.take_at_once(template, data, 0, len(read) - 1, False) is None
    assert template.take_texts(data, 0, len(read) - 1, False) == (len(read), texts)


def test_the_pure_build_reads_runs_at_once_and_the_compiled_build_by_its_loop() -> None:
    # (which path is faster in time depends on the build: run_texts.AT_ONCE says why)
    from proxy.build_info import is_compiled

    assert run_texts.AT_ONCE is (not is_compiled("proxy.core.stream.run_texts"))


@pytest.mark.parametrize(
    "middles",
    [
        [b'"x",["a"', b'"b"', b'"c"],"d"'],
        [b'"x",{"k":"a"', b'"b":"b"', b'"c":"c"},"d"'],
    ],
)
@pytest.mark.parametrize("unless_lt", [False, True])
def test_a_container_across_tokens_is_not_read_as_texts(middles: list[bytes], unless_lt: bool) -> None:
    # (found by review: the array has as many elements as there are tokens, one of them not a text)
    template = template_of(chunk({"content": "seed"}))
    assert template is not None and template.event_prefix is not None
    read = b"".join(
        template.event_prefix + middle + template.event_suffix for middle in [b'"one"', *middles, b'"tail"']
    )
    taken = run_texts.take_each(template, read, 0, 1 << 20, unless_lt)
    assert run_texts.take_at_once(template, read, 0, 1 << 20, unless_lt) in (None, taken)
    assert run_texts.take_texts(template, read, 0, 1 << 20, unless_lt) == taken
    assert all(type(text) is str for text in taken[1])
