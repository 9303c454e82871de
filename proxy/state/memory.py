"""The in-process backend: a dict in least-recently-written order, bounded by entries and bytes.

Whatever clients send (a flood of unique tool-call ids), the oldest entries are evicted once
either bound is reached, so the store never holds more than `max_bytes`. Expiry is checked on read
and the oldest expired entries are dropped on write; no timer runs.

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
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class MemoryStore:
    name = "memory"

    def __init__(
        self,
        *,
        ttl: float,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._data: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._data)

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

    async def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        self.put_now(items)

    def put_now(self, items: Sequence[tuple[str, bytes]]) -> None:
        """The synchronous write (the async one only wraps it): nothing in it can wait."""
        now = self.clock()
        expires = now + self.ttl
        for key, given in items:
            size = _held(key, given)
            if size > self.max_bytes:
                continue  # could never fit: not worth evicting everything else for it
            if key in self._data:
                self._drop(key)
            # An exact-size copy (see the module docstring): bytes(value) and value[:] would
            # return the same object, buffer and all.
            value = bytes(memoryview(given))
            self._data[key] = (expires, value)
            self.bytes += size
        self._evict(now)

    async def delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            if key in self._data:
                self._drop(key)

    def _drop(self, key: str) -> None:
        _, value = self._data.pop(key)
        self.bytes -= _held(key, value)

    def _evict(self, now: float) -> None:
        data = self._data
        # Oldest first: written longest ago, so also the first to expire (one TTL for all).
        while data:
            key, (expires, _) = next(iter(data.items()))
            if expires > now and len(data) <= self.max_entries and self.bytes <= self.max_bytes:
                break
            self._drop(key)

    async def ping(self) -> None:
        pass  # in this process: it is up as long as the process is

    async def aclose(self) -> None:
        self._data.clear()
        self.bytes = 0


def _held(key: str, value: bytes) -> int:
    """What one entry costs the process. sys.getsizeof of a bytes object assumes an exact-size
    buffer, which is what the store keeps; the key is the caller's string, kept as it is."""
    return sys.getsizeof(key) + sys.getsizeof(value) + ENTRY_OVERHEAD
