"""The composed stream pipeline: decoder → reasoning → trace → encoder, and the non-stream path."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from proxy.core.controls import ReasoningField, TraceFormat, TraceMode
from proxy.core.errors import ProxyError
from proxy.core.stream.completion import process_completion
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder
from tests.helpers import STREAM_FIXTURES, THINK, sse_frames, stream_pipeline

STREAMS = STREAM_FIXTURES
pipeline = stream_pipeline


def run(p: StreamPipeline, pieces: list[bytes]) -> bytes:
    out = p.begin({"messages": []}, 0.0)
    for piece in pieces:
        out += p.feed(piece, 1.0)
    return out + p.finish(2.0)


def data_of(raw: bytes) -> list[Any]:
    out = []
    for frame in sse_frames(raw):
        for line in frame.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                out.append(orjson.loads(line[6:]))
    return out


@pytest.mark.parametrize(
    "name", ["deepseek-reasoner.sse", "minimax-m2-inline-think.sse", "ollama-reasoning.sse"]
)
def test_same_output_at_every_split(name: str) -> None:
    raw = (STREAMS / name).read_bytes()
    whole = run(pipeline(TraceMode.DETAILED), [raw])
    for i in range(1, len(raw)):
        assert run(pipeline(TraceMode.DETAILED), [raw[:i], raw[i:]]) == whole, i


def test_unchanged_chunks_keep_their_bytes_and_trace_rides_in_comments() -> None:
    raw = (STREAMS / "deepseek-reasoner.sse").read_bytes()
    out = run(pipeline(TraceMode.BRIEF), [raw])
    without_trace = b"".join(f + b"\n\n" for f in sse_frames(out) if not f.startswith(b": trace "))
    assert without_trace == b"".join(f + b"\n\n" for f in sse_frames(raw))
    traces = [orjson.loads(f[len(b": trace ") :]) for f in sse_frames(out) if f.startswith(b": trace ")]
    assert [t["type"] for t in traces][-1] == "done"
    assert sse_frames(out)[-1] == b"data: [DONE]"
    assert sse_frames(out)[-2].startswith(b": trace ") and b'"done"' in sse_frames(out)[-2]


def test_event_format_frames_are_chunk_shaped_with_the_stream_identity() -> None:
    raw = (STREAMS / "deepseek-reasoner.sse").read_bytes()
    out = run(pipeline(TraceMode.DETAILED, TraceFormat.EVENT), [raw])
    chunks = data_of(out)
    first = next(c for c in chunks if "trace" not in c)
    traces = [c for c in chunks if "trace" in c]
    assert traces and traces[0]["trace"]["type"] == "status"  # held until the stream's id was known
    for t in traces:
        assert (t["id"], t["model"], t["created"]) == (first["id"], first["model"], first["created"])
        assert t["choices"] == [] and "error" not in t
    assert b"event: trace\n" in out and b"event: thread." not in out


def test_minimax_tags_never_reach_content() -> None:
    raw = (STREAMS / "minimax-m2-inline-think.sse").read_bytes()
    out = run(pipeline(None), [raw[i : i + 7] for i in range(0, len(raw), 7)])
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in data_of(out) if c.get("choices"))
    reasoning = "".join(
        c["choices"][0]["delta"].get("reasoning_content") or "" for c in data_of(out) if c.get("choices")
    )
    assert "<think>" not in content and "</think>" not in content and "think>" not in content
    assert reasoning


def completion(content: str, **message: Any) -> bytes:
    return orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, **message},
                    "finish_reason": "stop",
                }
            ],
        }
    )


def test_non_stream_unchanged_answer_keeps_its_bytes() -> None:
    body = completion("plain answer")
    assert process_completion(body, reasoning=THINK, trace=None, request_body=None, now_ms=1.0) is body


def test_non_stream_hide_with_implicit_open_keeps_the_answer() -> None:
    options = ReasoningOptions(tags=("think",), implicit_open=True, hide=True)
    out = orjson.loads(
        process_completion(
            completion("I think</think>answer"), reasoning=options, trace=None, request_body=None, now_ms=1
        )
    )
    message = out["choices"][0]["message"]
    assert message["content"] == "answer"
    assert "reasoning_content" not in message and "reasoning" not in message


def test_non_stream_gets_trace_array_and_both_fields() -> None:
    options = ReasoningOptions(tags=("think",), output_field=ReasoningField.BOTH)
    trace = TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="deep", provider="p")
    out = orjson.loads(
        process_completion(
            completion("<think>why</think>because"),
            reasoning=options,
            trace=trace,
            request_body=None,
            now_ms=3,
        )
    )
    message = out["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"], message["reasoning"]) == (
        "because",
        "why",
        "why",
    )
    types = [e["type"] for e in out["trace"]]
    assert types[0] == "status" and "reasoning.start" in types and types[-1] == "done"
    assert all("why" not in orjson.dumps(e).decode() for e in out["trace"])


def test_non_json_non_stream_body_passes_through() -> None:
    for body in (b"<html>busy</html>", b"[1,2]"):
        assert process_completion(body, reasoning=THINK, trace=None, request_body=None, now_ms=0) == body


# -- X-Reasoning: hide fails closed ------------------------------------------------------------------

SECRET_REASONING = "SECRET-REASONING-7c2e"
HIDE = ReasoningOptions(tags=("think",), hide=True)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def hostile_chunks() -> list[bytes]:
    """Chunks carrying reasoning that a fail-open pipeline forwarded as they came."""
    delta = b'"delta":{"reasoning_content":"' + SECRET_REASONING.encode() + b'"}'
    surrogate = b'"delta":{"reasoning_content":"' + SECRET_REASONING.encode() + b' \\ud800"}'
    return [
        b'data: {"id":"c","choices":[{"index":0,' + delta + b'}],"error":null}\n\n',
        b'data: {"id":"c","choices":[{"index":0,' + surrogate + b"}]}\n\n",
        b'data: {"id":"c","deep":' + nested(300).encode() + b',"choices":[{"index":0,' + delta + b"}]}\n\n",
        b'data: {"id":"c","deep":' + nested(1100).encode() + b',"choices":[{"index":0,' + delta + b"}]}\n\n",
        b'data: {"id":"c","choices":[{"index":0,' + delta + b"}]\n\n",  # cut short: not JSON
        b"data: <think>" + SECRET_REASONING.encode() + b"</think>\n\n",
    ]


@pytest.mark.parametrize("index", range(len(hostile_chunks())))
@pytest.mark.parametrize("mode", [None, TraceMode.DETAILED])
def test_hide_never_forwards_reasoning_at_any_split(index: int, mode: TraceMode | None) -> None:
    answer = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"the answer"}}]}\n\n'
    raw = hostile_chunks()[index] + answer + b"data: [DONE]\n\n"
    whole = run(pipeline(mode, options=HIDE), [raw])
    assert SECRET_REASONING.encode() not in whole
    assert b"the answer" in whole and whole.endswith(b"data: [DONE]\n\n")
    for i in range(1, len(raw), 7 if len(raw) > 2000 else 1):
        assert run(pipeline(mode, options=HIDE), [raw[:i], raw[i:]]) == whole, i


def test_hide_keeps_what_it_can_clean_and_says_what_it_withheld() -> None:
    chunks = hostile_chunks()
    out = run(pipeline(TraceMode.DETAILED, options=HIDE), [chunks[0], chunks[1], chunks[2], chunks[4]])
    kept = data_of(b"".join(f + b"\n\n" for f in sse_frames(out) if not f.startswith(b":")))
    # the error-keyed chunk keeps its null error, the surrogate and deep chunks their other fields
    assert [c.get("error", "absent") for c in kept[:3]] == [None, "absent", "absent"]
    assert kept[2]["deep"] == orjson.loads(nested(300))
    assert all("reasoning_content" not in c["choices"][0]["delta"] for c in kept[:3])
    assert b": withheld an upstream event" in out
    errors = [orjson.loads(f[8:]) for f in sse_frames(out) if f.startswith(b": trace ") and b'"error"' in f]
    assert [e["code"] for e in errors if e["type"] == "error"] == ["reasoning_not_removable"]


def test_a_split_surrogate_pair_in_content_reaches_the_client() -> None:
    raw = (
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"smile \\ud83d"}}]}\n\n'
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"\\ude00!"}}]}\n\n'
    )
    out = run(pipeline(None, options=HIDE), [raw])
    assert b"\\ud83d" in out and b"\\ude00" in out


def test_show_forwards_error_chunks_as_they_came() -> None:
    raw = hostile_chunks()[0]
    assert raw in run(pipeline(None, options=THINK), [raw])


def completion_with(extra: bytes) -> bytes:
    message = (
        b'"message":{"role":"assistant","content":"the answer","reasoning_content":"'
        + SECRET_REASONING.encode()
    )
    return b'{"id":"x",' + extra + b'"choices":[{"index":0,' + message + b'"},"finish_reason":"stop"}]}'


@pytest.mark.parametrize(
    "body",
    [
        completion_with(b'"error":null,'),
        completion_with(b'"note":"\\ud800",'),
        completion_with(b'"deep":' + nested(300).encode() + b","),
    ],
)
def test_non_stream_hide_removes_reasoning_from_odd_answers(body: bytes) -> None:
    out = process_completion(body, reasoning=HIDE, trace=None, request_body=None, now_ms=1)
    assert SECRET_REASONING.encode() not in out
    assert json.loads(out)["choices"][0]["message"]["content"] == "the answer"


@pytest.mark.parametrize("body", [completion_with(b'"deep":' + nested(1100).encode() + b","), b"{not json"])
def test_non_stream_hide_refuses_an_answer_it_cannot_clean(body: bytes) -> None:
    with pytest.raises(ProxyError) as info:
        process_completion(body, reasoning=HIDE, trace=None, request_body=None, now_ms=1)
    assert info.value.status == 502
    assert "X-Reasoning: hide" in info.value.message
    # shown, the same answers pass as they came
    assert process_completion(body, reasoning=THINK, trace=None, request_body=None, now_ms=1) == body


def test_non_stream_keeps_integers_above_64_bits() -> None:
    message = b'{"content":"<think>r</think>a"}'
    body = b'{"id":"x","seed":1180591620717411303424,"choices":[{"index":0,"message":' + message + b"}]}"
    out = process_completion(body, reasoning=THINK, trace=None, request_body=None, now_ms=1)
    assert b'"seed":1180591620717411303424' in out


@pytest.mark.parametrize("fmt", list(TraceFormat))
def test_hide_with_lone_surrogates_in_ids_and_tool_names_still_ends_cleanly(fmt: TraceFormat) -> None:
    raw = (
        b'data: {"id":"c\\ud800","model":"m\\udfff",'
        b'"choices":[{"index":0,"delta":{"content":"<think>x"}}]}\n\n'
        b'data: {"id":"c\\ud800","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t\\ud800",'
        b'"function":{"name":"f\\ud800","arguments":"{\\"a\\": \\"\\ud800\\"}"}}]}}]}\n\n'
    )
    whole = run(pipeline(TraceMode.DETAILED, fmt=fmt, options=HIDE), [raw])
    assert whole.endswith(b"data: [DONE]\n\n")
    assert b"tool_call.end" in whole
    for i in range(1, len(raw)):
        assert run(pipeline(TraceMode.DETAILED, fmt=fmt, options=HIDE), [raw[:i], raw[i:]]) == whole, i


@pytest.mark.parametrize("depth", [300, 1100])
def test_detailed_trace_of_deeply_nested_arguments_ends_the_stream_cleanly(depth: int) -> None:
    arguments = '{"a": ' + "[" * depth + "]" * depth + "}"
    call = {"index": 0, "id": "t", "function": {"name": "f", "arguments": arguments}}
    chunk = {
        "id": "c",
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}],
    }
    raw = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
    out = run(pipeline(TraceMode.DETAILED), [raw])
    ends = [
        orjson.loads(f[8:]) for f in sse_frames(out) if f.startswith(b": trace ") and b"tool_call.end" in f
    ]
    assert len(ends) == 1 and ends[0]["input_summary"]
    assert out.endswith(b"data: [DONE]\n\n") and b'"type":"done"' in out
