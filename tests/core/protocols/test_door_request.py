"""What both bridged doors' request sides share (proxy.core.protocols.door_request): the body's
fields, the stream fields, and sealed reasoning put back (the reference keys a history's blobs
need, what an opened payload gives, where the reasoning lands), held here and through each door."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import seal
from proxy.core.errors import BadRequest
from proxy.core.protocols.door_request import (
    present_fields,
    put_reasoning,
    reference_keys,
    stream_fields,
    take_reasoning,
)
from proxy.core.protocols.expansion import UNBOUNDED, Expansion
from proxy.core.protocols.messages.request import bridge_messages
from proxy.core.protocols.responses.request import bridge_request
from proxy.core.protocols.sealing import SealContext, seal_reasoning

CTX = SealContext(
    seal.SealKeys(b"secret-one"), "tenant-a", "deepseek", "https://api.deepseek.com", 1_700_000_000
)
KIND: seal.Kind = "anthropic.thinking"


def test_null_fields_are_not_present_and_a_body_must_be_an_object() -> None:
    assert present_fields({"model": "m", "stream": None, "n": 0}) == {"model": "m", "n": 0}
    for body in ([], "x", None):
        with pytest.raises(BadRequest) as caught:
            present_fields(body)
        assert caught.value.status == 400 and caught.value.code == "invalid_json"


def test_a_streamed_request_asks_for_the_usage_at_the_end() -> None:
    chat: dict[str, Any] = {}
    stream_fields({"stream": True}, chat)
    assert chat == {"stream": True, "stream_options": {"include_usage": True}}
    for present in ({"stream": False}, {}):
        chat = {}
        stream_fields(present, chat)
        assert chat == {}
    with pytest.raises(BadRequest) as caught:
        stream_fields({"stream": "yes"}, {})
    assert caught.value.status == 400 and caught.value.param == "stream"


@pytest.mark.parametrize("door", ["responses", "messages"])
def test_each_door_reads_its_body_and_stream_alike(door: str) -> None:
    def bridge(body: Any) -> dict[str, Any]:
        if door == "responses":
            return bridge_request(body).body
        return bridge_messages(body).body

    ask = {"model": "m", "stream": True, "max_tokens": 8}
    ask.update({"input": "hi"} if door == "responses" else {"messages": [{"role": "user", "content": "hi"}]})
    body = bridge(ask)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "stream" not in bridge({**ask, "stream": None})
    for bad, field in (([], None), ({**ask, "stream": 1}, "stream")):
        with pytest.raises(BadRequest) as caught:
            bridge(bad)
        assert caught.value.status == 400 and caught.value.param == field


def sealed(text: str, ids: tuple[str, ...], spill: list[tuple[str, bytes]], spill_id: str) -> str:
    payload = {"reasoning": text, "model": "m", "tool_call_ids": list(ids), "created": CTX.created}
    blob = seal_reasoning(CTX, KIND, ids, payload, spill=spill, spill_id=spill_id)
    assert blob is not None
    return blob


def test_the_reference_keys_of_our_blobs_each_once_in_order() -> None:
    spill: list[tuple[str, bytes]] = []
    huge = "".join(f"{i:x}" * 3 for i in range(200_000))  # (past the inline cap)
    first = sealed(huge, ("call_a",), spill, "b1")
    second = sealed(huge + "more", (), spill, "b2")
    inline = sealed("short", (), spill, "b3")
    assert len(spill) == 2
    blobs: list[tuple[str | None, Any]] = [
        (None, ((),)),
        ("anthropic-signature", ((),)),
        (second, ((),)),
        (inline, ((),)),
        (first, (("call_a",),)),
        (second, ((),)),
    ]
    assert reference_keys(Expansion(CTX, UNBOUNDED), KIND, blobs) == [spill[1][0], spill[0][0]]
    # bound to another call: it does not open, so no key is read for it
    assert reference_keys(Expansion(CTX, UNBOUNDED), KIND, [(first, (("call_b",),))]) == []


def test_an_opened_payload_gives_its_text_and_details() -> None:
    texts: list[str] = ["before"]
    details: list[Any] = []
    take_reasoning({"reasoning": "why", "details": [{"type": "reasoning.text"}]}, texts, details)
    take_reasoning({"reasoning": "", "details": "not a list"}, texts, details)
    take_reasoning({"reasoning": 3}, texts, details)
    assert texts == ["before", "why"] and details == [{"type": "reasoning.text"}]


def test_the_reasoning_lands_on_its_assistant_message() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert put_reasoning(messages, 1, [], []) is None
    assert put_reasoning(messages, 2, ["x"], []) is None and put_reasoning(messages, -1, ["x"], []) is None
    assert messages[1] == {"role": "assistant", "content": "a"}
    put = put_reasoning(messages, 1, ["one", "two"], [{"d": 1}])
    assert put is messages[1]
    assert put == {
        "role": "assistant",
        "content": "a",
        "reasoning_content": "one\n\ntwo",
        "reasoning_details": [{"d": 1}],
    }
    only_details = put_reasoning(messages, 0, [], [{"d": 2}])
    assert only_details is not None and "reasoning_content" not in only_details
