"""What a finished answer showed (proxy.core.stream.trace_outcome): the `reasoning_starved`
warning when the reasoning used the whole output limit and left no answer, stream and non-stream,
in both modes and languages, and the outcome listeners read it from; the `reasoning_in_content`
warning when a model that always reasons answered without any."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.stream.completion import process_completion
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.taps import TappedTraceBuilder
from proxy.core.stream.trace_outcome import IN_CONTENT, STARVED, output_limit
from proxy.core.usage import ReasoningTally
from tests.core.stream.trace_steps import (
    Step,
    assert_valid,
    builder,
    chunk,
    content_steps,
    of_type,
    reasoning_steps,
    run,
    tool_steps,
    types,
)


def usage(reasoning: int | None = 64, completion: int = 64) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": 12,
        "completion_tokens": completion,
        "total_tokens": 12 + completion,
    }
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def usage_step(**kwargs: Any) -> Step:
    body = chunk()
    body["choices"] = []
    body["usage"] = usage(**kwargs)
    return body, False


def starved_turn() -> list[Step]:
    """Reasoning until the output limit, then `length`: not a word of answer."""
    return [
        (chunk({"role": "assistant", "content": ""}), False),
        *reasoning_steps(8),
        (chunk({"content": "\n"}), False),  # (a line break is not an answer)
        (chunk(finish="length"), False),
        usage_step(),
    ]


@pytest.mark.parametrize("mode", [TraceMode.BRIEF, TraceMode.DETAILED])
def test_reasoning_that_ate_the_answer_is_a_warning_before_done(mode: TraceMode) -> None:
    events = run(starved_turn(), mode=mode, request={"model": "m", "max_tokens": 64})
    assert types(events)[-2:] == ["warning", "done"]
    [warning] = of_type(events, "warning")
    assert warning["code"] == STARVED == "reasoning_starved"
    assert (warning["reasoning_tokens"], warning["max_tokens"]) == (64, 64)
    assert "max_tokens" in warning["message"] and "level" in warning["message"]
    assert warning["t_ms"] <= events[-1]["t_ms"]
    assert_valid(events)


def test_the_warning_speaks_chinese_and_reads_max_completion_tokens() -> None:
    events = run(starved_turn(), zh=True, request={"model": "m", "max_completion_tokens": 50})
    [warning] = of_type(events, "warning")
    assert warning["max_tokens"] == 50 and "max_tokens" in warning["message"]
    assert "思考级别" in warning["message"]


def test_without_a_limit_or_a_count_the_warning_says_what_it_knows() -> None:
    steps = [*starved_turn()[:-1]]  # no usage
    [warning] = of_type(run(steps, request={"model": "m"}), "warning")
    assert "max_tokens" not in {k for k in warning if k != "message"} and "reasoning_tokens" not in warning
    assert_valid([warning])


@pytest.mark.parametrize(
    "steps",
    [
        # an answer cut short: the reasoning left room for some of it
        [
            *reasoning_steps(4),
            *content_steps("The answer beg", 3),
            (chunk(finish="length"), False),
            usage_step(),
        ],
        # a tool call cut short: not an empty answer either
        [
            *reasoning_steps(4),
            *tool_steps(0, "call_1", "kb_search", '{"q": "x', 2),
            (chunk(finish="length"), False),
        ],
        # thought, then stopped on its own with nothing to say
        [*reasoning_steps(4), (chunk(finish="stop"), False), usage_step()],
        # no reasoning and no count: the limit ate an empty answer, not reasoning
        [(chunk({"content": ""}), False), (chunk(finish="length"), False), usage_step(reasoning=0)],
    ],
    ids=["answer-cut", "tool-call-cut", "stop", "no-reasoning"],
)
def test_only_an_empty_answer_after_reasoning_is_starved(steps: list[Step]) -> None:
    events = run(steps, request={"model": "m", "max_tokens": 64})
    assert "warning" not in types(events)


def test_a_model_that_reasons_without_showing_it_is_known_by_its_count() -> None:
    """OpenAI's reasoning models send no reasoning text, only the count: the classic empty answer
    with finish_reason length."""
    steps: list[Step] = [
        (chunk({"role": "assistant", "content": ""}), False),
        (chunk(finish="length"), False),
    ]
    [warning] = of_type(run([*steps, usage_step(reasoning=256, completion=256)]), "warning")
    assert warning["reasoning_tokens"] == 256


def test_the_outcome_says_so() -> None:
    b = builder()
    b.begin({"max_tokens": 64}, 0.0)
    for c, reasoning in starved_turn():
        b.on_chunk(c, reasoning, 1.0)
    assert b.outcome() is None
    b.finish(2.0)
    outcome = b.outcome()
    assert outcome is not None and outcome.starved
    plain = builder()
    plain.begin(None, 0.0)
    plain.finish(1.0)
    assert plain.outcome() is not None and not plain.outcome().starved  # type: ignore[union-attr]


def test_a_non_stream_answer_is_checked_the_same() -> None:
    body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "reasoning_content": "Let me think."},
                "finish_reason": "length",
            }
        ],
        "usage": usage(reasoning=None, completion=64),
    }
    b = builder(TraceMode.BRIEF)
    tally = ReasoningTally()
    out = process_completion(
        orjson.dumps(body),
        reasoning=ReasoningOptions(),
        trace=b,
        request_body={"model": "m", "max_tokens": 64},
        now_ms=5.0,
        tally=tally,
    )
    [warning] = [e for e in orjson.loads(out)["trace"] if e["type"] == "warning"]
    # The count is the proxy's estimate, written into usage before the trace read it.
    assert warning["reasoning_tokens"] == tally.estimate() and warning["max_tokens"] == 64
    assert b.outcome() is not None and b.outcome().starved  # type: ignore[union-attr]


def test_a_stream_through_the_pipeline_warns_before_done() -> None:
    seen: list[dict[str, Any]] = []
    b = TappedTraceBuilder(
        client_mode=TraceMode.BRIEF, tap=seen.extend, zh=False, level="deep", provider="vllm"
    )
    pipeline = StreamPipeline(
        reasoning=ReasoningOptions(),
        trace=b,
        trace_format=TraceFormat.COMMENT,
        max_event_bytes=1 << 20,
        tally=ReasoningTally(),
    )
    out = pipeline.begin({"model": "m", "max_tokens": 8}, 0.0)
    for c, _ in [*starved_turn()[:-1], usage_step(reasoning=None, completion=8)]:
        out += pipeline.feed(b"data: " + orjson.dumps(c) + b"\n\n", 1.0)
    out += pipeline.feed(b"data: [DONE]\n\n", 2.0)
    client = [
        orjson.loads(line[len(b": trace ") :]) for line in out.split(b"\n") if line.startswith(b": trace ")
    ]
    assert [e["type"] for e in client][-2:] == ["warning", "done"]  # the brief client gets it too
    assert [e["seq"] for e in client] == list(range(len(client)))
    assert "warning" in [e["type"] for e in seen]
    assert client[-2]["reasoning_tokens"] == 8  # the estimate, capped at completion_tokens


def test_a_brief_client_of_a_tapped_builder_gets_the_front_doors_notes() -> None:
    b = TappedTraceBuilder(
        client_mode=TraceMode.BRIEF, tap=lambda events: None, zh=False, level="deep", provider="p"
    )
    b.add_note("Hosted tools left out: web_search", "已省略：web_search", code="omitted_tools", tools=["x"])
    assert [e["type"] for e in b.begin(None, 0.0)] == ["status", "note"]


@pytest.mark.parametrize(
    ("body", "limit"),
    [
        ({"max_tokens": 64}, 64),
        ({"max_completion_tokens": 50, "max_tokens": 64}, 50),
        ({"max_tokens": 0}, None),
        ({"max_tokens": True}, None),
        ({"max_tokens": "64"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_output_limit(body: dict[str, Any] | None, limit: int | None) -> None:
    assert output_limit(body) == limit


# ---- a model that always reasons answered without reasoning (Kimi K3, MoonshotAI/Kimi-K3#45) -------


def plain_answer() -> list[Step]:
    """Its chain of thought written as the answer: no reasoning field at all."""
    return [
        (chunk({"role": "assistant", "content": ""}), False),
        *content_steps("The user asks about tomatoes. I should say fruit. A tomato is a fruit.", 4),
        (chunk(finish="stop"), False),
        usage_step(reasoning=None),
    ]


def expecting(mode: TraceMode = TraceMode.DETAILED, zh: bool = False) -> Any:
    b = builder(mode, zh)
    b.expect_reasoning()
    return b


@pytest.mark.parametrize("mode", [TraceMode.BRIEF, TraceMode.DETAILED])
def test_an_answer_without_reasoning_from_a_model_that_always_reasons_is_a_warning(mode: TraceMode) -> None:
    b = expecting(mode)
    events = b.begin({"model": "kimi-k3"}, 0.0)
    for c, reasoning in plain_answer():
        events += b.on_chunk(c, reasoning, 1.0)
    events += b.finish(2.0)
    assert types(events)[-2:] == ["warning", "done"]
    [warning] = of_type(events, "warning")
    assert warning["code"] == IN_CONTENT == "reasoning_in_content"
    assert "no reasoning" in warning["message"] and "as it came" in warning["message"]
    assert_valid(events)
    outcome = b.outcome()
    assert outcome is not None and outcome.reasoning_in_content and not outcome.starved


def test_the_in_content_warning_speaks_chinese_and_comes_for_a_whole_completion_too() -> None:
    b = expecting(zh=True)
    b.begin(None, 0.0)
    events = b.on_completion(
        {"id": "x", "choices": [{"message": {"content": "先想想……番茄是水果。"}}]}, False, 5.0
    )
    [warning] = of_type(events, "warning")
    assert warning["code"] == IN_CONTENT and "推理" in warning["message"]


@pytest.mark.parametrize(
    ("expected", "steps"),
    [
        (True, [*reasoning_steps(3), *content_steps("Fruit.", 2), (chunk(finish="stop"), False)]),
        (True, [*tool_steps(0, "call_1", "kb_search", "{}", 1), (chunk(finish="tool_calls"), False)]),
        (True, [(chunk(finish="stop"), False)]),  # nothing said at all: not this warning
        (False, plain_answer()),  # a model that may answer without reasoning
    ],
    ids=["reasoned", "tool-call", "empty", "not-expected"],
)
def test_only_text_without_any_reasoning_from_an_always_reasoning_model_is_warned_of(
    expected: bool, steps: list[Step]
) -> None:
    b = expecting() if expected else builder()
    events = b.begin(None, 0.0)
    for c, reasoning in steps:
        events += b.on_chunk(c, reasoning, 1.0)
    events += b.finish(2.0)
    assert "warning" not in types(events)
    assert b.outcome() is not None and not b.outcome().reasoning_in_content  # type: ignore[union-attr]
