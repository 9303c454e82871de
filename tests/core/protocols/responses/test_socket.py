"""The WebSocket mode's message rules (proxy.core.protocols.responses.socket), pure: a client
message read, the events a socket sends, each checked against openai-python's own types."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponsesServerEvent

from proxy.core.errors import BadRequest, PayloadTooLarge
from proxy.core.protocols.responses.socket import (
    Append,
    Create,
    Steer,
    appended,
    error_event,
    error_from_answer,
    read_message,
    steer_failed,
    terminal_response_id,
)

SERVER_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponsesServerEvent)
LIMIT = 1 << 20


def test_a_create_is_the_post_body_with_stream_implied_and_the_envelope_apart() -> None:
    message = {"type": "response.create", "model": "m", "input": "hi", "generate": False, "stream_id": "a"}
    read = read_message(json.dumps(message), LIMIT)
    assert read == Create({"model": "m", "input": "hi", "stream": True}, generate=False, stream_id="a")
    assert read_message(b'{"type":"response.create","model":"m"}', LIMIT) == Create(
        {"model": "m", "stream": True}, generate=True, stream_id=None
    )


def test_a_steer_is_kept_as_sent() -> None:
    read = read_message('{"type":"response.steer","input":"go","previous_response_id":"resp_1"}', LIMIT)
    assert read == Steer("go", "resp_1")


def test_an_append_is_the_last_create_continued_with_the_added_input() -> None:
    """`response.append` (Codex's first WebSocket protocol: codex-rs `ResponseAppendWsRequest`,
    `{input, client_metadata?}`) is the last request with the items added: its create continued
    by `previous_response_id` with them, its other fields (and the append's metadata) kept."""
    added = [{"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    message = {"type": "response.append", "input": added, "client_metadata": {"turn": "2"}}
    read = read_message(json.dumps(message), LIMIT)
    assert read == Append(added, {"client_metadata": {"turn": "2"}})
    last = Create(
        {"model": "m", "input": "hi", "tools": [{"type": "function"}], "stream": True}, False, "lane"
    )
    assert appended(last, "resp_1", read) == Create(
        {
            "model": "m",
            "input": added,
            "tools": [{"type": "function"}],
            "stream": True,
            "previous_response_id": "resp_1",
            "client_metadata": {"turn": "2"},
        },
        generate=True,
        stream_id=None,
    )


@pytest.mark.parametrize(
    ("message", "found"),
    [
        ('{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1"}}', "resp_1"),
        ('{"type":"response.incomplete","sequence_number":9,"response":{"id":"resp_2"}}', "resp_2"),
        ('{"type":"response.failed","sequence_number":9,"response":{"id":"resp_3"}}', None),
        ('{"type":"error","status":400,"error":{"message":"no"}}', None),
        ("{cut", None),
        (None, None),
    ],
)
def test_only_a_response_that_ended_well_can_be_appended_to(message: str | None, found: str | None) -> None:
    assert terminal_response_id(message) == found


@pytest.mark.parametrize(
    ("message", "code", "param"),
    [
        ("[1]", "invalid_json", None),
        ("{oops", "invalid_json", None),
        ('{"type":"response.cancel"}', "unknown_event_type", "type"),
        ('{"type":"response.append","input":[]}', "invalid_request", "input"),
        ('{"type":"response.append","input":"hi"}', "invalid_request", "input"),
        (
            '{"type":"response.append","input":[{"role":"user","content":"x"}],"stream":false}',
            "unsupported_parameter",
            "stream",
        ),
        (
            '{"type":"response.append","input":[{"role":"user","content":"x"}],"previous_response_id":"r"}',
            "unsupported_parameter",
            "previous_response_id",
        ),
        ('{"model":"m"}', "unknown_event_type", "type"),
        ('{"type":"response.create","generate":"no"}', "invalid_request", "generate"),
        ('{"type":"response.create","stream_id":7}', "invalid_request", "stream_id"),
        ('{"type":"response.create","background":true}', "unsupported_parameter", "background"),
        ('{"type":"response.create","stream":false}', "unsupported_parameter", "stream"),
    ],
)
def test_a_message_the_protocol_does_not_allow_is_a_bad_request(
    message: str, code: str, param: str | None
) -> None:
    with pytest.raises(BadRequest) as refused:
        read_message(message, LIMIT)
    assert (refused.value.code, refused.value.param) == (code, param)


def test_a_message_past_the_limit_is_too_large_before_it_is_parsed() -> None:
    with pytest.raises(PayloadTooLarge) as refused:
        read_message("x" * 101, 100)
    assert "THINKPROXY_MAX_BODY_BYTES" in refused.value.message and refused.value.status == 413


def test_the_error_events_are_openai_pythons_ws_error() -> None:
    mine = json.loads(error_event(BadRequest("no", code="response_in_progress"), "lane"))
    assert mine == {
        "type": "error",
        "status": 400,
        "error": {
            "message": "no",
            "type": "invalid_request_error",
            "code": "response_in_progress",
            "param": None,
        },
        "stream_id": "lane",
    }
    upstream = (
        b'{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded","param":null}}'
    )
    theirs = json.loads(error_from_answer(429, upstream))
    assert theirs["status"] == 429 and theirs["error"]["code"] == "rate_limit_exceeded"
    text = json.loads(error_from_answer(502, b"Bad Gateway"))
    assert text["error"]["message"] == "Bad Gateway" and text["error"]["type"] == "upstream_error"
    for event in (mine, theirs, text):
        SERVER_EVENT.validate_python(event)


def test_steer_failed_returns_the_input() -> None:
    event = json.loads(steer_failed(Steer([{"type": "message", "role": "user", "content": "go"}], "resp_1")))
    SERVER_EVENT.validate_python(event)
    assert event["error"]["code"] == "steering_not_supported"
    assert event["steer"] == {
        "input": [{"type": "message", "role": "user", "content": "go"}],
        "previous_response_id": "resp_1",
    }
