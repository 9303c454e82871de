"""The trace's event writer: events numbered in order, in the trace's language, a tool's title on
its events, and nothing of a tool's output but its summary."""

from __future__ import annotations

from proxy.core.stream.tool_args import ToolCalls
from proxy.core.stream.trace_writer import EventWriter

TITLES = {"get_weather": {"en": "Checking the weather", "zh": "查询天气"}}


def test_events_are_numbered_in_order_and_speak_the_traces_language() -> None:
    english, chinese = EventWriter(False, None), EventWriter(True, None)
    assert [english.reasoning_start(1.0)["seq"], english.reasoning_end(5.0, 4.0)["seq"]] == [0, 1]
    assert english.reasoning_end(5.0, 4.0)["message"].startswith("Thought for")
    assert chinese.reasoning_start(1.0)["message"] == "开始思考"
    assert chinese.error(2.0, "boom", "stream_interrupted") == {
        "type": "error", "seq": 1, "t_ms": 2.0, "message": "出错：boom", "code": "stream_interrupted",
    }  # fmt: skip
    assert "code" not in english.error(2.0, "boom", None)


def test_a_tool_with_a_title_is_shown_by_it() -> None:
    writer = EventWriter(True, TITLES)
    call, _ = ToolCalls().take({"index": 0, "id": "c1", "function": {"name": "get_weather"}}, 0, True)
    start = writer.tool_call_start(0.5, call)
    assert (start["message"], start["title"], start["name"]) == ("查询天气", "查询天气", "get_weather")
    plain = EventWriter(False, None).tool_call_start(0.5, call)
    assert plain["message"] == "Calling tool: get_weather" and "title" not in plain


def test_a_tool_result_says_its_outcome_and_a_summary_only() -> None:
    writer = EventWriter(False, None)
    failed = writer.tool_result(3.0, "c1", "shell", "Error: no such file " + "x" * 5000, 12.0)
    assert failed["status"] == "error" and failed["duration_ms"] == 12.0
    assert len(failed["output_summary"]) < 1000
    assert "duration_ms" not in writer.tool_result(3.0, "c2", "shell", "ok", None)
