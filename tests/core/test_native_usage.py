"""Reading the usage of an answer relayed as it came (proxy.core.native_usage): native Responses,
native Messages and any other model route, streamed or not, whatever the split of its bytes."""

from __future__ import annotations

from itertools import pairwise

import orjson
import pytest

from proxy.core.native_usage import UsageReader
from proxy.core.usage import ESTIMATED, REPORTED, ReasoningTokens, TokenUsage, text_tokens


def sse(*events: tuple[str, dict[str, object]]) -> bytes:
    return b"".join(
        b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n" for name, data in events
    )


RESPONSES_USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 100},
    "output_tokens": 3010,
    "output_tokens_details": {"reasoning_tokens": 3000},
    "total_tokens": 3130,
}
RESPONSES_STREAM = sse(
    ("response.created", {"type": "response.created", "response": {"id": "resp_1", "usage": None}}),
    ("response.reasoning_text.delta", {"type": "response.reasoning_text.delta", "delta": "Think."}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Blue."}),
    (
        "response.completed",
        {
            "type": "response.completed",
            "response": {"id": "resp_1", "model": "gpt-5.4-2026", "usage": RESPONSES_USAGE},
        },
    ),
)
THINKING = "Rayleigh scattering makes short wavelengths scatter more. " * 40
MESSAGES_STREAM = sse(
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "model": "claude-sonnet-4-5",
                "usage": {"input_tokens": 30, "cache_read_input_tokens": 200, "output_tokens": 1},
            },
        },
    ),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
    ),
    *(
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": part},
            },
        )
        for part in (THINKING[:500], THINKING[500:])
    ),
    ("ping", {"type": "ping"}),
    (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2000}},
    ),
    ("message_stop", {"type": "message_stop"}),
)


def read(raw: bytes, cuts: list[int] | None = None, limit: int = 1 << 20) -> UsageReader:
    reader = UsageReader(limit=limit)
    bounds = [0, *(cuts or []), len(raw)]
    for a, b in pairwise(bounds):
        reader.feed(raw[a:b])
    return reader


@pytest.mark.parametrize("step", [1, 7, 64, 10_000])
def test_a_native_responses_stream_gives_the_completed_events_usage(step: int) -> None:
    reader = read(RESPONSES_STREAM, list(range(step, len(RESPONSES_STREAM), step)))
    assert reader.usage() == TokenUsage(120, 3010, 100, ReasoningTokens(3000, REPORTED))
    assert reader.model == "gpt-5.4-2026"


def test_a_native_responses_body_gives_its_usage_and_estimates_without_a_count() -> None:
    body = {"object": "response", "model": "m", "usage": RESPONSES_USAGE, "output": []}
    assert read(orjson.dumps(body)).usage() == TokenUsage(120, 3010, 100, ReasoningTokens(3000, REPORTED))
    # A server that shows its reasoning text but reports no count (vLLM): estimated from the text.
    text = "Let me think about the colour of the sky. " * 20
    uncounted = {
        "object": "response",
        "output": [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": text}]}],
        "usage": {"input_tokens": 10, "output_tokens": 5000},
    }
    assert read(orjson.dumps(uncounted)).usage() == TokenUsage(
        10, 5000, None, ReasoningTokens(text_tokens(text), ESTIMATED)
    )


@pytest.mark.parametrize("step", [1, 13, 10_000])
def test_a_native_messages_stream_gives_anthropics_usage_and_estimates_the_thinking(step: int) -> None:
    reader = read(MESSAGES_STREAM, list(range(step, len(MESSAGES_STREAM), step)))
    # Anthropic's input_tokens leaves out the cache: input is all three; the thinking count is
    # never reported: it is the output that no visible text accounts for (here all of it, since
    # the answer showed only thinking), never below the thinking text's estimate.
    assert reader.usage() == TokenUsage(230, 2000, 200, ReasoningTokens(2000, ESTIMATED))
    assert reader.model == "claude-sonnet-4-5"


def test_a_native_messages_body_gives_its_usage() -> None:
    body = {
        "type": "message",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": THINKING, "signature": "sig"},
            {"type": "text", "text": "Hi"},
        ],
        "usage": {"input_tokens": 30, "cache_creation_input_tokens": 5, "output_tokens": 2000},
    }
    assert read(orjson.dumps(body), [3]).usage() == TokenUsage(
        35, 2000, None, ReasoningTokens(2000 - text_tokens("Hi"), ESTIMATED)
    )
    # Output that the visible text explains: the thinking text's own estimate stands.
    body["usage"] = {"input_tokens": 30, "output_tokens": text_tokens(THINKING) + 1}
    assert read(orjson.dumps(body)).usage() == TokenUsage(
        30, text_tokens(THINKING) + 1, None, ReasoningTokens(text_tokens(THINKING), ESTIMATED)
    )


DROPPED = [
    {"type": "thinking_dropped", "path": "messages.1.content.0", "reason": "prefix_mismatch"},
    {"type": "thinking_mismatch_allowed", "path": "messages.3.content.0", "reason": "prefix_mismatch"},
    {"type": "thinking_dropped", "path": "messages.3.content.1", "reason": "prefix_mismatch"},
]


@pytest.mark.parametrize("stream", [False, True])
def test_the_thinking_blocks_anthropic_says_it_dropped_are_counted(stream: bool) -> None:
    """`input_transformations` on the Message (a body, or a stream's message_start): only the
    blocks it dropped count, not those it let through."""
    usage = {"input_tokens": 3, "output_tokens": 1}
    message = {"type": "message", "model": "claude-fable-5-1", "content": [],
               "input_transformations": DROPPED, "usage": usage}  # fmt: skip
    if stream:
        start = {"type": "message_start", "message": message}
        body = sse(("message_start", start), ("message_stop", {"type": "message_stop"}))
    else:
        body = orjson.dumps(message)
    reader = read(body, [7])
    reader.usage()
    assert reader.thinking_dropped == 2
    message["input_transformations"] = []
    reader = read(orjson.dumps(message))
    reader.usage()
    assert reader.thinking_dropped == 0


def test_redacted_or_summarised_thinking_counts_the_output_no_visible_text_accounts_for() -> None:
    # redacted_thinking has no text, and Claude 4 shows a summary of its thinking but bills all of
    # it: the output tokens minus the visible text's and the tool call's estimate.
    tool_input = {"city": "Paris", "days": 3}
    body = {
        "type": "message",
        "content": [
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": tool_input},
        ],
        "usage": {"input_tokens": 10, "output_tokens": 900},
    }
    visible = text_tokens("Let me check." + orjson.dumps(tool_input).decode())
    assert read(orjson.dumps(body)).usage() == TokenUsage(
        10, 900, None, ReasoningTokens(900 - visible, ESTIMATED)
    )
    summary = "The user wants the weather."
    stream = sse(
        (
            "message_start",
            {"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1}}},
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": summary},
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Let me check."},
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"city": "Paris", '},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '"days": 3}'},
            },
        ),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 1500}},
        ),
    )
    streamed = text_tokens('Let me check.{"city": "Paris", "days": 3}')
    assert read(stream, [40, 41, 300]).usage() == TokenUsage(
        10, 1500, None, ReasoningTokens(1500 - streamed, ESTIMATED)
    )


def test_an_answer_that_did_not_think_has_no_reasoning_from_its_output() -> None:
    body = {
        "type": "message",
        "content": [{"type": "text", "text": "Blue."}],
        "usage": {"input_tokens": 10, "output_tokens": 50},
    }
    assert read(orjson.dumps(body)).usage() == TokenUsage(10, 50, None, None)


def test_reasoning_text_without_a_usage_event_is_still_counted_as_estimated() -> None:
    # A native Responses stream cut before response.completed: what it showed is counted.
    cut = RESPONSES_STREAM[: RESPONSES_STREAM.index(b"event: response.completed")]
    assert read(cut).usage() == TokenUsage(reasoning=ReasoningTokens(text_tokens("Think."), ESTIMATED))
    messages = MESSAGES_STREAM[: MESSAGES_STREAM.index(b"event: message_delta")]
    usage = read(messages).usage()  # (message_start's counts came: its output_tokens is 1)
    assert usage is not None and usage.reasoning is not None and usage.reasoning.source == ESTIMATED


def test_an_estimate_is_never_above_the_output_tokens() -> None:
    body = {
        "type": "message",
        "content": [{"type": "thinking", "thinking": THINKING}],
        "usage": {"input_tokens": 3, "output_tokens": 7},
    }
    usage = read(orjson.dumps(body)).usage()
    assert usage is not None and usage.reasoning == ReasoningTokens(7, ESTIMATED)


def test_a_chat_shaped_answer_on_another_route_gives_its_usage() -> None:
    body = {
        "object": "text_completion",
        "choices": [{"text": "Blue."}],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 900,
            "completion_tokens_details": {"reasoning_tokens": 800},
        },
    }
    assert read(orjson.dumps(body)).usage() == TokenUsage(3, 900, None, ReasoningTokens(800, REPORTED))
    stream = (
        b'data: {"choices":[{"text":"Bl"}],"usage":null}\r\n\r\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9,'
        b'"completion_tokens_details":{"reasoning_tokens":4}}}\r\n\r\ndata: [DONE]\r\n\r\n'
    )
    assert read(stream, [20, 50, 51]).usage() == TokenUsage(3, 9, None, ReasoningTokens(4, REPORTED))


def test_what_it_cannot_read_is_no_usage() -> None:
    assert read(b"").usage() is None
    assert read(b'{"error": {"message": "nope"}}').usage() is None
    assert read(b"not json at all").usage() is None
    assert read(b'data: {"choices": []}\n\ndata: [DONE]\n\n').usage() is None


def test_a_body_past_the_limit_is_not_kept() -> None:
    body = orjson.dumps({"object": "response", "pad": "x" * 5000, "usage": RESPONSES_USAGE})
    assert read(body, [100], limit=1000).usage() is None
    # A stream's events past the limit are skipped one by one; the events after them still count.
    big = sse(("response.output_text.delta", {"type": "response.output_text.delta", "delta": "x" * 5000}))
    assert read(big + RESPONSES_STREAM, [700, 3000], limit=1000).usage() == TokenUsage(
        120, 3010, 100, ReasoningTokens(3000, REPORTED)
    )


def test_a_request_reaches_a_model_when_a_generation_path_s_json_body_names_one() -> None:
    from proxy.core.native_usage import Asked, model_asked

    ask = b'{"model": "gpt-5.4", "prompt": "Hi", "max_tokens": 900}'
    assert model_asked("POST", "/v1/completions", ask) == Asked("gpt-5.4", 900)
    assert model_asked("POST", "/v1/responses/compact", b'{"model": "gpt-5.4"}') == Asked("gpt-5.4", None)
    assert model_asked("POST", "/v1/completions/", ask) == Asked("gpt-5.4", 900)
    assert model_asked("GET", "/v1/completions", b"") is None
    assert model_asked("POST", "/v1/completions", b'{"purpose": "batch"}') is None
    assert model_asked("POST", "/v1/completions", b"--boundary\r\nmodel") is None
    assert model_asked("POST", "/v1/completions", b'{"model": 5}') is None


@pytest.mark.parametrize(
    "path",
    ["/v1/embeddings", "/v1/moderations", "/v1/audio/speech", "/v1/images/generations", "/v1/files"],
)
def test_routes_whose_answers_no_reasoning_writes_are_not_budgeted(path: str) -> None:
    from proxy.core.native_usage import model_asked

    # (and the body is never parsed: the path is judged first)
    assert model_asked("POST", path, b'{"model": "text-embedding-3-small", "input": "Hi"}') is None
