"""The sessions capability put together: its store, stats, listener and (with Redis) the shared
store, built from the settings; what the API reads (this process's sessions, or every replica's)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from proxy.sessions.listener import SessionsListener
from proxy.sessions.stats import Stats
from proxy.sessions.store import SessionStore
from proxy.settings import Settings

if TYPE_CHECKING:
    from proxy.sessions.shared import SharedSessions

logger = logging.getLogger("thinkproxy.sessions")


class SessionsService:
    def __init__(self, store: SessionStore, stats: Stats, shared: SharedSessions | None = None) -> None:
        self.store = store
        self.stats = stats
        self.shared = shared
        self.listener = SessionsListener(store, stats, shared)

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionsService | None:
        if not settings.sessions:
            return None
        store = SessionStore(
            max_sessions=settings.sessions_max,
            max_bytes=settings.sessions_max_bytes,
            per_session=settings.sessions_details_per_session,
        )
        shared = None
        if settings.state_url is not None:
            from proxy.sessions.shared import SharedSessions  # redis is imported only when it is used

            shared = SharedSessions(
                settings.state_url.get_secret_value(),
                max_sessions=settings.sessions_max,
                per_session=settings.sessions_details_per_session,
                ttl_s=settings.state_ttl * 24,
            )
        return cls(store, Stats(settings.stats_history), shared)

    async def summaries(self) -> tuple[list[dict[str, Any]], bool]:
        """Every kept session's summary, and whether they are every replica's."""
        local = [session.summary() for session in self.store.newest_first()]
        if self.shared is not None:
            found = await self.shared.summaries()
            if found is not None:
                return found, True
        return local, False

    async def session(self, session_id: str) -> tuple[dict[str, Any], list[bytes]] | None:
        if self.shared is not None:
            found = await self.shared.session(session_id)
            if found is not None:
                return found
        session = self.store.get(session_id)
        if session is None:
            return None
        return session.summary(), [orjson.dumps(facts.as_dict()) for facts in session.details]

    async def aclose(self) -> None:
        if self.shared is not None:
            await self.shared.aclose()
