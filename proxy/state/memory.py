"""The in-process backend: a dict in least-recently-written order, bounded by entries and bytes,
with a share per tenant.

Whatever clients send (a flood of unique tool-call ids), the oldest entries are evicted once
either bound is reached, so the store never holds more than `max_bytes`. Expiry is checked on read
and the oldest expired entries are dropped on write; no timer runs.

**A share per tenant.** An entry written with its tenant (`put_many(..., tenant=…)`: every
entry the proxy writes, the replay store's remembered turns, the Responses door's stored responses,
items and large reasoning payloads, native response owners) counts toward that tenant's bytes.
A tenant may use more than its share (`tenant_share`, by default an eighth of `max_bytes`) while
the store has room; once it is full, what gives way is the oldest entry of the writer when
the writer holds more than its share, else of the tenant holding the most beyond its share, and
only when no tenant is past its share the oldest entry of all. So one tenant's flood (14 requests
with a 5 MiB image each) evicts its own entries, never another tenant's stored response. Entries
written without a tenant take part only in the store-wide order.

`max_bytes` bounds what the process really holds, not the values' lengths: each value is copied
into a bytes object of its exact size (orjson.dumps, which makes the values, returns bytes whose
buffer can be ~4 KiB behind a ~130-byte value: counted by length, a 64 MiB cap let RSS grow by
~420 MiB), and each entry counts its key's and value's object sizes plus the dict's share.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

# Per entry, besides the key and value objects: the (expiry, value) tuple and its float, the dict's
# slot and the OrderedDict's link. tracemalloc measured 171 bytes on average at 100,000 entries
# (CPython 3.11); the rest covers tables just grown (they double) and the allocator's rounding.
ENTRY_OVERHEAD = 200
# An entry written with its tenant is also in that tenant's ordered key set (a dict slot and link).
TENANT_OVERHEAD = 100
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
TENANT_SHARE_DIVISOR = 8  # the default share of one tenant: max_bytes / 8 (8 MiB of 64 MiB)


class MemoryStore:
    name = "memory"

    def __init__(
        self,
        *,
        ttl: float,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tenant_share: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.tenant_share = tenant_share if tenant_share is not None else max_bytes // TENANT_SHARE_DIVISOR
        self.clock = clock
        self._data: OrderedDict[str, tuple[float, bytes, str | None]] = OrderedDict()
        self.bytes = 0
        # Per tenant: its keys in written order, and the bytes they hold.
        self._tenant_keys: dict[str, OrderedDict[str, None]] = {}
        self._tenant_bytes: dict[str, int] = {}
        self._over_share: set[str] = set()

    def __len__(self) -> int:
        return len(self._data)

    def tenant_bytes(self, tenant: str) -> int:
        """What the entries written with `tenant` hold (as counted against its share)."""
        return self._tenant_bytes.get(tenant, 0)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        now = self.clock()
        out: list[bytes | None] = []
        for key in keys:
            entry = self._data.get(key)
            if entry is None:
                out.append(None)
            elif entry[0] <= now:
                self._drop(key)
                out.append(None)
            else:
                out.append(entry[1])
        return out

    async def put_many(self, items: Sequence[tuple[str, bytes]], *, tenant: str | None = None) -> None:
        self.put_now(items, tenant=tenant)

    def put_now(self, items: Sequence[tuple[str, bytes]], *, tenant: str | None = None) -> None:
        """The synchronous write (the async one only wraps it): nothing in it can wait."""
        now = self.clock()
        expires = now + self.ttl
        for key, given in items:
            # An exact-size copy (see the module docstring): bytes(value) and value[:] would
            # return the same object, buffer and all. Counted as the copy (`_held`), whatever
            # buffer it was given.
            value = bytes(memoryview(given))
            size = _held(key, value, tenant)
            if size > self.max_bytes or (tenant is not None and size > self.tenant_share):
                continue  # could never fit: not worth evicting everything else for it
            if key in self._data:
                self._drop(key)
            self._data[key] = (expires, value, tenant)
            self.bytes += size
            if tenant is not None:
                self._tenant_keys.setdefault(tenant, OrderedDict())[key] = None
                self._add_tenant_bytes(tenant, size)
        self._evict(now, tenant)

    async def touch_many(self, keys: Sequence[str]) -> None:
        """Keep each key (present and not expired) for a new TTL, as if written now: a stored
        conversation's earlier turns stay as long as its latest one."""
        now = self.clock()
        for key in keys:
            entry = self._data.get(key)
            if entry is None or entry[0] <= now:
                continue
            self._data[key] = (now + self.ttl, entry[1], entry[2])
            self._data.move_to_end(key)
            if entry[2] is not None:
                self._tenant_keys[entry[2]].move_to_end(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            if key in self._data:
                self._drop(key)

    def _add_tenant_bytes(self, tenant: str, size: int) -> None:
        held = self._tenant_bytes.get(tenant, 0) + size
        if held > 0:
            self._tenant_bytes[tenant] = held
        else:
            self._tenant_bytes.pop(tenant, None)
            self._tenant_keys.pop(tenant, None)
        if held > self.tenant_share:
            self._over_share.add(tenant)
        else:
            self._over_share.discard(tenant)

    def _drop(self, key: str) -> None:
        _, value, tenant = self._data.pop(key)
        size = _held(key, value, tenant)
        self.bytes -= size
        if tenant is not None:
            keys = self._tenant_keys.get(tenant)
            if keys is not None:
                keys.pop(key, None)
            self._add_tenant_bytes(tenant, -size)

    def _evict(self, now: float, writer: str | None) -> None:
        data = self._data
        # Expired first: written longest ago, so the first to expire (one TTL for all)...
        while data:
            key, (expires, _, _) = next(iter(data.items()))
            if expires > now:
                break
            self._drop(key)
        # ...then, while over a bound, the oldest entry of whoever is most past its share.
        while data and (len(data) > self.max_entries or self.bytes > self.max_bytes):
            self._drop(self._victim(writer))

    def _victim(self, writer: str | None) -> str:
        """The key to evict next (module docstring: the writer's own, when it is past its share)."""
        over = self._over_share
        if over:
            if writer is not None and writer in over:
                tenant = writer
            else:
                tenant = max(over, key=self._tenant_bytes.__getitem__)
            return next(iter(self._tenant_keys[tenant]))
        return next(iter(self._data))

    async def ping(self) -> None:
        pass  # in this process: it is up as long as the process is

    async def aclose(self) -> None:
        self._data.clear()
        self._tenant_keys.clear()
        self._tenant_bytes.clear()
        self._over_share.clear()
        self.bytes = 0


def _held(key: str, value: bytes, tenant: str | None) -> int:
    """What one entry costs the process. sys.getsizeof of a bytes object assumes an exact-size
    buffer, which is what the store keeps (`put_now` measures its copy, not the buffer it was
    given); the key is the caller's string, kept as it is."""
    extra = ENTRY_OVERHEAD if tenant is None else ENTRY_OVERHEAD + TENANT_OVERHEAD
    return sys.getsizeof(key) + sys.getsizeof(value) + extra
