"""The trace builder's state machine (proxy.core.stream.trace): stages, reasoning, tool results from
the request, modes and languages, `done`, non-stream completions, and the events' encodings
(proxy.core.stream.trace_format). Tool-call fragments and their arguments: test_tool_args.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.core.controls import TraceMode, prefers_chinese
from proxy.core.stream.trace import TraceBuilder
from proxy.core.stream.trace_format import (
    ChunkMeta,
    TraceFrames,
    chunk_meta,
    comment_frames,
    duration_text,
    event_frames,
    ms,
)
from tests.core.stream.trace_steps import (
    ALL_TYPES,
    KB_ARGS,
    REASONING_SENTINEL,
    SCHEMA,
    SECRET,
    SYSTEM_SENTINEL,
    TOOL_OUTPUT_SENTINEL,
    VALIDATOR,
    WEATHER_ARGS,
    answer_turn,
    assert_valid,
    builder,
    chunk,
    content_steps,
    of_type,
    reasoning_steps,
    run,
    stages,
    tool_steps,
    tool_turn,
    types,
    usage_chunk,
)


def request_with_tool_results() -> dict[str, Any]:
    return {
        "model": "deepseek-flash",
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


def test_the_outcome_names_the_finish_reason_and_the_tool_calls_in_order() -> None:
    """For the sessions (proxy.sessions): read at the end, with no trace event watched."""
    b = builder()
    calls = [
        {"index": 0, "id": "a", "type": "function", "function": {"name": "shell", "arguments": "{}"}},
        {"index": 1, "id": "b", "type": "function", "function": {"name": "edit", "arguments": "{}"}},
    ]
    body = {
        "id": "x",
        "choices": [{"message": {"content": None, "tool_calls": calls}, "finish_reason": "tool_calls"}],
    }
    b.on_completion(body, False, 40.0)
    outcome = b.outcome()
    assert outcome is not None
    assert (outcome.finish_reason, outcome.tools) == ("tool_calls", ("shell", "edit"))


def test_the_outcome_tells_a_model_that_did_not_reason_from_one_that_reasoned_in_no_time() -> None:
    plain = builder()
    plain.on_completion({"id": "x", "choices": [{"message": {"content": "Hi"}}]}, False, 40.0)
    assert plain.outcome() == (None, 40.0, None, False, False, None, ())
    thought = builder()
    body = {"id": "x", "choices": [{"message": {"content": "Hi", "reasoning_content": "hmm"}}]}
    thought.on_completion(body, True, 40.0)
    # a whole answer: its thinking took no time here
    assert thought.outcome() == (None, 40.0, 0.0, False, False, None, ())


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
        "model": "deepseek-flash",
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
    meta = ChunkMeta(id="chatcmpl-7a1", model="deepseek-flash", created=1761725211)
    event = {"type": "error", "seq": 3, "t_ms": 9, "message": "boom", "code": "x"}
    frame = event_frames([event], meta)
    assert frame == (
        b'event: trace\ndata: {"id":"chatcmpl-7a1","object":"chat.completion.chunk","created":1761725211,'
        b'"model":"deepseek-flash","choices":[],"trace":{"type":"error","seq":3,"t_ms":9,"message":"boom",'
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
    assert chunk_meta(chunk()) == ChunkMeta(id="chatcmpl-7a1", model="deepseek-flash", created=1761725211)
    assert chunk_meta({"id": "x"}) == ChunkMeta(id="x", model="", created=0)
    assert chunk_meta({"choices": []}) is None


def test_trace_frames_hold_event_frames_until_the_stream_names_itself() -> None:
    events = [{"type": "status", "t_ms": 1.0}, {"type": "status", "t_ms": 2.0}]
    comments = TraceFrames(event_format=False)
    assert comments.frames(events) == comment_frames(events)  # (comments need no identity)
    assert comments.rest() == b""
    frames = TraceFrames(event_format=True)
    assert frames.frames(events[:1]) == b""  # held: no chunk has named the stream yet
    assert frames.start({"choices": []}) == b""  # a chunk without an id names nothing
    assert frames.meta is None
    named = ChunkMeta(id="chatcmpl-7a1", model="deepseek-flash", created=1761725211)
    assert frames.start(chunk()) == event_frames(events[:1], named)
    assert frames.frames(events[1:]) == event_frames(events[1:], named)
    assert frames.rest() == b""  # nothing is held twice
    unnamed = TraceFrames(event_format=True)
    unnamed.frames(events)
    assert unnamed.rest() == event_frames(events, ChunkMeta(id="", model="", created=0))
    assert unnamed.rest() == b""


def test_documented_examples_validate_and_cover_every_type() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "trace-events.md").read_text(encoding="utf-8")
    examples = [orjson.loads(line) for line in doc.splitlines() if line.startswith('{"type":')]
    assert_valid(examples)
    # (The review gate's own events are made by proxy.review: tests/review/test_trace.py; `note`
    # only when a front door adds one: test_a_front_doors_notes_follow_analyzing below; `warning`
    # only when the reasoning ate the answer: test_trace_outcome.py.)
    other_types = {"review.request", "review.decision", "note", "warning"}
    assert {e["type"] for e in examples} == ALL_TYPES | other_types
    assert {ref["$ref"].removeprefix("#/$defs/") for ref in SCHEMA["oneOf"]} == ALL_TYPES | other_types


@pytest.mark.parametrize("mode", [TraceMode.BRIEF, TraceMode.DETAILED])
def test_a_front_doors_notes_follow_analyzing(mode: TraceMode) -> None:
    builder = TraceBuilder(mode=mode, zh=True, level="deep", provider="deepseek")
    builder.add_note(
        "Hosted tools left out: web_search", "已省略：web_search", code="omitted_tools", tools=["web_search"]
    )
    events = builder.begin(None, 1.0)
    assert [e["type"] for e in events] == ["status", "note"]
    assert events[1]["message"] == "已省略：web_search" and events[1]["tools"] == ["web_search"]
    assert_valid(events)
    off = TraceBuilder(mode=TraceMode.OFF, zh=False, level="deep", provider="deepseek")
    off.add_note("x", "x", code="omitted_tools", tools=[])
    assert off.begin(None, 1.0) == []


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
    shown = ms(value)
    assert shown == expected
    assert isinstance(shown, int) == float(expected).is_integer()


def test_rounding_agrees_with_rounding_to_one_decimal_everywhere() -> None:
    for step in range(0, 200_000, 7):
        value = step / 97
        shown = ms(value)
        assert abs(shown - value) <= 0.05 + 1e-9
        assert abs(shown - round(value, 1)) < 0.1 + 1e-9  # (a tie may fall either way)
        assert len(repr(shown).partition(".")[2]) <= 1


def test_a_time_that_is_not_finite_is_passed_through() -> None:
    assert ms(float("inf")) == float("inf")


@pytest.mark.parametrize("ms", [0.0, 0.49, 0.5, 1.5, 2.5, 17.5, 374.6, 999.4, 999.5])
def test_duration_text_shows_the_same_digits_as_a_float_format(ms: float) -> None:
    assert duration_text(ms) == (f"{ms:.0f} ms", f"{ms:.0f} 毫秒")


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
    for made in builders:
        assert not hasattr(made, "__dict__"), type(made).__name__
