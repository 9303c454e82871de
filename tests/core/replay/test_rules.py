"""Replay (pure): how what was remembered is put back, and what a response leaves in the store.

Which messages need a lookup at all is tested in tests/core/replay/test_keys.py."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from proxy.core.config.providers import ReplayPolicy
from proxy.core.replay.keys import content_hash, plan_lookups, store_key
from proxy.core.replay.rules import (
    RecordCache,
    Remembered,
    apply_restore,
    capture_records,
    decode_record,
    for_model,
)
from proxy.core.stream.capture import Turn
from tests.core.replay.test_keys import (
    DETAILS,
    FORWARD,
    INLINE,
    STRIP,
    TENANT,
    TOOL_CALLS,
    assistant,
    call,
    history,
)


def remembered(reasoning: str | None = "I should look it up.", **kw: Any) -> Remembered:
    base: dict[str, Any] = {
        "provider": "deepseek",
        "model": "deepseek-flash",
        "reasoning": reasoning,
        "details": None,
        "signatures": {},
        "at_ms": None,
    }
    base.update(kw)
    return Remembered(**base)


def restore(
    body: dict[str, Any], policy: ReplayPolicy, found: dict[str, Remembered | None], **kw: Any
) -> Any:
    plan = plan_lookups(body["messages"], policy, TENANT)
    args: dict[str, Any] = {"provider": "deepseek", "model": "deepseek-flash", "now_ms": 10_000.0}
    args.update(kw)
    return plan, apply_restore(body, plan, found, policy=policy, **args)


def test_an_empty_answer_is_never_a_key() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "  "},
        {"role": "user", "content": "more"},
    ]
    assert plan_lookups(messages, INLINE, TENANT).empty
    turns = [Turn(None, "thought", "", None, {}), Turn(None, "thought", " \n", None, {})]
    kwargs: dict[str, Any] = {"tenant": TENANT, "provider": "minimax", "model": "m", "now_ms": 5.0}
    assert capture_records(turns, policy=INLINE, **kwargs) == []


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "tool_calls": [{"type": "function"}]},  # no id
        {"role": "assistant", "tool_calls": ["call_x"]},  # not an object
        {"role": "assistant", "tool_calls": "call_x"},
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},  # not a string (keep)
        {"role": "wizard", "tool_calls": [call("call_x")]},  # unknown role
        "assistant",
        None,
    ],
)
def test_malformed_messages_are_left_alone(message: Any) -> None:
    messages = [{"role": "user", "content": "hi"}, message]
    for policy in (TOOL_CALLS, INLINE, DETAILS):
        plan = plan_lookups(messages, policy, TENANT)
        body = {"messages": messages}
        result = apply_restore(body, plan, {}, policy=policy, provider="p", model=None, now_ms=0.0)
        assert result.body is body
        assert not result.counts.any


def test_restored_text_equals_the_original_and_the_callers_body_is_untouched() -> None:
    body = {"model": "deepseek-flash", "messages": history(assistant(call("call_b")))}
    before = copy.deepcopy(body)
    _, result = restore(body, TOOL_CALLS, {store_key(TENANT, "t", "call_b"): remembered("Let me check.")})
    assert body == before
    assert result.body["messages"][1]["reasoning_content"] == "Let me check."
    assert result.counts.as_dict() == {"restored": 1, "placeholder": 0, "missing": 0}
    assert result.counts.header_value() == "restored=1, placeholder=0, missing=0"
    assert result.changed


def test_a_miss_gets_a_placeholder_or_is_forwarded_per_policy() -> None:
    body = {"messages": history(assistant(call("call_b")))}
    _, placeholder = restore(body, TOOL_CALLS, {})
    assert placeholder.body["messages"][1]["reasoning_content"] == ""
    assert placeholder.counts.as_dict() == {"restored": 0, "placeholder": 1, "missing": 0}
    _, forwarded = restore(body, FORWARD, {})
    assert forwarded.body is body
    assert forwarded.counts.as_dict() == {"restored": 0, "placeholder": 0, "missing": 1}


def test_placeholders_off_makes_every_miss_missing() -> None:
    body = {"messages": history(assistant(call("call_b")))}
    _, result = restore(body, TOOL_CALLS, {}, placeholders=False)
    assert result.body is body
    assert result.counts.as_dict() == {"restored": 0, "placeholder": 0, "missing": 1}


def test_a_repeated_first_call_id_is_never_restored() -> None:
    body = {"messages": history(assistant(call("dup")), assistant(call("dup")))}
    plan, result = restore(body, FORWARD, {store_key(TENANT, "t", "dup"): remembered()})
    assert plan.keys == ()
    assert result.counts.missing == 2


def test_clients_own_empty_string_is_kept_and_replaced_when_remembered() -> None:
    body = {"messages": history(assistant(call("call_b"), reasoning_content=""))}
    _, miss = restore(body, TOOL_CALLS, {})
    assert miss.body is body and not miss.counts.any
    _, hit = restore(body, TOOL_CALLS, {store_key(TENANT, "t", "call_b"): remembered("real")})
    assert hit.body["messages"][1]["reasoning_content"] == "real"


def test_inline_think_goes_back_as_a_think_block() -> None:
    body = {"messages": [*history(assistant(content="Rain.")), {"role": "user", "content": "ok"}]}
    key = store_key(TENANT, "c", content_hash("Rain."))
    _, result = restore(body, INLINE, {key: remembered("thinking hard")}, provider="minimax")
    assert result.body["messages"][1]["content"] == "<think>thinking hard</think>\n\nRain."


DETAILS_SENT = [
    {"type": "reasoning.text", "text": "t", "signature": "sig==", "format": "unknown", "index": 0},
    {"type": "reasoning.encrypted", "data": "gAAAAA", "format": "unknown", "index": 1},
]


def test_details_go_back_unchanged_only_to_the_same_provider_and_model() -> None:
    body = {"messages": history(assistant(call("call_o")))}
    key = store_key(TENANT, "t", "call_o")
    found = {key: remembered("t", provider="openrouter", model="anthropic/claude", details=DETAILS_SENT)}
    _, same = restore(body, DETAILS, found, provider="openrouter", model="anthropic/claude")
    assert same.body["messages"][1]["reasoning_details"] == DETAILS_SENT
    _, other_model = restore(body, DETAILS, found, provider="openrouter", model="google/gemini-3")
    assert "reasoning_details" not in other_model.body["messages"][1]
    assert other_model.counts.missing == 1


def test_thought_signatures_go_back_only_to_their_provider() -> None:
    extra = {"google": {"thought_signature": "c2ln"}}
    body = {"messages": history(assistant(call("call_g"), call("call_h")))}
    key = store_key(TENANT, "t", "call_g")
    found = {key: remembered(None, provider="gemini", model="gemini-3", signatures={"call_g": extra})}
    _, same = restore(body, STRIP, found, provider="gemini", model="gemini-3")
    calls = same.body["messages"][1]["tool_calls"]
    assert calls[0]["extra_content"] == extra and "extra_content" not in calls[1]
    assert same.counts.restored == 1
    _, other = restore(body, STRIP, found, provider="openrouter", model="gemini-3")
    assert other.body is body and not other.counts.any


def test_durations_of_the_answered_calls() -> None:
    body = {"messages": history(assistant(call("call_a"), call("call_b"), reasoning_content="r"))}
    key = store_key(TENANT, "t", "call_a")
    _, result = restore(body, STRIP, {key: remembered(at_ms=7_500.0)}, now_ms=10_000.0)
    assert result.durations == {"call_a": 2500.0, "call_b": 2500.0}
    assert not result.counts.any


def test_capture_records_tool_turns_and_keep_policy_answers() -> None:
    turns = [
        Turn("call_1", "why", None, None, {}),
        Turn(None, "hmm", "Rain.", None, {}),
        Turn(None, None, "No reasoning.", None, {}),
    ]
    kwargs: dict[str, Any] = {"tenant": TENANT, "provider": "minimax", "model": "m", "now_ms": 5.0}
    kept = dict(capture_records(turns, policy=INLINE, **kwargs))
    assert set(kept) == {store_key(TENANT, "t", "call_1"), store_key(TENANT, "c", content_hash("Rain."))}
    tool_only = capture_records(turns, policy=TOOL_CALLS, **kwargs)
    assert [k for k, _ in tool_only] == [store_key(TENANT, "t", "call_1")]
    record = decode_record(tool_only[0][1])
    assert record == Remembered("minimax", "m", "why", None, {}, 5.0)


def test_decode_record_refuses_garbage() -> None:
    assert decode_record(None) is None
    assert decode_record(b"not json") is None
    assert decode_record(orjson.dumps([1])) is None
    assert decode_record(orjson.dumps({"r": "x"})) is None


def test_record_cache_decodes_like_decode_record_and_stays_bounded() -> None:
    cache = RecordCache(max_entries=4, max_value_bytes=200)
    plain = [orjson.dumps({"p": "deepseek", "m": "m", "r": f"thought {i}", "t": i}) for i in range(10)]
    for raw in plain:
        assert cache.decode(raw) == decode_record(raw)
        assert cache.decode(raw) == decode_record(raw)  # the second from the cache
        assert len(cache) <= 4
    # Records whose parts are mutable (details, signatures) are handed out fresh, never shared.
    signed = orjson.dumps({"p": "openrouter", "m": "m", "r": "x", "d": [{"type": "t"}], "x": {"c": {}}})
    first, second = cache.decode(signed), cache.decode(signed)
    assert first == second == decode_record(signed)
    assert first is not None and second is not None and first.details is not second.details
    big = orjson.dumps({"p": "deepseek", "r": "x" * 500})
    assert cache.decode(big) == decode_record(big)
    assert cache.decode(None) is None and cache.decode(b"not json") is None
    assert len(cache) == 4 and big not in cache._data and signed not in cache._data


def test_a_blobs_signed_fields_go_only_to_the_model_that_made_them() -> None:
    payload = {"reasoning": "r", "details": [1], "signatures": {"c": 1}, "model": "m1"}
    assert for_model(payload, "m1") is payload
    assert for_model(payload, "m2") == {"reasoning": "r", "model": "m1"}
    assert for_model({"reasoning": "r", "model": "m1"}, "m2") == {"reasoning": "r", "model": "m1"}
