"""Capture (pure): what a response leaves for the replay store, streamed or not, split anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.core.controls import ReasoningField, TraceFormat
from proxy.core.stream.capture import Turn, TurnCollector
from proxy.core.stream.completion import process_completion
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.mock.dialects import Gemini, MiniMax, OpenRouter, count_tokens
from proxy.mock.dialects import Turn as MockTurn
from proxy.mock.scenarios import Depth, Script, ToolCall

FIXTURES = Path(__file__).parents[2] / "fixtures" / "streams"
SCRIPT = Script(
    reasoning="The user wants the weather; I will call the tool.",
    content="",
    tool_calls=(ToolCall("call_w1", "get_weather", '{"city": "Paris"}'), ToolCall("call_w2", "t", "{}")),
)


def streamed(data: bytes, options: ReasoningOptions, pieces: list[bytes] | None = None) -> Turn:
    capture = TurnCollector()
    pipeline = StreamPipeline(
        reasoning=options,
        trace=None,
        trace_format=TraceFormat.COMMENT,
        max_event_bytes=1 << 20,
        capture=capture,
    )
    for piece in pieces if pieces is not None else [data]:
        pipeline.feed(piece, 0.0)
    pipeline.finish(0.0)
    (turn,) = capture.turns()
    return turn


def completed(body: dict[str, Any], options: ReasoningOptions) -> Turn:
    capture = TurnCollector()
    process_completion(
        orjson.dumps(body), reasoning=options, trace=None, request_body=None, now_ms=0.0, capture=capture
    )
    (turn,) = capture.turns()
    return turn


def mock_turn(dialect: Any, body: dict[str, Any]) -> MockTurn:
    return MockTurn(
        id="gen-1",
        created=1,
        model=dialect.default_model,
        body=body,
        depth=Depth.STANDARD,
        include_usage=False,
        chunk_chars=7,
    )


def test_kimi_stream_split_at_every_byte_gives_the_same_turn() -> None:
    data = (FIXTURES / "kimi-k2-thinking-tool-call.sse").read_bytes()
    options = ReasoningOptions()
    whole = streamed(data, options)
    assert whole.first_call_id is not None
    assert whole.reasoning and whole.reasoning.startswith("The user wants the current weather")
    for cut in range(1, len(data)):
        assert streamed(data, options, [data[:cut], data[cut:]]) == whole


def test_openrouter_stream_and_non_stream_capture_the_same_details_exactly() -> None:
    dialect = OpenRouter()
    body = {"reasoning": {"enabled": True}}
    turn = mock_turn(dialect, body)
    counts = count_tokens({}, SCRIPT)
    options = ReasoningOptions()
    stream = streamed(b"".join(dialect.frames(SCRIPT, turn, counts)), options)
    whole = completed(dialect.completion(SCRIPT, turn, counts), options)
    assert stream == whole
    assert whole.details == dialect.message(SCRIPT, turn)["reasoning_details"]
    assert whole.reasoning == SCRIPT.reasoning
    assert whole.first_call_id == "call_w1"


@pytest.mark.parametrize("hide", [False, True])
def test_reasoning_is_captured_even_when_hidden_from_the_client(hide: bool) -> None:
    dialect = OpenRouter()
    turn = mock_turn(dialect, {"reasoning": {"enabled": True}})
    counts = count_tokens({}, SCRIPT)
    options = ReasoningOptions(output_field=ReasoningField.BOTH, hide=hide)
    stream = streamed(b"".join(dialect.frames(SCRIPT, turn, counts)), options)
    assert stream.reasoning == SCRIPT.reasoning
    assert stream.details == dialect.message(SCRIPT, turn)["reasoning_details"]


def test_gemini_signatures_are_kept_per_call_id() -> None:
    dialect = Gemini()
    turn = mock_turn(dialect, {})
    counts = count_tokens({}, SCRIPT)
    stream = streamed(b"".join(dialect.frames(SCRIPT, turn, counts)), ReasoningOptions())
    expected = dialect.message(SCRIPT, turn)["tool_calls"][0]["extra_content"]
    assert stream.signatures == {"call_w1": expected}
    assert completed(dialect.completion(SCRIPT, turn, counts), ReasoningOptions()).signatures == {
        "call_w1": expected
    }


def test_inline_think_content_is_captured_as_the_client_gets_it() -> None:
    dialect = MiniMax()
    script = Script(reasoning="Short thought.", content="Rain in Paris.")
    turn = mock_turn(dialect, {})
    counts = count_tokens({}, script)
    options = ReasoningOptions(tags=("think",))
    stream = streamed(b"".join(dialect.frames(script, turn, counts)), options)
    assert stream.content is not None and stream.content.strip() == "Rain in Paris."  # as sent to the client
    assert stream.reasoning is not None and stream.reasoning.strip() == "Short thought."
    assert stream.first_call_id is None
    assert completed(dialect.completion(script, turn, counts), options) == stream


def test_malformed_chunks_capture_nothing_and_never_raise() -> None:
    capture = TurnCollector()
    for chunk in (
        {"choices": "x"},
        {"choices": [None, {"delta": "x"}, {"delta": {"tool_calls": ["x", {"index": "a"}]}}]},
        {"choices": [{"delta": {"reasoning_details": ["raw", {"index": 0, "text": 5}]}}]},
    ):
        capture.raw_details(chunk)
        capture.chunk(chunk)
    capture.message("weird", {"tool_calls": "x", "reasoning_details": "y", "content": None})
    assert [t.first_call_id for t in capture.turns()] == [None]


def test_any_choice_index_goes_to_its_own_turn_in_order() -> None:
    """The collector's shortcut to the previous chunk's turn is taken only for that very index."""
    capture = TurnCollector()
    capture.reasoning(-1, "minus ")
    capture.chunk({"choices": [{"index": 1, "delta": {"content": "one"}}]})
    capture.chunk({"choices": [{"index": True, "delta": {"content": "bool"}}]})  # not an int: choice 0
    capture.chunk({"choices": [{"index": 1000, "delta": {"content": "a"}}]})
    capture.chunk({"choices": [{"index": 1000, "delta": {"content": "b"}}]})
    capture.reasoning(-1, "one")
    capture.chunk({"choices": [{"delta": {"content": "zero"}}]})
    assert [(t.reasoning, t.content) for t in capture.turns()] == [
        ("minus one", None),
        (None, "one"),
        (None, "boolzero"),
        (None, "ab"),
    ]


def test_first_call_ids_are_what_turns_key_by_while_the_answer_is_under_way() -> None:
    collector = TurnCollector()
    call = {"index": 0, "id": "call_a", "function": {"name": "f", "arguments": "{"}}
    collector.chunk({"choices": [{"index": 0, "delta": {"content": "hi", "tool_calls": [call]}}]})
    collector.chunk({"choices": [{"index": 1, "delta": {"content": "no call"}}]})
    assert collector.first_call_ids() == ["call_a"]
    assert [t.first_call_id for t in collector.turns() if t.first_call_id] == ["call_a"]
