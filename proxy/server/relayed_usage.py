"""The token counts of an answer relayed as it came (native Responses and Messages, a native
compaction, `/v1/completions`, …): each body piece goes by a `UsageReader` (proxy.core.native_usage)
on its way to the client, never held back, and the record gets what it read when the answer ends —
for the thinking policy's budgets and usage book, the metrics and the access log alike."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from starlette.types import Message, Send

from proxy.core.events import AccessRecord
from proxy.core.native_usage import UsageReader

logger = logging.getLogger("thinkproxy.relay")
THINKING_DROPPED = "thinking_dropped"  # (the record's note and the warning's code)


def note_relayed(record: AccessRecord, usage: UsageReader, started: float | None = None) -> None:
    """An answer relayed as it came: its token counts (and its model), read from its bytes; and
    the thinking blocks the upstream said it dropped (`started`: the request's perf_counter start,
    for the warning's time)."""
    record.usage = usage.usage()
    if usage.model is not None and record.response_model is None:
        record.response_model = usage.model
    if usage.thinking_dropped:
        t_ms = round((time.perf_counter() - started) * 1000, 1) if started is not None else 0.0
        warn_thinking_dropped(record, usage.thinking_dropped, t_ms)


def warn_thinking_dropped(record: AccessRecord, dropped: int, t_ms: float) -> None:
    """The upstream left out `dropped` thinking blocks of the request (Anthropic's
    `input_transformations`: their prefix changed): the reasoning the client paid for did not
    reach the model. A relayed answer carries no trace of the proxy's, so the warning goes where
    operators look: the log, the record (`notes["thinking_dropped"]`, the console's flag) and the
    trace observers (the console's timeline), as a `warning` event with code `thinking_dropped`."""
    record.notes[THINKING_DROPPED] = dropped
    message = (
        f"The upstream dropped {dropped} thinking block(s) of the request: something before them "
        "(system, tools or an earlier message) changed since they were made. Send the history back "
        "unchanged to keep that reasoning."
    )
    logger.warning("%s (request %s)", message, record.request_id)
    event = {"type": "warning", "seq": 0, "t_ms": t_ms, "message": message, "code": THINKING_DROPPED,
             "count": dropped}  # fmt: skip
    for observer in record.observers:
        if observer.wants_trace:
            observer.on_trace([event])


async def read_as_relayed(write: Callable[[Send], Awaitable[None]], usage: UsageReader, send: Send) -> None:
    """`write` (proxy.server.streaming.relay_raw), each body piece read by `usage` on its way."""

    async def reading(message: Message) -> None:
        usage.feed(message.get("body", b""))
        await send(message)

    await write(reading)
