"""The in-process budget store (proxy.policy.store.MemoryBudgets): its synchronous forms are the
same steps as its async ones, and a policy over it settles an answer's reservation at once, with
no write left pending; a subclass (a store that fails) is still called through its async methods."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from proxy.core.config.policy_file import parse_policy
from proxy.core.controls import Level
from proxy.core.events import AccessRecord
from proxy.core.usage import ReasoningTokens, TokenUsage
from proxy.policy.service import ThinkingPolicy
from proxy.policy.store import MemoryBudgets

POLICY = "keys:\n  bob: {reasoning_tokens: {limit: 100000, per: hour}}\n"
T0 = 1_800_000_000.0


def test_the_synchronous_forms_count_as_the_async_ones() -> None:
    now, then = MemoryBudgets(), MemoryBudgets()
    assert now.reserve_now("k", 7, 40) == asyncio.run(then.reserve("k", 7, 40, 60)) == {7: 40}
    now.add_now("k", 9, 5, [7])
    asyncio.run(then.add("k", 9, 5, 60, [7]))
    assert now.counts_now("k") == asyncio.run(then.counts("k")) == {9: 5}
    assert now.counts_now("nobody") == {}


async def admitted_and_answered(store: MemoryBudgets, reasoning: int) -> ThinkingPolicy:
    thinking = ThinkingPolicy(parse_policy(POLICY, "policy.yaml", ["bob"]), store, clock=lambda: T0)
    record = AccessRecord("POST", "/v1/chat/completions", route="chat", client="bob")
    assert (await thinking.decide("bob", Level.DEEP, record=record)).level is Level.DEEP
    record.usage = TokenUsage(10, reasoning + 10, None, ReasoningTokens(reasoning, "reported"))
    thinking.spend(record)
    return thinking


def test_an_answer_settles_its_reservation_in_the_process_store_at_once() -> None:
    store = MemoryBudgets()
    thinking = asyncio.run(admitted_and_answered(store, 30))
    assert not thinking._writes  # (nothing left for drain: the reservation is settled already)
    assert sum(store.counts_now("bob:hour").values()) == 30


def test_a_store_subclass_is_settled_through_its_async_methods() -> None:
    class Watched(MemoryBudgets):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        async def reserve(self, key: str, bucket: int, tokens: int, ttl: int) -> dict[int, int]:
            self.calls.append("reserve")
            return await super().reserve(key, bucket, tokens, ttl)

        async def add(self, key: str, bucket: int, tokens: int, ttl: int, stale: Sequence[int]) -> None:
            self.calls.append("add")
            await super().add(key, bucket, tokens, ttl, stale)

    async def run(store: Watched) -> None:
        thinking = await admitted_and_answered(store, 30)
        assert thinking._writes  # (the settle is a write under way, as with Redis)
        await thinking.drain()

    store = Watched()
    asyncio.run(run(store))
    assert store.calls == ["reserve", "add", "add"]  # (the reservation's, then the settle's)
    assert sum(store.counts_now("bob:hour").values()) == 30
