"""Whose stored response is it: a native Responses upstream's response ids in gateway mode.

In gateway mode every tenant reaches the upstream with the operator's one key, so the upstream
holds all their stored responses under one account and answers for any id it is given: anyone who
learnt an id could read it (`GET /v1/responses/{id}`), delete it, or continue it
(`previous_response_id`). The proxy therefore records, in the state store, which tenant created
each response id it relays from a native upstream, under a key only that tenant's hash names
(proxy.core.replay_keys.store_key), and refuses every other tenant as the upstream refuses an
unknown id: a 404 for GET and DELETE, the 400 `previous_response_not_found` for a continuation.
Nothing of a refused request reaches the upstream.

The id is read from the answer as it goes by (`tap`): a stream's first event (`response.created`)
or a JSON answer's top-level `id`, and recorded before the bytes that carry it reach the client,
so the creator's own next request (which needs the id) always finds the record. Only what comes
before the id is held back: the first event, or a JSON body up to `HEAD_LIMIT`.

With the state store off nothing can be recorded: in gateway mode stored responses of a native
upstream are then refused to everyone, with a message that names the setting. In BYOK mode each
client reaches the upstream with its own key and the upstream answers for its own ids: nothing is
recorded or checked. A record lives as long as the store's entries (THINKPROXY_STATE_TTL); an id
older than that is refused too (the upstream may keep it longer).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any, Final

import orjson
from starlette.types import Message, Send

from proxy.core.errors import BadRequest, NotFound, ServiceUnavailable
from proxy.core.replay_keys import Tenants, store_key
from proxy.server.asgi import BodyProducer
from proxy.server.tenancy import DoorSecrets, get_rotated
from proxy.state.base import StateStore

logger = logging.getLogger("thinkproxy.responses")

OWNER_KIND: Final = "native_response"  # the replay_keys kind of an ownership record
HEAD_LIMIT: Final = 1024 * 1024  # the most held back while looking for the id
QUOTE_CHARS: Final = 80
_FIRST_KEY_ID = re.compile(rb'\A\s*\{\s*"id"\s*:\s*"([^"\\]{1,512})"')


def _quoted(ident: str) -> str:
    return repr(ident if len(ident) <= QUOTE_CHARS else ident[:QUOTE_CHARS] + "…")


def response_id_in(head: bytes, *, complete: bool) -> tuple[str | None, bool]:
    """The response id at the head of an answer, and whether looking further is pointless (found,
    or it cannot be there). `complete`: the head is the whole body."""
    start = head.lstrip()[:1]
    if start == b"{":  # a JSON answer: its top-level id (OpenAI's comes first)
        match = _FIRST_KEY_ID.match(head)
        if match is not None:
            return match.group(1).decode("utf-8", "replace"), True
        if not complete:
            return None, False
        try:
            parsed = orjson.loads(head)
        except orjson.JSONDecodeError:
            return None, True
        ident = parsed.get("id") if isinstance(parsed, dict) else None
        return (ident if isinstance(ident, str) and ident else None), True
    if not start:
        return None, complete
    # A stream: the first event that names its response (`response.created` comes first).
    blocks = head.replace(b"\r\n", b"\n").split(b"\n\n")
    for block in blocks if complete else blocks[:-1]:  # (the last one may still be cut)
        data = b"\n".join(line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:"))
        if not data:
            continue
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        response = event.get("response") if isinstance(event, dict) else None
        ident = response.get("id") if isinstance(response, dict) else None
        if isinstance(ident, str) and ident:
            return ident, True
    return None, complete


class NativeOwners:
    """One app's ownership records (see the module docstring). `active` in gateway mode only."""

    def __init__(self, store: StateStore | None, tenancy: DoorSecrets, *, gateway: bool) -> None:
        self.store = store
        self.tenancy = tenancy
        self.active = gateway

    def tenants(self, headers: Iterable[tuple[str, str]]) -> Tenants:
        return self.tenancy.tenants(headers)

    async def owns(self, tenants: Tenants, response_id: str) -> bool:
        """Whether this client created `response_id` (under any of its hashes: rotation). A store
        that does not answer: a 503 that says to retry (nothing is forwarded meanwhile)."""
        if self.store is None:
            return False
        try:
            (found,) = await get_rotated(
                self.store, tenants, lambda t: [store_key(t, OWNER_KIND, response_id)]
            )
        except Exception:
            logger.warning("The state store did not answer for a response's owner.")
            raise ServiceUnavailable(
                "The proxy's state store did not answer, so the response's owner was not checked; retry.",
                code="state_unavailable",
            ) from None
        return found is not None

    def refusal(self, response_id: str) -> NotFound:
        """The 404 of an id this client did not create (the upstream's words for an unknown id)."""
        message = f"Response with id {_quoted(response_id)} not found."
        if self.store is None:
            message += (
                " In gateway mode the proxy serves a native upstream's stored responses only to the key "
                "that created them, which it records in its state store: it is off (THINKPROXY_STATE=off)."
            )
        return NotFound(message, code="not_found")

    def continuation_refusal(self, response_id: str) -> BadRequest:
        """The 400 of a `previous_response_id` this client did not create."""
        message = f"Previous response with id {_quoted(response_id)} not found."
        if self.store is None:
            message += (
                " In gateway mode a native upstream's responses are continued only by the key that "
                "created them, which the proxy records in its state store: it is off (THINKPROXY_STATE=off)."
            )
        return BadRequest(message, code="previous_response_not_found", param="previous_response_id")

    async def check_continuation(self, tenants: Tenants, body: dict[str, Any]) -> None:
        previous = body.get("previous_response_id")
        if isinstance(previous, str) and previous and not await self.owns(tenants, previous):
            raise self.continuation_refusal(previous)

    async def record(self, tenant: str, response_id: str) -> None:
        if self.store is None:
            return
        try:
            await self.store.put_many([(store_key(tenant, OWNER_KIND, response_id), b"1")])
        except Exception:  # the state store never fails a request: the id is just not continuable
            logger.warning("Recording the owner of response %s failed.", _quoted(response_id))

    def tap(self, produce: BodyProducer, tenant: str) -> BodyProducer:
        """`produce` with the answer's response id recorded as `tenant`'s before the bytes that
        carry it are sent on (what comes before is held back, at most HEAD_LIMIT bytes)."""

        async def produce_recorded(send: Send) -> None:
            head = bytearray()
            held: list[Message] = []
            looking = True

            async def sent(message: Message) -> None:
                nonlocal looking
                if not looking:
                    await send(message)
                    return
                head.extend(message.get("body", b""))
                held.append(message)
                response_id, settled = response_id_in(bytes(head), complete=False)
                if settled or len(head) > HEAD_LIMIT:
                    looking = False
                    if response_id is not None:
                        await self.record(tenant, response_id)
                    await release()

            async def release() -> None:
                pending, held[:] = list(held), []
                for message in pending:
                    await send(message)

            await produce(sent)
            if looking and held:  # the whole body came without the id settling: a last look
                response_id, _ = response_id_in(bytes(head), complete=True)
                if response_id is not None:
                    await self.record(tenant, response_id)
                await release()

        return produce_recorded
