"""The Responses door's state-store I/O (proxy.server.doors.responses_store), against the memory store:
the `previous_response_id` chain walk (bounded, linear, yielding), item references read in batches,
and what a stored turn counts against the request's expansion limit."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from proxy.core import jsonio, seal
from proxy.core.errors import BadRequest, PayloadTooLarge
from proxy.core.protocols.expansion import UNBOUNDED, Expansion
from proxy.core.protocols.responses.state import RESPONSE_KIND, StoredResponse
from proxy.core.protocols.sealing import SealContext
from proxy.core.replay.keys import Tenants, store_key
from proxy.server.doors.responses_store import ITEM_KIND, MAX_CHAIN_TURNS, REFERENCE_BATCH, StoredResponses
from proxy.state.memory import MemoryStore

TENANT = "tenant-a"
TENANTS = Tenants(TENANT)
CTX = SealContext(seal.SealKeys(b"a secret"), TENANT, "deepseek", "https://api.deepseek.com", 0)


class CountingStore(MemoryStore):
    """A memory store that records the keys each `get_many` asked for, and may fail a touch."""

    def __init__(self, *, fail_touch: bool = False) -> None:
        super().__init__(ttl=600, max_entries=1_000_000, max_bytes=1 << 34)
        self.asked: list[list[str]] = []
        self.fail_touch = fail_touch
        self.seen: list[bool] = []  # per get_many: whether the loop had run another task by then
        self.marker: asyncio.Event | None = None

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        self.asked.append(list(keys))
        if self.marker is not None:
            self.seen.append(self.marker.is_set())
        return await super().get_many(keys)

    async def touch_many(self, keys: Sequence[str]) -> None:
        if self.fail_touch:
            raise RuntimeError("touch failed")
        await super().touch_many(keys)


def turn(i: int, *, instructions: str = "") -> StoredResponse:
    """Turn `i` of a chain: one user message in, one assistant message out, continuing turn i-1."""
    response: dict[str, Any] = {
        "id": f"resp_{i}",
        "output": [{"type": "message", "role": "assistant", "content": f"answer {i}"}],
    }
    if instructions:  # (echoed on every turn by clients such as Codex; never carried over)
        response["instructions"] = instructions
        response["tools"] = [{"type": "function", "name": "shell", "description": instructions}]
    items = [{"type": "message", "role": "user", "content": f"question {i}"}]
    return StoredResponse(items, response, f"resp_{i - 1}" if i else None)


async def chain(store: MemoryStore, turns: int, **kwargs: str) -> None:
    await store.put_many(
        [(store_key(TENANT, RESPONSE_KIND, f"resp_{i}"), turn(i, **kwargs).encode()) for i in range(turns)],
        tenant=TENANT,
    )


async def test_a_chain_longer_than_the_cap_is_a_400_that_says_to_send_the_items() -> None:
    store = CountingStore()
    await chain(store, MAX_CHAIN_TURNS + 1)
    body = {"previous_response_id": f"resp_{MAX_CHAIN_TURNS}"}
    with pytest.raises(BadRequest) as caught:
        await StoredResponses(store).earlier(body, TENANTS, Expansion(CTX, UNBOUNDED))
    error = caught.value
    assert error.status == 400 and error.param == "previous_response_id"
    assert error.code == "previous_response_chain_too_long"
    assert f"{MAX_CHAIN_TURNS:,}" in error.message and "input" in error.message
    assert len(store.asked) == MAX_CHAIN_TURNS  # refused at the cap: never read past it


async def test_a_chain_at_the_cap_is_walked_once_per_turn_and_yields_to_the_loop() -> None:
    store = CountingStore()
    await chain(store, MAX_CHAIN_TURNS)
    store.marker = asyncio.Event()
    marker = store.marker

    async def other_task() -> None:
        marker.set()

    task = asyncio.create_task(other_task())
    body = {"previous_response_id": f"resp_{MAX_CHAIN_TURNS - 1}"}
    items, keys = await StoredResponses(store).earlier(body, TENANTS, Expansion(CTX, UNBOUNDED))
    await task
    assert len(store.asked) == MAX_CHAIN_TURNS and all(len(asked) == 1 for asked in store.asked)
    assert len(keys) == MAX_CHAIN_TURNS
    assert items[0]["content"] == "question 0" and items[-1]["content"] == f"answer {MAX_CHAIN_TURNS - 1}"
    assert len(items) == 2 * MAX_CHAIN_TURNS
    assert any(store.seen), "the walk never let another task run"


async def test_a_chain_counts_its_conversation_not_the_instructions_each_turn_echoes() -> None:
    store = CountingStore()
    await chain(store, 40, instructions="You are a coding agent. " * 2_000)  # 48 KB a turn
    expansion = Expansion(CTX, 200_000)  # less than the 40 echoed instructions, more than the items
    items, _ = await StoredResponses(store).earlier({"previous_response_id": "resp_39"}, TENANTS, expansion)
    assert len(items) == 80
    assert expansion.used == sum(len(jsonio.dumps(turn(i).conversation())) for i in range(40))


async def test_references_are_read_in_batches_and_stop_at_the_limit() -> None:
    store = CountingStore()
    refs = 20 * REFERENCE_BATCH
    stored = {"type": "message", "role": "assistant", "content": "x" * 1_000}
    await store.put_many(
        [(store_key(TENANT, ITEM_KIND, f"msg_{i}"), jsonio.dumps(stored)) for i in range(refs)], tenant=TENANT
    )
    items = [{"type": "item_reference", "id": f"msg_{i}"} for i in range(refs)]
    expansion = Expansion(CTX, 1_000 * REFERENCE_BATCH + 500)  # passed within the second batch
    with pytest.raises(PayloadTooLarge):
        await StoredResponses(store).resolve_references(items, TENANTS, expansion)
    assert sum(len(asked) for asked in store.asked) <= 2 * REFERENCE_BATCH
    assert all(len(asked) <= REFERENCE_BATCH for asked in store.asked)


async def test_references_within_the_limit_are_all_put_back_in_order() -> None:
    store = CountingStore()
    refs = 3 * REFERENCE_BATCH + 5
    await store.put_many(
        [(store_key(TENANT, ITEM_KIND, f"msg_{i}"), jsonio.dumps({"id": f"msg_{i}"})) for i in range(refs)],
        tenant=TENANT,
    )
    items = [{"type": "item_reference", "id": f"msg_{i}"} for i in range(refs)] + [{"id": "msg_gone"}]
    out, missing, repeated = await StoredResponses(store).resolve_references(
        items, TENANTS, Expansion(CTX, UNBOUNDED)
    )
    assert out == [{"id": f"msg_{i}"} for i in range(refs)]
    assert missing == ["msg_gone"] and repeated == []
    assert len(store.asked) == 4


async def test_a_failed_touch_still_stores_the_new_turn() -> None:
    store = CountingStore(fail_touch=True)
    await chain(store, 1)
    earlier_key = store_key(TENANT, RESPONSE_KIND, "resp_0")
    final = {"id": "resp_1", "output": [{"id": "msg_1", "type": "message", "role": "assistant"}]}
    await StoredResponses(store).save(TENANT, final, [], "resp_0", [earlier_key])
    saved = StoredResponse.decode((await store.get_many([store_key(TENANT, RESPONSE_KIND, "resp_1")]))[0])
    assert saved is not None and saved.previous == "resp_0"
    assert (await store.get_many([store_key(TENANT, ITEM_KIND, "msg_1")]))[0] is not None
