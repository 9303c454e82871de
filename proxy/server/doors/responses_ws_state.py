"""A Responses WebSocket's own responses (proxy.server.doors.responses_ws): kept in memory on the
connection, in front of the state store, so that `previous_response_id` continues them and an
`item_reference` names their output items with `store: false` and with the state store off, as
OpenAI's WebSocket mode keeps connection-local state. They end with the socket.

And the worker's count of open sockets per client key (`KeySockets`,
THINKPROXY_MAX_SOCKETS_PER_KEY).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from proxy.core import jsonio
from proxy.core.protocols.expansion import Expansion
from proxy.core.replay.keys import Tenants, store_key
from proxy.server.doors.responses_store import ITEM_KIND, MAX_CHAIN_TURNS, StoredResponses, response_entries
from proxy.server.doors.responses_turn import ResponseSaver


class SocketResponses(StoredResponses):
    """A connection's own responses, kept in memory in front of the state store: what
    `previous_response_id` reads first, and each one's output items, what an `item_reference`
    reads first, whatever the turn's `store` and whether the store is on. Bounded: at most
    `max_bytes` of records (THINKPROXY_MAX_BODY_BYTES: what one request may expand into anyway)
    and MAX_CHAIN_TURNS of them, the oldest dropped first with its items (continuing a dropped
    one is `previous_response_not_found`, as for an expired stored one; a reference to one of its
    items is left out, as one the store no longer holds)."""

    def __init__(self, shared: StoredResponses, max_bytes: int, max_turns: int = MAX_CHAIN_TURNS) -> None:
        super().__init__(shared.store)
        self.shared = shared
        self.max_bytes = max_bytes
        self.max_turns = max_turns
        self.held: OrderedDict[str, bytes] = OrderedDict()
        self.size = 0
        # Each held response's output items, by the key the store keeps them under (the tenant's
        # item key: a rotated secret's hash still finds them), and the keys of each response's.
        self.items: dict[str, bytes] = {}
        self.items_of: dict[str, list[str]] = {}

    async def load_raw(self, key: str) -> bytes | None:
        held = self.held.get(key)
        if held is not None:
            return held
        if self.store is None:  # (not on this connection, and no store to ask: not found)
            return None
        return await super().load_raw(key)

    async def referenced(self, refs: list[str], tenants: Tenants, expansion: Expansion) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for ref in refs:
            for tenant in tenants.every:
                value = self.items.get(store_key(tenant, ITEM_KIND, ref))
                if value is not None:
                    expansion.charge(len(value))
                    found[ref] = jsonio.loads(value)
                    break
        rest = [ref for ref in refs if ref not in found]
        if rest and self.store is not None:
            found.update(await super().referenced(rest, tenants, expansion))
        return found

    def keep(self, key: str, record: bytes, items: dict[str, bytes] | None = None) -> None:
        """A response's record under its store key, and its output `items` by their item keys."""
        self._drop(key)
        self.held[key] = record
        self.size += len(record)
        if items:
            self.items.update(items)
            self.items_of[key] = list(items)
            self.size += sum(len(value) for value in items.values())
        # (the record just kept stays, even alone past max_bytes: the next turn continues it; it is
        # at most STORED_RESPONSE_CAP, a larger one kept as its stub)
        while len(self.held) > 1 and (self.size > self.max_bytes or len(self.held) > self.max_turns):
            self._drop(next(iter(self.held)))

    def _drop(self, key: str) -> None:
        """A held response and its items let go (nothing when not held)."""
        record = self.held.pop(key, None)
        if record is not None:
            self.size -= len(record)
        for item_key in self.items_of.pop(key, ()):
            value = self.items.pop(item_key, None)
            if value is not None:
                self.size -= len(value)

    def saver(self, shared: bool) -> ResponseSaver:
        return _TurnSaver(self, shared)


class _TurnSaver:
    """Keeps one turn's response on its connection, and in the state store when `shared`."""

    __slots__ = ("responses", "shared")

    def __init__(self, responses: SocketResponses, shared: bool) -> None:
        self.responses = responses
        self.shared = shared

    async def save(
        self,
        tenant: str,
        final: dict[str, Any],
        own: list[Any],
        previous: str | None,
        earlier_keys: list[str],
    ) -> None:
        # (made once for both: the connection's copy and the store's; a stub past the cap, as the
        # store keeps it, with no items either)
        entries = response_entries(tenant, final, own, previous)
        self.responses.keep(entries.key, entries.record, entries.items)
        if self.shared:
            await self.responses.shared.put(tenant, entries, earlier_keys)


class KeySockets:
    """How many WebSockets each client key holds open on this worker, at most `cap` (0: no cap).
    A key is counted under its tenant hash (proxy.core.replay.keys.tenant_of: a keyed hash, never
    the key itself); connections without a key share one count. A count that falls to 0 is
    dropped, so the table holds only keys with a socket open."""

    __slots__ = ("cap", "open")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: dict[str, int] = {}

    def take(self, tenant: str) -> bool:
        """One more socket for `tenant`; False (nothing taken) when it holds `cap` already."""
        held = self.open.get(tenant, 0)
        if self.cap and held >= self.cap:
            return False
        self.open[tenant] = held + 1
        return True

    def release(self, tenant: str) -> None:
        """A socket `take` gave is closed."""
        held = self.open.get(tenant, 0) - 1
        if held > 0:
            self.open[tenant] = held
        else:
            self.open.pop(tenant, None)
