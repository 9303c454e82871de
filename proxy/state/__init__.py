"""Shared state: the replay store's interface and its two backends (in-process memory, Redis).

`build_store(settings)` picks the backend: none when `THINKPROXY_STATE=off`, Redis when
`THINKPROXY_STATE_URL` is set, memory otherwise.
"""

from __future__ import annotations

from proxy.settings import Settings
from proxy.state.base import StateStore, StoreUnavailable
from proxy.state.memory import MemoryStore
from proxy.state.redis import RedisStore

__all__ = ["MemoryStore", "RedisStore", "StateStore", "StoreUnavailable", "build_store"]


def build_store(settings: Settings) -> StateStore | None:
    if settings.state == "off":
        return None
    if settings.state_url is not None:
        return RedisStore(settings.state_url.get_secret_value(), ttl=settings.state_ttl)
    return MemoryStore(ttl=settings.state_ttl)
