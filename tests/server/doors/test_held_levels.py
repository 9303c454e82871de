"""The level `auto` chose per native answer (proxy.server.doors.held_levels): read from the answer
as it goes by, per client key, the oldest forgotten past the limit. End to end, a tool loop continued
by id: tests/server/test_levels.py."""

from __future__ import annotations

import asyncio

from starlette.types import Message, Send

from proxy.core.controls import Level
from proxy.server.doors.held_levels import HeldLevels

RULE = "auto[1]: contains weather -> off"


def test_the_answers_first_id_is_kept_even_cut_between_pieces() -> None:
    held = HeldLevels()
    pieces = [b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_', b'ab12"'
              b',"output":[{"id":"fc_1"}]}}\n\n']  # fmt: skip
    out: list[Message] = []

    async def produce(send: Send) -> None:
        for piece in pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})

    async def send(message: Message) -> None:
        out.append(message)

    asyncio.run(held.tap(produce, "team-a", Level.OFF, RULE)(send))
    assert [m["body"] for m in out] == pieces  # (the answer goes on as it came)
    assert held.get("team-a", "resp_ab12") == (Level.OFF, RULE)
    assert held.get("team-a", "fc_1") is None  # (only the response's own id)
    assert held.get("team-b", "resp_ab12") is None  # (another key's continuation holds nothing)


def test_the_oldest_is_forgotten_past_the_limit() -> None:
    held = HeldLevels(limit=2)
    for n in range(3):
        held.keep(None, f"resp_{n}", Level.DEEP, RULE)
    assert held.get(None, "resp_0") is None
    assert held.get(None, "resp_2") == (Level.DEEP, RULE)
