"""The Responses bridge's transcoder (proxy.core.protocols.responses.stream): the chat pipeline's SSE
output, in any split, → Responses events a client reads (each one its openai-python type), trace
comments passed through, terminal events for every way a stream ends, tool names mapped back to
namespaced and custom (freeform) tools, and the non-stream `Response` object."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai.types.responses import Response

from proxy.core.protocols.door_stream import CUT_SHORT
from proxy.core.protocols.responses.stream import ResponsesTranscoder
from proxy.core.protocols.responses.tools import ToolName
from proxy.core.stream.chunk_template import joined
from proxy.core.stream.trace_format import comment_frames
from tests.core.protocols.responses.test_events import (
    EVENT,
    SIGNATURE,
    USAGE,
    Sealer,
    call,
    check_order,
    chunk,
    ids,
    make_frame,
    no_extras,
    validate,
)
from tests.helpers import known_pieces, pipeline_pieces

STREAMS = Path(__file__).resolve().parents[3] / "fixtures" / "streams"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------
def data(value: Any) -> bytes:
    """One `data:` frame as the pipeline writes it."""
    return b"data: " + orjson.dumps(value) + b"\n\n"


def trace(**event: Any) -> bytes:
    return comment_frames([event])


DONE = b"data: [DONE]\n\n"


def transcoder(
    summary: bool = False,
    tool_names: dict[str, ToolName] | None = None,
    seal: Sealer | None = None,
    templates: bool = True,
    socket: bool = False,
) -> ResponsesTranscoder:
    # templates=False: the reference, every chunk decoded and written through the general path
    return ResponsesTranscoder(
        make_frame(summary),
        seal=seal or Sealer(),
        new_id=ids(),
        tool_names=tool_names,
        templates=templates,
        socket=socket,
    )


def parse(out: bytes) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The output's events (in order) and its comment lines; fails on anything else."""
    assert out.endswith(b"\n\n") or out == b""
    events: list[dict[str, Any]] = []
    comments: list[bytes] = []
    for block in out.split(b"\n\n")[:-1]:
        lines = block.split(b"\n")
        if all(line.startswith(b":") for line in lines):
            comments.extend(lines)
            continue
        assert len(lines) == 2, block
        head, body = lines
        assert head.startswith(b"event: ") and body.startswith(b"data: "), block
        event = orjson.loads(body.removeprefix(b"data: "))
        assert head.removeprefix(b"event: ").decode() == event["type"]
        events.append(event)
    return events, comments


def whole(stream: bytes, **options: Any) -> bytes:
    coder = transcoder(**options)
    return coder.feed(stream) + coder.close()


def in_pieces(pieces: Iterable[bytes], **options: Any) -> tuple[bytes, ResponsesTranscoder]:
    coder = transcoder(**options)
    return b"".join(coder.feed(piece) for piece in pieces) + coder.close(), coder


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"].removeprefix("response.") for e in events]


TOOL_NAMES = {
    "crm__lookup": ToolName("function", "lookup", "crm"),
    "apply_patch": ToolName("custom", "apply_patch"),
}


def realistic_stream() -> bytes:
    """A DeepSeek-like reasoning turn as the pipeline writes it: reasoning, text, two tool calls
    (one namespaced), usage, trace comments interleaved, `[DONE]`."""
    return b"".join(
        [
            trace(type="request", model="deepseek-v4-pro", level="high"),
            data(chunk(role="assistant", content="")),
            data(chunk(reasoning_content="The user wants ")),
            b": keep-alive\n\n",
            data(chunk(reasoning_content="the weather in Zürich ✓, ")),
            data({**chunk(reasoning_content="and the account."), "model": "deepseek-v4-pro"}),
            trace(type="first_token", ms=412.5),
            data(chunk(content="Checking both…")),
            data(chunk(tool_calls=[{**call(0, "call_a", "get_weather", "")[0], "extra_content": SIGNATURE}])),
            data(chunk(tool_calls=call(0, args='{"city":'))),
            trace(type="tool_call", name="get_weather"),
            data(chunk(tool_calls=call(0, args='"Zürich"}'))),
            data(chunk(tool_calls=call(1, "call_b", "crm__lookup", '{"id":'))),
            data(chunk(tool_calls=call(1, args="42}"))),
            data(chunk(finish="tool_calls")),
            data({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": USAGE}),
            trace(type="summary", reasoning_chars=56, tokens={"in": 120, "out": 80}),
            DONE,
        ]
    )


# --------------------------------------------------------------------------------------------------
# A realistic stream, in every split
# --------------------------------------------------------------------------------------------------
def test_realistic_stream_events_and_trace_comments() -> None:
    stream = realistic_stream()
    out = whole(stream, tool_names=TOOL_NAMES)
    events, comments = parse(out)
    validate(events)
    check_order(events)
    assert types(events) == [
        "created",
        "in_progress",
        "output_item.added",  # reasoning
        "content_part.added",
        "reasoning_text.delta",
        "reasoning_text.delta",
        "reasoning_text.delta",
        "reasoning_text.done",
        "content_part.done",
        "output_item.done",  # the reasoning, done when the text began (sealed with no call)
        "output_item.added",  # message
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",  # call_a
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "output_item.added",  # call_b (crm.lookup)
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    # The trace comments and the keep-alive pass through, in place; nothing else is a comment.
    assert comments == [line.removesuffix(b"\n\n") for line in stream.split(b"\n\n") if line.startswith(b":")]
    assert len(comments) == 5 and all(c.startswith((b": trace {", b": keep-alive")) for c in comments)
    first_delta = out.index(b"event: response.reasoning_text.delta")
    keep_alive = out.index(b": keep-alive")
    assert first_delta < keep_alive < out.index(b"event: response.reasoning_text.delta", first_delta + 1)
    assert out.index(b': trace {"type":"summary"') > out.index(b"event: response.output_item.done")
    assert b"[DONE]" not in out
    assert not any(e["type"].startswith("response.trace") for e in events)

    response = events[-1]["response"]
    no_extras(Response.model_validate(response))
    assert response["usage"]["input_tokens"] == 120 and response["usage"]["output_tokens"] == 80
    reasoning, message, weather, lookup = response["output"]
    assert reasoning["content"] == [
        {"type": "reasoning_text", "text": "The user wants the weather in Zürich ✓, and the account."}
    ]
    assert message["content"][0]["text"] == "Checking both…"
    assert (weather["name"], weather["call_id"], weather["arguments"]) == (
        "get_weather",
        "call_a",
        '{"city":"Zürich"}',
    )
    assert "namespace" not in weather
    assert (lookup["name"], lookup.get("namespace"), lookup["arguments"]) == ("lookup", "crm", '{"id":42}')


def test_every_byte_split_gives_the_same_bytes() -> None:
    stream = realistic_stream()
    reference = whole(stream, tool_names=TOOL_NAMES)
    events, _ = parse(reference)
    assert events[-1]["type"] == "response.completed"
    for cut in range(len(stream) + 1):
        out, coder = in_pieces([stream[:cut], stream[cut:]], tool_names=TOOL_NAMES)
        assert out == reference, f"split at byte {cut}: {stream[max(0, cut - 20) : cut + 20]!r}"
        assert coder.final == events[-1]["response"]


def test_byte_by_byte_gives_the_same_bytes() -> None:
    stream = realistic_stream()
    reference = whole(stream, tool_names=TOOL_NAMES)
    out, coder = in_pieces([stream[i : i + 1] for i in range(len(stream))], tool_names=TOOL_NAMES)
    assert out == reference
    assert coder.final is not None and coder.final["status"] == "completed"
    # Split into three at a few uneven points too (a multibyte character cut in two included).
    zurich = stream.index("ü".encode()) + 1
    for cuts in [(1, zurich), (zurich, len(stream) - 3), (7, len(stream) - 1)]:
        a, b = cuts
        assert in_pieces([stream[:a], stream[a:b], stream[b:]], tool_names=TOOL_NAMES)[0] == reference


def test_the_summary_form_splits_alike() -> None:
    stream = realistic_stream()
    reference = whole(stream, summary=True)
    events, _ = parse(reference)
    validate(events)
    check_order(events)
    assert "reasoning_summary_text.delta" in types(events)
    for cut in range(len(stream) + 1):
        assert in_pieces([stream[:cut], stream[cut:]], summary=True)[0] == reference


# --------------------------------------------------------------------------------------------------
# Opening and ending
# --------------------------------------------------------------------------------------------------
def test_first_feed_opens_the_response_even_with_only_a_comment() -> None:
    coder = transcoder()
    out = coder.feed(trace(type="request", model="m"))
    events, comments = parse(out)
    assert types(events) == ["created", "in_progress"]
    assert [e["sequence_number"] for e in events] == [0, 1]
    assert comments == [b': trace {"type":"request","model":"m"}']
    assert out.index(b"response.in_progress") < out.index(b": trace")
    validate(events)
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["id"] == "resp_1"
    # ...and only once.
    assert coder.feed(b": keep-alive\n\n") == b": keep-alive\n\n"
    assert coder.feed(b"") == b""


def test_first_feed_opens_the_response_with_half_a_frame() -> None:
    coder = transcoder()
    events, comments = parse(coder.feed(b'data: {"cho'))
    assert types(events) == ["created", "in_progress"] and comments == []


def run_stream(*frames_: bytes, close: bool = True, **options: Any) -> tuple[list[dict[str, Any]], Any]:
    coder = transcoder(**options)
    out = b"".join(coder.feed(f) for f in frames_)
    if close:
        out += coder.close()
    events, _ = parse(out)
    validate(events)
    return events, coder


def test_stream_without_done_fails_on_close() -> None:
    events, coder = run_stream(
        data(chunk(reasoning_content="thinking")),
        data(chunk(content="Hello")),
        data(chunk(content=" wor", finish="stop")),  # even a finish reason: no [DONE], no end
    )
    assert types(events)[-1] == "failed"
    assert not any(e["type"] in ("response.completed", "response.incomplete") for e in events)
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": CUT_SHORT}
    assert coder.final == events[-1]["response"]
    assert coder.final["status"] == "failed"
    no_extras(Response.model_validate(coder.final))


def test_stream_cut_mid_tool_call_fails_and_the_call_is_never_done() -> None:
    events, coder = run_stream(
        data(chunk(tool_calls=call(0, "call_rm", "shell", '{"cmd":"rm -rf /tmp/'))),
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"argu',  # torn
    )
    check_order(events)
    assert types(events)[-1] == "failed"
    assert "function_call_arguments.done" not in types(events)
    assert "output_item.done" not in types(events)
    (item,) = coder.final["output"]
    assert item["status"] == "incomplete" and item["arguments"] == '{"cmd":"rm -rf /tmp/'


def test_close_without_any_output_fails() -> None:
    coder = transcoder()
    events, _ = parse(coder.close())
    validate(events)
    assert types(events) == ["created", "in_progress", "failed"]
    assert coder.close() == b""


def test_error_chunk_fails() -> None:
    error = {
        "error": {
            "message": "upstream stream broke",
            "type": "upstream_error",
            "code": "upstream_stream_error",
        }
    }
    events, coder = run_stream(data(chunk(content="Hal")), data(error), data(chunk(content="more")), DONE)
    check_order(events)
    assert types(events)[-1] == "failed"
    assert sum(e["type"] in TERMINAL for e in events) == 1
    assert coder.final["error"] == {"code": "server_error", "message": "upstream stream broke"}
    assert [i["status"] for i in coder.final["output"]] == ["incomplete"]
    no_extras(Response.model_validate(coder.final))


def test_length_finish_is_incomplete_with_max_output_tokens() -> None:
    events, coder = run_stream(
        data(chunk(reasoning_content="long thought")),
        data(chunk(content="Partial ans")),
        data(chunk(finish="length", usage=USAGE)),
        DONE,
    )
    check_order(events)
    assert types(events)[-1] == "incomplete"
    assert coder.final["status"] == "incomplete"
    assert coder.final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [i["status"] for i in coder.final["output"]] == ["completed", "incomplete"]
    no_extras(Response.model_validate(coder.final))


def test_nothing_after_the_end() -> None:
    coder = transcoder()
    coder.feed(data(chunk(content="ok", finish="stop")) + DONE)
    assert coder.final is not None and coder.final["status"] == "completed"
    final = coder.final
    assert coder.feed(data(chunk(content="late")) + DONE) == b""
    assert coder.close() == b""
    assert coder.final is final


# --------------------------------------------------------------------------------------------------
# Tool names: namespaced functions and custom (freeform) tools
# --------------------------------------------------------------------------------------------------
PATCH = '*** Begin Patch\n*** Add File: hello.txt\n+Grüße, "world"\n*** End Patch\n'


def test_namespaced_function_call_gets_its_name_and_namespace_back() -> None:
    names = {"ns__tool": ToolName("function", "tool", "ns")}
    events, coder = run_stream(
        data(chunk(tool_calls=call(0, "call_n", "ns__tool", '{"a"'))),
        data(chunk(tool_calls=call(0, args=":1}"))),
        data(chunk(finish="tool_calls")),
        DONE,
        tool_names=names,
    )
    check_order(events)
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert (added["item"]["name"], added["item"]["namespace"]) == ("tool", "ns")
    (item,) = coder.final["output"]
    assert item == {
        "id": "fc_0",
        "type": "function_call",
        "call_id": "call_n",
        "name": "tool",
        "arguments": '{"a":1}',
        "status": "completed",
        "namespace": "ns",
    }
    no_extras(Response.model_validate(coder.final))
    # Without the mapping the chat name goes out as it is.
    _, plain = run_stream(
        data(chunk(tool_calls=call(0, "call_n", "ns__tool", "{}"))), data(chunk(finish="tool_calls")), DONE
    )
    assert plain.final["output"][0]["name"] == "ns__tool" and "namespace" not in plain.final["output"][0]


def test_custom_tool_call_unwraps_its_input() -> None:
    arguments = orjson.dumps({"input": PATCH}).decode()
    pieces = [arguments[:3], arguments[3:11], arguments[11:30], arguments[30:]]
    frames_ = [data(chunk(tool_calls=call(0, "call_p", "apply_patch", pieces[0])))]
    frames_ += [data(chunk(tool_calls=call(0, args=piece))) for piece in pieces[1:]]
    events, coder = run_stream(
        *frames_, data(chunk(finish="tool_calls", usage=USAGE)), DONE, tool_names=TOOL_NAMES
    )
    assert types(events) == [
        "created",
        "in_progress",
        "output_item.added",
        "custom_tool_call_input.delta",
        "custom_tool_call_input.done",
        "output_item.done",
        "completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added, delta, done, item_done = events[2:6]
    assert added["item"]["type"] == "custom_tool_call" and added["item"]["name"] == "apply_patch"
    assert added["item"]["input"] == ""  # nothing of a half-received input
    assert delta["delta"] == PATCH and done["input"] == PATCH
    assert delta["item_id"] == done["item_id"] == added["item"]["id"] == item_done["item"]["id"]
    assert delta["output_index"] == done["output_index"] == 0
    # The raw JSON arguments never reach the client.
    assert not any(e["type"] == "response.function_call_arguments.delta" for e in events)
    assert item_done["item"] == {
        "id": "fc_0",
        "type": "custom_tool_call",
        "call_id": "call_p",
        "name": "apply_patch",
        "input": PATCH,
    }
    assert coder.final["output"] == [item_done["item"]]
    no_extras(Response.model_validate(coder.final))


def test_custom_and_function_calls_side_by_side() -> None:
    patch_args = orjson.dumps({"input": PATCH}).decode()
    events, coder = run_stream(
        data(chunk(reasoning_content="Patch, then look up.")),
        data(chunk(tool_calls=call(0, "call_p", "apply_patch", patch_args[:9]))),
        data(chunk(tool_calls=call(1, "call_l", "crm__lookup", '{"id":'))),
        data(chunk(tool_calls=call(0, args=patch_args[9:]))),
        data(chunk(tool_calls=call(1, args="7}"))),
        data(chunk(finish="tool_calls")),
        DONE,
        tool_names=TOOL_NAMES,
    )
    output = coder.final["output"]
    assert [(i["type"], i.get("name")) for i in output] == [
        ("reasoning", None),
        ("custom_tool_call", "apply_patch"),
        ("function_call", "lookup"),
    ]
    assert output[1]["input"] == PATCH
    assert (output[2]["namespace"], output[2]["arguments"]) == ("crm", '{"id":7}')
    done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert done == [i["id"] for i in output]
    no_extras(Response.model_validate(coder.final))


# --------------------------------------------------------------------------------------------------
# The non-stream form
# --------------------------------------------------------------------------------------------------
COMPLETION = {
    "id": "chatcmpl-9",
    "object": "chat.completion",
    "model": "deepseek-v4-pro",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "reasoning_content": "Two lookups are needed.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_p",
                        "type": "function",
                        "function": {
                            "name": "apply_patch",
                            "arguments": orjson.dumps({"input": PATCH}).decode(),
                        },
                    },
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": USAGE,
}


def test_completion_gives_a_response_object() -> None:
    seal = Sealer()
    coder = transcoder(seal=seal, tool_names=TOOL_NAMES)
    assert coder.final is None
    body = coder.completion(orjson.dumps(COMPLETION))
    response = orjson.loads(body)
    no_extras(Response.model_validate(response))
    assert coder.final == response
    assert response["status"] == "completed" and response["id"] == coder.response_id == "resp_1"
    assert [i["type"] for i in response["output"]] == ["reasoning", "function_call", "custom_tool_call"]
    reasoning, weather, patch = response["output"]
    assert reasoning["content"][0]["text"] == "Two lookups are needed."
    assert reasoning["encrypted_content"] == "sealed:rs_0:23"
    assert seal.facts[0].call_ids == ("call_a",)  # the call known as the reasoning was done: the first
    assert (weather["call_id"], weather["arguments"]) == ("call_a", '{"city":"Paris"}')
    assert patch["input"] == PATCH
    assert response["usage"]["total_tokens"] == 200


def test_completion_matches_the_stream_of_the_same_answer() -> None:
    message = COMPLETION["choices"][0]["message"]  # type: ignore[index]
    calls = message["tool_calls"]
    stream = b"".join(
        [
            data(chunk(reasoning_content=message["reasoning_content"])),
            *(
                data(chunk(tool_calls=call(i, c["id"], c["function"]["name"], c["function"]["arguments"])))
                for i, c in enumerate(calls)
            ),
            data(chunk(finish="tool_calls")),
            data({"choices": [], "usage": USAGE}),
            DONE,
        ]
    )
    streamed = transcoder(tool_names=TOOL_NAMES)
    streamed.feed(stream)
    non_stream = transcoder(tool_names=TOOL_NAMES)
    non_stream.completion(orjson.dumps(COMPLETION))
    assert non_stream.final == streamed.final


@pytest.mark.parametrize(
    "body", [b"<html>502 Bad Gateway</html>", b"", b"[1, 2]", b'"text"', b'{"choices": ']
)
def test_completion_of_a_non_object_fails_without_raising(body: bytes) -> None:
    coder = transcoder()
    response = orjson.loads(coder.completion(body))
    assert response["status"] == "failed"
    assert response["error"]["code"] == "server_error" and response["error"]["message"]
    assert response["output"] == []
    assert coder.final == response
    no_extras(Response.model_validate(response))


def test_completion_error_and_no_choice_fail() -> None:
    coder = transcoder()
    error = {"error": {"message": "model overloaded", "code": "rate_limit_exceeded"}}
    response = orjson.loads(coder.completion(orjson.dumps(error)))
    assert response["status"] == "failed"
    assert response["error"] == {"code": "rate_limit_exceeded", "message": "model overloaded"}
    no_choice = orjson.loads(transcoder().completion(b'{"id": "x", "choices": []}'))
    assert no_choice["status"] == "failed"
    no_extras(Response.model_validate(no_choice))


def test_completion_with_a_null_error_field_is_an_answer() -> None:
    """Some OpenAI-compatible servers send `"error": null` beside a normal answer; the stream path
    treats a null error as none, and the non-stream form must agree."""
    body = {**COMPLETION, "error": None}
    response = orjson.loads(transcoder().completion(orjson.dumps(body)))
    assert response["status"] == "completed"
    assert [i["type"] for i in response["output"]] == ["reasoning", "function_call", "function_call"]
    no_extras(Response.model_validate(response))


def test_custom_tool_call_cut_short_is_never_done() -> None:
    arguments = orjson.dumps({"input": PATCH}).decode()
    events, coder = run_stream(
        data(chunk(tool_calls=call(0, "call_p", "apply_patch", arguments[:20]))), tool_names=TOOL_NAMES
    )
    assert types(events) == ["created", "in_progress", "output_item.added", "failed"]
    assert events[2]["item"]["input"] == ""
    assert coder.final["status"] == "failed"
    no_extras(Response.model_validate(coder.final))


@pytest.mark.parametrize("summary", [False, True])
def test_the_text_delta_fast_path_writes_what_the_general_path_writes(summary: bool) -> None:
    """ResponsesTranscoder writes plain text deltas directly; byte for byte what the encoder's
    general path gives for the same stream (text with quotes, escapes, non-ASCII, empty pieces)."""
    pieces = ["", 'Zürich "quoted"', "\\ back", "tab\there", "\u2028line", "✓ done"]
    chunks = [data({"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": ""}}]})]
    chunks += [
        data({"choices": [{"index": 0, "delta": {"reasoning_content": p, "content": None}}]}) for p in pieces
    ]
    chunks += [data({"choices": [{"index": 0, "delta": {"reasoning": p}}]}) for p in pieces]
    chunks += [data({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in pieces]
    chunks += [data({"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]}), DONE]
    stream = b"".join(chunks)
    fast = whole(stream, summary=summary)
    general = whole(stream, summary=summary, templates=False)
    assert fast == general
    events, _ = parse(fast)
    for event in events:
        EVENT.validate_python(event)


RUN_TEXTS = ["word ", "Zürich ", '"q" ', 'a",', "\\ ", "<tag> ", "✓ "] * 10


def runs_stream() -> bytes:
    """Long runs of same-shaped chunks (how upstreams stream): reasoning, a trace comment, text."""
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def piece(field: str, text: str) -> bytes:
        other = "content" if field == "reasoning_content" else "reasoning_content"
        delta = {field: text, other: None}
        return data(
            {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
        )

    return b"".join(
        [
            data(
                {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": ""}}]}
            ),
            *(piece("reasoning_content", t) for t in RUN_TEXTS),
            trace(type="status", seq=1, t_ms=1, message="Writing the answer", stage="answering"),
            *(piece("content", t) for t in RUN_TEXTS),
            data({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": USAGE}),
            DONE,
        ]
    )


def test_runs_of_more_of_the_same_read_by_template_match_the_decoded_path() -> None:
    """Long runs of same-shaped chunks are read by their ChunkTemplate when fed in big pieces; the
    output is the same as decoding every event, however it is cut."""
    stream, texts = runs_stream(), RUN_TEXTS
    in_runs = whole(stream)
    assert in_runs == in_pieces([stream[i : i + 1] for i in range(len(stream))])[0]
    assert in_runs == in_pieces([stream[i : i + 777] for i in range(0, len(stream), 777)])[0]
    assert in_runs == whole(stream, templates=False)  # (no template is ever learned: every event decoded)
    events, comments = parse(in_runs)
    assert len(comments) == 1
    for event in events:
        EVENT.validate_python(event)
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "".join(texts)


@pytest.mark.parametrize("summary", [False, True])
@pytest.mark.parametrize("name", ["runs", "realistic"])
def test_runs_handed_over_with_their_texts_match_the_decoded_path(name: str, summary: bool) -> None:
    """The pipeline's runs handed over with their texts (feed_pieces, as StreamPipeline.feed_runs
    gives them) are written from the texts: the same bytes as decoding every event, wherever the
    runs fall against the transcoder's own state. The realistic stream is cut at every 3rd byte;
    the long runs stream (27 kB, 144 events) at every line end, the bytes around it and every 29th
    byte (tests.helpers.split_points): a run is handed over as whole events, so where a cut falls
    is a matter of which event it falls in and whether at its boundary, and each of the runs'
    events is still cut ~6 times, at an offset that moves along the run."""
    from tests.helpers import split_points

    stream = runs_stream() if name == "runs" else realistic_stream()
    fast = whole(stream, summary=summary)
    cuts = split_points(stream, 29) if name == "runs" else range(0, len(stream) + 1, 3)
    for cut in cuts:
        coder = transcoder(summary)
        out = coder.feed_pieces(known_pieces(stream[:cut])) + coder.feed_pieces(known_pieces(stream[cut:]))
        assert out + coder.close() == fast, cut
    # (no template is ever learned: every event decoded)
    assert fast == whole(stream, summary=summary, templates=False)


@pytest.mark.parametrize("name", sorted(p.name for p in STREAMS.glob("*.sse")))
def test_what_the_pipeline_hands_over_gives_what_its_bytes_give(name: str) -> None:
    raw = (STREAMS / name).read_bytes()
    events = [i + 2 for i in range(len(raw)) if raw.startswith(b"\n\n", i)][:-1]
    for cuts in ([], events, list(range(13, len(raw), 97))):
        pieces = pipeline_pieces(raw, cuts)
        handed, plain = transcoder(), transcoder()
        out = b"".join(handed.feed_pieces(piece) for piece in pieces) + handed.close()
        assert out == b"".join(plain.feed(joined(piece)) for piece in pieces) + plain.close()


# --------------------------------------------------------------------------------------------------
# The WebSocket mode's form: the same events, each its JSON and a newline
# --------------------------------------------------------------------------------------------------
def data_lines(sse: bytes) -> list[bytes]:
    """The JSON of each event of the SSE form, in order (its `data:` lines)."""
    return [line.removeprefix(b"data: ") for line in sse.split(b"\n") if line.startswith(b"data: ")]


def socket_lines(out: bytes) -> list[bytes]:
    assert out.endswith(b"\n") and b"\n\n" not in out, out[-200:]
    return out.split(b"\n")[:-1]


@pytest.mark.parametrize("summary", [False, True])
@pytest.mark.parametrize("name", ["runs", "realistic"])
def test_the_socket_form_is_the_sse_forms_event_json_at_every_split(name: str, summary: bool) -> None:
    """`socket=True` writes each event's JSON (byte for byte the SSE form's `data:` line) and a
    newline, comments left out, wherever the pipeline's output is cut and however it is handed
    over (bytes, or runs with their texts); its terminal `Response` is the SSE form's. The realistic
    stream is cut at every byte; the long runs stream (27 kB, 144 events, and every cut transcodes
    it twice: ~100 s of the suite at every byte) at every line end, the bytes around it and every
    29th byte (tests.helpers.split_points), so each of its events is still cut ~6 times, at an
    offset that moves along the run; the decoder's own tests keep every byte."""
    from tests.helpers import split_points

    stream = runs_stream() if name == "runs" else realistic_stream()
    reference = transcoder(summary, TOOL_NAMES)
    expected = data_lines(reference.feed(stream) + reference.close())
    assert len(expected) > 20 and all(line.startswith(b'{"type":"response.') for line in expected)
    cuts: Iterable[int] = split_points(stream, 29) if name == "runs" else range(len(stream) + 1)
    for cut in cuts:
        out, coder = in_pieces(
            [stream[:cut], stream[cut:]], summary=summary, tool_names=TOOL_NAMES, socket=True
        )
        assert socket_lines(out) == expected, f"split at byte {cut}"
        assert coder.final == reference.final
        handed = transcoder(summary, TOOL_NAMES, socket=True)
        out = handed.feed_pieces(known_pieces(stream[:cut])) + handed.feed_pieces(known_pieces(stream[cut:]))
        assert socket_lines(out + handed.close()) == expected, f"handed over, split at byte {cut}"


@pytest.mark.parametrize("name", sorted(p.name for p in STREAMS.glob("*.sse")))
def test_recorded_streams_give_the_same_event_json_in_the_socket_form(name: str) -> None:
    raw = (STREAMS / name).read_bytes()
    events = [i + 2 for i in range(len(raw)) if raw.startswith(b"\n\n", i)][:-1]
    for cuts in ([], events, list(range(13, len(raw), 97))):
        pieces = pipeline_pieces(raw, cuts)
        sse, socket = transcoder(), transcoder(socket=True)
        expected = data_lines(b"".join(sse.feed_pieces(piece) for piece in pieces) + sse.close())
        out = b"".join(socket.feed_pieces(piece) for piece in pieces) + socket.close()
        assert socket_lines(out) == expected
        assert socket.final == sse.final


def test_the_socket_form_of_a_stream_cut_short_ends_failed() -> None:
    stream = realistic_stream()
    cut = stream.index(b"Checking")
    coder = transcoder(socket=True)
    lines = socket_lines(coder.feed(stream[:cut]) + coder.close())
    assert orjson.loads(lines[-1])["type"] == "response.failed"
    assert coder.final is not None and coder.final["status"] == "failed"
