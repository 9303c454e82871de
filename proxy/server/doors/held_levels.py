"""The level `auto` chose for a native Responses answer, kept per response id so the tool loop
that continues it holds the same level.

A native Responses tool loop continued with `previous_response_id` sends only the tools' outputs
(`function_call_output`): no user message, so the auto rules, which read the last user message,
would fall to their fallback and the turn's level would change mid-loop (the upstream's prompt
cache lost, the replay rules seeing two levels in one turn). The answer's id is read as it goes by
(its first `"id"` member: the response's, in the JSON body and in `response.created`) and the
choice kept beside it, in memory, the newest MAX_HELD; a continuation with no user text takes the
choice of the response it continues. Connection-local state is not needed: a WebSocket turn's
answer goes through the same tap.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from starlette.types import Message, Send

from proxy.core.controls import Level
from proxy.server.asgi import BodyProducer
from proxy.server.doors.native_owners import CARRY, ids_in

__all__ = ["MAX_HELD", "HeldLevels"]

MAX_HELD: Final = 10_000  # response ids remembered (the oldest forgotten first)

# (the client key's name or "", the response id) → (the level, the rule that chose it)
_Key = tuple[str, str]


class HeldLevels:
    """Which level and rule `auto` chose for each recent native response, per client key."""

    def __init__(self, limit: int = MAX_HELD) -> None:
        self.limit = limit
        self.chosen: OrderedDict[_Key, tuple[Level, str]] = OrderedDict()

    def get(self, client: str | None, response_id: str) -> tuple[Level, str] | None:
        return self.chosen.get((client or "", response_id))

    def keep(self, client: str | None, response_id: str, level: Level, rule: str) -> None:
        key = (client or "", response_id)
        self.chosen[key] = (level, rule)
        self.chosen.move_to_end(key)
        while len(self.chosen) > self.limit:
            self.chosen.popitem(last=False)

    def tap(self, produce: BodyProducer, client: str | None, level: Level, rule: str) -> BodyProducer:
        """`produce` with the answer's response id (its first `"id"`) kept with `level` and `rule`."""

        async def produce_kept(send: Send) -> None:
            found = False
            carry = b""

            async def sent(message: Message) -> None:
                nonlocal found, carry
                body: bytes = message.get("body", b"")
                if body and not found:
                    window = carry + body
                    ids = ids_in(window)
                    if ids:
                        found = True
                        self.keep(client, ids[0], level, rule)
                    carry = window[-CARRY:]
                await send(message)

            await produce(sent)

        return produce_kept
