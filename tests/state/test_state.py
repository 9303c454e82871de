"""The replay store's backends: memory (bounds, TTL) and a real redis-server (TTL, outage)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from proxy.state import MemoryStore, RedisStore, StoreUnavailable, build_store
from proxy.state.memory import ENTRY_OVERHEAD, TENANT_OVERHEAD
from tests.helpers import make_settings
from tests.realredis import RedisServer, running_redis


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_memory_keeps_values_for_the_ttl_then_forgets_them() -> None:
    clock = Clock()
    store = MemoryStore(ttl=60, clock=clock)
    await store.put_many([("a", b"1"), ("b", b"2")])
    assert await store.get_many(["a", "b", "c"]) == [b"1", b"2", None]
    clock.now += 59.9
    assert await store.get_many(["a"]) == [b"1"]
    clock.now += 0.2
    assert await store.get_many(["a"]) == [None]
    assert len(store) == 1  # "b" was not read: still held, dropped by the next write
    await store.put_many([("c", b"3")])
    assert len(store) == 1
    assert await store.get_many(["b", "c"]) == [None, b"3"]


async def test_memory_stays_bounded_under_a_flood_of_unique_keys() -> None:
    store = MemoryStore(ttl=3600, max_entries=1000, max_bytes=200_000)
    value = b"x" * 100
    for batch in range(200):
        await store.put_many([(f"call_{batch}_{i}", value) for i in range(50)])  # 10 000 unique ids
        assert len(store) <= 1000
        assert store.bytes <= 200_000
    # the newest survive, the oldest were evicted
    assert await store.get_many(["call_199_49", "call_0_0"]) == [value, None]


async def test_memory_bytes_bound_evicts_oldest_and_skips_a_value_that_can_never_fit() -> None:
    store = MemoryStore(ttl=3600, max_entries=1000, max_bytes=2000)
    await store.put_many([("a", b"x" * 700), ("b", b"y" * 700)])
    await store.put_many([("c", b"z" * 700)])
    assert await store.get_many(["a", "b", "c"]) == [None, b"y" * 700, b"z" * 700]
    await store.put_many([("huge", b"h" * 5000)])
    assert await store.get_many(["huge", "c"]) == [None, b"z" * 700]


async def test_memory_rewrite_of_a_key_replaces_it() -> None:
    store = MemoryStore(ttl=10)
    await store.put_many([("a", b"1")])
    await store.put_many([("a", b"22")])
    assert await store.get_many(["a"]) == [b"22"]
    assert len(store) == 1


async def test_memory_a_tenant_past_its_share_evicts_its_own_entries_first() -> None:
    """One tenant's flood evicts its own oldest entries, never another tenant's (issue 41, item 2:
    14 requests with a 5 MiB image each wiped another tenant's stored response)."""
    store = MemoryStore(ttl=3600, max_bytes=100_000, tenant_share=20_000)
    await store.put_many([("b-response", b"b" * 5_000)], tenant="tenant-b")
    await store.put_many([("shared-replay", b"r" * 5_000)])  # (no tenant: the store-wide order)
    for i in range(40):
        await store.put_many([(f"a-{i}", b"a" * 5_000)], tenant="tenant-a")
        assert store.bytes <= 100_000
    assert await store.get_many(["b-response", "shared-replay"]) == [b"b" * 5_000, b"r" * 5_000]
    assert await store.get_many(["a-39", "a-0"]) == [b"a" * 5_000, None]
    assert store.tenant_bytes("tenant-a") > 20_000  # past its share while the store had room


async def test_memory_a_full_store_takes_from_whoever_is_most_past_its_share() -> None:
    store = MemoryStore(ttl=3600, max_bytes=60_000, tenant_share=25_000)
    for i in range(9):
        await store.put_many([(f"a-{i}", b"a" * 5_000)], tenant="tenant-a")  # ~45 KB: past its share
    await store.put_many([("b-0", b"b" * 5_000)], tenant="tenant-b")
    for i in range(1, 4):  # tenant b, within its share, fills the store: tenant a gives way
        await store.put_many([(f"b-{i}", b"b" * 5_000)], tenant="tenant-b")
    assert await store.get_many([f"b-{i}" for i in range(4)]) == [b"b" * 5_000] * 4
    assert (await store.get_many(["a-0"]))[0] is None and store.bytes <= 60_000


async def test_memory_a_value_past_a_tenants_share_is_not_kept() -> None:
    store = MemoryStore(ttl=3600, max_bytes=100_000, tenant_share=10_000)
    await store.put_many([("keep", b"k" * 1_000)], tenant="t")
    await store.put_many([("huge", b"h" * 20_000)], tenant="t")
    assert await store.get_many(["huge", "keep"]) == [None, b"k" * 1_000]


async def test_memory_accounting_matches_what_it_holds_through_every_operation() -> None:
    """`bytes` and each tenant's bytes are exactly what the entries held cost (their key's and
    value's object sizes plus the per-entry overhead), and a tenant is past its share exactly when
    its bytes are, after writes with and without a tenant, rewrites (of a key by another tenant
    too), values of any buffer type, evictions by both bounds, expiry, touches and deletes."""
    clock = Clock()
    store = MemoryStore(ttl=60, max_entries=12, max_bytes=9_000, tenant_share=2_500, clock=clock)

    def check() -> None:
        held: dict[str | None, int] = {}
        for key, (_, value, tenant) in store._data.items():
            extra = ENTRY_OVERHEAD if tenant is None else ENTRY_OVERHEAD + TENANT_OVERHEAD
            held[tenant] = held.get(tenant, 0) + sys.getsizeof(key) + sys.getsizeof(value) + extra
            assert type(value) is bytes
        assert store.bytes == sum(held.values())
        for tenant in ("t1", "t2", "t3"):
            assert store.tenant_bytes(tenant) == held.get(tenant, 0)
            kept = [key for key, entry in store._data.items() if entry[2] == tenant]
            assert list(store._tenant_keys.get(tenant, ())) == kept  # in written order
        assert store._over_share == {t for t in ("t1", "t2", "t3") if held.get(t, 0) > store.tenant_share}
        assert store.bytes <= store.max_bytes and len(store) <= store.max_entries

    for i in range(30):
        tenant = (None, "t1", "t2", "t1", "t3")[i % 5]
        value: bytes | bytearray | memoryview = b"v" * (100 + 37 * (i % 7))
        if i % 4 == 1:
            value = bytearray(value)  # a buffer that is not bytes: kept as an exact-size bytes copy
        elif i % 4 == 2:
            value = memoryview(bytes(value))
        items = [(f"k-{i}", value), (f"k-{i // 3}", b"r" * 50)]  # the second one rewrites an older key
        store.put_now(items, tenant=tenant)  # type: ignore[list-item]
        check()
        if i % 6 == 5:
            clock.now += 25
            await store.touch_many([f"k-{i - 1}", f"k-{i - 9}"])
            check()
        if i % 7 == 6:
            await store.delete_many([f"k-{i - 2}", "k-absent"])
            check()
    clock.now += 61  # everything expires: the next write drops it all first
    store.put_now([("last", b"l")], tenant="t1")
    check()
    assert len(store) == 1


async def test_memory_touch_keeps_an_entry_for_a_new_ttl_and_last_to_go() -> None:
    clock = Clock()
    store = MemoryStore(ttl=60, max_bytes=3_100, tenant_share=3_100, clock=clock)  # (~1 KB an entry)
    await store.put_many([("old", b"o" * 700), ("new", b"n" * 700)], tenant="t")
    clock.now += 50
    await store.touch_many(["old", "absent"])
    clock.now += 20  # "new" has expired, "old" was touched 20 s ago
    assert await store.get_many(["old", "new"]) == [b"o" * 700, None]
    await store.put_many([("x", b"x" * 700)], tenant="t")
    await store.touch_many(["old"])
    await store.put_many([("y", b"y" * 700), ("z", b"z" * 700)])  # over the bytes: the oldest goes
    assert await store.get_many(["old", "x"]) == [b"o" * 700, None]


# What a flood does to the process: run in a fresh interpreter so that its RSS is the store's and
# nothing else's. The values are what the proxy stores (orjson.dumps of a captured turn), whose
# buffers orjson over-allocates (~4 KiB behind a ~130-byte value): counted by their length, 100,000
# turns were 28.5 MiB "against the cap" and 420 MiB of RSS.
_FLOOD = textwrap.dedent(
    """
    import asyncio, gc, os, sys
    import orjson
    import proxy
    from proxy.state.memory import MemoryStore

    PAGE = os.sysconf("SC_PAGE_SIZE")  # 4 KiB on x86-64, 16 or 64 KiB on some arm64 kernels

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE  # resident pages

    CAP = int(sys.argv[1])
    TURNS = int(sys.argv[2])
    store = MemoryStore(ttl=3600, max_entries=10_000_000, max_bytes=CAP)
    gc.collect()
    before = rss()
    for batch in range(TURNS // 100):
        items = []
        for i in range(100):
            n = batch * 100 + i
            record = {"p": "deepseek", "m": "deepseek-v4-pro", "r": f"A tool: {n}.", "t": 1.7e12 + n}
            items.append((f"thinkproxy:replay:{n:040x}", orjson.dumps(record)))
        store.put_now(items)
    gc.collect()
    print(rss() - before, store.bytes, len(store))
    print(os.path.dirname(os.path.abspath(proxy.__file__)))
    """
)
# This checkout, wherever pytest is started: `python -c` imports `proxy` from its working directory
# first, then PYTHONPATH, then whatever the venv has installed (perhaps another checkout).
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc")
def test_memory_cap_bounds_what_the_process_really_holds() -> None:
    cap = 16 * 1024 * 1024
    turns = 200_000  # several times what fits: the cap, not the flood, decides what is held
    env = {**os.environ, "PYTHONMALLOC": "pymalloc", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _FLOOD, str(cap), str(turns)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
        check=True,
    )
    figures, imported = done.stdout.splitlines()
    assert Path(imported) == ROOT / "proxy"  # this tree's store is the one measured
    grown, counted, kept = (int(x) for x in figures.split())
    assert counted <= cap and 0 < kept < turns
    # Slack for the dict's spare slots and the allocator's rounding; the old count let RSS grow
    # 8-30 times the cap.
    assert grown <= cap * 1.5, (
        f"RSS grew {grown / 2**20:.1f} MiB for {kept} turns under a {cap / 2**20:.0f} MiB cap"
    )


def test_build_store_follows_the_settings() -> None:
    assert build_store(make_settings(state="off")) is None
    assert isinstance(build_store(make_settings()), MemoryStore)
    redis = build_store(make_settings(state_url="redis://127.0.0.1:1/0"))
    assert isinstance(redis, RedisStore)
    asyncio.run(redis.aclose())


# --- Redis ---------------------------------------------------------------------------------------


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


async def test_redis_round_trip_in_one_call_and_ttl(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, ttl=0.3)
    try:
        await store.put_many([(f"k{i}", f"v{i}".encode()) for i in range(300)])
        values = await store.get_many([f"k{i}" for i in range(300)] + ["absent"])
        assert values[:3] == [b"v0", b"v1", b"v2"] and values[299] == b"v299" and values[300] is None
        deadline = time.monotonic() + 10
        while (await store.get_many(["k0"]))[0] is not None:  # Redis expires it (PX 300)
            assert time.monotonic() < deadline, "key never expired"
            await asyncio.sleep(0.05)
    finally:
        await store.aclose()


async def test_redis_touch_keeps_a_key_for_a_new_ttl(redis_server: RedisServer) -> None:
    # (asserted on Redis's own PTTL, not on sleeps: the same on a fast or a loaded machine)
    store = RedisStore(redis_server.url, ttl=600)
    raw = Redis.from_url(redis_server.url)
    try:
        await store.put_many([("kept", b"1"), ("left", b"2")], tenant="t")
        for key in ("kept", "left"):  # both as if written long ago: 10 s to live
            await raw.pexpire(key, 10_000)
        await store.touch_many(["kept", "absent"])
        assert await raw.pttl("kept") > 500_000  # a new TTL (600 s) from now
        assert 0 < await raw.pttl("left") <= 10_000  # untouched: its old TTL runs on
        assert await raw.exists("absent") == 0  # touching an absent key does not create it
        assert await store.get_many(["kept", "left"]) == [b"1", b"2"]
    finally:
        await raw.aclose()
        await store.aclose()


async def test_redis_outage_is_reported_quickly_and_recovery_is_noticed(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, ttl=60, retry_after=0.2)
    try:
        await store.put_many([("a", b"1")])
        redis_server.stop()
        with pytest.raises(StoreUnavailable):
            await store.get_many(["a"])
        with pytest.raises(StoreUnavailable):  # while "down", no attempt at all
            await store.put_many([("b", b"2")])
        redis_server.start()  # same port, empty (no persistence)
        deadline = time.monotonic() + 10
        while True:
            try:
                assert await store.get_many(["a"]) == [None]
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "store never came back"
                await asyncio.sleep(0.05)
    finally:
        await store.aclose()


async def test_redis_that_never_answers_costs_a_bounded_wait() -> None:
    # A listening socket that accepts and never replies: a hung Redis.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0", ttl=60, timeout=0.1)
    try:
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(store.get_many(["a"]), 5)  # the outer bound only guards the test
    finally:
        await store.aclose()
        server.close()
