"""The Responses encoder (proxy.core.protocols.responses.events) against the openai-python types:
every event parses as the type it names (with no field the type does not declare), in a
well-ordered stream, and the final `Response` carries every item as it was done."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent

from proxy.core.protocols.chat_events import Finish, ReasoningDelta, TextDelta, chunk_events
from proxy.core.protocols.responses.events import (
    ReasoningItemFacts,
    ResponseFrame,
    ResponsesEncoder,
    frame,
    frames,
)
from proxy.core.protocols.responses.output import message_frames, response_object, responses_usage
from proxy.core.protocols.responses.stream import response_from_completion
from proxy.core.usage import ReasoningTokens, account

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
DELTAS = {
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
    "response.output_text.delta",
    "response.function_call_arguments.delta",
}


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------
class Sealer:
    def __init__(self, result: str | None = "sealed") -> None:
        self.facts: list[ReasoningItemFacts] = []
        self.result = result

    def __call__(self, facts: ReasoningItemFacts) -> str | None:
        self.facts.append(facts)
        return None if self.result is None else f"{self.result}:{facts.item_id}:{len(facts.text)}"


def ids() -> Any:
    counter = itertools.count()
    return lambda prefix: f"{prefix}_{next(counter)}"


def make_frame(summary: bool = False, **echo: Any) -> ResponseFrame:
    return ResponseFrame("resp_1", "deepseek-v4-pro", 1_700_000_000, summary=summary, echo=echo)


def encoder(summary: bool = False, seal: Sealer | None = None) -> ResponsesEncoder:
    return ResponsesEncoder(make_frame(summary), seal=seal or Sealer(), new_id=ids())


def chunk(finish: str | None = None, usage: dict[str, Any] | None = None, **delta: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def call(index: int, call_id: str | None = None, name: str | None = None, args: str | None = None) -> Any:
    fragment: dict[str, Any] = {"index": index, "function": {}}
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    if name is not None:
        fragment["function"]["name"] = name
    if args is not None:
        fragment["function"]["arguments"] = args
    return [fragment]


SIGNATURE = {"google": {"thought_signature": "c2ln"}}
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 80,
    "total_tokens": 200,
    "prompt_tokens_details": {"cached_tokens": 64},
    "completion_tokens_details": {"reasoning_tokens": 50},
}


def run(
    chunks: Iterable[dict[str, Any]], summary: bool = False, seal: Sealer | None = None
) -> list[dict[str, Any]]:
    enc = encoder(summary, seal)
    events = enc.start()
    for item in chunks:
        events += enc.feed(chunk_events(item))
    events += enc.end()
    return events


# What Open Responses' `ResponseResource` requires of a response and openai-python's `Response`
# does not declare (proxy.core.protocols.responses.output).
OPEN_RESPONSES_ONLY = frozenset(("presence_penalty", "frequency_penalty", "store"))


def no_extras(value: Any, path: str = "") -> None:
    """No field the types do not declare, anywhere (openai's models accept extras silently), but
    the Open Responses fields a `Response` carries."""
    if isinstance(value, pydantic.BaseModel):
        allowed = OPEN_RESPONSES_ONLY if isinstance(value, Response) else frozenset()
        extra = {k: v for k, v in (value.model_extra or {}).items() if k not in allowed}
        assert not extra, f"undeclared fields at {path or 'top'}: {extra}"
        for name in type(value).model_fields:
            no_extras(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for position, item in enumerate(value):
            no_extras(item, f"{path}[{position}]")


def validate(events: list[dict[str, Any]]) -> list[Any]:
    parsed = []
    for event in events:
        model = EVENT.validate_python(orjson.loads(orjson.dumps(event)))
        assert model.type == event["type"]
        no_extras(model, event["type"])
        parsed.append(model)
    return parsed


def check_order(events: list[dict[str, Any]]) -> None:
    """The stream's grammar: numbering, opening and terminal events, items and parts nested."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] in TERMINAL
    assert not any(e["type"] in TERMINAL for e in events[:-1])
    added: dict[str, int] = {}  # item id -> output index
    kinds: dict[str, str] = {}  # item id -> type
    done: set[str] = set()
    parts_open: set[tuple[str, int]] = set()
    parts_done: set[tuple[str, int]] = set()
    texts: dict[tuple[str, str, int], str] = {}
    for event in events[2:-1]:
        kind = event["type"]
        if kind == "response.output_item.added":
            assert event["output_index"] == len(added)
            assert event["item"]["status"] == "in_progress"
            assert "encrypted_content" not in event["item"]
            # As OpenAI streams: a reasoning or message item is done before the next item begins
            # (only parallel calls, whose arguments a chat upstream interleaves, stay open together).
            still_open = [i for i in added if i not in done and kinds[i] in ("reasoning", "message")]
            assert not still_open, f"{still_open} still open when {event['item']['id']} began"
            added[event["item"]["id"]] = event["output_index"]
            kinds[event["item"]["id"]] = event["item"]["type"]
            continue
        item_id = event["item"]["id"] if "item" in event else event["item_id"]
        assert item_id in added and item_id not in done, kind
        assert added[item_id] == event["output_index"]
        if kind == "response.output_item.done":
            assert not any(part[0] == item_id for part in parts_open), "a part left open"
            assert all(added[other] < added[item_id] for other in done), "items done in output order"
            done.add(item_id)
            continue
        index = event.get("content_index", event.get("summary_index", 0))
        key = (item_id, index)
        if kind.endswith("part.added"):
            assert key not in parts_open and key not in parts_done
            parts_open.add(key)
        elif kind.endswith("part.done"):
            assert key in parts_open
            parts_open.discard(key)
            parts_done.add(key)
        elif kind in DELTAS:
            if kind != "response.function_call_arguments.delta":
                assert key in parts_open, kind
            family = kind.removesuffix(".delta")
            texts[(family, item_id, index)] = texts.get((family, item_id, index), "") + event["delta"]
        elif kind.endswith(".done"):  # text / arguments done: the deltas, whole
            family = kind.removesuffix(".done")
            whole = event.get("text", event.get("arguments"))
            assert texts.get((family, item_id, index), "") == whole, kind
    terminal = events[-1]
    if terminal["type"] != "response.failed":
        assert set(added) == done, "every item done before the end"
        finals = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        assert terminal["response"]["output"] == sorted(finals, key=lambda i: added[i["id"]])


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"].removeprefix("response.") for e in events]


def checked(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    validate(events)
    check_order(events)
    return events


def typical_turn() -> list[dict[str, Any]]:
    return [
        chunk(role="assistant", content=""),
        chunk(reasoning_content="The user wants "),
        chunk(reasoning_content="the weather."),
        chunk(tool_calls=call(0, "call_a", "get_weather", "")),
        chunk(tool_calls=call(0, args='{"city":')),
        chunk(tool_calls=call(0, args='"Paris"}')),
        chunk(finish="tool_calls"),
        {"id": "chatcmpl-1", "choices": [], "usage": USAGE},
    ]


# --------------------------------------------------------------------------------------------------
# The sequence
# --------------------------------------------------------------------------------------------------
def test_typical_reasoning_tool_call_turn_with_summary() -> None:
    seal = Sealer()
    events = checked(run(typical_turn(), summary=True, seal=seal))
    assert types(events) == [
        "created",
        "in_progress",
        "output_item.added",
        "reasoning_summary_part.added",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.done",
        "reasoning_summary_part.done",
        "output_item.done",  # the reasoning, sealed with the call it precedes, before that begins
        "output_item.added",  # the call
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",  # the call
        "completed",
    ]
    response = events[-1]["response"]
    assert response["status"] == "completed"
    reasoning, function_call = response["output"]
    assert reasoning == {
        "id": "rs_0",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "The user wants the weather."}],
        "encrypted_content": "sealed:rs_0:27",
        "status": "completed",
    }
    assert function_call == {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_a",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "status": "completed",
    }
    assert seal.facts == [
        ReasoningItemFacts(
            "rs_0", "resp_1", "deepseek-v4-pro", "The user wants the weather.", call_ids=("call_a",)
        )
    ]
    Response.model_validate(response)


def test_reasoning_text_parts_when_no_summary_was_asked() -> None:
    events = checked(run(typical_turn(), summary=False))
    assert types(events)[2:8] == [
        "output_item.added",
        "content_part.added",
        "reasoning_text.delta",
        "reasoning_text.delta",
        "reasoning_text.done",
        "content_part.done",
    ]
    assert events[3]["part"] == {"type": "reasoning_text", "text": ""}
    reasoning = events[-1]["response"]["output"][0]
    assert reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "The user wants the weather."}]


@pytest.mark.parametrize("summary", [True, False])
def test_reasoning_text_and_several_tool_calls_interleaved(summary: bool) -> None:
    chunks = [
        chunk(reasoning="Think "),
        chunk(reasoning="first."),
        chunk(content="Let me "),
        chunk(content="check."),
        chunk(reasoning_content="Two calls."),
        chunk(tool_calls=[{**call(0, "call_a", "read", '{"p"')[0], "extra_content": SIGNATURE}]),
        chunk(tool_calls=call(1, "call_b", "list", "{")),
        chunk(tool_calls=call(0, args=':"x"}')),  # back to index 0: both still open
        chunk(tool_calls=call(1, args="}")),
        chunk(tool_calls=call(2, "call_c", "noop")),
        chunk(finish="tool_calls", usage=USAGE),
    ]
    seal = Sealer()
    events = checked(run(chunks, summary=summary, seal=seal))
    output = events[-1]["response"]["output"]
    assert [(i["type"], i["status"]) for i in output] == [
        ("reasoning", "completed"),
        ("message", "completed"),
        ("reasoning", "completed"),
        ("function_call", "completed"),
        ("function_call", "completed"),
        ("function_call", "completed"),
    ]
    assert output[1]["content"] == [
        {"type": "output_text", "text": "Let me check.", "annotations": [], "logprobs": []}
    ]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in output[3:]] == [
        ("call_a", "read", '{"p":"x"}'),
        ("call_b", "list", "{}"),
        ("call_c", "noop", ""),
    ]
    done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert done == [i["id"] for i in output]  # items done in output order
    # The first reasoning was followed by text, the second by the calls: only it names a call, the
    # one known when the first call began (the item is done before it: the others came later).
    assert [(f.item_id, f.call_ids, dict(f.signatures)) for f in seal.facts] == [
        ("rs_0", (), {}),
        ("rs_2", ("call_a",), {"call_a": SIGNATURE}),
    ]
    Response.model_validate(events[-1]["response"])


def test_tool_call_arguments_split_anywhere() -> None:
    arguments = '{"cmd":"ls -la","workdir":"/tmp/é"}'
    reference = None
    for cut_a, cut_b in itertools.combinations_with_replacement(range(len(arguments) + 1), 2):
        pieces = [arguments[:cut_a], arguments[cut_a:cut_b], arguments[cut_b:]]
        chunks = [chunk(tool_calls=call(0, "call_x", "exec_command", pieces[0]))]
        chunks += [chunk(tool_calls=call(0, args=piece)) for piece in pieces[1:]]
        events = run([*chunks, chunk(finish="tool_calls")])
        check_order(events)
        finals = [
            {k: v for k, v in e.items() if k != "sequence_number"}
            for e in events
            if e["type"] in ("response.output_item.done", "response.completed")
        ]
        if reference is None:
            validate(events)
            reference = finals
        assert finals == reference
    assert reference is not None and reference[0]["item"]["arguments"] == arguments


def test_tool_call_announced_once_its_name_comes() -> None:
    chunks = [
        chunk(tool_calls=[{"index": 0, "id": "call_q", "function": {"arguments": '{"a"'}}]),
        chunk(tool_calls=call(0, name="late_name", args=":1}")),
        chunk(tool_calls=[{"function": {"arguments": ""}}]),  # no index: the last call
        chunk(finish="tool_calls"),
    ]
    events = checked(run(chunks))
    assert types(events)[2:5] == [
        "output_item.added",
        "function_call_arguments.delta",  # what came before the name, at once
        "function_call_arguments.done",
    ]
    assert events[2]["item"]["name"] == "late_name"
    assert events[3]["delta"] == '{"a":1}'
    assert events[-1]["response"]["output"][0]["arguments"] == '{"a":1}'


def test_tool_call_without_id_gets_one() -> None:
    events = checked(run([chunk(tool_calls=call(0, name="f", args="{}")), chunk(finish="tool_calls")]))
    assert events[-1]["response"]["output"][0]["call_id"] == "call_1"


def test_same_chunks_split_differently_give_the_same_events() -> None:
    """Text split at every offset, and fields shared by one chunk or spread over several: once
    consecutive deltas are joined, the same events, the same items, the same response."""
    reasoning, text = "Weigh it: ✓", "Answer."

    def normalized(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for event in events:
            event = {k: v for k, v in event.items() if k != "sequence_number"}
            last = out[-1] if out else None
            if last and event["type"] in DELTAS and last["type"] == event["type"]:
                last["delta"] += event["delta"]
            else:
                out.append(event)
        return out

    reference = normalized(
        checked(
            run([chunk(reasoning_content=reasoning, content=text, finish="stop", usage=USAGE)], summary=True)
        )
    )
    for cut_r, cut_t in itertools.product(range(len(reasoning) + 1), range(len(text) + 1)):
        chunks = [
            chunk(reasoning_content=reasoning[:cut_r]),
            chunk(reasoning_content=reasoning[cut_r:], content=text[:cut_t]),
            chunk(content=text[cut_t:]),
            chunk(finish="stop"),
            {"choices": [], "usage": USAGE},
        ]
        events = run(chunks, summary=True)
        check_order(events)
        assert normalized(events) == reference


def test_encrypted_content_only_when_done_and_details_reach_the_seal() -> None:
    seal = Sealer()
    detail = {"type": "reasoning.encrypted", "data": "opaque", "index": 0}
    events = checked(
        run(
            [chunk(reasoning_content="hm", reasoning_details=[detail]), chunk(content="ok", finish="stop")],
            seal=seal,
        )
    )
    added, done = (
        e["item"] for e in events if e["type"].startswith("response.output_item") and e["output_index"] == 0
    )
    assert "encrypted_content" not in added
    assert done["encrypted_content"] == "sealed:rs_0:2"
    assert events[-1]["response"]["output"][0] == done
    assert seal.facts[0].details == (detail,)


def test_no_encrypted_content_when_the_seal_gives_none() -> None:
    events = checked(run([chunk(reasoning_content="hm"), chunk(finish="stop")], seal=Sealer(None)))
    assert "encrypted_content" not in events[-1]["response"]["output"][0]


# --------------------------------------------------------------------------------------------------
# How a response ends
# --------------------------------------------------------------------------------------------------
def test_length_cut_is_incomplete_with_max_output_tokens() -> None:
    seal = Sealer()
    chunks = [chunk(reasoning_content="long"), chunk(content="partial"), chunk(finish="length", usage=USAGE)]
    events = checked(run(chunks, seal=seal))
    response = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete"
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [i["status"] for i in response["output"]] == ["completed", "incomplete"]
    assert seal.facts[0].status == "completed"
    Response.model_validate(response)


def test_content_filter_is_incomplete() -> None:
    events = checked(run([chunk(content="no"), chunk(finish="content_filter")]))
    assert events[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}


def test_failure_mid_stream_is_failed_and_never_looks_complete() -> None:
    enc = encoder()
    events = enc.start()
    events += enc.feed(chunk_events(chunk(reasoning_content="thinking")))
    events += enc.feed(chunk_events(chunk(content="Half")))
    events += enc.feed(chunk_events(chunk(tool_calls=call(0, "call_a", "rm", '{"path":"/tm'))))
    events += enc.fail("upstream connection reset", code="upstream_stream_error")
    checked(events)
    assert events[-1]["type"] == "response.failed"
    assert not any(e["type"] == "response.completed" for e in events)
    # The open call is never done: a client must not run half its arguments.
    assert not any(
        e["type"] in ("response.output_item.done", "response.function_call_arguments.done")
        and e.get("item", {}).get("type", "function_call") == "function_call"
        for e in events
    )
    response = events[-1]["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "upstream connection reset"}
    assert [(i["type"], i["status"]) for i in response["output"]] == [
        ("reasoning", "completed"),
        ("message", "completed"),
        ("function_call", "incomplete"),
    ]
    assert response["output"][2]["arguments"] == '{"path":"/tm'
    Response.model_validate(response)
    assert enc.finished
    assert enc.feed(chunk_events(chunk(content="more"))) == [] and enc.end() == [] and enc.fail("again") == []


def test_error_chunk_fails_the_response() -> None:
    error = {"error": {"message": "rate limited", "type": "upstream_error", "code": "rate_limit_exceeded"}}
    events = checked(run([chunk(content="Hi"), error, chunk(content="ignored")]))
    assert types(events)[-1] == "failed"
    assert events[-1]["response"]["error"] == {"code": "rate_limit_exceeded", "message": "rate limited"}
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"


def test_end_without_a_finish_reason_fails() -> None:
    events = checked(run([chunk(content="Hello")]))
    assert events[-1]["type"] == "response.failed"
    assert "without a finish reason" in events[-1]["response"]["error"]["message"]


def test_upstream_giving_up_fails() -> None:
    events = checked(run([chunk(content="Hel"), chunk(finish="insufficient_system_resource")]))
    assert events[-1]["type"] == "response.failed"


def test_empty_turn_completes_with_no_output() -> None:
    events = checked(run([chunk(role="assistant", content=""), chunk(finish="stop")]))
    assert types(events) == ["created", "in_progress", "completed"]
    assert events[-1]["response"]["output"] == []


def test_feed_before_start_opens_the_stream() -> None:
    enc = encoder()
    events = enc.feed(chunk_events(chunk(content="x", finish="stop"))) + enc.end()
    checked(events)
    assert enc.start() == []


# --------------------------------------------------------------------------------------------------
# Usage, the frame, the non-stream form, SSE
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (USAGE, (120, 64, 80, 50, 200)),
        (  # DeepSeek's cache counts
            {
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "prompt_cache_hit_tokens": 7,
                "prompt_cache_miss_tokens": 3,
            },
            (10, 7, 5, 0, 15),
        ),
        ({"prompt_tokens": 3, "completion_tokens": 2, "prompt_tokens_details": None}, (3, 0, 2, 0, 5)),
    ],
)
def test_usage_mapping(usage: dict[str, Any], expected: tuple[int, ...]) -> None:
    events = checked(run([chunk(content="x", finish="stop", usage=usage)]))
    mapped = events[-1]["response"]["usage"]
    assert mapped == responses_usage(usage)
    assert (
        mapped["input_tokens"],
        mapped["input_tokens_details"]["cached_tokens"],
        mapped["output_tokens"],
        mapped["output_tokens_details"]["reasoning_tokens"],
        mapped["total_tokens"],
    ) == expected


def test_no_usage_is_null() -> None:
    assert run([chunk(content="x", finish="stop")])[-1]["response"]["usage"] is None
    assert responses_usage(None) is None


def test_frame_for_request_echoes_the_request() -> None:
    request = {
        "model": "gpt-5",
        "input": "hi",
        "instructions": "Be brief.",
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "high", "summary": "auto"},
        "max_output_tokens": 1000,
        "store": False,
        "stream": True,
    }
    made = ResponseFrame.for_request(request, response_id="resp_9", model="deepseek-flash", created_at=1.5)
    assert made.summary
    enc = ResponsesEncoder(made, seal=Sealer(), new_id=ids())
    events = checked(
        enc.start() + enc.feed(chunk_events(chunk(reasoning_content="r", finish="stop"))) + enc.end()
    )
    response = events[-1]["response"]
    assert response["instructions"] == "Be brief." and response["parallel_tool_calls"] is False
    assert response["model"] == "deepseek-flash" and response["id"] == "resp_9"
    assert response["store"] is False and "input" not in response
    assert events[-1]["response"]["output"][0]["summary"][0]["text"] == "r"
    assert not ResponseFrame.for_request(
        {"reasoning": {"summary": None}}, response_id="r", model="m", created_at=0
    ).summary


def test_non_stream_matches_the_stream() -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "reasoning_content": "The user wants the weather.",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": USAGE,
    }
    whole = response_from_completion(completion, encoder(True))
    streamed = run(typical_turn(), summary=True)[-1]["response"]
    assert whole == streamed
    no_extras(Response.model_validate(whole))


def test_non_stream_length_and_error() -> None:
    cut = {"choices": [{"index": 0, "message": {"content": "Par"}, "finish_reason": "length"}]}
    response = response_from_completion(cut, encoder())
    assert response["status"] == "incomplete" and response["output"][0]["status"] == "incomplete"
    error = {"error": {"message": "bad", "code": "x"}}
    assert response_from_completion(error, encoder())["status"] == "failed"
    no_finish = {"choices": [{"index": 0, "message": {"content": "ok"}}]}
    assert response_from_completion(no_finish, encoder())["status"] == "completed"
    for made in (response, response_from_completion(error, encoder())):
        no_extras(Response.model_validate(made))


def test_sse_framing() -> None:
    events = run([chunk(content="a\nb", finish="stop")])
    raw = frames(events)
    assert raw == b"".join(frame(e) for e in events)
    blocks = raw.split(b"\n\n")
    assert blocks[-1] == b"" and len(blocks) == len(events) + 1
    for block, event in zip(blocks, events, strict=False):
        head, data = block.split(b"\n")
        assert head == b"event: " + event["type"].encode()
        assert orjson.loads(data.removeprefix(b"data: ")) == event
    assert b"[DONE]" not in raw


def _all_streams() -> Iterator[list[dict[str, Any]]]:
    yield run(typical_turn(), summary=True)
    yield run(typical_turn(), summary=False)


def test_every_event_is_its_declared_type() -> None:
    for events in _all_streams():
        parsed = validate(events)
        assert [type(model).__name__ for model in parsed][:2] == [
            "ResponseCreatedEvent",
            "ResponseInProgressEvent",
        ]
        assert type(parsed[-1]).__name__ == "ResponseCompletedEvent"


def test_an_estimated_reasoning_count_keeps_its_marker() -> None:
    """The proxy's estimate (proxy.core.usage) is marked in the chat usage; the Responses usage
    says so too, and reads back as estimated."""
    estimated = {
        "prompt_tokens": 3,
        "completion_tokens": 40,
        "completion_tokens_details": {"reasoning_tokens": 31, "reasoning_tokens_estimated": True},
    }
    mapped = run([chunk(content="x", finish="stop", usage=estimated)])[-1]["response"]["usage"]
    assert mapped["output_tokens_details"] == {"reasoning_tokens": 31, "reasoning_tokens_estimated": True}
    assert account(mapped).reasoning == ReasoningTokens(31, "estimated")
    reported = responses_usage({**estimated, "completion_tokens_details": {"reasoning_tokens": 31}})
    assert reported is not None and reported["output_tokens_details"] == {"reasoning_tokens": 31}


@pytest.mark.parametrize(
    ("finish", "status", "reason"),
    [("stop", "completed", None), ("length", "incomplete", "max_output_tokens"), (None, "failed", None)],
)
def test_the_terminal_response_is_the_response_object_of_what_was_streamed(
    finish: str | None, status: str, reason: str | None
) -> None:
    """The terminal `Response` (built from the opening one) is `response_object` of the frame with
    the stream's output, usage, error and incomplete reason: every field, in its key order."""
    frame = ResponseFrame(
        "resp_1",
        "deepseek-v4-pro",
        1_700_000_000,
        echo={"instructions": "be brief", "metadata": {"k": "v"}, "tools": [], "temperature": 0.5},
        clock=lambda: 1_700_000_042.7,
    )
    coder = ResponsesEncoder(frame, seal=Sealer(), new_id=ids())
    usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    events = [ReasoningDelta(["think"]), TextDelta(["answer"])]
    if finish is not None:
        events.append(Finish(finish, ()))
    coder.feed(events)
    coder.feed(chunk_events({"choices": [], "usage": usage}))
    terminal = coder.end()[-1]["response"]
    error = None if finish is not None else terminal["error"]
    assert status != "failed" or error is not None
    expected = response_object(
        frame,
        status=status,  # type: ignore[arg-type]
        output=terminal["output"],
        usage=responses_usage(usage),
        error=error,
        incomplete_reason=reason,
    )
    assert list(terminal.items()) == list(expected.items())
    assert terminal["completed_at"] == (1_700_000_042 if status == "completed" else None)


# Texts a run of deltas may carry: what JSON escapes, what % formatting or a split at `","` would
# misread, and any text.
DELTA_TEXTS = st.lists(
    st.sampled_from(["%", "%d", "%s", "%%", '","', '"', "\\", ",", 'a",', "é 😀", "\n", "\u2028"])
    | st.text(min_size=1, max_size=8),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    texts=DELTA_TEXTS,
    before=st.integers(min_value=0, max_value=5),
    reasoning=st.booleans(),
    summary=st.booleans(),
    socket=st.booleans(),
)
def test_a_run_written_directly_is_each_delta_written_alone(
    texts: list[str], before: int, reasoning: bool, summary: bool, socket: bool
) -> None:
    """A run of text deltas written in one go (text_delta_frames) is byte for byte the general
    path's frames of each delta in turn, numbered on from what came before, in both forms."""
    write = message_frames if socket else frames

    def opened() -> ResponsesEncoder:
        coder = ResponsesEncoder(make_frame(summary), seal=Sealer(), new_id=ids(), socket=socket)
        coder.feed([ReasoningDelta(["open"]) if reasoning else TextDelta(["open"])] * (before + 1))
        return coder

    direct, general = opened(), opened()
    written = direct.text_delta_frames(reasoning, texts)
    one_by_one = [ReasoningDelta([t]) if reasoning else TextDelta([t]) for t in texts]
    assert written == write(general.feed(one_by_one))
    assert write(direct.end()) == write(general.end())


@settings(max_examples=150, deadline=None)
@given(texts=DELTA_TEXTS, reasoning=st.booleans(), socket=st.booleans())
def test_a_run_added_as_parts_joins_to_the_run_written_directly(
    texts: list[str], reasoning: bool, socket: bool
) -> None:
    """A run added as parts to what a read already holds (text_delta_parts, which the transcoder
    joins once per read) joins to the same bytes as the run written directly, whatever came
    before it in the list; not that case, nothing is added."""

    def opened() -> ResponsesEncoder:
        coder = ResponsesEncoder(make_frame(False), seal=Sealer(), new_id=ids(), socket=socket)
        coder.feed([ReasoningDelta(["open"]) if reasoning else TextDelta(["open"])])
        return coder

    by_parts, direct = opened(), opened()
    out = [b"before"]
    assert by_parts.text_delta_parts(reasoning, texts, out)
    assert out[0] == b"before"
    assert b"".join(out[1:]) == direct.text_delta_frames(reasoning, texts)
    size = len(out)
    assert not by_parts.text_delta_parts(not reasoning, texts, out)  # (another kind: no item of it)
    assert not by_parts.text_delta_parts(reasoning, ["", *texts], out)  # (an empty text)
    assert len(out) == size
    assert by_parts.text_delta_parts(reasoning, [], out) and len(out) == size  # (no text: nothing)
    assert direct.text_delta_frames(reasoning, []) == b""
    assert by_parts.end() == direct.end()


def test_sequence_numbers_past_the_writers_table_are_written_alike() -> None:
    """A run whose numbers go past the ones the direct writer keeps made (4096) is numbered as the
    general path numbers it."""
    texts = [f"w{i} " for i in range(4200)]
    direct, general = encoder(), encoder()
    opening = [TextDelta(["open"])]
    assert frames(direct.feed(opening)) == frames(general.feed(opening))
    written = direct.text_delta_frames(False, texts[:4000])
    assert written is not None
    written += direct.text_delta_frames(False, texts[4000:4100]) or b""
    written += b"".join(direct.text_delta_frames(False, [t]) or b"" for t in texts[4100:])
    assert written == frames(general.feed([TextDelta([t]) for t in texts]))
    assert b'"sequence_number":4199,' in written and b'"sequence_number":4204,' in written
