"""The sessions' listener (proxy.core.events): at the end of each request a model answered, its
session and client kind from the headers it came with (proxy.core.sessions.identity), its facts
(proxy.core.sessions.facts) counted in the session store, the stats and, with Redis, the shared
store. It also leaves the session and client kind in the record's notes for the console's row,
which ends after it (proxy.server.app registers it first).

Per request: one observer holding the few headers identity reads, and at the end one tuple of
facts (their JSON is made when read, or at once for Redis). It reads the trace's outcome at the
end (finish reason, tool calls, times) and watches no trace event: a tap on the trace would cost
every request more than all the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson

from proxy.core.events import MODEL_ROUTES, AccessRecord, RequestObserver
from proxy.core.sessions.facts import request_facts
from proxy.core.sessions.identity import (
    CHAIN_NOTE,
    ChainLinks,
    SessionKey,
    client_kind,
    pick_headers,
    scoped,
    session_of,
)

if TYPE_CHECKING:
    from proxy.sessions.shared import SharedSessions
    from proxy.sessions.stats import Stats
    from proxy.sessions.store import SessionStore

logger = logging.getLogger("thinkproxy.sessions")
# Where the session's id (as the API shows it) and the client kind wait on the record for the
# console's row (`AccessRecord.notes`).
SESSION_NOTE = "session"
CLIENT_KIND_NOTE = "client_kind"
CHANGES_NOTE = "changes"


# Whose sessions a request counts in, from its headers (GatewayAuth.session_scope); None: BYOK.
ScopeOf = Callable[[Iterable[tuple[str, str]]], "str | None"]


def _unscoped(headers: Iterable[tuple[str, str]]) -> str | None:
    return None


class SessionsListener:
    def __init__(self, store: SessionStore, stats: Stats, shared: SharedSessions | None = None) -> None:
        self.store = store
        self.stats = stats
        self.shared = shared
        # Set by the app to the current gateway's (it follows a reload of the keys).
        self.scope_of: ScopeOf = _unscoped
        self._counter = 0

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> RequestObserver:
        pairs = list(headers)
        return _SessionObserver(self, pick_headers(pairs), int(time.time() * 1000), self.scope_of(pairs))

    def finish(
        self,
        record: AccessRecord,
        headers: dict[str, str],
        at_ms: int,
        total_ms: float,
        tenant: str | None = None,
    ) -> None:
        """`tenant`: the scope_of the request's headers (every key's sessions apart in gateway mode)."""
        links, own_response = _chain(record.notes.get(CHAIN_NOTE))
        continued = None
        if links is not None and links.previous_response_id is not None:
            continued = self.store.continued(tenant, links.previous_response_id)
        request_id = record.request_id
        if not request_id:
            self._counter += 1
            request_id = f"request-{self._counter}"
        key = session_of(headers, request_id, links, continued)
        if key.source == "request" and own_response is not None:
            key = SessionKey(own_response, "responses")  # the first response of a chain names it
        if own_response is not None:
            self.store.remember_response(tenant, own_response, key.id)
        client = client_kind(headers)
        session_id = scoped(key.id, tenant)
        record.notes[SESSION_NOTE] = session_id
        record.notes[CLIENT_KIND_NOTE] = client
        if record.route not in MODEL_ROUTES and record.usage is None:
            return  # (a request no model was asked for: a listing, a stored response read)
        changes = record.notes.get(CHANGES_NOTE)
        facts = request_facts(
            record,
            at_ms=at_ms,
            total_ms=total_ms,
            client=client,
            changes=changes if isinstance(changes, list) else None,
        )
        # Copied to its exact size: orjson's bytes keep the ~8 KiB buffer they were written in
        # (tracemalloc: 8.2 KB held per 0.7 KB detail), which would put ~10x the counted bytes in
        # the store.
        session = self.store.add(session_id, key.source, client, facts)
        self.stats.add(facts)
        if self.shared is not None:  # (only then is a request's JSON made as it ends)
            self.shared.publish(session.summary(), orjson.dumps(facts.as_dict()))


def _chain(note: Any) -> tuple[ChainLinks | None, str | None]:
    if isinstance(note, tuple) and len(note) == 2 and isinstance(note[0], ChainLinks):
        own = note[1]
        return note[0], own if isinstance(own, str) else None
    return None, None


class _SessionObserver(RequestObserver):
    __slots__ = ("at_ms", "headers", "listener", "tenant")
    wants_outcome = True  # (finish reason, tool calls, times: read at the end)

    def __init__(
        self, listener: SessionsListener, headers: dict[str, str], at_ms: int, tenant: str | None
    ) -> None:
        self.listener = listener
        self.headers = headers
        self.at_ms = at_ms
        self.tenant = tenant

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        try:
            self.listener.finish(record, self.headers, self.at_ms, duration_ms, self.tenant)
        except Exception:  # accounting never fails a request's end
            logger.exception("sessions: counting the request failed")
