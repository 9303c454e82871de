"""The store interface: opaque byte values under string keys, each kept for a fixed time.

Small on purpose: a request makes at most one `get_many` per thing it looks up (one round trip,
whatever the number of keys; a `previous_response_id` chain one per earlier turn) and a finished
response at most one `put_many` (and one `touch_many` for the earlier turns it continues). A
backend that cannot answer raises `StoreUnavailable`; callers treat that as "nothing remembered",
never as a failed request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class StoreUnavailable(Exception):
    """The backend did not answer (down, slow, refused): the caller goes on without it."""


class StateStore(Protocol):
    name: str  # "memory" or "redis", for logs and docs

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The value of each key (None where absent or expired), in the order asked."""
        ...

    async def put_many(self, items: Sequence[tuple[str, bytes]], *, tenant: str | None = None) -> None:
        """Store each value for the store's TTL, replacing any earlier value under its key.
        `tenant` (the tenant hash) counts the values toward that tenant's share where the backend
        keeps shares (memory: one tenant's writes evict its own entries first)."""
        ...

    async def touch_many(self, keys: Sequence[str]) -> None:
        """Keep each key that is still held for a new TTL (absent ones are no error)."""
        ...

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Forget each key (absent ones are no error)."""
        ...

    async def ping(self) -> None:
        """Return when the backend answers (bounded like every call); else StoreUnavailable."""
        ...

    async def aclose(self) -> None: ...
