"""The Messages transcoder: the pipeline's chat SSE → Anthropic events, checked against the
Anthropic SDK's own types and stream accumulator, the same whatever the split of the input."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent

from proxy.core.protocols.door_stream import CUT_SHORT
from proxy.core.protocols.messages.events import MessagesEncoder, ThinkingFacts
from proxy.core.protocols.messages.stream import MessagesTranscoder, message_from_completion

EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)


def sign(facts: ThinkingFacts) -> str:
    """A deterministic stand-in for the sealer: it names what the blob would be bound to."""
    return f"sig:{facts.next_call_id}:{len(facts.text)}"


def ids(prefix: str) -> str:
    return f"{prefix}_1"


def transcoder(**kwargs: Any) -> MessagesTranscoder:
    return MessagesTranscoder("msg_1", "deepseek-v4-pro", seal=sign, new_id=ids, **kwargs)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "model": "m", **extra}
    body["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


TOOL_STREAM = b"".join(
    [
        chunk({"role": "assistant", "reasoning_content": "Need the "}),
        chunk({"reasoning_content": "weather \u00e9."}),
        b': trace {"type":"status","stage":"tool_calling"}\n\n',
        chunk({"content": "Let me check."}),
        chunk({"reasoning_content": "Call it."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "call_b", "function": {"name": "get_time", "arguments": "{}"}}
                ]
            }
        ),
        chunk({}, "tool_calls"),
        chunk(
            None,
            usage={
                "prompt_tokens": 30,
                "completion_tokens": 12,
                "prompt_tokens_details": {"cached_tokens": 10},
            },
        ),
        b"data: [DONE]\n\n",
    ]
)


def events_of(raw: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """The events (each `event:` name checked against its data's type) and the comment lines."""
    events, comments = [], []
    for block in raw.decode().split("\n\n"):
        lines = block.splitlines()
        comments += [line for line in lines if line.startswith(":")]
        names = [line[7:] for line in lines if line.startswith("event: ")]
        data = [line[6:] for line in lines if line.startswith("data: ")]
        if data:
            event = json.loads("\n".join(data))
            assert names == [event["type"]]
            events.append(event)
    return events, comments


def accumulate(events: list[dict[str, Any]]) -> Message:
    """The SDK's own accumulator over the events (ping skipped, as the SDK does)."""
    snapshot = None
    bufs: dict[int, bytes] = {}
    for event in events:
        if event["type"] == "ping":
            continue
        snapshot = accumulate_event(
            event=EVENT.validate_python(event), current_snapshot=snapshot, json_bufs=bufs
        )
    assert snapshot is not None
    return snapshot


def test_a_tool_stream_is_the_events_the_sdk_reads() -> None:
    t = transcoder()
    events, comments = events_of(t.feed(TOOL_STREAM) + t.close())
    assert [e["type"] for e in events][:2] == ["message_start", "ping"]
    assert events[-2]["type"] == "message_delta" and events[-1]["type"] == "message_stop"
    assert comments == [': trace {"type":"status","stage":"tool_calling"}']
    message = accumulate(events)
    kinds = [b.type for b in message.content]
    assert kinds == ["thinking", "text", "thinking", "tool_use", "tool_use"]
    first, text, second, call_a, call_b = message.content
    assert (
        first.type == "thinking"
        and first.thinking == "Need the weather \u00e9."
        and first.signature == "sig:None:19"
    )
    assert text.type == "text" and text.text == "Let me check."
    # The thinking right before a call is bound to that call's id.
    assert second.type == "thinking" and second.signature == "sig:call_a:8"
    assert call_a.type == "tool_use" and call_a.id == "call_a" and call_a.input == {"city": "Paris"}
    assert call_b.type == "tool_use" and call_b.name == "get_time" and call_b.input == {}
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == 12 and message.usage.input_tokens == 20
    assert message.usage.cache_read_input_tokens == 10
    assert t.final is not None and t.final["stop_reason"] == "tool_use"
    assert Message.model_validate(t.final).content[3] == call_a


def test_the_signature_delta_comes_just_before_its_block_stops() -> None:
    t = transcoder()
    events, _ = events_of(t.feed(TOOL_STREAM))
    for i, event in enumerate(events):
        if event["type"] == "content_block_delta" and event["delta"]["type"] == "signature_delta":
            assert events[i + 1] == {"type": "content_block_stop", "index": event["index"]}


def test_any_split_gives_the_same_bytes() -> None:
    whole = transcoder()
    expected = whole.feed(TOOL_STREAM) + whole.close()
    for cut in range(1, len(TOOL_STREAM)):
        t = transcoder()
        got = t.feed(TOOL_STREAM[:cut]) + t.feed(TOOL_STREAM[cut:]) + t.close()
        assert got == expected, cut


def test_byte_by_byte_gives_the_same_bytes() -> None:
    whole = transcoder()
    expected = whole.feed(TOOL_STREAM) + whole.close()
    t = transcoder()
    assert b"".join(t.feed(TOOL_STREAM[i : i + 1]) for i in range(len(TOOL_STREAM))) + t.close() == expected


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")],
)
def test_finish_reasons_become_stop_reasons(finish: str, stop_reason: str) -> None:
    t = transcoder()
    raw = t.feed(chunk({"content": "Hi"}) + chunk({}, finish) + b"data: [DONE]\n\n") + t.close()
    events, _ = events_of(raw)
    assert accumulate(events).stop_reason == stop_reason


def test_a_stream_cut_short_ends_with_an_error_never_a_message_stop() -> None:
    t = transcoder()
    events, _ = events_of(t.feed(chunk({"content": "Hal"})) + t.close())
    assert events[-1] == {"type": "error", "error": {"type": "api_error", "message": CUT_SHORT}}
    assert "message_stop" not in [e["type"] for e in events]


def test_done_without_a_finish_reason_is_an_error() -> None:
    t = transcoder()
    events, _ = events_of(t.feed(chunk({"content": "Hal"}) + b"data: [DONE]\n\n") + t.close())
    assert events[-1]["type"] == "error" and "finish reason" in events[-1]["error"]["message"]
    assert t.final is None


def test_an_error_chunk_becomes_an_error_event_and_nothing_after_it() -> None:
    failure = {"message": "upstream read timed out", "type": "upstream_error", "code": "upstream_timeout"}
    error = b"data: " + json.dumps({"error": failure}).encode() + b"\n\n"
    t = transcoder()
    tool = chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{"}}]})
    events, _ = events_of(t.feed(tool + error + b"data: [DONE]\n\n") + t.close())
    assert events[-1] == {
        "type": "error",
        "error": {"type": "timeout_error", "message": "upstream read timed out"},
    }
    # A half-received call is never stopped: it must not look complete.
    assert "content_block_stop" not in [e["type"] for e in events]


def test_keep_alives_become_pings_and_other_comments_pass() -> None:
    t = transcoder()
    raw = t.feed(b": keep-alive\n\n: trace {}\n\n")
    assert raw.endswith(b'event: ping\ndata: {"type":"ping"}\n\n: trace {}\n\n')
    assert raw.count(b"event: ping") == 2  # (one after message_start, one for the keep-alive)


def test_display_omitted_streams_signed_blocks_without_text() -> None:
    t = transcoder(show_thinking=False)
    raw = t.feed(
        chunk({"reasoning_content": "secret"}) + chunk({"content": "4"}, "stop") + b"data: [DONE]\n\n"
    )
    events, _ = events_of(raw)
    assert "thinking_delta" not in raw.decode() and "secret" not in raw.decode()
    thinking = accumulate(events).content[0]
    assert thinking.type == "thinking" and thinking.thinking == "" and thinking.signature == "sig:None:6"


def test_interleaved_arguments_of_a_stopped_call_end_the_stream_with_an_error() -> None:
    t = transcoder()
    calls = [
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
    ]
    events, _ = events_of(t.feed(b"".join(calls)) + t.close())
    assert events[-1]["type"] == "error" and "interleaved" in events[-1]["error"]["message"]


def test_a_call_announced_before_its_name_starts_once_named() -> None:
    t = transcoder()
    calls = [
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"arguments": '{"x"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
    events, _ = events_of(t.feed(b"".join(calls)))
    call = accumulate(events).content[0]
    assert call.type == "tool_use" and call.name == "f" and call.input == {"x": 1}


# -- non-stream ----------------------------------------------------------------------------------


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4},
    }


def test_a_completion_is_one_message_with_the_same_blocks() -> None:
    body = completion(
        {
            "content": None,
            "reasoning_content": "Look it up.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        "tool_calls",
    )
    message = Message.model_validate(
        message_from_completion(body, MessagesEncoder("msg_1", "m", seal=sign, new_id=ids))
    )
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[0].type == "thinking" and message.content[0].signature == "sig:call_a:11"
    assert message.stop_reason == "tool_use" and message.usage.input_tokens == 9


def test_the_transcoder_completion_matches_the_stream() -> None:
    body = completion({"content": "Four.", "reasoning_content": "2+2"})
    t = transcoder()
    out = json.loads(t.completion(json.dumps(body).encode()))
    stream = transcoder()
    events, _ = events_of(
        stream.feed(
            chunk({"reasoning_content": "2+2"})
            + chunk({"content": "Four."}, "stop")
            + chunk(None, usage=body["usage"])
            + b"data: [DONE]\n\n"
        )
    )
    assert out == stream.final == accumulate(events).model_dump(exclude_none=True) | {"stop_sequence": None}


def test_an_error_body_is_an_anthropic_error_object() -> None:
    out = message_from_completion(
        {"error": {"message": "boom"}}, MessagesEncoder("msg_1", "m", seal=sign, new_id=ids)
    )
    assert out == {"type": "error", "error": {"type": "api_error", "message": "boom"}}


def stop_chunk(finish: str, **choice: Any) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    body["choices"] = [{"index": 0, "delta": {}, "finish_reason": finish, **choice}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@pytest.mark.parametrize(
    ("report", "stop_reason", "stop_sequence"),
    [
        ({"stop_reason": "END"}, "stop_sequence", "END"),  # vLLM names the string that matched
        ({"matched_stop": "###"}, "stop_sequence", "###"),  # SGLang
        ({}, "end_turn", None),  # DeepSeek, OpenAI, …: `stop` either way, nothing says which
        ({"stop_reason": None}, "end_turn", None),  # vLLM, the model's own end
        ({"stop_reason": 128009}, "end_turn", None),  # vLLM, a stop token id: not a stop sequence
        ({"stop_reason": "STOP"}, "end_turn", None),  # not one of the sequences asked for
    ],
)
def test_a_stop_sequence_is_reported_only_when_the_upstream_says_which_matched(
    report: dict[str, Any], stop_reason: str, stop_sequence: str | None
) -> None:
    """Chat completions say `finish_reason: stop` for a stop string as for the model's own end, and
    leave the string out of the text: only an upstream that names the match tells them apart."""
    stops = ("END", "###")
    t = transcoder(stop_sequences=stops)
    raw = t.feed(chunk({"content": "Hi"}) + stop_chunk("stop", **report) + b"data: [DONE]\n\n") + t.close()
    events, _ = events_of(raw)
    assert events[-2]["delta"] == {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    message = accumulate(events)
    assert (message.stop_reason, message.stop_sequence) == (stop_reason, stop_sequence)
    assert t.final is not None and (t.final["stop_reason"], t.final["stop_sequence"]) == (
        stop_reason,
        stop_sequence,
    )
    # The non-stream form reads the same report.
    body = completion({"content": "Hi"})
    body["choices"][0].update(report)
    whole = message_from_completion(
        body, MessagesEncoder("msg_1", "m", seal=sign, new_id=ids, stop_sequences=stops)
    )
    assert (whole["stop_reason"], whole["stop_sequence"]) == (stop_reason, stop_sequence)


def test_a_reported_match_without_stop_sequences_asked_is_not_a_stop_sequence() -> None:
    t = transcoder()
    events, _ = events_of(t.feed(stop_chunk("stop", stop_reason="END") + b"data: [DONE]\n\n"))
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
