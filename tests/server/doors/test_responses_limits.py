"""The Responses front door's bounds (issue 41, items 1 and 2), end to end through a real proxy in
front of the simulated DeepSeek: what one request may expand into (item references, sealed blobs,
reference blobs, each put back once; past THINKPROXY_MAX_BODY_BYTES a 413), and the state store's
share per tenant, per stored response, and a chain of turns stored by reference."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.core import seal
from proxy.core.replay.keys import store_key, tenant_of
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.doors import responses_store
from proxy.server.doors.responses import ResponsesDoor
from proxy.server.serving import BackgroundServer
from proxy.state.memory import MemoryStore
from tests.helpers import make_settings, route_handler

MODEL = "deepseek-v4-pro"
SECRET = "a deployment secret for the expansion tests"
KEY = "sk-flood"


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


class Proxy:
    """A proxy in front of the mock, with its door (its store, its keys) at hand."""

    def __init__(self, mock: BackgroundServer, **overrides: Any) -> None:
        self.base_url = f"{mock.url}/deepseek/v1"
        settings = make_settings(upstream_base_url=self.base_url, state_secret=SECRET, **overrides)
        app = create_app(settings, table=simulated_table(mock.port))
        door = route_handler(app, "/v1/responses", "POST")
        assert isinstance(door, ResponsesDoor)
        self.door = door
        self.server = BackgroundServer(app)

    def __enter__(self) -> Proxy:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(None, None, None)

    @property
    def store(self) -> MemoryStore:
        assert isinstance(self.door.store, MemoryStore)
        return self.door.store

    def tenant(self, key: str = KEY) -> str:
        return tenant_of(SECRET.encode(), key)

    def binding(self, key: str = KEY) -> seal.Binding:
        """What a reasoning blob before a text answer is bound to (no tool-call ids)."""
        return seal.Binding(self.tenant(key), "deepseek", self.base_url, "responses.reasoning", ())

    def post(self, body: dict[str, Any], key: str = KEY) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"}
        return httpx.post(f"{self.server.url}/v1/responses", json=body, headers=headers, timeout=60)


def upstream_body(mock: BackgroundServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    return body


def turn_with(reasoning_items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A history whose assistant text answer follows the given reasoning items."""
    return [
        {"role": "user", "content": "Think about it."},
        *reasoning_items,
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "And now?"},
    ]


def restored(mock: BackgroundServer) -> tuple[int, str]:
    """The upstream body's size, and the reasoning put back on its assistant message."""
    body = upstream_body(mock)
    (assistant,) = (m for m in body["messages"] if m["role"] == "assistant")
    return len(json.dumps(body)), str(assistant.get("reasoning_content") or "")


# -- item 1: each distinct reference, blob, reference blob put back once ---------------------------


def test_an_item_referenced_many_times_is_put_back_once(mock: BackgroundServer) -> None:
    text = "r" * 300_000
    item = {
        "type": "reasoning",
        "id": "rs_big",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }
    with Proxy(mock) as proxy:
        proxy.store.put_now([(store_key(proxy.tenant(), "response_item", "rs_big"), orjson.dumps(item))])
        refs = [{"type": "item_reference", "id": "rs_big"}] * 40
        r = proxy.post({"model": MODEL, "input": turn_with(refs), "store": False})
    assert r.status_code == 200, r.text
    size, reasoning = restored(mock)
    assert len(reasoning) == len(text) and reasoning == text  # once, not 40 times
    assert size < len(text) + 10_000


def test_the_same_blob_many_times_is_opened_and_put_back_once(mock: BackgroundServer) -> None:
    text = "q" * 300_000  # (compresses to a blob of a few hundred characters)
    with Proxy(mock) as proxy:
        payload = {"reasoning": text, "model": MODEL, "tool_call_ids": [], "created": int(time.time())}
        blob = seal.seal(proxy.door.keys, proxy.binding(), payload)
        assert isinstance(blob, seal.Blob) and len(blob.text) < 2_000
        items = [{"type": "reasoning", "summary": [], "encrypted_content": blob.text}] * 100
        r = proxy.post({"model": MODEL, "input": turn_with(items), "store": False})
    assert r.status_code == 200, r.text
    size, reasoning = restored(mock)
    assert len(reasoning) == len(text) and reasoning == text  # once
    assert size < len(text) + 10_000


def test_a_reference_blob_many_times_reads_its_payload_once(mock: BackgroundServer) -> None:
    text = "s" * 300_000
    with Proxy(mock) as proxy:
        key = store_key(proxy.tenant(), "sealed_reasoning", "rs_spilled")
        payload = {"reasoning": text, "model": MODEL, "tool_call_ids": [], "created": int(time.time())}
        proxy.store.put_now([(key, orjson.dumps(payload))])
        blob = seal.seal_reference(proxy.door.keys, proxy.binding(), key).text
        assert len(blob) < 200
        items = [{"type": "reasoning", "summary": [], "encrypted_content": blob}] * 100
        r = proxy.post({"model": MODEL, "input": turn_with(items), "store": False})
    assert r.status_code == 200, r.text
    size, reasoning = restored(mock)
    assert len(reasoning) == len(text) and reasoning == text  # once
    assert size < len(text) + 10_000


def test_a_spilled_payload_is_capped_as_an_inline_one_is(mock: BackgroundServer) -> None:
    """What the store holds under a reference blob's key is read only up to seal.RAW_CAP."""
    with Proxy(mock) as proxy:
        key = store_key(proxy.tenant(), "sealed_reasoning", "rs_huge")
        payload = {"reasoning": "h" * (seal.RAW_CAP + 1), "model": MODEL, "tool_call_ids": [], "created": 0}
        proxy.store.put_now([(key, orjson.dumps(payload))])
        blob = seal.seal_reference(proxy.door.keys, proxy.binding(), key).text
        items = [{"type": "reasoning", "summary": [], "encrypted_content": blob}]
        r = proxy.post({"model": MODEL, "input": turn_with(items), "store": False})
    assert r.status_code == 200, r.text
    size, reasoning = restored(mock)
    assert reasoning == "" and size < 10_000


@pytest.mark.parametrize("shape", ["item_reference", "blob", "reference_blob"])
def test_an_expansion_past_the_body_limit_is_a_413_that_says_so(mock: BackgroundServer, shape: str) -> None:
    """Two distinct 150 KB payloads under a 200 KB limit: the request itself is small."""
    with Proxy(mock, max_body_bytes=200_000) as proxy:
        items = []
        for n in range(2):
            text = f"{n}" * 150_000
            payload = {"reasoning": text, "model": MODEL, "tool_call_ids": [], "created": int(time.time())}
            if shape == "item_reference":
                item = {"type": "reasoning", "id": f"rs_{n}", "summary": [], "content": []}
                item["content"] = [{"type": "reasoning_text", "text": text}]
                proxy.store.put_now(
                    [(store_key(proxy.tenant(), "response_item", f"rs_{n}"), orjson.dumps(item))]
                )
                items.append({"type": "item_reference", "id": f"rs_{n}"})
            elif shape == "blob":
                blob = seal.seal(proxy.door.keys, proxy.binding(), payload)
                assert isinstance(blob, seal.Blob)
                items.append({"type": "reasoning", "summary": [], "encrypted_content": blob.text})
            else:
                key = store_key(proxy.tenant(), "sealed_reasoning", f"rs_{n}")
                proxy.store.put_now([(key, orjson.dumps(payload))])
                blob_text = seal.seal_reference(proxy.door.keys, proxy.binding(), key).text
                items.append({"type": "reasoning", "summary": [], "encrypted_content": blob_text})
        httpx.delete(f"{mock.url}/_mock/requests")
        r = proxy.post({"model": MODEL, "input": turn_with(items), "store": False})
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "expansion_too_large" and error["type"] == "invalid_request_error"
    assert "200000 bytes (THINKPROXY_MAX_BODY_BYTES)" in error["message"]
    assert "raise THINKPROXY_MAX_BODY_BYTES" in error["message"]
    assert httpx.get(f"{mock.url}/_mock/requests").json() == []  # nothing was forwarded


# -- item 2: the state store's shares ---------------------------------------------------------------


def test_another_tenants_stored_response_survives_one_tenants_flood(mock: BackgroundServer) -> None:
    """One tenant's big requests (300 KB each, answered with an echo: ~900 KB stored per request,
    12 of them past a 4 MiB store) evict its own responses, never another tenant's."""
    with Proxy(mock) as proxy:
        proxy.store.max_bytes, proxy.store.tenant_share = 4 << 20, 1 << 20
        kept = proxy.post({"model": MODEL, "input": "My name is Ada."}, key="sk-other")
        assert kept.status_code == 200, kept.text
        kept_id = kept.json()["id"]
        flood = [proxy.post({"model": MODEL, "input": "x" * 300_000}) for _ in range(12)]
        assert all(r.status_code == 200 for r in flood)
        assert proxy.store.bytes <= 4 << 20
        got = httpx.get(
            f"{proxy.server.url}/v1/responses/{kept_id}", headers={"authorization": "Bearer sk-other"}
        )
        assert got.status_code == 200 and got.json()["id"] == kept_id
        follow = proxy.post(
            {"model": MODEL, "input": "What is my name?", "previous_response_id": kept_id}, key="sk-other"
        )
        assert follow.status_code == 200, follow.text
        assert upstream_body(mock)["messages"][0]["content"] == "My name is Ada."
        # The flooding tenant's newest response is there; its oldest went.
        last = flood[-1].json()["id"]
        assert proxy.post({"model": MODEL, "input": "more", "previous_response_id": last}).status_code == 200
        first = proxy.post({"model": MODEL, "input": "more", "previous_response_id": flood[0].json()["id"]})
        assert first.status_code == 400


def test_a_chain_of_turns_is_stored_linearly(mock: BackgroundServer) -> None:
    """Each turn's record holds that turn only (the earlier ones by reference): n turns of 20 KB
    store ~n x 20 KB, not ~n^2/2 x 20 KB; the chain still continues, reads and reaches upstream whole."""
    with Proxy(mock) as proxy:
        previous: str | None = None
        sizes = []
        ids = []
        for n in range(12):
            body: dict[str, Any] = {"model": MODEL, "input": f"turn {n} " + "y" * 20_000}
            if previous is not None:
                body["previous_response_id"] = previous
            before = proxy.store.bytes
            r = proxy.post(body)
            assert r.status_code == 200, r.text
            sizes.append(proxy.store.bytes - before)
            previous = r.json()["id"]
            ids.append(previous)
        assert max(sizes) < 2 * min(sizes), sizes  # (copying the conversation: turn 12 ~12x turn 1)
        sent = [m for m in upstream_body(mock)["messages"] if m["role"] == "user"]
        assert [m["content"][:7] for m in sent] == [f"turn {n} "[:7] for n in range(12)]
        middle = httpx.get(
            f"{proxy.server.url}/v1/responses/{ids[5]}", headers={"authorization": f"Bearer {KEY}"}
        )
        assert middle.status_code == 200 and middle.json()["id"] == ids[5]


def test_a_response_over_the_cap_is_kept_as_a_stub_that_says_why(
    mock: BackgroundServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(responses_store, "STORED_RESPONSE_CAP", 50_000)
    with Proxy(mock) as proxy:
        big = proxy.post({"model": MODEL, "input": "z" * 60_000})
        assert big.status_code == 200, big.text
        big_id = big.json()["id"]
        assert proxy.store.bytes < 20_000  # the stub, not the 60 KB
        follow = proxy.post({"model": MODEL, "input": "next", "previous_response_id": big_id})
        assert follow.status_code == 400
        error = follow.json()["error"]
        assert error["code"] == "previous_response_too_large" and "too large to store" in error["message"]
        got = httpx.get(
            f"{proxy.server.url}/v1/responses/{big_id}", headers={"authorization": f"Bearer {KEY}"}
        )
        assert got.status_code == 404 and "too large to store" in got.json()["error"]["message"]


def test_a_broken_chain_says_which_earlier_response_is_gone(mock: BackgroundServer) -> None:
    with Proxy(mock) as proxy:
        first = proxy.post({"model": MODEL, "input": "one"}).json()["id"]
        second = proxy.post({"model": MODEL, "input": "two", "previous_response_id": first}).json()["id"]
        httpx.delete(f"{proxy.server.url}/v1/responses/{first}", headers={"authorization": f"Bearer {KEY}"})
        r = proxy.post({"model": MODEL, "input": "three", "previous_response_id": second})
    assert r.status_code == 400
    assert "no longer stored" in r.json()["error"]["message"] and first in r.json()["error"]["message"]
