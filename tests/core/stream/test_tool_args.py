"""Streamed tool calls as the trace follows them (proxy.core.stream.tool_args): the argument
scanner on its own at every split of tricky text, which call each fragment belongs to (by index,
by id, by position), and the calls' events as the trace builder makes them from it."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from proxy.core.controls import TraceMode
from proxy.core.stream.summaries import summarize_arguments
from proxy.core.stream.tool_args import MAX_KEPT_ARGUMENT_CHARS, ArgumentScanner, ToolCalls
from proxy.core.stream.trace_format import comment_frames
from tests.core.stream.trace_steps import (
    KB_ARGS,
    WEATHER_ARGS,
    Step,
    assert_valid,
    builder,
    chunk,
    of_type,
    run,
    split,
    tool_steps,
    tool_turn,
    types,
)

# -- tool calls ------------------------------------------------------------------------------------


def test_tool_call_split_across_many_chunks() -> None:
    b = builder()
    b.begin(None, 0.0)
    name_pieces: list[dict[str, Any]] = [
        {"index": 0, "id": "call_9", "type": "function", "function": {"name": "kb_", "arguments": ""}},
        {"index": 0, "function": {"name": "sea"}},
        {"index": 0, "function": {"name": "rch"}},
    ]
    emitted: list[list[dict[str, Any]]] = []
    for i, piece in enumerate(name_pieces):
        emitted.append(b.on_chunk(chunk({"tool_calls": [piece]}), False, 10.0 + i))
    fragments = split(KB_ARGS, 15)
    for i, fragment in enumerate(fragments):
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}
        emitted.append(b.on_chunk(chunk(delta), False, 20.0 + i))
    # start as soon as the whole name is known (first argument text); end when the JSON closes
    assert types(emitted[0]) == ["status"]
    assert emitted[1] == emitted[2] == []
    assert types(emitted[3]) == ["tool_call.start"]
    assert emitted[3][0] | {"t_ms": 0} == {
        "type": "tool_call.start",
        "seq": 2,
        "t_ms": 0,
        "message": "Calling tool: kb_search",
        "id": "call_9",
        "name": "kb_search",
        "index": 0,
    }
    assert all(e == [] for e in emitted[4:-1])
    (end,) = emitted[-1]
    assert end["type"] == "tool_call.end"
    assert end["name"] == "kb_search"
    assert end["input_summary"] == "query: refund policy for EU orders, top_k: 5, api_key: ***"
    assert b.finish(99.0)[-1]["type"] == "done"  # nothing left open to close


def test_parallel_tool_calls_interleaved_by_index() -> None:
    a_args, b_args = split(WEATHER_ARGS, 4), split('{"query": "museums", "limit": 2}', 4)
    steps: list[Step] = [
        (
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "c0", "function": {"name": "get_weather", "arguments": ""}}
                    ]
                }
            ),
            False,
        ),
        (
            chunk(
                {"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "kb_search", "arguments": ""}}]}
            ),
            False,
        ),
    ]
    for pa, pb in itertools.zip_longest(a_args, b_args):
        if pa is not None:
            steps.append((chunk({"tool_calls": [{"index": 0, "function": {"arguments": pa}}]}), False))
        if pb is not None:
            steps.append((chunk({"tool_calls": [{"index": 1, "function": {"arguments": pb}}]}), False))
    steps.append((chunk(finish="tool_calls"), False))
    events = run(steps)
    starts, ends = of_type(events, "tool_call.start"), of_type(events, "tool_call.end")
    assert [(e["index"], e["id"], e["name"]) for e in starts] == [
        (0, "c0", "get_weather"),
        (1, "c1", "kb_search"),
    ]
    by_index = {e["index"]: e for e in ends}
    assert by_index[0]["input_summary"] == "city: Paris, days: 3"
    assert by_index[1]["input_summary"] == "query: museums, limit: 2"
    assert by_index[1]["name"] == "kb_search"
    assert_valid(events)


def test_parallel_calls_in_one_delta() -> None:
    delta = {
        "tool_calls": [
            {"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x": 1}'}},
            {"index": 1, "id": "b", "function": {"name": "g", "arguments": '{"y": 2}'}},
        ]
    }
    events = run([(chunk(delta), False), (chunk(finish="tool_calls"), False)])
    assert types(events)[2:] == [
        "tool_call.start",
        "tool_call.end",
        "tool_call.start",
        "tool_call.end",
        "done",
    ]


def test_sequential_calls_end_before_the_next_starts() -> None:
    events = run(tool_turn())
    calls = [e for e in events if e["type"].startswith("tool_call")]
    assert [(e["type"], e["index"]) for e in calls] == [
        ("tool_call.start", 0),
        ("tool_call.end", 0),
        ("tool_call.start", 1),
        ("tool_call.end", 1),
    ]


def test_malformed_arguments_end_at_finish_reason() -> None:
    b = builder()
    b.begin(None, 0.0)
    b.on_chunk(*tool_steps(0, "c", "f", '{"a": 1', 2)[0], 1.0)
    for step in tool_steps(0, "c", "f", '{"a": 1', 2)[1:]:
        assert types(b.on_chunk(*step, 2.0)) in (["tool_call.start"], [])
    (end,) = b.on_chunk(chunk(finish="tool_calls"), False, 3.0)
    assert end["type"] == "tool_call.end"
    assert end["input_summary"] == '{"a": 1 (7 chars, not valid JSON)'


def test_open_tool_call_ends_when_content_starts() -> None:
    b = builder()
    b.begin(None, 0.0)
    b.on_chunk(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}), False, 1.0)
    events = b.on_chunk(chunk({"content": "Done"}), False, 2.0)
    assert types(events) == ["tool_call.start", "tool_call.end", "status"]
    assert events[1]["input_summary"] == "(no arguments)"


def test_an_upstream_repeating_the_name_is_not_doubled() -> None:
    steps = [
        (chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "lookup"}}]}), False),
        (
            chunk({"tool_calls": [{"index": 0, "function": {"name": "lookup", "arguments": '{"id": 4}'}}]}),
            False,
        ),
    ]
    (start,) = of_type(run(steps), "tool_call.start")
    assert start["name"] == "lookup"


def test_arguments_split_at_every_offset_give_one_start_and_one_end() -> None:
    expected = "query: refund policy for EU orders, top_k: 5, api_key: ***"
    for cut in range(1, len(KB_ARGS)):
        steps = [
            (chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "kb_search"}}]}), False),
            (chunk({"tool_calls": [{"index": 0, "function": {"arguments": KB_ARGS[:cut]}}]}), False),
            (chunk({"tool_calls": [{"index": 0, "function": {"arguments": KB_ARGS[cut:]}}]}), False),
        ]
        b = builder()
        b.begin(None, 0.0)
        per_step = [b.on_chunk(c, r, 1.0) for c, r in steps]
        assert types(per_step[1]) == ["tool_call.start"], cut
        assert types(per_step[2]) == ["tool_call.end"], cut
        assert per_step[2][0]["input_summary"] == expected


def test_name_split_at_every_offset_is_whole_in_start() -> None:
    name = "search_knowledge_base"
    for cut in range(1, len(name)):
        first = {"index": 0, "id": "c", "function": {"name": name[:cut], "arguments": ""}}
        steps = [
            (chunk({"tool_calls": [first]}), False),
            (chunk({"tool_calls": [{"index": 0, "function": {"name": name[cut:]}}]}), False),
            (chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}), False),
        ]
        (start,) = of_type(run(steps, mode=TraceMode.BRIEF), "tool_call.start")
        assert start["name"] == name, cut


# -- tool calls without `index`, argument tracking ---------------------------------------------------


def without_index(steps: list[Step]) -> list[Step]:
    """The same tool-call steps as an upstream that never sends `index` would stream them."""
    out: list[Step] = []
    for body, carried in steps:
        body = orjson.loads(orjson.dumps(body))
        for choice in body["choices"]:
            for call in choice["delta"].get("tool_calls") or ():
                call.pop("index", None)
        out.append((body, carried))
    return out


def test_streamed_call_without_index_is_one_call() -> None:
    events = run(without_index([*tool_steps(0, "call_kb", "kb_search", KB_ARGS, 12)]))
    calls = [(e["type"], e["id"], e["name"]) for e in events if e["type"].startswith("tool_call")]
    assert calls == [("tool_call.start", "call_kb", "kb_search"), ("tool_call.end", "call_kb", "kb_search")]
    assert of_type(events, "tool_call.end")[0]["input_summary"].startswith("query: refund policy")


def test_parallel_calls_without_index_are_matched_by_id_and_position() -> None:
    # First both calls are announced (by id), then their argument fragments come side by side,
    # each at its call's position in the tool_calls array.
    a_args, b_args = split(WEATHER_ARGS, 3), split('{"query": "museums", "limit": 2}', 3)
    announce = {
        "tool_calls": [
            {"id": "c0", "function": {"name": "get_weather", "arguments": ""}},
            {"id": "c1", "function": {"name": "kb_search", "arguments": ""}},
        ]
    }
    steps: list[Step] = [(chunk(announce), False)]
    for pa, pb in zip(a_args, b_args, strict=True):
        pieces = [{"function": {"arguments": pa}}, {"function": {"arguments": pb}}]
        steps.append((chunk({"tool_calls": pieces}), False))
    steps.append((chunk(finish="tool_calls"), False))
    events = run(steps)
    ends = {e["id"]: (e["name"], e["input_summary"]) for e in of_type(events, "tool_call.end")}
    assert ends == {
        "c0": ("get_weather", "city: Paris, days: 3"),
        "c1": ("kb_search", "query: museums, limit: 2"),
    }
    assert "unknown" not in [e.get("name") for e in events]


def test_whole_calls_per_chunk_without_index() -> None:
    steps: list[Step] = [
        (chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x": 1}'}}]}), False),
        (chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": '{"y": 2}'}}]}), False),
        (chunk(finish="tool_calls"), False),
    ]
    events = run(steps)
    ends = [(e["id"], e["name"], e["index"], e["input_summary"]) for e in of_type(events, "tool_call.end")]
    assert ends == [("a", "f", 0, "x: 1"), ("b", "g", 1, "y: 2")]


def test_whole_calls_without_index_or_id_are_not_merged() -> None:
    steps: list[Step] = [
        (chunk({"tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]}), False),
        (chunk({"tool_calls": [{"function": {"name": "g", "arguments": '{"y": 2}'}}]}), False),
        (chunk(finish="tool_calls"), False),
    ]
    ends = [(e["name"], e["input_summary"]) for e in of_type(run(steps), "tool_call.end")]
    assert ends == [("f", "x: 1"), ("g", "y: 2")]


def test_a_new_id_at_a_reused_index_is_a_new_call() -> None:
    steps: list[Step] = [
        (
            chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}]}),
            False,
        ),
        (
            chunk({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "g", "arguments": "{"}}]}),
            False,
        ),
        (chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"y": 2}'}}]}), False),
        (chunk(finish="tool_calls"), False),
    ]
    ends = [(e["id"], e["name"], e["input_summary"]) for e in of_type(run(steps), "tool_call.end")]
    assert ends == [("a", "f", "(no arguments)"), ("b", "g", "y: 2")]


TRICKY_ARGS = orjson.dumps(
    {
        "q": 'a "quoted" } ] { [ brace',
        "path": "C:\\dir\\",
        "nested": [{"x": [1, {"y": "}"}]}],
        "u": "\u00e9\\u",
    }
).decode()


@pytest.mark.parametrize("mode", [TraceMode.BRIEF, TraceMode.DETAILED])
def test_call_ends_exactly_when_its_arguments_close_at_every_split(mode: TraceMode) -> None:
    for cut in range(1, len(TRICKY_ARGS)):
        for second in (cut, min(cut + 7, len(TRICKY_ARGS))):
            pieces = [TRICKY_ARGS[:cut], TRICKY_ARGS[cut:second], TRICKY_ARGS[second:]]
            b = builder(mode)
            b.begin(None, 0.0)
            b.on_chunk(
                chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}), False, 1.0
            )
            emitted = [
                b.on_chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}), False, 2.0)
                for p in pieces
            ]
            # Nothing may look complete before the last piece; the call ends with it (or, when
            # the last piece is empty, with the piece that closed the JSON).
            closing = 2 if pieces[2] else (1 if pieces[1] else 0)
            assert [e for e in emitted[:closing] if e and e[-1]["type"] == "tool_call.end"] == [], cut
            if mode is TraceMode.DETAILED:
                assert emitted[closing][-1]["type"] == "tool_call.end", cut
                assert emitted[closing][-1]["input_summary"].startswith('q: a "quoted" } ] { [ brace'), cut
            assert types(b.finish(3.0)) == ["done"], cut


def test_huge_arguments_are_kept_only_up_to_a_bound() -> None:
    value = "x" * 3_000_000
    arguments = orjson.dumps({"path": "notes.txt", "content": value}).decode()
    b = builder()
    b.begin(None, 0.0)
    b.on_chunk(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "write"}}]}), False, 1.0)
    out: list[dict[str, Any]] = []
    for piece in split(arguments, 600):
        out += b.on_chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}), False, 2.0)
    (end,) = of_type(out, "tool_call.end")
    summary = end["input_summary"]
    assert len(summary) < 200
    assert summary.startswith('{"path": "notes.txt"') or summary.startswith('{"path":"notes.txt"')
    assert f"{len(arguments):,} chars" in summary
    assert "not valid JSON" not in summary


def test_deep_arguments_are_summarized() -> None:
    deep = '{"a": ' + "[" * 400 + "]" * 400 + ', "b": 2}'
    deeper = "[" * 3000 + "]" * 3000
    for arguments in (deep, deeper):
        b = builder()
        b.begin(None, 0.0)
        first = {"index": 0, "id": "c", "function": {"name": "f", "arguments": arguments}}
        events = b.on_chunk(chunk({"tool_calls": [first]}), False, 1.0) + b.finish(2.0)
        (end,) = of_type(events, "tool_call.end")
        comment_frames(events)  # every event can be written
        assert end["input_summary"] and "not valid JSON" not in end["input_summary"]
    assert summarize_arguments(deep) == "a: [1 item], b: 2"


# -- the scanner and the calls on their own ----------------------------------------------------------


def closes_at(pieces: list[str]) -> int | None:
    """The piece after which a fresh scanner says the arguments closed, or None. Empty pieces are
    skipped, as the trace builder never feeds one (after a trailing backslash, one would be taken
    for the escaped character)."""
    scanner = ArgumentScanner()
    for i, piece in enumerate(pieces):
        if piece and scanner.feed(piece):
            return i
    return None


def test_the_scanner_closes_on_the_last_character_at_every_split() -> None:
    for text in (TRICKY_ARGS, " \n" + TRICKY_ARGS, '[1, "]", {"a": "\\\\"}]'):
        last = len(text) - 1
        for cut in range(1, len(text)):
            for second in range(cut, len(text)):
                pieces = [text[:cut], text[cut:second], text[second:]]
                closing = max(i for i, p in enumerate(pieces) if p)
                assert closes_at(pieces) == closing, (text, cut, second)
        assert closes_at([text[:last]]) is None


def test_an_escaped_quote_split_from_its_backslash_stays_in_the_string() -> None:
    assert closes_at(['{"a": "x\\', '"}', '"}']) == 2
    assert closes_at(['{"a": "x\\', '\\"}']) == 1


@pytest.mark.parametrize("text", ['"a string"', "42", "true", "null", "  7"])
def test_arguments_that_are_not_an_object_or_array_never_close(text: str) -> None:
    assert closes_at([text, "}", "]"]) is None


def test_whitespace_alone_does_not_start_the_arguments() -> None:
    scanner = ArgumentScanner()
    assert not scanner.feed(" \t\n")
    assert not scanner.started
    assert scanner.feed("{}")


def test_fragments_find_their_call_by_index_then_id_then_position() -> None:
    calls = ToolCalls()
    first, args = calls.take({"index": 0, "id": "a", "function": {"name": "get_", "arguments": ""}}, 0, True)
    assert (first.index, first.id, first.name, args) == (0, "a", "get_", False)
    again, args = calls.take({"index": 0, "function": {"name": "weather", "arguments": '{"x"'}}, 0, True)
    assert again is first and first.name == "get_weather" and args
    by_id, _ = calls.take({"id": "a", "function": {"arguments": ": 1}"}}, 0, True)
    assert by_id is first and first.scanner.closed and first.summary() == "x: 1"
    calls.positions = [first]
    other, _ = calls.take({"index": 0, "id": "b", "function": {"name": "g"}}, 0, True)
    assert other is not first and other.index == 0  # a new id at a reused index is a new call
    assert [c.id for c in calls.calls] == ["a", "b"] and calls.open == 2
    calls.end(first)
    assert first.ended and calls.open == 1


def test_a_fragment_without_index_or_id_is_the_call_at_its_position() -> None:
    calls = ToolCalls()
    a, _ = calls.take({"id": "a", "function": {"name": "f", "arguments": ""}}, 0, False)
    b, _ = calls.take({"id": "b", "function": {"name": "g", "arguments": ""}}, 1, False)
    calls.positions = [a, b]
    assert calls.take({"function": {"arguments": "{}"}}, 1, False)[0] is b
    assert calls.take({"function": {"arguments": "{"}}, 0, False)[0] is a
    calls.positions = [b]
    # The call at that position is finished and the fragment names a new one: a new call.
    new, _ = calls.take({"function": {"name": "h", "arguments": "{}"}}, 0, False)
    assert new not in (a, b) and new.index == 2


def test_only_a_bounded_head_of_the_arguments_is_kept() -> None:
    calls = ToolCalls()
    call, _ = calls.take({"index": 0, "function": {"name": "write"}}, 0, True)
    piece = "x" * (MAX_KEPT_ARGUMENT_CHARS // 3 + 1)
    for _ in range(4):
        calls.take({"index": 0, "function": {"arguments": piece}}, 0, True)
    assert call.kept_chars == sum(map(len, call.kept)) == MAX_KEPT_ARGUMENT_CHARS
    assert call.total_chars == 4 * len(piece)
    unkept, _ = ToolCalls().take({"index": 0, "function": {"name": "f", "arguments": piece}}, 0, False)
    assert unkept.kept == [] and unkept.total_chars == len(piece)
