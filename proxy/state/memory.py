"""The in-process backend: a dict in least-recently-written order, bounded by entries and bytes.

Whatever clients send (a flood of unique tool-call ids), the oldest entries are evicted once
either bound is reached, so the process never grows past `max_bytes` of values. Expiry is checked
on read and the oldest expired entries are dropped on write; no timer runs.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

# Per-entry overhead counted against max_bytes besides the value: the key, the tuple, the slot.
ENTRY_OVERHEAD = 160
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
        for key, value in items:
            size = len(value) + len(key) + ENTRY_OVERHEAD
            if size > self.max_bytes:
                continue  # could never fit: not worth evicting everything else for it
            if key in self._data:
                self._drop(key)
            self._data[key] = (expires, value)
            self.bytes += size
        self._evict(now)

    def _drop(self, key: str) -> None:
        _, value = self._data.pop(key)
        self.bytes -= len(value) + len(key) + ENTRY_OVERHEAD

    def _evict(self, now: float) -> None:
        data = self._data
        # Oldest first: written longest ago, so also the first to expire (one TTL for all).
        while data:
            key, (expires, _) = next(iter(data.items()))
            if expires > now and len(data) <= self.max_entries and self.bytes <= self.max_bytes:
                break
            self._drop(key)

    async def aclose(self) -> None:
        self._data.clear()
        self.bytes = 0
