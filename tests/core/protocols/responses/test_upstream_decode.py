"""The Responses decoder (proxy.core.protocols.responses.upstream_decode): an upstream's Responses stream, cut
anywhere, → the chat chunks a chat client reads (each one its openai-python type), the same answer
whole → a `chat.completion` that agrees with the stream, and every way a stream ends: completed,
incomplete, failed, an error event, or cut off without a terminal event (never complete-looking).

The upstream bytes are the simulated OpenAI's (proxy.mock), driven in-process."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import httpx
import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from proxy.core.protocols.responses.upstream_decode import ResponsesDecoder
from proxy.core.protocols.responses.upstream_items import completion_from_response
from proxy.core.stream.chunk_template import KnownRun
from proxy.mock import create_mock_app
from tests.helpers import assert_run_tells_its_texts

DONE = b"data: [DONE]\n\n"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CLOCK = {**WEATHER, "name": "get_time", "description": "Local time in a city"}
SQL = {"type": "custom", "name": "run_sql", "description": "Run one SQL query"}
# The requests of issue 29 (store off, encrypted reasoning, a summary), and what each exercises.
SCENARIOS: dict[str, dict[str, Any]] = {
    "call": {"tools": [WEATHER], "input": "Café ✓ weather in Paris?"},  # summary + blob + one call
    "text": {"input": 'Say "hi"\nplease, café ✓'},  # summary + blob + text
    "cut": {"input": "weather in Paris?", "max_output_tokens": 20},  # incomplete: max_output_tokens
    "two_calls": {  # deep: two summary parts, two calls
        "tools": [WEATHER, CLOCK],
        "input": "weather in Paris and time in Tokyo",
        "reasoning": {"effort": "high", "summary": "auto"},
    },
    "custom": {"tools": [SQL], "input": "count the users table"},  # a freeform tool's call
}


# --------------------------------------------------------------------------------------------------
# The upstream, and reading the output
# --------------------------------------------------------------------------------------------------
@functools.cache
def upstream(scenario: str, stream: bool, chunk_chars: int = 4) -> bytes:
    """The simulated OpenAI's answer to the scenario's request (cached: one request per test run)."""
    body = {
        "model": "gpt-5.4",
        "reasoning": {"effort": "medium", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "stream": stream,
        **SCENARIOS[scenario],
    }

    async def post() -> bytes:
        transport = httpx.ASGITransport(app=create_mock_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://mock") as client:
            headers = {"X-Mock-Chunk-Chars": str(chunk_chars)}
            response = await client.post("/openai/v1/responses", json=body, headers=headers)
            assert response.status_code == 200, response.text
            return response.content

    return asyncio.run(post())


def upstream_events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: ")]


def final_response(body: bytes) -> dict[str, Any]:
    """The Response object of a stream's terminal event."""
    response: dict[str, Any] = upstream_events(body)[-1]["response"]
    return response


def decode(pieces: list[bytes], include_usage: bool = True) -> bytes:
    decoder = ResponsesDecoder(include_usage=include_usage)
    out = b"".join(decoder.feed(piece) for piece in pieces) + decoder.close()
    assert decoder.finished
    return out


def chunks(out: bytes) -> list[dict[str, Any]]:
    """The output's chunks, each validated (error chunks aside); it ends with one [DONE]."""
    assert out.endswith(DONE) and out.count(DONE) == 1
    frames = out[: -len(DONE)].split(b"\n\n")
    assert frames.pop() == b""
    found = []
    for frame in frames:
        assert frame.startswith(b"data: ") and b"\n" not in frame
        chunk = orjson.loads(frame[6:])
        if "error" not in chunk:
            ChatCompletionChunk.model_validate(chunk)
        found.append(chunk)
    return found


def assemble(found: list[dict[str, Any]]) -> dict[str, Any]:
    """The message the chunks add up to, with its finish reason and usage (as a client builds it)."""
    message: dict[str, Any] = {"content": "", "reasoning_content": "", "reasoning_details": []}
    calls: dict[int, dict[str, Any]] = {}
    finish, usage = None, None
    for chunk in found:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices", ()):
            delta = choice["delta"]
            message["content"] += delta.get("content") or ""
            message["reasoning_content"] += delta.get("reasoning_content") or ""
            message["reasoning_details"] += delta.get("reasoning_details") or []
            for fragment in delta.get("tool_calls") or ():
                call = calls.setdefault(fragment["index"], {"id": None, "name": "", "arguments": ""})
                call["id"] = fragment.get("id") or call["id"]
                call["name"] += fragment.get("function", {}).get("name") or ""
                call["arguments"] += fragment.get("function", {}).get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    assert sorted(calls) == list(range(len(calls)))
    message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"message": message, "finish_reason": finish, "usage": usage}


def from_completion(completion: dict[str, Any]) -> dict[str, Any]:
    """The same view of a `chat.completion`."""
    choice = completion["choices"][0]
    message = choice["message"]
    calls = [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message.get("tool_calls") or ()
    ]
    view = {
        "content": message["content"] or "",
        "reasoning_content": message.get("reasoning_content") or "",
        "reasoning_details": message.get("reasoning_details") or [],
        "tool_calls": calls,
    }
    return {"message": view, "finish_reason": choice["finish_reason"], "usage": completion.get("usage")}


def splits(data: bytes) -> list[list[bytes]]:
    return [[data[:i], data[i:]] for i in range(len(data) + 1)]


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e)) for e in events)


HEAD = {"id": "resp_1", "object": "response", "created_at": 1700000000, "model": "gpt-5.4", "output": []}
CREATED = {"type": "response.created", "response": {**HEAD, "status": "in_progress"}}


def ended(status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": f"response.{status}", "response": {**HEAD, "status": status, "output": output, **extra}}


# --------------------------------------------------------------------------------------------------
# Real streams, cut anywhere
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["call", "text", "cut"])
def test_any_split_gives_the_same_chunks(scenario: str) -> None:
    body = upstream(scenario, True, chunk_chars=16)
    whole = decode([body])
    for pieces in splits(body):
        assert decode(pieces) == whole
    chunks(whole)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_byte_by_byte_and_crlf_give_the_same_chunks(scenario: str) -> None:
    body = upstream(scenario, True)
    whole = decode([body])
    assert decode([body[i : i + 1] for i in range(len(body))]) == whole
    assert decode([body.replace(b"\n", b"\r\n")]) == whole
    assert decode([body.replace(b"\n", b"\r")]) == whole


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_chunks_carry_the_answer(scenario: str) -> None:
    body = upstream(scenario, True)
    final = final_response(body)
    found = chunks(decode([body]))
    assert {c["id"] for c in found} == {final["id"]}
    assert {c["model"] for c in found} == {"gpt-5.4"} and {c["created"] for c in found} == {
        final["created_at"]
    }
    assert found[0]["choices"][0]["delta"]["role"] == "assistant"
    got = assemble(found)
    reasoning = [i for i in final["output"] if i["type"] == "reasoning"]
    summary = [p["text"] for item in reasoning for p in item["summary"]]
    assert got["message"]["reasoning_content"] == "\n\n".join(summary) != ""
    detail = {"type": "reasoning.encrypted", "format": "openai-responses-v1", "index": 0}
    assert got["message"]["reasoning_details"] == [
        {**detail, "id": item["id"], "data": item["encrypted_content"], "summary": summary}
        for item in reasoning
    ]
    messages = [i for i in final["output"] if i["type"] == "message"]
    assert got["message"]["content"] == "".join(p["text"] for m in messages for p in m["content"])
    calls = [i for i in final["output"] if i["type"] in ("function_call", "custom_tool_call")]
    assert got["message"]["tool_calls"] == [
        {
            "id": c["call_id"],
            "name": c["name"],
            "arguments": c.get("arguments") or orjson.dumps({"input": c.get("input")}).decode(),
        }
        for c in calls
    ]
    usage = final["usage"]
    assert got["usage"] == {
        "prompt_tokens": usage["input_tokens"],
        "completion_tokens": usage["output_tokens"],
        "total_tokens": usage["total_tokens"],
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": usage["output_tokens_details"]["reasoning_tokens"]},
    }
    finish = {"call": "tool_calls", "two_calls": "tool_calls", "custom": "tool_calls", "cut": "length"}
    assert got["finish_reason"] == finish.get(scenario, "stop")
    assert found[-1]["choices"] == [] and all(c["choices"] for c in found[:-1])


def decode_pieces(pieces: list[bytes]) -> list[bytes | KnownRun]:
    decoder = ResponsesDecoder(include_usage=True)
    out = [piece for read in pieces for piece in decoder.feed_pieces(read)]
    return [*out, decoder.close()]


@pytest.mark.parametrize("scenario", ["call", "text", "two_calls"])
def test_pieces_are_the_same_chunks_with_each_runs_texts_told_truly(scenario: str) -> None:
    body = upstream(scenario, True, chunk_chars=16)
    whole = decode([body])
    for reads in [[body], *splits(body)[:: max(1, len(body) // 300)]]:
        pieces = decode_pieces(reads)
        assert b"".join(p.data if isinstance(p, KnownRun) else p for p in pieces) == whole
    runs = [p for p in decode_pieces([body]) if isinstance(p, KnownRun)]
    assert runs and sum(len(run.texts) for run in runs) > 5
    for run in runs:
        assert_run_tells_its_texts(run)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_runs_of_deltas_are_taken_from_their_bytes(scenario: str) -> None:
    """A read of many events takes the runs of same-shaped deltas without decoding them (the
    split tests above hold those runs to the bytes of decoding every event)."""
    decoder = ResponsesDecoder(include_usage=True)
    decoder.feed(upstream(scenario, True))
    run = decoder._run
    assert run is not None and run.hits > 0


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_an_upstream_that_escapes_and_spaces_its_json_gives_the_same_answer(scenario: str) -> None:
    """Runs copy each text's JSON token as it came: another spelling of the same text is still
    the same text (Python's json: ASCII escapes, blanks after separators)."""
    events = upstream_events(upstream(scenario, True))
    body = b"".join(
        b"event: %s\ndata: %s\n\n" % (e["type"].encode(), json.dumps(e, ensure_ascii=True).encode())
        for e in events
    )
    assert b"\\u" in body or scenario in ("cut", "two_calls", "custom")
    whole = chunks(decode([body]))
    assert assemble(whole) == assemble(chunks(decode([body[i : i + 1] for i in range(len(body))])))
    assert assemble(whole) == assemble(chunks(decode([upstream(scenario, True)])))


def test_the_scenarios_are_what_they_say() -> None:
    """(The mock's answers exercise what the tests above claim.)"""
    two = final_response(upstream("two_calls", True))
    assert len(two["output"][0]["summary"]) == 2 and [i["type"] for i in two["output"]][1:] == [
        "function_call",
        "function_call",
    ]
    custom = final_response(upstream("custom", True))
    assert custom["output"][-1]["type"] == "custom_tool_call"
    assert final_response(upstream("cut", True))["incomplete_details"] == {"reason": "max_output_tokens"}
    assert "✓" in final_response(upstream("text", True))["output"][-1]["content"][0]["text"]


def test_the_arguments_of_a_custom_call_are_its_input_as_json() -> None:
    got = assemble(chunks(decode([upstream("custom", True)])))
    assert orjson.loads(got["message"]["tool_calls"][0]["arguments"]) == {"input": "count the users table"}


def test_usage_only_when_asked() -> None:
    found = chunks(decode([upstream("text", True)], include_usage=False))
    assert all("usage" not in c for c in found) and found[-1]["choices"][0]["finish_reason"] == "stop"


# --------------------------------------------------------------------------------------------------
# Non-stream
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_whole_response_is_a_chat_completion_that_agrees_with_the_stream(scenario: str) -> None:
    whole = orjson.loads(upstream(scenario, False))
    completion = completion_from_response(whole)
    ChatCompletion.model_validate(completion)
    assert completion["id"] == whole["id"] and completion["object"] == "chat.completion"
    streamed = assemble(chunks(decode([upstream(scenario, True)])))
    got = from_completion(completion)
    # Two requests: the same answer, but each has its own ids (and so its own blobs).
    for view in (got, streamed):
        for call in view["message"]["tool_calls"]:
            assert call.pop("id").startswith("call_")
        details = view["message"]["reasoning_details"]
        assert all(d.pop("id").startswith("rs_") and d.pop("data") for d in details) and details
    assert got == streamed
    # The Response a stream ends with, whole: exactly what the stream decoded to.
    body = upstream(scenario, True)
    assert from_completion(completion_from_response(final_response(body))) == assemble(chunks(decode([body])))


def test_a_failed_response_is_an_error_body() -> None:
    failed = {**HEAD, "status": "failed", "error": {"code": "server_error", "message": "boom"}}
    assert completion_from_response(failed) == {
        "error": {"message": "boom", "type": "upstream_error", "code": "server_error", "param": None}
    }


# --------------------------------------------------------------------------------------------------
# How a stream ends
# --------------------------------------------------------------------------------------------------
def test_a_stream_cut_before_its_terminal_event_ends_with_an_error() -> None:
    body = upstream("call", True, chunk_chars=16)
    terminal = body.rindex(b"event: response.completed")
    for end in range(terminal + len(b"event: response.completed\ndata: ")):
        found = chunks(decode([body[:end]]))
        assert found[-1]["error"]["code"] == "upstream_truncated"
        assert found[-1]["error"]["type"] == "upstream_error"
        assert not any(choice.get("finish_reason") for c in found for choice in c.get("choices", ()))
    cut_in_the_last_event = chunks(decode([body[:-3]]))  # (its JSON whole, not its blank line)
    assert "middle of an event" in cut_in_the_last_event[-1]["error"]["message"]
    assert chunks(decode([body]))[-1]["choices"] == []


def test_response_failed_is_an_error_chunk_after_what_came() -> None:
    delta = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hel"}
    failed = ended("failed", [], error={"code": "rate_limit_exceeded", "message": "slow down"})
    found = chunks(decode([sse(CREATED, delta, failed)]))
    assert found[0]["choices"][0]["delta"]["content"] == "Hel"
    assert found[-1] == {
        "error": {
            "message": "slow down",
            "type": "upstream_error",
            "code": "rate_limit_exceeded",
            "param": None,
        }
    }


@pytest.mark.parametrize(
    "event",
    [
        {"type": "error", "code": "server_error", "message": "upstream broke", "param": None},
        {"type": "error", "error": {"code": "server_error", "message": "upstream broke"}},
    ],
)
def test_an_error_event_is_an_error_chunk(event: dict[str, Any]) -> None:
    decoder = ResponsesDecoder()
    found = chunks(decoder.feed(sse(CREATED, event)))
    assert found == [
        {
            "error": {
                "message": "upstream broke",
                "type": "upstream_error",
                "code": "server_error",
                "param": None,
            }
        }
    ]
    assert decoder.feed(sse(ended("completed", []))) == b"" and decoder.close() == b""


@pytest.mark.parametrize(
    ("reason", "finish"), [("content_filter", "content_filter"), ("max_output_tokens", "length")]
)
def test_incomplete_gives_its_finish_reason(reason: str, finish: str) -> None:
    event = ended("incomplete", [], incomplete_details={"reason": reason})
    assert assemble(chunks(decode([sse(CREATED, event)])))["finish_reason"] == finish
    whole = completion_from_response(event["response"])
    assert whole["choices"][0]["finish_reason"] == finish


def test_an_event_that_is_not_json_ends_the_stream_with_an_error() -> None:
    found = chunks(decode([sse(CREATED) + b"data: {not json\n\n" + sse(ended("completed", []))]))
    assert [c.get("error", {}).get("code") for c in found] == ["upstream_bad_response"]


def test_an_event_too_large_ends_the_stream_with_an_error() -> None:
    decoder = ResponsesDecoder(max_event_bytes=64)
    out = decoder.feed(b"data: " + b"x" * 100)
    assert chunks(out)[-1]["error"]["code"] == "upstream_event_too_large" and decoder.close() == b""


@pytest.mark.parametrize("piece", [1, 7, 40])
def test_an_event_too_large_in_pieces_ends_the_stream_with_an_error(piece: int) -> None:
    """(The start of an event is held until it is whole, never beyond the limit.)"""
    decoder = ResponsesDecoder(max_event_bytes=64)
    data = sse(CREATED) + b"data: " + b"x" * 100 + b"\n\n"
    out = b"".join(decoder.feed(data[i : i + piece]) for i in range(0, len(data), piece))
    assert chunks(out)[-1]["error"]["code"] == "upstream_event_too_large" and decoder.close() == b""


@pytest.mark.parametrize("end", [b"", b"\n"])
def test_an_event_without_its_blank_line_at_the_end_is_a_cut(end: bytes) -> None:
    """(Held until whole, the start of the last event still reaches the SSE decoder at close.)"""
    body = upstream("text", True)
    cut = body[: body.rindex(b"\n\n")] + end
    out = decode([cut])
    assert chunks(out)[-1]["error"]["message"].endswith("ended in the middle of an event.")
    assert decode([cut[i : i + 1] for i in range(len(cut))]) == out


# --------------------------------------------------------------------------------------------------
# Text is never dropped
# --------------------------------------------------------------------------------------------------
def test_text_sent_only_whole_is_delivered() -> None:
    """An upstream that skips deltas: the done events, done items and the final output carry it."""
    at = {"output_index": 1, "content_index": 0}
    events = [
        CREATED,
        {
            "type": "response.reasoning_summary_text.done",
            "output_index": 0,
            "summary_index": 0,
            "text": "Plan.",
        },
        {"type": "response.output_text.delta", **at, "delta": "Hel"},
        {"type": "response.output_text.done", **at, "text": "Hello"},
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {"type": "message", "content": [{"type": "output_text", "text": "Hello world"}]},
        },
    ]
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": '{"a":1}'}
    final = ended("completed", [{"type": "reasoning", "id": "rs_1", "summary": []}, {}, call])
    got = assemble(chunks(decode([sse(*events, final)])))
    assert got["message"]["content"] == "Hello world"
    assert got["message"]["reasoning_content"] == "Plan."
    assert got["message"]["tool_calls"] == [{"id": "call_1", "name": "f", "arguments": '{"a":1}'}]
    assert got["finish_reason"] == "tool_calls"


def test_summary_parts_are_separated_and_raw_text_of_the_same_item_is_not_repeated() -> None:
    def summary(index: int, part: int, text: str) -> dict[str, Any]:
        event = {"type": "response.reasoning_summary_text.delta", "output_index": index}
        return {**event, "summary_index": part, "delta": text}

    raw = {"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "raw"}
    other = {"type": "response.reasoning_text.delta", "output_index": 1, "content_index": 0, "delta": "R"}
    events = [CREATED, summary(0, 0, "A"), summary(0, 0, "a"), summary(0, 1, "B"), raw, other]
    got = assemble(chunks(decode([sse(*events, ended("completed", []))])))
    assert got["message"]["reasoning_content"] == "Aa\n\nB\n\nR"
    assert got["finish_reason"] == "stop"


def test_refusal_and_arguments_before_their_call_are_kept() -> None:
    refusal = {"type": "response.refusal.delta", "output_index": 0, "content_index": 0, "delta": "No."}
    early = {
        "type": "response.function_call_arguments.delta",
        "item_id": "fc_1",
        "output_index": 1,
        "delta": "{}",
    }
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": ""}
    added = {"type": "response.output_item.added", "output_index": 1, "item": call}
    found = chunks(decode([sse(CREATED, refusal, early, added, ended("completed", []))]))
    assert found[0]["choices"][0]["delta"] == {"role": "assistant", "refusal": "No."}
    assert assemble(found)["message"]["tool_calls"] == [{"id": "call_1", "name": "f", "arguments": "{}"}]
