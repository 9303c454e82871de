"""Budgets shared across replicas: two gateways in front of the same simulated upstream, both
counting in one real Redis (THINKPROXY_STATE_URL). What one replica's answers spent, the other
refuses; concurrent additions are all counted; and a Redis that goes away refuses no one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.policy.store import RedisBudgets
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings
from tests.realredis import RedisServer, running_redis

ASK = {"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": "Why is the sky blue?"}]}
HEADERS = {"authorization": "Bearer ck-bob", "x-thinking-level": "standard"}
# The stores under test directly get a generous bound: these tests are about what is counted, not
# how fast this machine answers. With the default 0.25 s, 200 additions queued for a pool of 32
# connections timed out on a loaded CI runner (the store then fails open, as it should in service).
GENEROUS_S = 10.0


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


def replica(mock: BackgroundServer, redis: RedisServer, policy: Path) -> BackgroundServer:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        upstream_api_key="sk-operator",
        client_keys=["bob:ck-bob"],
        admin_keys=["ops:ak-ops"],
        policy_file=policy,
        state_url=redis.url,
    )
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


def test_what_one_replica_counted_the_other_refuses(
    mock: BackgroundServer, redis: RedisServer, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("keys:\n  bob: {reasoning_tokens: {limit: 1, per: week}}\n")
    with replica(mock, redis, policy) as one, replica(mock, redis, policy) as two:
        first = httpx.post(f"{one.url}/v1/chat/completions", json=ASK, headers=HEADERS, timeout=20)
        assert first.status_code == 200
        spent = first.json()["usage"]["completion_tokens_details"]["reasoning_tokens"]
        for _ in range(100):  # (the count is written after the answer ends: wait for it, bounded)
            report = httpx.get(
                f"{two.url}/thinkproxy/usage", headers={"authorization": "Bearer ak-ops"}
            ).json()
            if report["clients"]["bob"]["budget"]["spent"]:
                break
            asyncio.run(asyncio.sleep(0.02))
        assert report["clients"]["bob"]["budget"] == {"limit": 1, "per": "week", "spent": spent, "left": 0}
        assert report["budget_store"]["name"] == "redis"
        refused = httpx.post(f"{two.url}/v1/chat/completions", json=ASK, headers=HEADERS, timeout=20)
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "reasoning_budget_exceeded"


def test_concurrent_additions_are_all_counted(redis: RedisServer) -> None:
    async def run() -> dict[int, int]:
        stores = [RedisBudgets(redis.url, timeout=GENEROUS_S) for _ in range(2)]
        try:
            await asyncio.gather(*(stores[i % 2].add("race:day", 7, 3, 100, []) for i in range(200)))
            return await stores[0].counts("race:day")
        finally:
            for store in stores:
                await store.aclose()

    assert asyncio.run(run()) == {7: 600}


def test_stale_buckets_are_deleted_and_the_hash_expires(redis: RedisServer) -> None:
    async def run() -> tuple[dict[int, int], int]:
        store = RedisBudgets(redis.url, timeout=GENEROUS_S)
        try:
            await store.add("stale:day", 1, 5, 100, [])
            await store.add("stale:day", 70, 2, 100, [1])
            ttl = await store._client.ttl("tp:budget:stale:day")
            return await store.counts("stale:day"), int(ttl)
        finally:
            await store.aclose()

    counts, ttl = asyncio.run(run())
    assert counts == {70: 2} and 0 < ttl <= 100


def test_a_redis_that_went_away_refuses_no_one(mock: BackgroundServer, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("keys:\n  bob: {reasoning_tokens: {limit: 1, per: week}}\n")
    gone = RedisServer().start()
    url = gone.url
    gone.stop()
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        upstream_api_key="sk-operator",
        client_keys=["bob:ck-bob"],
        admin_keys=["ops:ak-ops"],
        policy_file=policy,
        state_url=url,
        state="off",
    )
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
        for _ in range(3):
            r = httpx.post(f"{proxy.url}/v1/chat/completions", json=ASK, headers=HEADERS, timeout=20)
            assert r.status_code == 200
        report = httpx.get(f"{proxy.url}/thinkproxy/usage", headers={"authorization": "Bearer ak-ops"}).json()
    assert report["budget_store"]["errors"] >= 3 and report["clients"]["bob"]["requests"] == 3


def test_concurrent_reservations_each_see_the_ones_before_them(redis: RedisServer) -> None:
    """The reserve is one atomic step (MULTI/EXEC): of 200 requests reserving 10 tokens each at once
    against a limit of 1000, on two replicas, exactly 100 are admitted (proxy.core.policy.budgets.admits)."""
    from proxy.core.policy.budgets import Window

    window = Window(86_400)

    async def run() -> list[dict[int, int]]:
        stores = [RedisBudgets(redis.url, timeout=GENEROUS_S) for _ in range(2)]
        try:
            return await asyncio.gather(*(stores[i % 2].reserve("held:day", 7, 10, 100) for i in range(200)))
        finally:
            for store in stores:
                await store.aclose()

    seen = asyncio.run(run())
    assert sorted(counts[7] for counts in seen) == list(range(10, 2001, 10))
    now = 7 * window.width
    assert sum(window.admits(counts, now, limit=1000, reserved=10) for counts in seen) == 100
