"""A Responses WebSocket's own responses (proxy.server.doors.responses_ws_state): read before the
state store, kept whatever `store` says, bounded, and in the store too only when stored. And the
worker's count of open sockets per client key (KeySockets)."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.core.protocols.expansion import UNBOUNDED, Expansion
from proxy.core.protocols.responses.state import RESPONSE_KIND, StoredResponse
from proxy.core.replay.keys import Tenants, store_key
from proxy.server.doors.responses_store import ITEM_KIND, StoredResponses
from proxy.server.doors.responses_ws_state import KeySockets, SocketResponses
from proxy.state.memory import MemoryStore
from tests.server.doors.test_responses_store import CTX

TENANT = "t" * 16


def final(response_id: str, text: str = "hi") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text}]
    message = {"type": "message", "id": "msg_" + response_id, "role": "assistant", "content": content}
    return {"id": response_id, "object": "response", "output": [message]}


def key(response_id: str) -> str:
    return store_key(TENANT, RESPONSE_KIND, response_id)


def item_key(item_id: str) -> str:
    return store_key(TENANT, ITEM_KIND, item_id)


def test_an_unstored_response_is_kept_on_the_connection_only() -> None:
    store = MemoryStore(ttl=60)
    responses = SocketResponses(StoredResponses(store), max_bytes=1 << 20)
    user = [{"type": "message", "role": "user", "content": "hi"}]

    async def run() -> tuple[bytes | None, list[bytes | None]]:
        await responses.saver(False).save(TENANT, final("resp_a"), user, None, [])
        await responses.saver(True).save(TENANT, final("resp_b"), user, "resp_a", [])
        return await responses.load_raw(key("resp_a")), await store.get_many([key("resp_a"), key("resp_b")])

    held, in_store = asyncio.run(run())
    record = StoredResponse.decode(held)
    assert record is not None and record.input == user
    assert in_store[0] is None and in_store[1] is not None  # (only the stored one is shared)


def test_without_a_store_an_unknown_id_is_not_found_not_a_store_error() -> None:
    responses = SocketResponses(StoredResponses(None), max_bytes=1 << 20)
    assert asyncio.run(responses.load_raw(key("resp_x"))) is None


def test_the_oldest_records_go_first_past_the_bounds() -> None:
    responses = SocketResponses(StoredResponses(None), max_bytes=1 << 20, max_turns=2)
    for name in ("resp_1", "resp_2", "resp_3"):
        asyncio.run(responses.saver(False).save(TENANT, final(name), [], None, []))
    assert list(responses.held) == [key("resp_2"), key("resp_3")]
    # (a dropped response's output items go with it; what is held is counted with its items)
    assert list(responses.items) == [item_key("msg_resp_2"), item_key("msg_resp_3")]
    held = len(responses.held[key("resp_3")]) + len(responses.items[item_key("msg_resp_3")])
    small = SocketResponses(StoredResponses(None), max_bytes=held + 10)
    for name in ("resp_1", "resp_2"):
        asyncio.run(small.saver(False).save(TENANT, final(name), [], None, []))
    assert list(small.held) == [key("resp_2")] and list(small.items) == [item_key("msg_resp_2")]
    assert small.size == len(small.held[key("resp_2")]) + len(small.items[item_key("msg_resp_2")])


def test_an_item_reference_reads_the_connection_first_then_the_store() -> None:
    store = MemoryStore(ttl=60)
    responses = SocketResponses(StoredResponses(store), max_bytes=1 << 20)
    tenants = Tenants(TENANT)
    refs = [{"type": "item_reference", "id": i} for i in ("msg_resp_a", "msg_resp_b", "msg_gone")]

    async def run() -> tuple[list[Any], list[str], list[str]]:
        await responses.saver(False).save(TENANT, final("resp_a", "own"), [], None, [])
        await StoredResponses(store).save(TENANT, final("resp_b", "stored"), [], None, [])
        return await responses.resolve_references(refs, tenants, Expansion(CTX, UNBOUNDED))

    items, unresolved, repeated = asyncio.run(run())
    assert [item["content"][0]["text"] for item in items] == ["own", "stored"]
    assert unresolved == ["msg_gone"] and repeated == []


def test_the_newest_record_stays_even_when_it_alone_is_past_max_bytes() -> None:
    responses = SocketResponses(StoredResponses(None), max_bytes=10)
    asyncio.run(responses.saver(False).save(TENANT, final("resp_1"), [], None, []))
    asyncio.run(responses.saver(False).save(TENANT, final("resp_2", "x" * 100), [], "resp_1", []))
    # (the turn just made is the one the next continues: only the older ones make room)
    assert list(responses.held) == [key("resp_2")]
    assert asyncio.run(responses.load_raw(key("resp_2"))) is not None


def test_a_key_holds_at_most_its_cap_of_sockets_and_each_release_frees_one() -> None:
    sockets = KeySockets(2)
    assert sockets.take("a") and sockets.take("a")
    assert not sockets.take("a")  # at the cap: nothing taken
    assert sockets.take("b")  # another key counts apart
    sockets.release("a")
    assert sockets.take("a")
    assert not sockets.take("a")
    sockets.release("a")
    sockets.release("a")
    sockets.release("b")
    assert sockets.open == {}  # (only keys with a socket open are held)


def test_cap_0_is_no_cap() -> None:
    sockets = KeySockets(0)
    assert all(sockets.take("a") for _ in range(1000))
    assert sockets.open == {"a": 1000}
