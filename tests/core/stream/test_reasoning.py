from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.controls import ReasoningField, TraceFormat
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import (
    ReasoningOptions,
    StreamReasoningExtractor,
    normalize_completion,
    normalize_message,
)
from proxy.core.stream.sse import SSEDecoder, SSEEvent

STREAMS = Path(__file__).parents[2] / "fixtures" / "streams"

THINK = ReasoningOptions(tags=("think",))
IMPLICIT = ReasoningOptions(tags=("think",), implicit_open=True)


def normalize_stream(chunks: Iterable[bytes], options: ReasoningOptions) -> bytes:
    """A whole upstream SSE byte stream through the proxy's own composition (decoder + extractor,
    no trace) → the bytes the client gets."""
    pipeline = StreamPipeline(
        reasoning=options, trace=None, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 24
    )
    out = b"".join(pipeline.feed(piece, 0.0) for piece in chunks)
    return out + pipeline.finish(0.0)


def events_of(stream: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return decoder.feed(stream) + decoder.flush()


def chunks_of(stream: bytes) -> list[dict[str, Any]]:
    chunks = []
    for event in events_of(stream):
        if event.data is None or event.data == b"[DONE]":
            continue
        try:
            chunks.append(orjson.loads(event.data))
        except orjson.JSONDecodeError:
            continue
    return chunks


def texts(chunks: list[dict[str, Any]], field: str = "reasoning_content") -> dict[int, tuple[str, str]]:
    """Per choice index: (reasoning from `field`, content), concatenated over the stream."""
    out: dict[int, tuple[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            reasoning, content = out.get(choice["index"], ("", ""))
            out[choice["index"]] = (
                reasoning + (delta.get(field) or ""),
                content + (delta.get("content") or ""),
            )
    return out


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


DEFAULT = ReasoningOptions()

# fixture → (options, {choice index: (reasoning, content)})
EXPECTED: dict[str, tuple[ReasoningOptions, dict[int, tuple[str, str]]]] = {
    "deepseek-reasoner": (DEFAULT, {0: ("在用户问“1+1等于几”。这是基础算术，答案是2。", "1 + 1 = **2**。")}),
    "dashscope-qwen": (
        DEFAULT,
        {0: ("好的，用户让我用一句话介绍杭州。西湖很有名。", "杭州是浙江省省会，以西湖闻名。")},
    ),
    "kimi-k2-thinking-tool-call": (
        DEFAULT,
        {
            0: (
                "The user wants the current weather in Beijing. I should call get_weather with city=Beijing.",
                "I'll check the weather in Beijing.",
            )
        },
    ),
    "minimax-m2-inline-think": (
        THINK,
        {
            0: (
                "\nThe user says hi. I should greet them back briefly.\n",
                "\n\nHello! How can I help you today?",
            )
        },
    ),
    "minimax-m2-reasoning-split": (
        DEFAULT,
        {
            0: (
                "The user asks for a haiku about autumn. Keep it 5-7-5.",
                "Crisp leaves drift and fall\namber light on quiet paths\nthe year exhales slow",
            )
        },
    ),
    "openrouter-anthropic-reasoning-details": (
        DEFAULT,
        {0: ("The user wants 17 × 23. 17 × 20 = 340, 17 × 3 = 51; 340 + 51 = 391.", "17 × 23 = **391**")},
    ),
    "ollama-reasoning": (
        DEFAULT,
        {
            0: (
                "Okay, the user asks for the capital of France. That's Paris.",
                "The capital of France is Paris.",
            )
        },
    ),
    "vllm-reasoning-n2": (
        DEFAULT,
        {0: ("Pick a color: blue.", "Blue."), 1: ("A color? Green works.", "Green!")},
    ),
    "llamacpp-implicit-open": (
        IMPLICIT,
        {0: ("Okay, so I need to add 2 and 3. That gives 5.\n", "\n\n2 + 3 = 5.")},
    ),
    "mistral-magistral-thinking": (
        DEFAULT,
        {
            0: (
                "Okay, the user says hello. It's a greeting, I should return a greeting.",
                "Hello! How can I help?",
            )
        },
    ),
    "gateway-crlf-comments": (THINK, {0: ("\nShort question; answer directly.\n", "\n\nYes, it is.")}),
}
NAMES = sorted(EXPECTED)
TAG_RE = re.compile(r"</?(think|thinking)>")


def fixture(name: str) -> bytes:
    return (STREAMS / f"{name}.sse").read_bytes()


def test_every_sse_fixture_has_an_expectation() -> None:
    assert sorted(p.stem for p in STREAMS.glob("*.sse")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_fixture_reasoning_and_content(name: str) -> None:
    options, expected = EXPECTED[name]
    output = normalize_stream([fixture(name)], options)
    chunks = chunks_of(output)
    assert texts(chunks) == expected
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            assert not isinstance(delta.get("content"), list)
            assert not TAG_RE.search(delta.get("content") or "")
            assert not delta.get("reasoning"), "reasoning text left in a second field"
    assert output.endswith(b"data: [DONE]\n\n") or output.endswith(b"data: [DONE]\r\n\r\n")


@pytest.mark.parametrize("name", NAMES)
def test_fixture_identical_output_at_every_split(name: str) -> None:
    # Every offset where the extractor carries tag state between chunks; every third offset
    # elsewhere (tests/core/stream/test_sse.py checks the decoded events of every fixture at every offset,
    # and the extractor sees nothing but those events).
    options, _ = EXPECTED[name]
    data = fixture(name)
    whole = normalize_stream([data], options)
    for i in range(0, len(data) + 1, 1 if options.tags else 3):
        assert normalize_stream(split_at(data, [i]), options) == whole, i


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_fixture_identical_output_at_random_splits(name: str, cuts: list[int]) -> None:
    options, _ = EXPECTED[name]
    data = fixture(name)
    pieces = split_at(data, [c % (len(data) + 1) for c in cuts])
    assert normalize_stream(pieces, options) == normalize_stream([data], options)


NORMALIZED_KEYS = ("content", "reasoning_content", "reasoning")


def without_normalized(chunk: dict[str, Any]) -> dict[str, Any]:
    chunk = copy.deepcopy(chunk)
    for choice in chunk.get("choices") or ():
        for key in NORMALIZED_KEYS:
            (choice.get("delta") or {}).pop(key, None)
    return chunk


@pytest.mark.parametrize("name", NAMES)
def test_everything_else_survives(name: str) -> None:
    """Same events in the same order; unchanged ones byte for byte, changed ones differ only in
    the normalized fields; non-JSON lines, comments and unknown fields pass through."""
    options, _ = EXPECTED[name]
    data = fixture(name)
    before, after = events_of(data), events_of(normalize_stream([data], options))
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        if old.raw == new.raw:
            continue
        assert old.data is not None and new.data is not None
        assert (old.event, old.id, old.retry) == (new.event, new.id, new.retry)
        assert without_normalized(orjson.loads(old.data)) == without_normalized(orjson.loads(new.data))


def test_gateway_passthrough_lines_byte_for_byte() -> None:
    output = normalize_stream([fixture("gateway-crlf-comments")], THINK)
    assert output.startswith(b"retry: 3000\r\n\r\n")
    assert b"\n: ping - 2025-11-30 12:05:00.012345+00:00\r\n\r\n" in output
    assert b"\ndata: keep-alive\r\n\r\n" in output
    assert b"id: 6\n" in output  # a changed event keeps its id field


def test_unchanged_stream_is_byte_identical() -> None:
    data = fixture("deepseek-reasoner")
    assert normalize_stream([data], DEFAULT) == data


@pytest.mark.parametrize("name", NAMES)
def test_output_field_reasoning_and_both(name: str) -> None:
    options, expected = EXPECTED[name]
    for field in (ReasoningField.REASONING, ReasoningField.BOTH):
        opts = ReasoningOptions(options.tags, options.implicit_open, field)
        chunks = chunks_of(normalize_stream([fixture(name)], opts))
        assert texts(chunks, "reasoning") == expected
        if field is ReasoningField.BOTH:
            assert texts(chunks, "reasoning_content") == expected
        else:
            assert all(
                not (c.get("delta") or {}).get("reasoning_content") for k in chunks for c in k["choices"]
            )


@pytest.mark.parametrize("name", NAMES)
def test_hide_removes_reasoning_text_only(name: str) -> None:
    options, expected = EXPECTED[name]
    hidden = ReasoningOptions(options.tags, options.implicit_open, hide=True)
    output = normalize_stream([fixture(name)], hidden)
    chunks = chunks_of(output)
    assert {i: c for i, (_, c) in texts(chunks).items()} == {i: c for i, (_, c) in expected.items()}
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            assert not delta.get("reasoning_content") and not delta.get("reasoning")
            for item in delta.get("reasoning_details") or ():
                assert "text" not in item and "summary" not in item
    for reasoning, _ in expected.values():
        for line in reasoning.split("\n"):
            if len(line) > 8:
                assert line.encode() not in output
    assert len(events_of(output)) == len(events_of(fixture(name)))  # no chunk dropped


def test_hide_keeps_replay_data() -> None:
    output = normalize_stream(
        [fixture("openrouter-anthropic-reasoning-details")], ReasoningOptions(hide=True)
    )
    details = [
        d for c in chunks_of(output) for ch in c["choices"] for d in ch["delta"].get("reasoning_details", ())
    ]
    assert [d["type"] for d in details] == ["reasoning.text", "reasoning.encrypted"]
    assert details[0]["signature"].startswith("ErcB") and details[1]["data"].startswith("EmwK")


def test_openrouter_reasoning_counted_once_and_details_kept() -> None:
    chunks = chunks_of(normalize_stream([fixture("openrouter-anthropic-reasoning-details")], DEFAULT))
    first = chunks[0]["choices"][0]["delta"]
    assert first["reasoning_content"] == "The user"
    assert "reasoning" not in first
    assert first["reasoning_details"] == [
        {"type": "reasoning.text", "text": "The user", "format": "anthropic-claude-v1", "index": 0}
    ]


PARITY = ["deepseek-reasoner", "minimax-m2-inline-think", "openrouter-anthropic-reasoning-details"]
PARITY += ["mistral-magistral-thinking", "llamacpp-implicit-open"]


@pytest.mark.parametrize("name", PARITY)
@pytest.mark.parametrize("field", list(ReasoningField))
def test_stream_and_non_stream_parity(name: str, field: ReasoningField) -> None:
    base, expected = EXPECTED[name]
    options = ReasoningOptions(base.tags, base.implicit_open, field)
    body = orjson.loads((STREAMS / f"{name}.json").read_bytes())
    normalize_completion(body, options)
    message = body["choices"][0]["message"]
    streamed = chunks_of(normalize_stream([fixture(name)], options))
    written = ["reasoning_content", "reasoning"] if field is ReasoningField.BOTH else [field.value]
    for key in ("reasoning_content", "reasoning"):
        if key in written:
            assert (message[key], message["content"]) == texts(streamed, key)[0] == expected[0]
        else:
            assert not message.get(key)


def test_normalize_message_keeps_reasoning_details_and_other_fields() -> None:
    body = orjson.loads((STREAMS / "openrouter-anthropic-reasoning-details.json").read_bytes())
    original = copy.deepcopy(body)
    assert normalize_completion(body, DEFAULT)
    message = body["choices"][0]["message"]
    assert message["reasoning_details"] == original["choices"][0]["message"]["reasoning_details"]
    assert message["refusal"] is None
    del message["reasoning_content"]
    del original["choices"][0]["message"]["reasoning"]
    assert body == original


def test_normalize_message_hide() -> None:
    body = orjson.loads((STREAMS / "openrouter-anthropic-reasoning-details.json").read_bytes())
    assert normalize_completion(body, ReasoningOptions(hide=True))
    message = body["choices"][0]["message"]
    assert "reasoning" not in message and "reasoning_content" not in message
    assert [sorted(d) for d in message["reasoning_details"]] == [
        ["format", "index", "signature", "type"],
        ["data", "format", "index", "type"],
    ]
    inline = orjson.loads((STREAMS / "minimax-m2-inline-think.json").read_bytes())
    assert normalize_completion(inline, ReasoningOptions(tags=("think",), hide=True))
    assert inline["choices"][0]["message"]["content"] == "\n\nHello! How can I help you today?"
    assert "reasoning_content" not in inline["choices"][0]["message"]


def test_literal_angle_bracket_is_not_a_change() -> None:
    extractor = StreamReasoningExtractor(THINK)
    c = chunk({"content": "if a < b and c <= d: <div>"})
    assert not extractor.process_chunk(c).changed
    assert c["choices"][0]["delta"] == {"content": "if a < b and c <= d: <div>"}


def test_normalize_message_unchanged() -> None:
    message = {"role": "assistant", "content": "a < b", "reasoning_content": "x"}
    assert not normalize_message(message, THINK)
    assert message == {"role": "assistant", "content": "a < b", "reasoning_content": "x"}


# --- the extractor on hand-made chunks -------------------------------------------------------


def chunk(*deltas: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [
        {"index": i, "delta": d, "finish_reason": finish} for i, d in enumerate(deltas) if d is not None
    ]
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        **extra,
    }


def run(pieces: list[str], options: ReasoningOptions) -> tuple[str, str, list[dict[str, Any]]]:
    extractor = StreamReasoningExtractor(options)
    reasoning = content = ""
    out = []
    for piece in pieces:
        c = chunk({"content": piece})
        extractor.process_chunk(c)
        out.append(c)
    out += extractor.flush()
    for c in out:
        for choice in c["choices"]:
            reasoning += choice["delta"].get("reasoning_content") or ""
            content += choice["delta"].get("content") or ""
    return reasoning, content, out


def test_fast_path_leaves_chunk_untouched() -> None:
    extractor = StreamReasoningExtractor(THINK)
    c = chunk({"role": "assistant", "content": "plain text"}, usage=None)
    delta = c["choices"][0]["delta"]
    snapshot = copy.deepcopy(c)
    outcome = extractor.process_chunk(c)
    assert (outcome.changed, outcome.reasoning, outcome.content) == (False, False, True)
    assert c == snapshot and c["choices"][0]["delta"] is delta


def test_already_normalized_reasoning_is_unchanged() -> None:
    extractor = StreamReasoningExtractor(DEFAULT)
    c = chunk({"content": None, "reasoning_content": "思考"})
    outcome = extractor.process_chunk(c)
    assert (outcome.changed, outcome.reasoning, outcome.content) == (False, True, False)


def test_tags_split_at_every_position() -> None:
    text = "pre<think>one</think>mid<think>two</think>post"
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            reasoning, content, _ = run([text[:i], text[i:j], text[j:]], THINK)
            assert (reasoning, content) == ("onetwo", "premidpost"), (i, j)


def test_text_before_and_after_tag_in_one_chunk() -> None:
    extractor = StreamReasoningExtractor(THINK)
    c = chunk({"content": "Sure.<think>hmm</think>Done"})
    outcome = extractor.process_chunk(c)
    assert c["choices"][0]["delta"] == {"content": "Sure.Done", "reasoning_content": "hmm"}
    assert (outcome.changed, outcome.reasoning, outcome.content) == (True, True, True)


def test_held_back_partial_tag_keeps_the_chunk_with_empty_content() -> None:
    extractor = StreamReasoningExtractor(THINK)
    first = chunk({"role": "assistant", "content": "Hi <thi"})
    extractor.process_chunk(first)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "Hi "}
    second = chunk({"content": "nk>deep"})
    extractor.process_chunk(second)
    assert second["choices"][0]["delta"] == {"content": "", "reasoning_content": "deep"}
    third = chunk({"content": "<", "tool_calls": []})
    outcome = extractor.process_chunk(third)
    assert third["choices"][0]["delta"] == {"content": "", "tool_calls": []}
    assert (outcome.changed, outcome.reasoning, outcome.content) == (True, False, False)


def test_dangling_partial_tag_is_flushed_at_finish_reason() -> None:
    extractor = StreamReasoningExtractor(THINK)
    extractor.process_chunk(chunk({"content": "x <thi"}))
    final = chunk({}, finish="stop")
    extractor.process_chunk(final)
    assert final["choices"][0]["delta"] == {"content": "<thi"}
    assert extractor.flush() == []


def test_flush_builds_a_chunk_from_the_last_one() -> None:
    extractor = StreamReasoningExtractor(THINK)
    extractor.process_chunk(chunk({"content": "<think>a</thi"}, system_fingerprint="fp"))
    extractor.process_chunk(
        {"id": "c2", "object": "chat.completion.chunk", "created": 2, "model": "m2", "choices": []}
    )
    assert extractor.flush() == [
        {
            "id": "c2",
            "object": "chat.completion.chunk",
            "created": 2,
            "model": "m2",
            "choices": [{"index": 0, "delta": {"reasoning_content": "</thi"}, "finish_reason": None}],
        }
    ]
    assert extractor.flush() == []


def test_held_back_text_is_bounded_by_longest_tag() -> None:
    extractor = StreamReasoningExtractor(ReasoningOptions(tags=("think", "thinking")))
    for piece in ["a", "<", "/", "t", "h", "i", "n", "k", "i", "n", "g"]:
        extractor.process_chunk(chunk({"content": piece}))
        held = max((len(s.held) for s in extractor._splitters.values()), default=0)
        assert held < len("</thinking>")


def test_several_tag_names() -> None:
    reasoning, content, _ = run(
        ["<thinking>a</thinking>b<think>c</think>d"], ReasoningOptions(tags=("think", "thinking"))
    )
    assert (reasoning, content) == ("ac", "bd")


def test_implicit_open_closing_tag_only() -> None:
    reasoning, content, _ = run(["Let me see", ".</th", "ink>\n\nAnswer"], IMPLICIT)
    assert (reasoning, content) == ("Let me see.", "\n\nAnswer")


def test_implicit_open_with_explicit_opening_tag() -> None:
    reasoning, content, _ = run(["<think>\nplan", "</think>ok"], IMPLICIT)
    assert (reasoning, content) == ("\nplan", "ok")


def test_implicit_open_ignored_when_server_already_split_reasoning() -> None:
    extractor = StreamReasoningExtractor(IMPLICIT)
    first = chunk({"reasoning_content": "plan"})
    extractor.process_chunk(first)
    second = chunk({"content": "the answer"})
    outcome = extractor.process_chunk(second)
    assert second["choices"][0]["delta"] == {"content": "the answer"}
    assert outcome.content and not outcome.reasoning


def test_two_choices_keep_separate_tag_state() -> None:
    extractor = StreamReasoningExtractor(THINK)
    chunks = [
        chunk({"content": "<think>a</th"}, {"content": "b<thi"}),
        chunk({"content": "ink>c"}, {"content": "nk>d"}),
    ]
    for c in chunks:
        extractor.process_chunk(c)
    final = chunk({}, {}, finish="stop")
    extractor.process_chunk(final)
    chunks.append(final)
    assert texts(chunks) == {0: ("a", "c"), 1: ("d", "b")}


def test_mistral_text_part_only_and_mixed_parts() -> None:
    extractor = StreamReasoningExtractor(DEFAULT)
    c = chunk(
        {
            "content": [
                {"type": "thinking", "thinking": [{"type": "text", "text": "t"}]},
                {"type": "text", "text": "x"},
            ]
        }
    )
    outcome = extractor.process_chunk(c)
    assert c["choices"][0]["delta"] == {"content": "x", "reasoning_content": "t"}
    assert (outcome.reasoning, outcome.content) == (True, True)


def test_reasoning_details_summary_and_precedence() -> None:
    extractor = StreamReasoningExtractor(DEFAULT)
    details = [
        {"type": "reasoning.summary", "summary": "**Plan**", "format": "openai-responses-v1", "index": 0},
        {
            "type": "reasoning.encrypted",
            "data": "gAAA",
            "id": "rs_1",
            "format": "openai-responses-v1",
            "index": 0,
        },
    ]
    c = chunk({"content": "", "reasoning_details": details})
    extractor.process_chunk(c)
    assert c["choices"][0]["delta"]["reasoning_content"] == "**Plan**"
    both = chunk(
        {
            "reasoning_content": "A",
            "reasoning": "A",
            "reasoning_details": [{"type": "reasoning.text", "text": "A"}],
        }
    )
    extractor.process_chunk(both)
    assert (
        both["choices"][0]["delta"]["reasoning_content"] == "A"
        and "reasoning" not in both["choices"][0]["delta"]
    )


def test_hide_strips_signed_text_item_to_its_signature() -> None:
    extractor = StreamReasoningExtractor(ReasoningOptions(hide=True))
    item = {"type": "reasoning.text", "text": "secret", "signature": "sig", "index": 0}
    c = chunk({"content": "", "reasoning": "secret", "reasoning_details": [item]})
    outcome = extractor.process_chunk(c)
    assert c["choices"][0]["delta"] == {
        "content": "",
        "reasoning_details": [{"type": "reasoning.text", "signature": "sig", "index": 0}],
    }
    assert outcome.changed and outcome.reasoning


# Property: any answer made of reasoning and content segments, tagged, split anywhere.
segment_text = st.text(alphabet=st.sampled_from(list("ab <>/thinkg\n")), max_size=12).filter(
    lambda s: not TAG_RE.search(s)
)


@settings(max_examples=300, deadline=None)
@given(
    segments=st.lists(segment_text, min_size=1, max_size=6),
    implicit=st.booleans(),
    tag=st.sampled_from(["think", "thinking"]),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
)
def test_any_tagged_text_split_anywhere(
    segments: list[str], implicit: bool, tag: str, cuts: list[int]
) -> None:
    # Segments alternate reasoning/content; implicit mode starts inside reasoning with no opening tag.
    text, reasoning, content = "", "", ""
    inside = implicit
    for k, segment in enumerate(segments):
        if k:
            text += f"</{tag}>" if inside else f"<{tag}>"
            inside = not inside
        text += segment
        if inside:
            reasoning += segment
        else:
            content += segment
    options = ReasoningOptions(tags=("think", "thinking"), implicit_open=implicit)
    points = [0, *sorted(c % (len(text) + 1) for c in cuts), len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(points)]
    got_reasoning, got_content, out = run(pieces, options)
    assert (got_reasoning, got_content) == (reasoning, content)
    assert len(out) >= len(pieces)
    for c in out:
        assert not TAG_RE.search(c["choices"][0]["delta"].get("content") or "")
    message = {"role": "assistant", "content": text}
    normalize_message(message, options)
    assert (message.get("reasoning_content") or "", message["content"]) == (reasoning, content)


def run_chunks(chunks: list[dict[str, Any]], options: ReasoningOptions, *, fast_path: bool) -> list[Any]:
    """With `fast_path=False` the extractor is the reference the fast path must agree with."""
    chunks = copy.deepcopy(chunks)
    extractor = StreamReasoningExtractor(options, fast_path=fast_path)
    outcomes = [extractor.process_chunk(c) for c in chunks]
    return [chunks, outcomes, extractor.flush()]


OPTION_SETS = [
    ReasoningOptions(tags=tags, implicit_open=implicit, output_field=field, hide=hide)
    for tags in ((), ("think",))
    for implicit in (False, True)
    for field in ReasoningField
    for hide in (False, True)
]


@pytest.mark.parametrize("name", NAMES)
def test_fast_path_agrees_with_full_path_on_fixtures(name: str) -> None:
    chunks = chunks_of(fixture(name))
    for options in OPTION_SETS:
        fast = run_chunks(chunks, options, fast_path=True)
        assert fast == run_chunks(chunks, options, fast_path=False), options


maybe_text = st.one_of(st.none(), st.sampled_from(["", "a", "<", "x<think>y", "</think>z", "<thi"]))
random_delta = st.fixed_dictionaries(
    {},
    optional={
        "content": maybe_text,
        "reasoning_content": maybe_text,
        "reasoning": maybe_text,
        "reasoning_details": st.sampled_from(
            [[], [{"type": "reasoning.text", "text": "d"}], [{"type": "reasoning.encrypted", "data": "e"}]]
        ),
        "role": st.just("assistant"),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    deltas=st.lists(
        st.tuples(st.integers(0, 1), random_delta, st.sampled_from([None, None, "stop"])), max_size=8
    ),
    options=st.sampled_from(OPTION_SETS),
)
def test_fast_path_agrees_with_full_path_on_random_deltas(
    deltas: list[tuple[int, dict[str, Any], str | None]], options: ReasoningOptions
) -> None:
    chunks = [{"id": "x", "choices": [{"index": i, "delta": d, "finish_reason": f}]} for i, d, f in deltas]
    fast = run_chunks(chunks, options, fast_path=True)
    assert fast == run_chunks(chunks, options, fast_path=False)


def test_the_flush_at_the_end_orders_choices_by_index_on_both_paths() -> None:
    # Found by the property test above: choice 1 was seen first, empty, so only the full path
    # met it before choice 0; held '<' of both came out in different orders.
    deltas: list[tuple[int, dict[str, Any], str | None]] = [(1, {}, None), (0, {"content": "<"}, None)]
    deltas.append((1, {"content": "<"}, None))
    chunks = [{"id": "x", "choices": [{"index": i, "delta": d, "finish_reason": f}]} for i, d, f in deltas]
    options = ReasoningOptions(tags=("think",))
    fast = run_chunks(chunks, options, fast_path=True)
    assert fast == run_chunks(chunks, options, fast_path=False)
    assert [c["index"] for c in fast[-1][0]["choices"]] == [0, 1]


def test_the_reference_extractor_never_takes_the_fast_path() -> None:
    # (Otherwise the agreement tests above would compare the fast path with itself.)
    chunk = {"id": "x", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
    fast = StreamReasoningExtractor(ReasoningOptions())
    reference = StreamReasoningExtractor(ReasoningOptions(), fast_path=False)
    for extractor in (fast, reference):
        extractor.process_chunk(copy.deepcopy(chunk))
    assert fast.text_rule("content", 0) is not None
    assert reference.text_rule("content", 0) is None
