"""gpt-oss harmony text in content: channels split into reasoning, answer and tool calls, however
the text is cut, streamed or not (proxy.core.stream.harmony)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from proxy.core.controls import Controls, ReasoningField, ReasoningVisibility, TraceFormat, TraceMode
from proxy.core.plan.chat import reasoning_options
from proxy.core.plan.request import Defaults, Intent
from proxy.core.stream.completion import process_completion
from proxy.core.stream.harmony import (
    HEADER_LIMIT,
    HarmonyExtractor,
    HarmonyParser,
    _Out,
    call_id,
    extractor,
    normalize_completion,
    speaks_harmony,
)
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions, StreamReasoningExtractor
from tests.core.stream.test_reasoning import chunks_of

HARMONY = ReasoningOptions(harmony=True)
ID = "chatcmpl-harmony-1"
REASONING = 'User wants Paris weather. Use get_weather with {"city": "Paris"}; a < b.'
FINAL = "I'll check the weather in Paris <b>now</b>."
ARGS = '{"city": "Paris", "unit": "celsius"}'
# The whole answer in OpenAI's harmony format (https://github.com/openai/harmony/blob/main/docs/format.md):
# chain of thought, an answer, then a function call on the commentary channel.
FULL = (
    f"<|channel|>analysis<|message|>{REASONING}<|end|>"
    f"<|start|>assistant<|channel|>final<|message|>{FINAL}<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    f"<|message|>{ARGS}<|call|>"
)
CALL = {"id": call_id(ID, 0, 0), "name": "get_weather", "arguments": ARGS}


def parse(*pieces: str) -> tuple[str, str, list[dict[str, Any]]]:
    """(reasoning, content, tool calls as whole {id, name, arguments}) of one choice's pieces."""
    parser = HarmonyParser(ID, 0)
    outs = []
    for piece in pieces:
        outs.append(_Out())
        parser.feed(piece, outs[-1])
    outs.append(_Out())
    parser.finish(outs[-1])
    calls: dict[int, dict[str, Any]] = {}
    for out in outs:
        for item in out.calls:
            whole = calls.setdefault(item["index"], {"id": None, "name": None, "arguments": ""})
            whole["id"] = item.get("id", whole["id"])
            whole["name"] = item["function"].get("name", whole["name"])
            whole["arguments"] += item["function"]["arguments"]
    reasoning = "".join(t for out in outs for t in out.reasoning)
    content = "".join(t for out in outs for t in out.content)
    return reasoning, content, [calls[i] for i in sorted(calls)]


def test_the_full_answer_splits_into_its_channels() -> None:
    assert parse(FULL) == (REASONING, FINAL, [CALL])


def test_split_at_every_offset_and_character_by_character() -> None:
    expected = parse(FULL)
    for cut in range(len(FULL) + 1):
        assert parse(FULL[:cut], FULL[cut:]) == expected, cut
    for a in range(0, len(FULL), 7):
        for b in range(a, len(FULL), 11):
            assert parse(FULL[:a], FULL[a:b], FULL[b:]) == expected, (a, b)
    assert parse(*FULL) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the documented example output, ended by the stop token <|return|>
        (
            "<|channel|>analysis<|message|>Simple arithmetic.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
            ("Simple arithmetic.", "2 + 2 = 4.", []),
        ),
        # llama.cpp --reasoning-format none: the analysis raw, the final answer without its header
        ("<|channel|>analysis<|message|>Think.<|end|>Answer.", ("Think.", "Answer.", [])),
        # no stop token at the end (a server that does not print it), whitespace between messages
        (
            "<|channel|>analysis<|message|>T<|end|>\n<|start|>assistant<|channel|>final<|message|>A",
            ("T", "A", []),
        ),
        # the recipient in the role part, no space before <|constrain|>
        (
            "<|start|>assistant to=functions.lookup<|channel|>commentary<|constrain|>json"
            "<|message|>{}<|call|>",
            ("", "", [{"id": call_id(ID, 0, 0), "name": "lookup", "arguments": "{}"}]),
        ),
        # a preamble on the commentary channel is for the user; a built-in tool call is not
        (
            "<|channel|>commentary<|message|>Plan: search.<|end|>"
            '<|start|>assistant<|channel|>analysis to=browser.search<|message|>{"query": "x"}<|call|>',
            ('{"query": "x"}', "Plan: search.", []),
        ),
        # text of a server that parsed harmony itself: nothing to do
        ("Just an answer with a < and a <| in it.", ("", "Just an answer with a < and a <| in it.", [])),
        # an unknown channel is not the answer
        ("<|channel|>scratch<|message|>hidden<|end|>shown", ("hidden", "shown", [])),
    ],
)
def test_shapes(text: str, expected: tuple[str, str, list[dict[str, Any]]]) -> None:
    assert parse(text) == expected
    assert all(parse(text[:cut], text[cut:]) == expected for cut in range(len(text) + 1))


def test_markers_never_leak() -> None:
    for cut in range(len(FULL) + 1):
        reasoning, content, calls = parse(FULL[:cut], FULL[cut:])
        for text in (reasoning, content, *(c["arguments"] for c in calls)):
            assert "<|" not in text.replace("a < b", "")


def test_a_literal_header_start_is_released_as_text_past_the_limit() -> None:
    tail = "x" * (HEADER_LIMIT + 1)
    reasoning, content, calls = parse("Say <|start|>", tail)
    assert (reasoning, calls) == ("", [])
    assert content == "Say " + tail


def test_an_unfinished_marker_at_the_end_is_text() -> None:
    assert parse("<|channel|>final<|message|>A <|ret") == ("", "A <|ret", [])


def test_call_ids_are_deterministic_and_differ_per_answer_choice_and_call() -> None:
    assert call_id("a", 0, 0) == call_id("a", 0, 0)
    assert len({call_id("a", 0, 0), call_id("b", 0, 0), call_id("a", 1, 0), call_id("a", 0, 1)}) == 4
    assert call_id("a", 0, 0).startswith("call_")


# --- the stream: chunks through the extractor -------------------------------------------------


def chunk(delta: dict[str, Any] | None, finish: str | None = None, index: int = 0) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish}
    if delta is None:
        del choice["delta"]
    return {
        "id": ID,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-oss-20b",
        "choices": [choice],
    }


def stream_of(pieces: list[str], finish: str | None = "stop") -> list[dict[str, Any]]:
    chunks = [chunk({"role": "assistant", "content": None})]
    chunks += [chunk({"content": p}) for p in pieces]
    if finish is not None:
        chunks.append(chunk({}, finish))
    return chunks


def collect(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client reads from normalized chunks: reasoning, content, whole tool calls, finish."""
    reasoning, content, finish = "", "", None
    calls: dict[int, dict[str, Any]] = {}
    for c in chunks:
        for choice in c.get("choices", []):
            delta = choice.get("delta") or {}
            reasoning += delta.get("reasoning_content") or ""
            content += delta.get("content") or ""
            for item in delta.get("tool_calls") or []:
                whole = calls.setdefault(item["index"], {"id": None, "name": None, "arguments": ""})
                whole["id"] = item.get("id", whole["id"])
                whole["name"] = item.get("function", {}).get("name", whole["name"])
                whole["arguments"] += item.get("function", {}).get("arguments", "")
            finish = choice.get("finish_reason") or finish
    return {
        "reasoning": reasoning,
        "content": content,
        "calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
    }


def run(chunks: list[dict[str, Any]], options: ReasoningOptions = HARMONY, *, fast: bool = True) -> list[Any]:
    ex = extractor(options, fast_path=fast)
    out = []
    for c in chunks:
        ex.process_chunk(c)
        out.append(c)
    return out + ex.flush()


EXPECTED = {"reasoning": REASONING, "content": FINAL, "calls": [CALL], "finish": "tool_calls"}


def test_stream_split_at_every_offset() -> None:
    for cut in range(len(FULL) + 1):
        for fast in (True, False):
            assert collect(run(stream_of([FULL[:cut], FULL[cut:]]), fast=fast)) == EXPECTED, cut
    assert collect(run(stream_of(list(FULL)))) == EXPECTED


def test_stream_bytes_split_at_every_offset_through_the_pipeline() -> None:
    """The SSE bytes of a stream of small pieces, cut at every byte, through the whole pipeline
    (its chunk templates included): the same bytes out every time, and the expected answer."""
    pieces = [FULL[i : i + 16] for i in range(0, len(FULL), 16)]
    data = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in stream_of(pieces)) + b"data: [DONE]\n\n"

    def through(*reads: bytes) -> bytes:
        pipeline = StreamPipeline(
            reasoning=HARMONY, trace=None, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
        )
        return b"".join(pipeline.feed(read, 0.0) for read in reads) + pipeline.finish(0.0)

    reference = through(data)
    assert collect(chunks_of(reference)) == EXPECTED
    for cut in range(len(data) + 1):
        assert through(data[:cut], data[cut:]) == reference, cut


def test_non_stream_equals_stream() -> None:
    body = {
        "id": ID,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": FULL}, "finish_reason": "stop"}],
    }
    assert normalize_completion(body, HARMONY)
    choice = body["choices"][0]
    message = choice["message"]
    calls = [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message["tool_calls"]
    ]
    got = {
        "reasoning": message["reasoning_content"],
        "content": message["content"] or "",  # (None: a message that only calls)
        "calls": calls,
        "finish": choice["finish_reason"],
    }
    assert got == EXPECTED == collect(run(stream_of([FULL])))


def test_non_stream_answer_without_a_call_keeps_stop_and_its_content() -> None:
    text = "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final<|message|>A<|return|>"
    body = {
        "id": ID,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }
    process = process_completion(
        orjson.dumps(body), reasoning=HARMONY, trace=None, request_body=None, now_ms=0.0
    )
    choice = orjson.loads(process)["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"] == {"role": "assistant", "content": "A", "reasoning_content": "R"}


def test_reasoning_goes_to_the_configured_field_and_hiding_removes_it() -> None:
    for field in (ReasoningField.REASONING, ReasoningField.BOTH):
        got = run(stream_of([FULL]), ReasoningOptions(harmony=True, output_field=field))
        text = "".join(
            (c["choices"][0].get("delta") or {}).get("reasoning") or "" for c in got if c["choices"]
        )
        assert text == REASONING
    hidden = run(stream_of([FULL]), ReasoningOptions(harmony=True, hide=True))
    assert collect(hidden) == {**EXPECTED, "reasoning": ""}
    assert all("reasoning" not in (c["choices"][0].get("delta") or {}) for c in hidden if c["choices"])
    body = {"id": ID, "choices": [{"index": 0, "message": {"content": FULL}, "finish_reason": "stop"}]}
    out = orjson.loads(
        process_completion(
            orjson.dumps(body),
            reasoning=ReasoningOptions(harmony=True, hide=True),
            trace=None,
            request_body=None,
            now_ms=0.0,
        )
    )
    assert "reasoning_content" not in out["choices"][0]["message"]
    assert out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == ARGS


def test_the_upstreams_own_tool_calls_are_kept_and_minted_ones_follow() -> None:
    own = {
        "index": 0,
        "id": "call_upstream",
        "type": "function",
        "function": {"name": "a", "arguments": "{}"},
    }
    chunks = [chunk({"tool_calls": [own]}), *stream_of([FULL])[1:]]
    got = collect(run(chunks))
    assert got["calls"] == [{"id": "call_upstream", "name": "a", "arguments": "{}"}, CALL]


def test_a_choice_without_harmony_is_left_as_it_came() -> None:
    chunks = stream_of(["Hello", " world <b>", "!"])
    original = copy.deepcopy(chunks)
    ex = extractor(HARMONY)
    assert [ex.process_chunk(c).changed for c in chunks] == [False] * len(chunks)
    assert chunks == original and ex.flush() == []


def test_without_the_option_harmony_text_is_content() -> None:
    assert type(extractor(ReasoningOptions())) is StreamReasoningExtractor
    chunks = stream_of([FULL])
    got = collect(run(chunks, ReasoningOptions()))
    assert got == {"reasoning": "", "content": FULL, "calls": [], "finish": "stop"}


def test_the_fast_path_stays_open_outside_a_message_only() -> None:
    ex = extractor(HARMONY)
    assert isinstance(ex, HarmonyExtractor)
    rule = ex.text_rule("content", 0)
    assert rule is not None and rule.unless_lt  # (a text with `<` may start a marker)
    ex.process_chunk(chunk({"content": "<|channel|>analysis<|message|>"}))
    assert ex.text_rule("content", 0) is None  # inside the analysis: plain text is reasoning
    ex.process_chunk(chunk({"content": "R<|end|><|start|>assistant<|channel|>final<|message|>"}))
    assert ex.text_rule("content", 0) is not None


def test_a_stream_that_ends_without_a_finish_releases_what_was_held() -> None:
    got = collect(run(stream_of(["<|channel|>analysis<|message|>R<|end|>A <|", "ca"], finish=None)))
    assert got == {"reasoning": "R", "content": "A <|ca", "calls": [], "finish": None}


def test_two_choices_keep_their_own_state() -> None:
    chunks = [
        chunk({"content": "<|channel|>analysis<|message|>r0"}, index=0),
        chunk({"content": "<|channel|>final<|message|>a1"}, index=1),
        chunk({"content": "<|end|>a0"}, "stop", index=0),
        chunk({"content": "!"}, "stop", index=1),
    ]
    run(chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"content": "", "reasoning_content": "r0"}
    assert deltas[1] == {"content": "a1"}
    assert deltas[2] == {"content": "a0"} and deltas[3] == {"content": "!"}


@pytest.mark.parametrize(
    ("model", "harmony"),
    [
        ("openai/gpt-oss-20b", True),
        ("gpt-oss:120b", True),
        ("GPT-OSS-20B-MXFP4.gguf", True),
        ("qwen3-8b-q4_k_m.gguf", False),
        ("gpt-4o", False),
        (None, False),
    ],
)
def test_the_gpt_oss_family_speaks_harmony_on_any_upstream(model: str | None, harmony: bool) -> None:
    assert speaks_harmony(model) is harmony
    controls = Controls(None, TraceMode.OFF, TraceFormat.COMMENT, ReasoningVisibility.SHOW)
    defaults = Defaults(
        None, TraceMode.OFF, TraceFormat.COMMENT, ReasoningVisibility.SHOW, ReasoningField.REASONING
    )
    options = reasoning_options(("think",), True, defaults, Intent(None, controls, None), model=model)
    assert options.harmony is harmony
    # gpt-oss's template opens no think block, whatever the entry says of its other models
    assert options.implicit_open is not harmony
