"""The store interface: opaque byte values under string keys, each kept for a fixed time.

Small on purpose: a request makes at most one `get_many` (one round trip, whatever the number of
keys) and a finished response at most one `put_many`. A backend that cannot answer raises
`StoreUnavailable`; callers treat that as "nothing remembered", never as a failed request.
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

    async def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Store each value for the store's TTL, replacing any earlier value under its key."""
        ...

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Forget each key (absent ones are no error)."""
        ...

    async def ping(self) -> None:
        """Return when the backend answers (bounded like every call); else StoreUnavailable."""
        ...

    async def aclose(self) -> None: ...
