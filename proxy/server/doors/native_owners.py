"""Whose stored response is it: a native Responses upstream's ids in gateway mode.

In gateway mode every tenant reaches the upstream with the operator's one key, so the upstream
holds all their stored responses and items under one account and answers for any id it is given:
anyone who learnt an id could read it (`GET /v1/responses/{id}`), delete it, continue it
(`previous_response_id`) or put its items in a request (`item_reference`, or a reasoning item
sent without its `encrypted_content`, which the upstream looks up by id). The proxy therefore
records, in the state store, which tenant created each id it relays from a native upstream (the
response's and each output item's), under a key only that tenant's hash names
(proxy.core.replay.keys.store_key), and refuses every other tenant as the upstream refuses an
unknown id: a 404 for GET and DELETE, the 400 `previous_response_not_found` for a continuation,
the 404 `Item with id '…' not found.` (param `input`) for an item. An id never recorded (made up,
or older than its record) is refused the same way. Nothing of a refused request reaches the
upstream.

The ids are read from the answer as it goes by (`tap`): every `"id"` member of the JSON body or of
the stream's events (`response.created`, `response.output_item.added`, …), each recorded before
the bytes that carry it reach the client, so the creator's own next request (which needs the id)
always finds the record. Nothing is held back but the piece being read.

A conversation object (`conversation`, `/v1/conversations/*`) would live in the shared account
under no tenant either, and the proxy does not follow its items: in gateway mode `conversation`
on a native door is a 400 `conversation_not_supported` and the `/v1/conversations` routes a 403
`conversations_not_served` (`refuse_conversations`), both saying why.

With the state store off nothing can be recorded: in gateway mode stored responses of a native
upstream are then refused to everyone, with a message that names the setting. In BYOK mode each
client reaches the upstream with its own key and the upstream answers for its own ids: nothing is
recorded or checked. A record lives as long as the store's entries (THINKPROXY_STATE_TTL), renewed
each time it is used; an id unused for longer is refused too (the upstream may keep it longer).
The memory store is one process's: with `serve --workers N` a record is found only by the worker
that wrote it, so gateway mode with a native upstream and several workers needs a shared store
(THINKPROXY_STATE_URL=redis://…).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Send

from proxy.core.errors import BadRequest, Forbidden, NotFound, ServiceUnavailable, quoted
from proxy.core.events import AccessRecord
from proxy.core.replay.keys import Tenants, store_key
from proxy.server.asgi import BodyProducer
from proxy.server.handlers import Proxy
from proxy.server.tenancy import DoorSecrets, get_rotated
from proxy.settings import Settings
from proxy.state.base import StateStore

logger = logging.getLogger("thinkproxy.responses")

OWNER_KIND: Final = "native_response"  # the replay_keys kind of an ownership record (any id)
QUOTE_CHARS: Final = 80
# An `"id"` member of a JSON object (inside a string its quotes are escaped: never matched).
_ID_MEMBER = re.compile(rb'"id"\s*:\s*"([^"\\]{1,512})"')
CARRY: Final = 600  # the bytes of one piece kept to find an id cut at its end in the next


def ids_in(data: bytes) -> list[str]:
    """Every `"id"` member's value in `data` (a JSON body or SSE events, whole or in part)."""
    return [match.group(1).decode("utf-8", "replace") for match in _ID_MEMBER.finditer(data)]


def referenced_ids(body: dict[str, Any]) -> list[str]:
    """The ids in `input` that the upstream looks up in its store: `item_reference` items (an item
    with an `id` and neither `type` nor `role` is one too) and reasoning items sent without their
    `encrypted_content`. In order, each once."""
    items = body.get("input")
    found: dict[str, None] = {}
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        ident, kind = item.get("id"), item.get("type")
        looked_up = kind == "item_reference" or (kind is None and "role" not in item)
        if kind == "reasoning" and not item.get("encrypted_content"):
            looked_up = True
        if looked_up and isinstance(ident, str) and ident:
            found[ident] = None
    return list(found)


def conversation_refusal() -> BadRequest:
    return BadRequest(
        "`conversation` is not served in gateway mode: every client reaches the upstream with the "
        "operator's one key, so a conversation stored there would be open to every client. Continue "
        "with previous_response_id, or send the conversation's items in input.",
        code="conversation_not_supported",
        param="conversation",
    )


def refuse_conversations(proxy: Proxy) -> Callable[[Request], Awaitable[Response]]:
    """The handler of `/v1/conversations*` in gateway mode: a 403 that says why (after the key is
    checked), nothing forwarded."""

    async def handler(request: Request) -> Response:
        async def run(record: AccessRecord, started: float) -> Response:
            record.client = proxy.s.gateway.authorize(request.headers.items())
            raise Forbidden(
                "Conversations are not served in gateway mode: every client reaches the upstream with "
                "the operator's one key, so a conversation stored there would be open to every client. "
                "Continue with previous_response_id, or send the conversation's items in input.",
                code="conversations_not_served",
            )

        return await proxy.guarded(request, "passthrough", run)

    return handler


def split_records_warning(settings: Settings) -> str | None:
    """What `serve` says at start when gateway mode keeps its records in each worker's own memory
    store (several workers, no state URL): a record is then found only by the worker that wrote it."""
    if (
        not settings.gateway_mode
        or settings.workers < 2
        or settings.state_url is not None
        or settings.state == "off"
    ):
        return None
    return (
        f"gateway mode with {settings.workers} workers and the memory state store: a native Responses "
        "upstream's stored responses and items are served only by the worker that relayed them (the "
        "others refuse their ids); set THINKPROXY_STATE_URL=redis://… to share the records"
    )


class NativeOwners:
    """One app's ownership records (see the module docstring). `active` in gateway mode only."""

    def __init__(self, store: StateStore | None, tenancy: DoorSecrets, *, gateway: bool) -> None:
        self.store = store
        self.tenancy = tenancy
        self.active = gateway

    def tenants(self, headers: Iterable[tuple[str, str]]) -> Tenants:
        return self.tenancy.tenants(headers)

    async def owns(self, tenants: Tenants, response_id: str) -> bool:
        """Whether this client created `response_id` (under any of its hashes: rotation)."""
        return not await self.unowned(tenants, [response_id])

    async def unowned(self, tenants: Tenants, ids: Sequence[str]) -> list[str]:
        """The ids of `ids` this client did not create; the records of the others are renewed (a
        record in use does not expire). A store that does not answer: a 503 that says to retry
        (nothing is forwarded meanwhile)."""
        if not ids:
            return []
        if self.store is None:
            return list(ids)
        try:
            found = await get_rotated(
                self.store, tenants, lambda t: [store_key(t, OWNER_KIND, ident) for ident in ids]
            )
        except Exception:
            logger.warning("The state store did not answer for a response's owner.")
            raise ServiceUnavailable(
                "The proxy's state store did not answer, so the response's owner was not checked; retry.",
                code="state_unavailable",
            ) from None
        owned = [ident for ident, value in zip(ids, found, strict=True) if value is not None]
        if owned:
            try:  # (under every hash of the client: the record is under one of them)
                await self.store.touch_many(
                    [store_key(t, OWNER_KIND, ident) for t in tenants.every for ident in owned]
                )
            except Exception:  # a record not renewed just expires sooner
                logger.warning("Renewing the owner of response %s failed.", quoted(owned[0], QUOTE_CHARS))
        return [ident for ident, value in zip(ids, found, strict=True) if value is None]

    def refusal(self, response_id: str) -> NotFound:
        """The 404 of an id this client did not create (the upstream's words for an unknown id)."""
        message = f"Response with id {quoted(response_id, QUOTE_CHARS)} not found."
        if self.store is None:
            message += (
                " In gateway mode the proxy serves a native upstream's stored responses only to the key "
                "that created them, which it records in its state store: it is off (THINKPROXY_STATE=off)."
            )
        return NotFound(message, code="not_found")

    def continuation_refusal(self, response_id: str) -> BadRequest:
        """The 400 of a `previous_response_id` this client did not create."""
        message = f"Previous response with id {quoted(response_id, QUOTE_CHARS)} not found."
        if self.store is None:
            message += (
                " In gateway mode a native upstream's responses are continued only by the key that "
                "created them, which the proxy records in its state store: it is off (THINKPROXY_STATE=off)."
            )
        return BadRequest(message, code="previous_response_not_found", param="previous_response_id")

    def item_refusal(self, item_id: str) -> NotFound:
        """The 404 of an input item id this client did not get (the upstream's words, param `input`)."""
        message = f"Item with id {quoted(item_id, QUOTE_CHARS)} not found."
        if self.store is None:
            message += (
                " In gateway mode a native upstream's stored items are used only by the key that "
                "created them, which the proxy records in its state store: it is off (THINKPROXY_STATE=off)."
            )
        return NotFound(message, code="not_found", param="input")

    async def check_continuation(self, tenants: Tenants, body: dict[str, Any]) -> None:
        """Refuse a request that would reach stored state this client did not create: another's
        `previous_response_id` or items (`referenced_ids`), or a conversation object."""
        if body.get("conversation") is not None:
            raise conversation_refusal()
        previous = body.get("previous_response_id")
        first = [previous] if isinstance(previous, str) and previous else []
        unowned = await self.unowned(tenants, [*first, *referenced_ids(body)])
        if first and first[0] in unowned:
            raise self.continuation_refusal(first[0])
        if unowned:
            raise self.item_refusal(unowned[0])

    async def record(self, tenant: str, *ids: str) -> None:
        if self.store is None or not ids:
            return
        try:
            await self.store.put_many(
                [(store_key(tenant, OWNER_KIND, ident), b"1") for ident in ids], tenant=tenant
            )
        except Exception:  # the state store never fails a request: the id is just not continuable
            logger.warning("Recording the owner of response %s failed.", quoted(ids[0], QUOTE_CHARS))

    def tap(self, produce: BodyProducer, tenant: str) -> BodyProducer:
        """`produce` with every id of the answer (`ids_in`) recorded as `tenant`'s before the piece
        that carries it is sent on."""

        async def produce_recorded(send: Send) -> None:
            seen: set[str] = set()
            carry = b""

            async def sent(message: Message) -> None:
                nonlocal carry
                body: bytes = message.get("body", b"")
                if body:
                    window = carry + body
                    new = [ident for ident in dict.fromkeys(ids_in(window)) if ident not in seen]
                    if new:
                        seen.update(new)
                        await self.record(tenant, *new)
                    carry = window[-CARRY:]
                await send(message)

            await produce(sent)

        return produce_recorded
