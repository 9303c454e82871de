from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from proxy.core.controls import TraceMode, prefers_chinese
from proxy.core.stream.summaries import summarize_arguments
from proxy.core.stream.trace import (
    ChunkMeta,
    TraceBuilder,
    _duration_text,
    _ms,
    chunk_meta,
    comment_frames,
    event_frames,
)

SCHEMA = orjson.loads((Path(__file__).parents[3] / "docs" / "trace-event.schema.json").read_bytes())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

REASONING_SENTINEL = "REASONING-SENTINEL-4b1d"
SYSTEM_SENTINEL = "SYSTEM-PROMPT-SENTINEL-88c2"
SECRET = "sk-SECRET-SENTINEL-0e9f"
TOOL_OUTPUT_SENTINEL = "TOOL-OUTPUT-TAIL-SENTINEL"

ALL_TYPES = {
    "status",
    "reasoning.start",
    "reasoning.end",
    "tool_call.start",
    "tool_call.end",
    "tool_result",
    "error",
    "done",
}

Chunk = dict[str, Any]
Step = tuple[Chunk, bool]  # a chunk and whether it carried reasoning


# -- realistic streams -----------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> Chunk:
    return {
        "id": "chatcmpl-7a1",
        "object": "chat.completion.chunk",
        "created": 1761725211,
        "model": "deepseek-chat",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
    }


def usage_chunk(completion_tokens: int = 120) -> Chunk:
    body = chunk()
    body["choices"] = []
    body["usage"] = {"prompt_tokens": 310, "completion_tokens": completion_tokens, "total_tokens": 310 + 120}
    return body


def reasoning_steps(n: int) -> list[Step]:
    return [
        (chunk({"content": None, "reasoning_content": f"{REASONING_SENTINEL} {i}"}), True) for i in range(n)
    ]


def content_steps(text: str, pieces: int) -> list[Step]:
    size = max(1, len(text) // pieces)
    return [(chunk({"content": text[i : i + size]}), False) for i in range(0, len(text), size)]


def split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def tool_steps(index: int, call_id: str, name: str, arguments: str, pieces: int) -> list[Step]:
    """OpenAI's shape: id + name + empty arguments first, then argument fragments."""
    first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    steps: list[Step] = [(chunk({"tool_calls": [first]}), False)]
    for piece in split(arguments, pieces):
        steps.append((chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), False))
    return steps


KB_ARGS = orjson.dumps({"query": "refund policy for EU orders", "top_k": 5, "api_key": SECRET}).decode()
WEATHER_ARGS = orjson.dumps({"city": "Paris", "days": 3}).decode()


def tool_turn() -> list[Step]:
    """Think, then call kb_search and get_weather (arguments in many fragments), then usage."""
    return [
        (chunk({"role": "assistant", "content": ""}), False),
        *reasoning_steps(30),
        *tool_steps(0, "call_kb", "kb_search", KB_ARGS, 12),
        *tool_steps(1, "call_wx", "get_weather", WEATHER_ARGS, 6),
        (chunk(finish="tool_calls"), False),
        (usage_chunk(), False),
    ]


def answer_turn() -> list[Step]:
    """Think, then answer in many content chunks, then usage."""
    return [
        (chunk({"role": "assistant", "content": ""}), False),
        *reasoning_steps(20),
        *content_steps("EU orders can be refunded within 30 days; Paris will be sunny. " * 3, 40),
        (chunk(finish="stop"), False),
        (usage_chunk(), False),
    ]


def request_with_tool_results() -> dict[str, Any]:
    return {
        "model": "deepseek-chat",
        "messages": [
            {"role": "system", "content": f"You are a support bot. {SYSTEM_SENTINEL}"},
            {"role": "user", "content": "Old question"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_old", "type": "function", "function": {"name": "old_tool"}}],
            },
            {"role": "tool", "tool_call_id": "call_old", "content": "old result"},
            {"role": "user", "content": "Can I get a refund, and what's the weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": REASONING_SENTINEL,
                "tool_calls": [
                    {
                        "id": "call_kb",
                        "type": "function",
                        "function": {"name": "kb_search", "arguments": KB_ARGS},
                    },
                    {
                        "id": "call_wx",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_kb",
                "content": orjson.dumps(
                    [
                        {"title": "Refunds", "text": "30 days", "token": SECRET},
                        {"title": "EU"},
                        {"title": "x"},
                    ]
                ).decode(),
            },
            {
                "role": "tool",
                "tool_call_id": "call_wx",
                "content": '{"error": {"message": "upstream timeout"}}',
            },
            {"role": "tool", "tool_call_id": "call_unknown", "content": "stray"},
        ],
    }


def builder(mode: TraceMode = TraceMode.DETAILED, zh: bool = False) -> TraceBuilder:
    return TraceBuilder(mode=mode, zh=zh, level="deep", provider="deepseek", method="params")


def run(
    steps: Iterable[Step],
    *,
    mode: TraceMode = TraceMode.DETAILED,
    zh: bool = False,
    request: dict[str, Any] | None = None,
    step_ms: float = 12.5,
) -> list[dict[str, Any]]:
    b = builder(mode, zh)
    events = b.begin(request, 2.0)
    now = 40.0
    for c, reasoning in steps:
        events += b.on_chunk(c, reasoning, now)
        now += step_ms
    events += b.finish(now)
    return events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def stages(events: list[dict[str, Any]]) -> list[str]:
    return [e["stage"] for e in events if e["type"] == "status"]


def of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


def assert_valid(events: list[dict[str, Any]]) -> None:
    for event in events:
        errors = [e.message for e in VALIDATOR.iter_errors(event)]
        assert not errors, (event, errors)


# -- stages, order, timing -------------------------------------------------------------------------


def test_tool_turn_stages_in_order() -> None:
    events = run(tool_turn(), request=request_with_tool_results())
    assert stages(events) == ["analyzing", "thinking", "tool_calling"]
    assert types(events) == [
        "status",
        "tool_result",
        "tool_result",
        "status",
        "reasoning.start",
        "reasoning.end",
        "status",
        "tool_call.start",
        "tool_call.end",
        "tool_call.start",
        "tool_call.end",
        "done",
    ]


def test_answer_turn_stages_in_order() -> None:
    events = run(answer_turn())
    assert stages(events) == ["analyzing", "thinking", "answering"]
    assert types(events) == [
        "status",
        "status",
        "reasoning.start",
        "reasoning.end",
        "status",
        "done",
    ]


def test_content_then_tool_call_then_content_changes_stage_each_time() -> None:
    steps = [
        *content_steps("Let me check.", 3),
        *tool_steps(0, "call_1", "kb_search", '{"q": "x"}', 3),
        *content_steps("Found it.", 2),
        (chunk(finish="stop"), False),
    ]
    assert stages(run(steps)) == ["analyzing", "answering", "tool_calling", "answering"]


def test_seq_is_dense_and_times_never_go_back() -> None:
    b = builder()
    events = b.begin(None, 50.0)
    # a clock that jumps backwards exactly when something happens
    steps = [
        (*reasoning_steps(1)[0], 60.0),
        (*reasoning_steps(1)[0], 70.0),
        (chunk({"content": "a"}), False, 55.0),
        (*tool_steps(0, "c", "f", '{"a": 1}', 1)[1], 52.0),
        (chunk(finish="tool_calls"), False, 51.0),
        (usage_chunk(), False, 90.0),
    ]
    for c, reasoning, now in steps:
        events += b.on_chunk(c, reasoning, now)
    events += b.finish(45.0)
    assert [e["seq"] for e in events] == list(range(len(events)))
    times = [e["t_ms"] for e in events]
    assert times == sorted(times)
    assert all(t >= 0 for t in times)
    (end,) = of_type(events, "reasoning.end")
    assert end["duration_ms"] == 0
    done = events[-1]
    assert done["total_ms"] == 90
    assert done["reasoning_ms"] == 0
    assert done["total_ms"] >= done["ttft_ms"] >= 0
    assert_valid(events)


def test_durations_come_from_the_observing_calls() -> None:
    b = builder()
    b.begin(None, 5.0)
    assert b.on_chunk(chunk({"role": "assistant", "content": ""}), False, 100.0) == []
    started = b.on_chunk(*reasoning_steps(1)[0], 120.0)
    assert types(started) == ["status", "reasoning.start"]
    assert started[1]["t_ms"] == 120
    assert b.on_chunk(*reasoning_steps(1)[0], 900.0) == []
    ended = b.on_chunk(chunk({"content": "Hi"}), False, 1450.5)
    assert types(ended) == ["reasoning.end", "status"]
    assert ended[0]["duration_ms"] == 1330.5
    assert ended[0]["message"] == "Thought for 1.3 s"
    b.on_chunk(*reasoning_steps(1)[0], 1500.0)  # interleaved thinking resumes
    b.on_chunk(chunk({"content": "!"}), False, 1600.0)
    done = b.finish(1700.0)[-1]
    assert done["ttft_ms"] == 120
    assert done["reasoning_ms"] == 1330.5 + 100
    assert done["total_ms"] == 1700
    assert done["message"] == "Done in 1.7 s"


@pytest.mark.parametrize("mode", [TraceMode.BRIEF, TraceMode.DETAILED])
def test_the_outcome_is_what_the_done_event_says(mode: TraceMode) -> None:
    b = TraceBuilder(mode=mode, zh=False, level="deep", provider="deepseek")
    b.begin(None, 5.0)
    b.on_chunk(*reasoning_steps(1)[0], 120.0)
    b.on_chunk(chunk({"content": "Hi"}), False, 450.0)
    assert b.outcome() is None  # not finished yet
    b.on_chunk(usage_chunk(), False, 460.0)
    done = b.finish(500.0)[-1]
    outcome = b.outcome()
    assert outcome is not None
    assert outcome.usage == done["usage"] and outcome.usage["prompt_tokens"] == 310
    assert (outcome.ttft_ms, outcome.reasoning_ms) == (done["ttft_ms"], done["reasoning_ms"]) == (120, 330)


def test_the_outcome_tells_a_model_that_did_not_reason_from_one_that_reasoned_in_no_time() -> None:
    plain = builder()
    plain.on_completion({"id": "x", "choices": [{"message": {"content": "Hi"}}]}, False, 40.0)
    assert plain.outcome() == (None, 40.0, None)
    thought = builder()
    body = {"id": "x", "choices": [{"message": {"content": "Hi", "reasoning_content": "hmm"}}]}
    thought.on_completion(body, True, 40.0)
    assert thought.outcome() == (None, 40.0, 0.0)  # a whole answer: its thinking took no time here


def test_a_builder_that_is_off_has_no_outcome() -> None:
    b = TraceBuilder(mode=TraceMode.OFF, zh=False, level="none", provider="openai")
    b.on_completion({"id": "x", "choices": [{"message": {"content": "Hi"}}]}, False, 40.0)
    assert b.finish(50.0) == [] and b.outcome() is None


def test_time_is_relative_to_origin() -> None:
    b = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="none", provider="openai", origin_ms=10_000.0)
    assert b.begin(None, 10_003.0)[0]["t_ms"] == 3
    assert b.finish(10_250.7)[-1]["total_ms"] == 250.7


def test_hidden_reasoning_still_marks_thinking() -> None:
    """In hide mode the chunk has no reasoning text left; the flag alone says it carried some."""
    steps = [(chunk({}), True), (chunk({}), True), (chunk({"content": "Answer"}), False)]
    events = run(steps)
    assert stages(events) == ["analyzing", "thinking", "answering"]
    assert events[-1]["reasoning_ms"] > 0


def test_role_only_and_empty_chunks_cause_nothing() -> None:
    b = builder()
    b.begin(None, 0.0)
    assert b.on_chunk(chunk({"role": "assistant", "content": ""}), False, 1.0) == []
    assert b.on_chunk(chunk({}), False, 2.0) == []
    assert b.finish(3.0)[-1]["ttft_ms"] is None


def test_plain_content_chunks_after_answering_cause_nothing() -> None:
    b = builder()
    b.begin(None, 0.0)
    b.on_chunk(chunk({"content": "a"}), False, 1.0)
    for i in range(50):
        assert b.on_chunk(chunk({"content": "more"}), False, 2.0 + i) == []
    assert types(b.on_chunk(*reasoning_steps(1)[0], 60.0)) == ["status", "reasoning.start"]


def test_begin_is_implied_by_a_first_chunk() -> None:
    b = builder(TraceMode.BRIEF)
    events = b.on_chunk(chunk({"content": "x"}), False, 7.0)
    assert stages(events) == ["analyzing", "answering"]
    assert b.begin(None, 8.0) == []


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


# -- tool results from the request -----------------------------------------------------------------


def test_tool_results_matched_by_id_with_name_and_status() -> None:
    events = TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="deep", provider="deepseek").begin(
        request_with_tool_results(), 1.0
    )
    results = of_type(events, "tool_result")
    assert [(r["id"], r["name"], r["status"], r["output_summary"]) for r in results] == [
        ("call_kb", "kb_search", "success", "3 items"),
        ("call_wx", "get_weather", "error", "error: upstream timeout"),
    ]
    assert results[1]["message"] == "Tool result: get_weather (error)"
    assert_valid(events)


def test_only_the_last_assistant_turn_is_answered() -> None:
    request = request_with_tool_results()
    request["messages"] = request["messages"][:4]  # the old turn is now the last one
    (result,) = of_type(builder().begin(request, 0.0), "tool_result")
    assert (result["id"], result["name"], result["output_summary"]) == ("call_old", "old_tool", "old result")


@pytest.mark.parametrize("request_body", [None, {}, {"messages": "x"}, {"messages": [{"role": "user"}]}])
def test_requests_without_tool_results(request_body: dict[str, Any] | None) -> None:
    assert types(builder().begin(request_body, 0.0)) == ["status"]


def test_long_tool_output_is_summarized_not_copied() -> None:
    request = request_with_tool_results()
    request["messages"][-3]["content"] = "Refund policy. " * 200 + TOOL_OUTPUT_SENTINEL
    events = builder().begin(request, 0.0)
    summary = of_type(events, "tool_result")[0]["output_summary"]
    assert summary.endswith("… (3,025 chars)")
    assert TOOL_OUTPUT_SENTINEL not in orjson.dumps(events).decode()


# -- modes and languages ---------------------------------------------------------------------------


def test_brief_keeps_stages_tool_names_and_done() -> None:
    events = run(tool_turn(), mode=TraceMode.BRIEF, request=request_with_tool_results())
    assert types(events) == ["status", "status", "status", "tool_call.start", "tool_call.start", "done"]
    assert [e["name"] for e in of_type(events, "tool_call.start")] == ["kb_search", "get_weather"]
    assert events[-1]["reasoning_ms"] > 0  # still measured, just not itemized
    assert_valid(events)


def test_brief_keeps_errors() -> None:
    b = builder(TraceMode.BRIEF)
    b.begin(None, 0.0)
    b.on_chunk(chunk({"content": "partial"}), False, 5.0)
    events = b.on_error("Upstream stream broke", 9.0, code="upstream_stream_error") + b.finish(9.5)
    assert types(events) == ["error", "done"]
    assert events[0] | {"t_ms": 0} == {
        "type": "error",
        "seq": 2,
        "t_ms": 0,
        "message": "Upstream stream broke",
        "code": "upstream_stream_error",
    }
    assert events[1]["finish_reason"] is None
    assert "usage" not in events[1]
    assert_valid(events)


def test_off_emits_nothing() -> None:
    b = builder(TraceMode.OFF)
    assert b.begin(request_with_tool_results(), 0.0) == []
    assert all(b.on_chunk(c, r, 1.0) == [] for c, r in tool_turn())
    assert b.on_error("x", 2.0) == []
    assert b.finish(3.0) == []
    assert b.on_completion({"choices": []}, False, 4.0) == []


def test_chinese_messages() -> None:
    assert prefers_chinese("zh-CN,zh;q=0.9,en;q=0.8")
    events = run(tool_turn(), zh=True, request=request_with_tool_results())
    messages = [e["message"] for e in events]
    assert messages[0] == "正在分析请求"
    assert "正在思考" in messages
    assert "正在调用工具" in messages
    assert "调用工具：kb_search" in messages
    assert "工具结果：get_weather（失败）" in messages
    assert stages(run(answer_turn(), zh=True)) == ["analyzing", "thinking", "answering"]
    assert "正在整理答案" in [e["message"] for e in run(answer_turn(), zh=True)]
    assert messages[-1].startswith("完成，用时")


def test_english_messages() -> None:
    messages = [e["message"] for e in run(answer_turn())]
    assert messages[:2] == ["Analyzing the request", "Thinking"]
    assert "Writing the answer" in messages


# -- done ------------------------------------------------------------------------------------------


def test_done_carries_the_last_usage_and_identity() -> None:
    steps = [*content_steps("hi", 1), (chunk(finish="stop"), False)]
    last = chunk(finish=None)
    last["usage"] = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    events = run([*steps, (usage_chunk(completion_tokens=7), False), (last, False)])
    done = events[-1]
    assert done["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert (done["finish_reason"], done["level"], done["provider"], done["method"]) == (
        "stop",
        "deep",
        "deepseek",
        "params",
    )


def test_finish_is_idempotent_and_ends_the_trace() -> None:
    b = builder()
    b.begin(None, 0.0)
    b.on_chunk(*reasoning_steps(1)[0], 1.0)
    b.on_chunk(
        chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{"}}]}),
        False,
        2.0,
    )
    first = b.finish(3.0)
    assert types(first) == ["tool_call.end", "done"]
    assert first[0]["input_summary"] == "{ (1 chars, not valid JSON)"
    assert b.finish(4.0) == []
    assert b.on_chunk(chunk({"content": "late"}), False, 5.0) == []
    assert b.on_error("late", 6.0) == []


# -- safety: what never appears --------------------------------------------------------------------


@pytest.mark.parametrize("mode", [TraceMode.BRIEF, TraceMode.DETAILED])
@pytest.mark.parametrize("zh", [False, True])
def test_no_reasoning_system_prompt_or_secret_in_any_event(mode: TraceMode, zh: bool) -> None:
    streams = [tool_turn(), answer_turn()]
    serialized = b""
    for steps in streams:
        events = run(steps, mode=mode, zh=zh, request=request_with_tool_results())
        assert_valid(events)
        serialized += comment_frames(events) + event_frames(events, ChunkMeta("i", "m", 1))
    completion = completion_body(with_tools=True)
    b = TraceBuilder(mode=mode, zh=zh, level="deep", provider="deepseek")
    events = b.begin(request_with_tool_results(), 0.0) + b.on_completion(completion, True, 9.0)
    serialized += orjson.dumps(events)
    for sentinel in (REASONING_SENTINEL, SYSTEM_SENTINEL, SECRET):
        assert sentinel.encode() not in serialized


def test_every_event_of_every_scenario_validates() -> None:
    b = builder()
    events = b.begin(request_with_tool_results(), 0.0)
    for i, (c, r) in enumerate([*tool_turn(), *content_steps("tail", 2)]):
        events += b.on_chunk(c, r, float(i))
    events += b.on_error("boom", 100.0) + b.finish(101.0)
    assert set(types(events)) == ALL_TYPES
    assert_valid(events)


def test_schema_rejects_unknown_fields_and_types() -> None:
    good = {"type": "status", "seq": 0, "t_ms": 1.5, "message": "x", "stage": "thinking"}
    assert VALIDATOR.is_valid(good)
    assert not VALIDATOR.is_valid(good | {"reasoning": "leak"})
    assert not VALIDATOR.is_valid(good | {"stage": "sleeping"})
    assert not VALIDATOR.is_valid(good | {"type": "thread.run"})


# -- non-stream ------------------------------------------------------------------------------------


def completion_body(*, with_tools: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "reasoning_content": REASONING_SENTINEL}
    if with_tools:
        message["content"] = None
        message["tool_calls"] = [
            {"id": "call_kb", "type": "function", "function": {"name": "kb_search", "arguments": KB_ARGS}},
            {
                "id": "call_wx",
                "type": "function",
                "function": {"name": "get_weather", "arguments": WEATHER_ARGS},
            },
        ]
    else:
        message["content"] = "EU orders can be refunded within 30 days."
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1761725211,
        "model": "deepseek-chat",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if with_tools else "stop"}
        ],
        "usage": {"prompt_tokens": 310, "completion_tokens": 120, "total_tokens": 430},
    }


@pytest.mark.parametrize(("with_tools", "stream"), [(True, tool_turn), (False, answer_turn)])
@pytest.mark.parametrize("mode", [TraceMode.BRIEF, TraceMode.DETAILED])
def test_completion_gives_the_same_events_as_the_stream(
    with_tools: bool, stream: Any, mode: TraceMode
) -> None:
    b = builder(mode)
    from_completion = b.begin(request_with_tool_results(), 0.0) + b.on_completion(
        completion_body(with_tools=with_tools), True, 800.0
    )
    from_stream = run(stream(), mode=mode, request=request_with_tool_results())
    assert types(from_completion) == types(from_stream)
    assert stages(from_completion) == stages(from_stream)
    summaries = [e.get("input_summary") for e in from_completion]
    assert summaries == [e.get("input_summary") for e in from_stream]
    done = from_completion[-1]
    assert (done["finish_reason"], done["usage"]["total_tokens"], done["total_ms"]) == (
        "tool_calls" if with_tools else "stop",
        430,
        800,
    )
    assert b.finish(900.0) == []
    assert_valid(from_completion)


def test_completion_reasoning_flag_alone_marks_thinking() -> None:
    body = completion_body(with_tools=False)
    del body["choices"][0]["message"]["reasoning_content"]  # hidden before the trace saw it
    b = builder()
    assert "thinking" in stages(b.on_completion(body, True, 5.0))
    b = builder()
    assert "thinking" not in stages(b.on_completion(body, False, 5.0))


# -- delivery --------------------------------------------------------------------------------------


def test_comment_frames_bytes() -> None:
    events = [
        {"type": "status", "seq": 0, "t_ms": 1, "message": "Analyzing", "stage": "analyzing"},
        {"type": "error", "seq": 1, "t_ms": 2.5, "message": "line1\nline2\r"},
    ]
    assert comment_frames(events) == (
        b': trace {"type":"status","seq":0,"t_ms":1,"message":"Analyzing","stage":"analyzing"}\n\n'
        b': trace {"type":"error","seq":1,"t_ms":2.5,"message":"line1\\nline2\\r"}\n\n'
    )
    assert comment_frames([]) == b""


def test_event_frames_bytes() -> None:
    meta = ChunkMeta(id="chatcmpl-7a1", model="deepseek-chat", created=1761725211)
    event = {"type": "error", "seq": 3, "t_ms": 9, "message": "boom", "code": "x"}
    frame = event_frames([event], meta)
    assert frame == (
        b'event: trace\ndata: {"id":"chatcmpl-7a1","object":"chat.completion.chunk","created":1761725211,'
        b'"model":"deepseek-chat","choices":[],"trace":{"type":"error","seq":3,"t_ms":9,"message":"boom",'
        b'"code":"x"}}\n\n'
    )
    data = orjson.loads(frame.split(b"data: ", 1)[1])
    assert "error" not in data  # openai SDKs raise on a top-level error key


def test_frames_have_one_line_per_event() -> None:
    events = run(tool_turn(), request=request_with_tool_results())
    comments = comment_frames(events)
    assert comments.count(b"\n\n") == len(events)
    assert all(line.startswith(b": trace {") for line in comments.split(b"\n\n") if line)
    frames = event_frames(events, ChunkMeta("i", "m", 1)).split(b"\n\n")[:-1]
    assert len(frames) == len(events)
    for frame, event in zip(frames, events, strict=True):
        name, data = frame.split(b"\n")
        assert name == b"event: trace"
        assert orjson.loads(data.removeprefix(b"data: "))["trace"] == event


def test_chunk_meta() -> None:
    assert chunk_meta(chunk()) == ChunkMeta(id="chatcmpl-7a1", model="deepseek-chat", created=1761725211)
    assert chunk_meta({"id": "x"}) == ChunkMeta(id="x", model="", created=0)
    assert chunk_meta({"choices": []}) is None


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


def test_documented_examples_validate_and_cover_every_type() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "trace-events.md").read_text(encoding="utf-8")
    examples = [orjson.loads(line) for line in doc.splitlines() if line.startswith('{"type":')]
    assert_valid(examples)
    # (The review gate's own events are made by proxy.review: tests/review/test_trace.py.)
    review_types = {"review.request", "review.decision"}
    assert {e["type"] for e in examples} == ALL_TYPES | review_types
    assert {ref["$ref"].removeprefix("#/$defs/") for ref in SCHEMA["oneOf"]} == ALL_TYPES | review_types


def test_whitespace_between_reasoning_and_a_tool_call_is_not_answering() -> None:
    builder = TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="standard", provider="minimax")
    events = builder.begin(None, 0.0)

    def delta(d: dict[str, object], finish: str | None = None) -> dict[str, object]:
        return {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}],
        }

    events += builder.on_chunk(delta({"reasoning_content": "hmm"}), True, 1.0)
    events += builder.on_chunk(delta({"content": "\n\n"}), False, 2.0)
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    events += builder.on_chunk(delta({"tool_calls": [call]}), False, 3.0)
    events += builder.on_chunk(delta({}, "tool_calls"), False, 4.0)
    events += builder.finish(5.0)
    stages = [e["stage"] for e in events if e["type"] == "status"]
    assert stages == ["analyzing", "thinking", "tool_calling"]


def test_replay_outcome_and_tool_durations_from_the_replay_store() -> None:
    b = builder(TraceMode.DETAILED)
    b.note_replay({"restored": 2, "placeholder": 0, "missing": 1}, {"call_kb": 1234.56})
    body = {
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "call_kb", "function": {"name": "kb_search"}},
                    {"id": "call_wx", "function": {"name": "get_weather"}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_kb", "content": "[1, 2]"},
            {"role": "tool", "tool_call_id": "call_wx", "content": "rain"},
        ]
    }
    events = b.begin(body, 3.0)
    assert [(e["type"], e.get("stage")) for e in events] == [
        ("status", "analyzing"),
        ("status", "replaying"),
        ("tool_result", None),
        ("tool_result", None),
    ]
    assert events[1]["restored"] == 2 and events[1]["missing"] == 1
    assert events[2]["duration_ms"] == 1234.6
    assert "duration_ms" not in events[3]  # not remembered: no figure rather than a guess
    for event in events:
        assert VALIDATOR.is_valid(event), event
    # Without a replay outcome there is no replaying status.
    assert [e.get("stage") for e in builder().begin(body, 0.0)][:2] == ["analyzing", None]


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


def test_deep_usage_from_the_upstream_does_not_break_the_trace() -> None:
    deep: Any = {}
    for _ in range(600):
        deep = {"d": deep}
    b = builder()
    b.begin(None, 0.0)
    body = usage_chunk()
    body["usage"] = {"prompt_tokens": 1, "details": deep}
    events = b.on_chunk(body, False, 1.0) + b.finish(2.0)
    comment_frames(events)  # would raise if the usage could not be written
    assert of_type(events, "done")[0]["usage"]["prompt_tokens"] == 1


# -- numbers in events -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.0, 0), (12.0, 12), (12.04, 12), (12.06, 12.1), (0.96, 1), (52.5, 52.5), (1999.96, 2000), (3.25, 3.2)],
)
def test_times_are_rounded_to_a_tenth_and_whole_ones_are_integers(value: float, expected: float) -> None:
    shown = _ms(value)
    assert shown == expected
    assert isinstance(shown, int) == float(expected).is_integer()


def test_rounding_agrees_with_rounding_to_one_decimal_everywhere() -> None:
    for step in range(0, 200_000, 7):
        value = step / 97
        shown = _ms(value)
        assert abs(shown - value) <= 0.05 + 1e-9
        assert abs(shown - round(value, 1)) < 0.1 + 1e-9  # (a tie may fall either way)
        assert len(repr(shown).partition(".")[2]) <= 1


def test_a_time_that_is_not_finite_is_passed_through() -> None:
    assert _ms(float("inf")) == float("inf")


@pytest.mark.parametrize("ms", [0.0, 0.49, 0.5, 1.5, 2.5, 17.5, 374.6, 999.4, 999.5])
def test_duration_text_shows_the_same_digits_as_a_float_format(ms: float) -> None:
    assert _duration_text(ms) == (f"{ms:.0f} ms", f"{ms:.0f} 毫秒")


def test_a_builder_keeps_no_instance_dict() -> None:
    # Its attributes are slots (see TraceBuilder.__slots__): a subclass that forgets its own
    # __slots__ brings the per-instance dict back.
    from proxy.core.stream.taps import AnswerKeepingTraceBuilder, TappedTraceBuilder

    kwargs: dict[str, Any] = {"zh": False, "level": "deep", "provider": "deepseek"}
    builders = [
        TraceBuilder(mode=TraceMode.DETAILED, **kwargs),
        TappedTraceBuilder(client_mode=TraceMode.BRIEF, tap=lambda events: None, **kwargs),
        AnswerKeepingTraceBuilder(
            output=lambda messages: None, client_mode=TraceMode.BRIEF, tap=lambda events: None, **kwargs
        ),
    ]
    for builder in builders:
        assert not hasattr(builder, "__dict__"), type(builder).__name__
