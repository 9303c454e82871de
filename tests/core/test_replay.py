"""Replay (pure): which messages need a lookup, how what was remembered is put back, what is stored."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from proxy.core.providers import ReplayPolicy
from proxy.core.replay import (
    ANONYMOUS,
    RecordCache,
    Remembered,
    apply_restore,
    capture_records,
    content_hash,
    decode_record,
    plan_lookups,
    store_key,
    tenant_of,
)
from proxy.core.stream.capture import Turn

TOOL_CALLS = ReplayPolicy(mode="tool_calls", field="reasoning_content", missing="placeholder")
FORWARD = ReplayPolicy(mode="tool_calls", field="reasoning_content")
DETAILS = ReplayPolicy(mode="keep", field="reasoning_details")
INLINE = ReplayPolicy(mode="keep", field="inline_think")
STRIP = ReplayPolicy(mode="strip")
TENANT = "t1"


def call(call_id: str, name: str = "get_weather", **extra: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}, **extra}


def assistant(*calls: dict[str, Any], **fields: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": fields.pop("content", "")}
    if calls:
        message["tool_calls"] = list(calls)
    message.update(fields)
    return message


def history(*turns: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    for turn in turns:
        messages.append(turn)
        for c in turn.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": "rain"})
    return messages


def remembered(reasoning: str | None = "I should look it up.", **kw: Any) -> Remembered:
    base: dict[str, Any] = {
        "provider": "deepseek",
        "model": "deepseek-chat",
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
    args: dict[str, Any] = {"provider": "deepseek", "model": "deepseek-chat", "now_ms": 10_000.0}
    args.update(kw)
    return plan, apply_restore(body, plan, found, policy=policy, **args)


def test_tenant_is_a_keyed_hash_never_the_key() -> None:
    a = tenant_of(b"secret", "sk-live-abc")
    assert "sk-live-abc" not in a and len(a) == 32
    assert a == tenant_of(b"secret", "sk-live-abc")
    assert a != tenant_of(b"other-secret", "sk-live-abc")
    assert a != tenant_of(b"secret", "sk-live-abd")
    assert tenant_of(b"secret", None) == ANONYMOUS


def test_keys_differ_per_tenant_and_are_bounded() -> None:
    assert store_key("t1", "t", "call_1") != store_key("t2", "t", "call_1")
    assert len(store_key("t1", "t", "x" * 100_000)) == len(store_key("t1", "t", "y"))


def test_only_tool_call_turns_without_reasoning_are_looked_up_under_tool_calls_policy() -> None:
    messages = history(
        assistant(call("call_a"), reasoning_content="kept"),
        assistant(call("call_b")),
        assistant(content="Rain today."),
    )
    plan = plan_lookups(messages, TOOL_CALLS, TENANT)
    # call_a has its reasoning (looked up only for a signature it may have had); the answer needs none
    assert [(n.position, n.text, n.signatures) for n in plan.needs] == [(1, False, True), (3, True, True)]
    assert plan.keys == (store_key(TENANT, "t", "call_a"), store_key(TENANT, "t", "call_b"))


def test_strip_policy_needs_nothing_but_the_timing_of_the_last_calls() -> None:
    messages = history(assistant(call("call_a")), assistant(call("call_b")))
    messages.append({"role": "user", "content": "thanks"})
    messages.append(assistant(call("call_c"), extra_content=None))
    messages[-1]["tool_calls"][0]["extra_content"] = {"google": {"thought_signature": "s"}}
    messages.append({"role": "tool", "tool_call_id": "call_c", "content": "sun"})
    plan = plan_lookups(messages, STRIP, TENANT)
    assert [(n.position, n.counted, n.signatures, n.timing) for n in plan.needs] == [(6, False, False, True)]


def test_keep_policy_keys_a_turn_without_tool_calls_by_its_content() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "more"},
    ]
    plan = plan_lookups(messages, INLINE, TENANT)
    assert plan.keys == (store_key(TENANT, "c", content_hash("Hello!")),)


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


def test_not_a_list_of_messages_plans_nothing() -> None:
    assert plan_lookups({"role": "user"}, TOOL_CALLS, TENANT).empty
    assert plan_lookups(None, TOOL_CALLS, TENANT).empty


def test_restored_text_equals_the_original_and_the_callers_body_is_untouched() -> None:
    body = {"model": "deepseek-chat", "messages": history(assistant(call("call_b")))}
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


def test_signatures_only_for_the_current_turn() -> None:
    messages = [*history(assistant(call("call_g"))), {"role": "assistant", "content": "Rain."}]
    messages.append({"role": "user", "content": "thanks"})
    assert plan_lookups(messages, STRIP, TENANT).empty


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


def test_store_key_of_a_huge_id_is_not_cached() -> None:
    from proxy.core.replay import _cached_store_key

    before = _cached_store_key.cache_info().currsize
    assert store_key(TENANT, "t", "x" * 100_000) == store_key(TENANT, "t", "x" * 100_000)
    assert _cached_store_key.cache_info().currsize == before
    assert _cached_store_key.cache_info().maxsize is not None
