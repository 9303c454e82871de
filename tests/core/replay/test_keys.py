"""Replay keys (pure): tenants, store keys, and which messages of a history need a lookup.

The histories built here are shared with tests/core/replay/test_rules.py, which puts back what was found."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.config.providers import ReplayPolicy
from proxy.core.replay.keys import (
    ANONYMOUS,
    Secrets,
    _cached_store_key,
    content_hash,
    plan_lookups,
    store_key,
    tenant_of,
)

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


def test_tenant_is_a_keyed_hash_never_the_key() -> None:
    a = tenant_of(b"secret", "sk-live-abc")
    assert "sk-live-abc" not in a and len(a) == 32
    assert a == tenant_of(b"secret", "sk-live-abc")
    assert a != tenant_of(b"other-secret", "sk-live-abc")
    assert a != tenant_of(b"secret", "sk-live-abd")
    assert tenant_of(b"secret", None) == ANONYMOUS


def test_secrets_give_each_earlier_secret_its_own_tenant_hash() -> None:
    secrets = Secrets(b"new", (b"old", b"new", b"", b"old", b"older"))
    assert secrets.old == (b"old", b"older")  # the current one, empties and repeats left out
    tenants = secrets.tenants("sk-live-abc")
    assert tenants.current == tenant_of(b"new", "sk-live-abc")
    assert tenants.old == (tenant_of(b"old", "sk-live-abc"), tenant_of(b"older", "sk-live-abc"))
    assert tenants.earlier == tenants.old
    anonymous = secrets.tenants(None)
    assert anonymous.current == ANONYMOUS and anonymous.old == (ANONYMOUS, ANONYMOUS)
    assert anonymous.earlier == ()  # the same store keys whatever the secret: nothing more to ask
    assert "new" not in repr(secrets) and "old" not in repr(secrets)
    with pytest.raises(ValueError):
        Secrets(b"")


def test_secrets_hash_each_request_alone_and_as_tenant_of_does() -> None:
    """The current secret's hash is prepared once and copied per request: a request's key never
    leaks into the next one's hash, and a secret longer than BLAKE2b's key hashes as tenant_of
    hashes it (its SHA-256 as the key)."""
    for secret in (b"s", b"k" * 64, b"long" * 40):
        secrets = Secrets(secret, (b"old",))
        first = secrets.tenants("sk-live-abc")
        assert secrets.tenants("sk-other").current == tenant_of(secret, "sk-other")
        assert secrets.tenants("sk-live-abc") == first
        assert first == (tenant_of(secret, "sk-live-abc"), (tenant_of(b"old", "sk-live-abc"),))
        assert Secrets(secret).tenants("sk-live-abc") == (first.current, ())
    assert Secrets(b"a") == Secrets(b"a") and hash(Secrets(b"a")) == hash(Secrets(b"a"))


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


def test_strip_policy_needs_nothing_but_signatures_and_the_timing_of_the_last_calls() -> None:
    messages = history(assistant(call("call_a")), assistant(call("call_b")))
    messages.append({"role": "user", "content": "thanks"})
    messages.append(assistant(call("call_c"), extra_content=None))
    messages[-1]["tool_calls"][0]["extra_content"] = {"google": {"thought_signature": "s"}}
    messages.append({"role": "tool", "tool_call_id": "call_c", "content": "sun"})
    plan = plan_lookups(messages, STRIP, TENANT)
    assert [(n.position, n.counted, n.signatures, n.timing) for n in plan.needs] == [
        (1, False, True, False),  # earlier turns: their signatures, whatever turn they were in
        (3, False, True, False),
        (6, False, False, True),  # the last calls carry theirs: only their timing
    ]


def test_keep_policy_keys_a_turn_without_tool_calls_by_its_content() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "more"},
    ]
    plan = plan_lookups(messages, INLINE, TENANT)
    assert plan.keys == (store_key(TENANT, "c", content_hash("Hello!")),)


def test_not_a_list_of_messages_plans_nothing() -> None:
    assert plan_lookups({"role": "user"}, TOOL_CALLS, TENANT).empty
    assert plan_lookups(None, TOOL_CALLS, TENANT).empty


def test_signatures_also_for_turns_before_the_last_user_message() -> None:
    # Restored on one request and not on the next (once a user message follows), the turn's bytes
    # would change and the upstream's prefix cache would miss from there on.
    messages = [*history(assistant(call("call_g"))), {"role": "assistant", "content": "Rain."}]
    messages.append({"role": "user", "content": "thanks"})
    plan = plan_lookups(messages, STRIP, TENANT)
    assert [(n.position, n.signatures, n.counted) for n in plan.needs] == [(1, True, False)]
    assert plan.keys == (store_key(TENANT, "t", "call_g"),)


def test_store_key_of_a_huge_id_is_not_cached() -> None:
    before = _cached_store_key.cache_info().currsize
    assert store_key(TENANT, "t", "x" * 100_000) == store_key(TENANT, "t", "x" * 100_000)
    assert _cached_store_key.cache_info().currsize == before
    assert _cached_store_key.cache_info().maxsize is not None
