"""An answer relayed as it came is read on its way (proxy.server.relayed_usage): every piece reaches
the client unchanged, and the record gets the usage read from them at the end."""

from __future__ import annotations

import asyncio

from starlette.types import Message, Send

from proxy.core.events import AccessRecord
from proxy.core.native_usage import UsageReader
from proxy.core.usage import REPORTED, ReasoningTokens, TokenUsage
from proxy.server.relayed_usage import note_relayed, read_as_relayed

PIECES = [
    b'{"object": "response", "model": "gpt-5.4", "usage": {"input_tokens": 5, ',
    b'"output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 7}}}',
]


def test_each_piece_goes_on_unchanged_and_is_read() -> None:
    sent: list[Message] = []
    reader = UsageReader(limit=1 << 20)

    async def relay_raw(send: Send) -> None:  # (what proxy.server.streaming.relay_raw does)
        for piece in PIECES:
            await send({"type": "http.response.body", "body": piece, "more_body": True})

    async def client(message: Message) -> None:
        sent.append(message)

    asyncio.run(read_as_relayed(relay_raw, reader, client))
    assert [m["body"] for m in sent] == PIECES
    record = AccessRecord("POST", "/v1/responses", route="responses")
    note_relayed(record, reader)
    assert record.usage == TokenUsage(5, 9, None, ReasoningTokens(7, REPORTED))
    assert record.response_model == "gpt-5.4"
