"""Rotating THINKPROXY_STATE_SECRET end to end (DESIGN.md, "Sealed blobs": rotation is real).

A proxy runs with secret A; the next turn of each conversation reaches a proxy restarted with
secret B and `THINKPROXY_STATE_OLD_SECRETS=A`. The simulated DeepSeek refuses a tool loop whose
reasoning is not passed back, so every second turn here works only if the proxy found what the
first one left: the sealed blob (state store off, both doors), the replay store's entry (chat),
the stored response and its items (Responses), the spilled payload a reference blob names.

With the store on, both proxies share one store (as replicas share Redis): the one with secret A
keeps serving while the restarted one answers, as in a rolling restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.core import seal
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server import replay_service
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.settings import Settings
from proxy.state import MemoryStore, build_store
from tests.helpers import make_settings

MODEL = "deepseek-v4-pro"
ASK = "What's the weather in Paris? Use get_weather."
RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
MESSAGES_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": RESPONSES_TOOL["parameters"],
}
CHAT_TOOL = {"type": "function", "function": {k: v for k, v in RESPONSES_TOOL.items() if k != "type"}}
SECRET_A = "secret A: the one before the rotation"
SECRET_B = "secret B: the one after"
KEY = "sk-tenant-1"


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


@pytest.fixture
def shared_store(monkeypatch: pytest.MonkeyPatch) -> MemoryStore:
    """One memory store for every proxy the test starts (as replicas share one Redis)."""
    store = MemoryStore(ttl=600)

    def build(settings: Settings) -> Any:
        return None if build_store(settings) is None else store

    monkeypatch.setattr(replay_service, "build_store", build)
    return store


def proxy_for(
    mock: BackgroundServer, secret: str, old: str | None = None, **overrides: Any
) -> BackgroundServer:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        state_secret=secret,
        state_old_secrets=old,
        **overrides,
    )
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


def before(mock: BackgroundServer, **overrides: Any) -> BackgroundServer:
    return proxy_for(mock, SECRET_A, **overrides)


def after(mock: BackgroundServer, **overrides: Any) -> BackgroundServer:
    """Restarted with the new secret, the old one kept for opening and lookups."""
    return proxy_for(mock, SECRET_B, f"an unrelated older one,{SECRET_A}", **overrides)


def retired(mock: BackgroundServer, **overrides: Any) -> BackgroundServer:
    """The old secret removed: what it left is gone (the miss policy applies)."""
    return proxy_for(mock, SECRET_B, **overrides)


def sent_assistants(mock: BackgroundServer) -> list[dict[str, Any]]:
    body = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    return [m for m in body["messages"] if m["role"] == "assistant"]


# -- the Responses door ----------------------------------------------------------------------------


def responses(proxy: BackgroundServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=KEY, max_retries=0, timeout=20)


def responses_first_turn(proxy: BackgroundServer, **extra: Any) -> tuple[Any, list[dict[str, Any]]]:
    first = responses(proxy).responses.create(
        model=MODEL, input=ASK, tools=[RESPONSES_TOOL], reasoning={"effort": "high"}, **extra
    )
    call = next(o for o in first.output if o.type == "function_call")
    items = [
        {"role": "user", "content": ASK},
        *(o.model_dump(exclude_none=True) for o in first.output),
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},
    ]
    return first, items


def blob_only(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reasoning items with only their blob: nothing but the blob can restore the reasoning."""
    return [
        {"type": "reasoning", "summary": [], "encrypted_content": i["encrypted_content"]}
        if i.get("type") == "reasoning"
        else i
        for i in items
    ]


def responses_second_turn(proxy: BackgroundServer, items: list[dict[str, Any]], **extra: Any) -> Any:
    return responses(proxy).responses.create(
        model=MODEL, input=items, tools=[RESPONSES_TOOL], reasoning={"effort": "high"}, **extra
    )


def test_responses_blobs_sealed_before_the_rotation_still_restore_reasoning(mock: BackgroundServer) -> None:
    with before(mock, state="off") as proxy:
        _, items = responses_first_turn(proxy, store=False)
    with after(mock, state="off") as proxy:
        answer = responses_second_turn(proxy, blob_only(items), store=False)
        assert answer.status == "completed" and "sunny" in answer.output_text
        assert sent_assistants(mock)[0]["reasoning_content"]
        # New blobs are sealed with the new secret: they open once the old one is retired.
        _, fresh = responses_first_turn(proxy, store=False)
    with retired(mock, state="off") as proxy:
        assert responses_second_turn(proxy, blob_only(fresh), store=False).status == "completed"
        with pytest.raises(openai.BadRequestError, match="must be passed back"):
            responses_second_turn(proxy, blob_only(items), store=False)


def test_responses_a_spilled_payload_is_found_after_the_rotation(
    mock: BackgroundServer, shared_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seal, "INLINE_CAP", 16)  # every payload spills: the blob seals its store key
    with before(mock) as old:
        _, items = responses_first_turn(old, store=False)
        with after(mock) as proxy:
            answer = responses_second_turn(proxy, blob_only(items), store=False)
    assert answer.status == "completed"
    assert sent_assistants(mock)[0]["reasoning_content"]


def test_stored_responses_and_items_are_found_after_the_rotation(
    mock: BackgroundServer, shared_store: MemoryStore
) -> None:
    with before(mock) as old:
        first, items = responses_first_turn(old)
        with after(mock) as proxy:
            client = responses(proxy)
            assert client.responses.retrieve(first.id).id == first.id
            # The reasoning only as an item_reference (the AI SDK's way): from the stored items.
            referenced = [
                {"type": "item_reference", "id": i["id"]} if i.get("type") == "reasoning" else i
                for i in items
            ]
            assert responses_second_turn(proxy, referenced).status == "completed"
            assert sent_assistants(mock)[0]["reasoning_content"]
            # previous_response_id: the stored conversation, with its sealed reasoning.
            output = next(i for i in items if i.get("type") == "function_call_output")
            follow = responses_second_turn(proxy, [output], previous_response_id=first.id)
            assert follow.status == "completed"
            assert sent_assistants(mock)[0]["reasoning_content"]
            # Another tenant still finds nothing, under either secret.
            other = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-other", max_retries=0)
            with pytest.raises(openai.NotFoundError):
                other.responses.retrieve(first.id)
            r = httpx.delete(
                f"{proxy.url}/v1/responses/{first.id}", headers={"authorization": f"Bearer {KEY}"}
            )
            assert r.status_code == 200 and r.json()["deleted"] is True
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(first.id)
            with pytest.raises(openai.NotFoundError):  # gone for the old replica too
                responses(old).responses.retrieve(first.id)


def test_deleting_a_response_drops_its_items_under_every_hash(
    mock: BackgroundServer, shared_store: MemoryStore
) -> None:
    """DELETE /v1/responses/{id} drops the record and the output items an item_reference reaches,
    whichever of the client's hashes (before or after the rotation) they were kept under."""
    with before(mock) as old:
        first = responses(old).responses.create(model=MODEL, input="Name a colour.")
        message = next(o for o in first.output if o.type == "message")
        with after(mock) as proxy:
            again = [
                {"role": "user", "content": "Name a colour."},
                {"type": "item_reference", "id": message.id},
                {"role": "user", "content": "And another?"},
            ]
            responses(proxy).responses.create(model=MODEL, input=again)
            assert [m["role"] for m in sent_body(mock)["messages"]] == ["user", "assistant", "user"]
            r = httpx.delete(
                f"{proxy.url}/v1/responses/{first.id}", headers={"authorization": f"Bearer {KEY}"}
            )
            assert r.status_code == 200
            responses(proxy).responses.create(model=MODEL, input=again)
            assert [m["role"] for m in sent_body(mock)["messages"]] == ["user", "user"]  # left out


def sent_body(mock: BackgroundServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    return body


# -- the Messages door -----------------------------------------------------------------------------


def messages(proxy: BackgroundServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0, timeout=20)


MESSAGES_KW: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 1024,
    "tools": [MESSAGES_TOOL],
    "thinking": {"type": "enabled", "budget_tokens": 4096},
}


def messages_history(proxy: BackgroundServer) -> list[dict[str, Any]]:
    first = messages(proxy).messages.create(messages=[{"role": "user", "content": ASK}], **MESSAGES_KW)
    call = next(b for b in first.content if b.type == "tool_use")
    return [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ]


def test_messages_signatures_made_before_the_rotation_still_restore_reasoning(mock: BackgroundServer) -> None:
    with before(mock, state="off") as proxy:
        history = messages_history(proxy)
    with after(mock, state="off") as proxy:
        second = messages(proxy).messages.create(messages=history, **MESSAGES_KW)
    assert second.stop_reason == "end_turn"
    turn = next(m for m in sent_assistants(mock) if m.get("tool_calls"))
    assert turn["reasoning_content"]
    with retired(mock, state="off") as proxy, pytest.raises(anthropic.BadRequestError):
        messages(proxy).messages.create(messages=history, **MESSAGES_KW)


def test_messages_a_spilled_payload_is_found_after_the_rotation(
    mock: BackgroundServer, shared_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seal, "INLINE_CAP", 16)
    with before(mock) as old:
        history = messages_history(old)
        with after(mock) as proxy:
            second = messages(proxy).messages.create(messages=history, **MESSAGES_KW)
    assert second.stop_reason == "end_turn"
    assert next(m for m in sent_assistants(mock) if m.get("tool_calls"))["reasoning_content"]


# -- chat completions: the replay store ------------------------------------------------------------


def test_replay_entries_written_before_the_rotation_are_found(
    mock: BackgroundServer, shared_store: MemoryStore
) -> None:
    """A client that drops reasoning_content (most frameworks): the store puts it back."""
    question: list[dict[str, Any]] = [{"role": "user", "content": ASK}]
    with before(mock) as old:
        chat = openai.OpenAI(base_url=f"{old.url}/v1", api_key=KEY, max_retries=0, timeout=20)
        first = chat.chat.completions.create(model=MODEL, messages=question, tools=[CHAT_TOOL])  # type: ignore[arg-type,list-item]
        calls = first.choices[0].message.tool_calls
        assert calls
        history = [
            *question,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": "{}"}}  # type: ignore[union-attr]
                    for c in calls
                ],
            },
            *({"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in calls),
        ]
        with after(mock) as proxy:
            chat = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=KEY, max_retries=0, timeout=20)
            raw = chat.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=history,  # type: ignore[arg-type]
                tools=[CHAT_TOOL],  # type: ignore[list-item]
            )
    assert raw.parse().choices[0].finish_reason == "stop"
    assert raw.headers["x-thinking-replay"].startswith("restored=1")
    assert sent_assistants(mock)[0]["reasoning_content"]
