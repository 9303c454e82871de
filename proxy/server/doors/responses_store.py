"""The Responses door's state-store I/O (proxy.server.doors.responses): stored responses and the
items an `item_reference` names (reasoning payloads too large to seal inline are both doors':
proxy.server.doors.common).

- A stored response holds its own turn only (proxy.core.protocols.responses.state.StoredResponse):
  `previous_response_id` walks the chain of records back (`StoredResponses.earlier`), one lookup
  per earlier turn, and a new record touches the earlier ones so the whole chain lives as long as
  its latest turn. A chain of n turns stores O(n) bytes, not O(n^2). A chain is walked back at
  most MAX_CHAIN_TURNS turns (past it a 400 asks for the items in `input`), letting the event
  loop run between records.
- One record holds at most STORED_RESPONSE_CAP bytes; past it a stub says why it cannot be
  continued or read. Each record, item and payload counts toward its tenant's share of the store
  (proxy.state.memory): one tenant's flood evicts its own entries.
- What a request brings back (references, earlier turns' items: not the instructions and tools
  each record echoes) counts against its expansion limit (proxy.core.protocols.expansion): past
  THINKPROXY_MAX_BODY_BYTES, a 413. References are read in batches, so the 413 comes before the
  rest are fetched.

A store that does not answer never fails a request that does not need it: a write is skipped
(logged), a reference left out; a `previous_response_id` it cannot read is a 503.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from proxy.core import jsonio
from proxy.core.errors import BadRequest, NotFound, ServiceUnavailable, quoted
from proxy.core.protocols.expansion import Expansion
from proxy.core.protocols.responses.state import RESPONSE_KIND, STORED_RESPONSE_CAP, StoredResponse
from proxy.core.replay.keys import Tenants, store_key
from proxy.server.doors.common import read_spilled
from proxy.server.tenancy import every_key, get_rotated
from proxy.state.base import StateStore

logger = logging.getLogger("thinkproxy.responses")

ITEM_KIND = "response_item"  # the replay_keys kind of a stored output item
# The most stored turns a `previous_response_id` chain is walked back (one lookup each): past it a
# 400 asks for the items in `input`. Codex sends its items itself; 1,000 turns is far past what
# any client continues by id, and bounds what one request can make the store answer.
MAX_CHAIN_TURNS = 1_000
CHAIN_YIELD_EVERY = 64  # a chain walk lets the event loop run other tasks this often
REFERENCE_BATCH = 256  # `item_reference` ids read per store call (counted before the next)


def input_items(parsed: dict[str, Any]) -> list[Any]:
    """The request's own input as a list of items."""
    current = parsed.get("input")
    if current is not None and not isinstance(current, (str, list)):
        raise BadRequest("input must be a string or a list of items.", param="input")
    if isinstance(current, str):
        return [{"type": "message", "role": "user", "content": current}]
    return list(current or ())


def stored_keys(tenants: Tenants, response_id: str, stored: StoredResponse) -> list[str]:
    """What deleting a stored response drops, under each of the client's hashes: its record and
    its output items (what an `item_reference` reaches)."""
    items = [
        item["id"]
        for item in stored.response.get("output") or ()
        if isinstance(item, dict) and isinstance(item.get("id"), str)
    ]
    keys = every_key(tenants, partial(_key_of, RESPONSE_KIND, response_id))
    for item_id in items:
        keys += every_key(tenants, partial(_key_of, ITEM_KIND, item_id))
    return keys


def _key_of(kind: str, ident: str, tenant: str) -> str:
    return store_key(tenant, kind, ident)


def _keys_of(kind: str, idents: list[str], tenant: str) -> list[str]:
    return [store_key(tenant, kind, ident) for ident in idents]


def is_reference(item: Any) -> bool:
    """An `item_reference` (its type may be left out: an object with only an id)."""
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        return False
    return item.get("type") == "item_reference" or (item.get("type") is None and "role" not in item)


class StoredResponses:
    """The state-store side of the Responses door, bound to its store (None: the store is off)."""

    def __init__(self, store: StateStore | None) -> None:
        self.store = store

    async def earlier(
        self, parsed: dict[str, Any], tenants: Tenants, expansion: Expansion
    ) -> tuple[list[Any], list[str]]:
        """The earlier turns `previous_response_id` names, oldest first, and their store keys: the
        chain of stored records walked back (each holds its own turn and names the one before),
        each counted against the request's expansion limit."""
        previous = parsed.get("previous_response_id")
        if previous is None:
            return [], []
        if not isinstance(previous, str) or not previous:
            raise BadRequest("previous_response_id must be a response id.", param="previous_response_id")
        shares: list[list[Any]] = []
        visited: set[str] = set()  # (a record naming one already walked ends the chain: no loop)
        store_keys: list[str] = []  # (where each was found: under an earlier secret's hash after a rotation)
        at: str | None = previous
        while at is not None and at not in visited:
            if len(store_keys) >= MAX_CHAIN_TURNS:
                raise BadRequest(
                    f"Previous response {quoted(previous)} continues a chain of more than "
                    f"{MAX_CHAIN_TURNS:,} stored turns, the most the proxy walks back for "
                    "previous_response_id. Send the conversation's items in input instead (or start a "
                    "new chain from them).",
                    code="previous_response_chain_too_long",
                    param="previous_response_id",
                )
            if store_keys and len(store_keys) % CHAIN_YIELD_EVERY == 0:
                await asyncio.sleep(0)  # (a long walk never holds the loop: the memory store never waits)
            key, raw = await self.load_rotated(tenants, at)
            stored = StoredResponse.decode(raw)
            if stored is None:
                if at == previous:
                    raise BadRequest(
                        f"Previous response with id {quoted(previous)} not found.",
                        code="previous_response_not_found",
                        param="previous_response_id",
                    )
                raise BadRequest(
                    f"Previous response {quoted(previous)} continues response {quoted(at)}, which is no "
                    "longer stored (expired, deleted or evicted): the conversation cannot be rebuilt. Send "
                    "its items in input instead.",
                    code="previous_response_not_found",
                    param="previous_response_id",
                )
            if stored.too_large:
                raise BadRequest(
                    f"Response {quoted(at)} was too large to store ({stored.too_large} bytes; one stored "
                    f"response holds at most {STORED_RESPONSE_CAP}), so it cannot be continued with "
                    "previous_response_id. Send the conversation's items in input instead.",
                    code="previous_response_too_large",
                    param="previous_response_id",
                )
            share = stored.conversation()
            # (what the turn puts back: its items, not the instructions and tools each record echoes)
            expansion.charge(len(jsonio.dumps(share)))
            shares.append(share)
            visited.add(at)
            store_keys.append(key)
            at = stored.previous
        return [item for share in reversed(shares) for item in share], store_keys

    async def made_from(
        self, tenants: Tenants, response_id: str, stored: StoredResponse
    ) -> list[tuple[str, list[Any]]]:
        """The items a stored response was made from, per turn, oldest first ((response id, its
        items)): each earlier turn of its `previous_response_id` chain (what went in, what came
        out), then its own input (GET /v1/responses/{id}/input_items). The chain is walked as for
        a continuation (at most MAX_CHAIN_TURNS turns, yielding to the loop); an earlier turn no
        longer stored, or stored as a stub, is a 404 that names it: the list would not be whole."""
        turns: list[tuple[str, list[Any]]] = [(response_id, list(stored.input))]
        visited = {response_id}
        at = stored.previous
        while at is not None and at not in visited:
            if len(turns) > MAX_CHAIN_TURNS:
                raise BadRequest(
                    f"Response {quoted(response_id)} continues a chain of more than {MAX_CHAIN_TURNS:,} "
                    "stored turns, the most the proxy walks back: its input items cannot be listed.",
                    code="previous_response_chain_too_long",
                )
            if len(turns) % CHAIN_YIELD_EVERY == 0:
                await asyncio.sleep(0)  # (a long walk never holds the loop)
            earlier = StoredResponse.decode((await self.load_rotated(tenants, at))[1])
            if earlier is None or earlier.too_large:
                why = (
                    "was too large to store"
                    if earlier
                    else "is no longer stored (expired, deleted or evicted)"
                )
                raise NotFound(
                    f"Response {quoted(response_id)} continues response {quoted(at)}, which {why}: "
                    "its input items cannot be listed whole.",
                    code="not_found",
                )
            turns.append((at, earlier.conversation()))
            visited.add(at)
            at = earlier.previous
        turns.reverse()
        return turns

    async def resolve_references(
        self, items: list[Any], tenants: Tenants, expansion: Expansion
    ) -> tuple[list[Any], list[str], list[str]]:
        """Input items with each `item_reference` replaced by the stored item it names, each
        distinct id looked up once and put in once (a repeated reference is left out and listed
        second); those the store does not hold (expired, another tenant's, the store off) are left
        out and listed first. What the references bring in counts against `expansion`."""
        refs = list(dict.fromkeys(item["id"] for item in items if is_reference(item)))
        if not refs:
            return items, [], []
        found = await self.referenced(refs, tenants, expansion)
        out: list[Any] = []
        placed: set[str] = set()
        repeated: dict[str, None] = {}
        for item in items:
            if not is_reference(item):
                out.append(item)
            elif item["id"] in placed:
                repeated[item["id"]] = None
            else:
                placed.add(item["id"])
                if item["id"] in found:
                    out.append(found[item["id"]])
        return out, [ref for ref in refs if ref not in found], list(repeated)

    async def referenced(self, refs: list[str], tenants: Tenants, expansion: Expansion) -> dict[str, Any]:
        """The stored items of the ids `refs` the store holds, by id (counted against `expansion`)."""
        found: dict[str, Any] = {}
        if self.store is not None:
            # In batches, each counted before the next is read: past the limit, the 413 comes
            # before the rest are fetched.
            for start in range(0, len(refs), REFERENCE_BATCH):
                batch = refs[start : start + REFERENCE_BATCH]
                try:
                    values = await get_rotated(self.store, tenants, partial(_keys_of, ITEM_KIND, batch))
                except Exception:
                    logger.warning("The state store did not answer for referenced items; they are left out.")
                    break
                for ref, value in zip(batch, values, strict=True):
                    if value:
                        expansion.charge(len(value))
                        found[ref] = jsonio.loads(value)
        return found

    async def spilled(self, keys: list[str]) -> dict[str, bytes | None]:
        """The large reasoning payloads the history's blobs refer to (a store fault: none)."""
        return await read_spilled(self.store, keys)

    async def load(self, tenants: Tenants, response_id: str) -> StoredResponse | None:
        return StoredResponse.decode((await self.load_rotated(tenants, response_id))[1])

    async def load_rotated(self, tenants: Tenants, response_id: str) -> tuple[str, bytes | None]:
        """A stored response's key and record: under the client's current hash, else under an
        earlier secret's (kept before a rotation). The current key when none holds it."""
        for tenant in tenants.every:
            key = store_key(tenant, RESPONSE_KIND, response_id)
            raw = await self.load_raw(key)
            if raw is not None:
                return key, raw
        return store_key(tenants.current, RESPONSE_KIND, response_id), None

    async def load_raw(self, key: str) -> bytes | None:
        """A stored response's record as the store holds it (None: not there)."""
        if self.store is None:
            raise BadRequest(
                "previous_response_id needs the proxy's state store, which is off (THINKPROXY_STATE=off); "
                "send the conversation's items in input instead, or turn the state store on.",
                code="state_disabled",
                param="previous_response_id",
            )
        try:
            found = await self.store.get_many([key])
        except Exception:
            logger.warning("The state store did not answer for a stored response.")
            raise ServiceUnavailable(
                "The proxy's state store did not answer, so the stored response could not be read; retry.",
                code="state_unavailable",
            ) from None
        return found[0]

    async def save(
        self,
        tenant: str,
        final: dict[str, Any],
        own: list[Any],
        previous: str | None,
        earlier_keys: list[str],
    ) -> None:
        """Keep a finished response: its own turn (`own`, references resolved) and its output,
        the earlier turns by reference (`previous`), which live on as long as it does."""
        if self.store is None:
            return
        await self.put(tenant, response_entries(tenant, final, own, previous), earlier_keys)

    async def put(self, tenant: str, entries: ResponseEntries, earlier_keys: list[str]) -> None:
        """Keep a finished response's `entries` (response_entries: made once for a socket's turn,
        which keeps them on its connection too); the earlier turns' keys touched."""
        if self.store is None:
            return
        if entries.stubbed:
            logger.warning(
                "Response %s holds %d bytes, over the %d a stored response may hold: kept as a stub "
                "(it cannot be continued).",
                entries.response_id,
                entries.stubbed,
                STORED_RESPONSE_CAP,
            )
        try:
            await self.store.put_many([(entries.key, entries.record), *entries.items.items()], tenant=tenant)
        except Exception:  # the state store never fails a request: the response is just not kept
            logger.warning("Storing response %s failed: it cannot be continued or read.", entries.response_id)
        if earlier_keys:  # (the earlier turns live as long as the latest: one chain)
            try:
                await self.store.touch_many(earlier_keys)
            except Exception:  # (the earlier turns then expire on their own time)
                logger.warning("Keeping the earlier turns of response %s failed.", entries.response_id)


class ResponseEntries:
    """A finished response as it is kept: its record under its key, and each output item under
    its own item key (by its id: a client's `item_reference`; none for a stub)."""

    __slots__ = ("items", "key", "record", "response_id", "stubbed")

    def __init__(
        self, response_id: str, key: str, record: bytes, items: dict[str, bytes], stubbed: int
    ) -> None:
        self.response_id = response_id
        self.key = key
        self.record = record
        self.items = items
        # The whole record's size when it was past STORED_RESPONSE_CAP and `record` is its stub
        # (it cannot be continued); 0 when whole.
        self.stubbed = stubbed


def response_entries(
    tenant: str, final: dict[str, Any], own: list[Any], previous: str | None
) -> ResponseEntries:
    """A finished response's entries: the response under its id (previous_response_id, GET):
    this turn only, the earlier ones by reference (StoredResponse.previous); a record past the cap
    as a stub that says so. Each output item under its own id (a client's `item_reference`: the AI
    SDK sends reasoning back only that way), while the response is kept whole."""
    response_id = str(final["id"])
    key = store_key(tenant, RESPONSE_KIND, response_id)
    stored = StoredResponse(own, final, previous)
    record = stored.encode()
    size = len(record)
    if size > STORED_RESPONSE_CAP:
        return ResponseEntries(response_id, key, stored.stub(size).encode(), {}, size)
    items: dict[str, bytes] = {}
    for item in final.get("output") or ():
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            items[store_key(tenant, ITEM_KIND, item["id"])] = jsonio.dumps(item)
    return ResponseEntries(response_id, key, record, items, 0)
