"""The token counts of an answer relayed as it came (native Responses and Messages, a native
compaction, `/v1/completions`, …): each body piece goes by a `UsageReader` (proxy.core.native_usage)
on its way to the client, never held back, and the record gets what it read when the answer ends —
for the thinking policy's budgets and usage book, the metrics and the access log alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.types import Message, Send

from proxy.core.events import AccessRecord
from proxy.core.native_usage import UsageReader


def note_relayed(record: AccessRecord, usage: UsageReader) -> None:
    """An answer relayed as it came: its token counts (and its model), read from its bytes."""
    record.usage = usage.usage()
    if usage.model is not None and record.response_model is None:
        record.response_model = usage.model


async def read_as_relayed(write: Callable[[Send], Awaitable[None]], usage: UsageReader, send: Send) -> None:
    """`write` (proxy.server.streaming.relay_raw), each body piece read by `usage` on its way."""

    async def reading(message: Message) -> None:
        usage.feed(message.get("body", b""))
        await send(message)

    await write(reading)
