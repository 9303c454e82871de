"""How trace events are written: their times (ms to a tenth), durations as words, and the two
encodings a stream carries them in (`: trace` comment lines, `event: trace` frames that repeat
the stream's identity; TraceFrames: one stream's, holding event frames until its identity is known).

Separate from the trace builder (proxy.core.stream.trace) because more than the builder writes
trace events: the stream pipeline frames the builder's events, and the review gate
(proxy.core.stream.gate) frames its own `review.*` events into the same stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.jsonio import dumps
from proxy.core.stream.sse import comment_frame


@dataclass(frozen=True, slots=True)
class ChunkMeta:
    """The identity of a stream (from its chunks) that `event` frames repeat."""

    id: str
    model: str
    created: int
    object: str = "chat.completion.chunk"


def chunk_meta(chunk: dict[str, Any]) -> ChunkMeta | None:
    """The id/model/created of a chunk, or None when it has no string id to copy."""
    chunk_id = chunk.get("id")
    if not isinstance(chunk_id, str):
        return None
    model = chunk.get("model")
    created = chunk.get("created")
    return ChunkMeta(
        id=chunk_id,
        model=model if isinstance(model, str) else "",
        created=created if isinstance(created, int) and not isinstance(created, bool) else 0,
    )


def comment_frames(events: list[dict[str, Any]]) -> bytes:
    """`: trace {json}` SSE comment lines, one per event; every OpenAI SDK skips them."""
    # Both encoders escape control characters, so each JSON text is a single line. (jsonio: names
    # and ids from an upstream chunk read leniently may hold lone surrogates orjson refuses.)
    return b"".join(comment_frame(b"trace " + dumps(event)) for event in events)


def event_frames(events: list[dict[str, Any]], meta: ChunkMeta) -> bytes:
    """`event: trace` frames whose data is a chunk with `choices: []` and a `trace` key.

    The data never has a top-level `error` key (OpenAI SDKs raise on it) and the event name never
    starts with `thread.` (which they route elsewhere), so clients that ignore `trace` are unharmed
    beyond seeing a chunk with no choices.
    """
    head = {"id": meta.id, "object": meta.object, "created": meta.created, "model": meta.model, "choices": []}
    return b"".join(b"event: trace\ndata: " + dumps({**head, "trace": event}) + b"\n\n" for event in events)


class TraceFrames:
    """One stream's trace events as its SSE frames, in the encoding the client asked for: comment
    lines, or `event: trace` frames, which repeat the stream's identity and so are held until the
    stream's first chunk names it (`start`); `rest` writes whatever is still held at the end."""

    __slots__ = ("_event_format", "_pending", "meta")

    def __init__(self, event_format: bool) -> None:
        self._event_format = event_format
        self.meta: ChunkMeta | None = None  # the stream's identity, once a chunk gave it
        self._pending: list[dict[str, Any]] = []

    def frames(self, events: list[dict[str, Any]]) -> bytes:
        if not events:
            return b""
        if not self._event_format:
            return comment_frames(events)
        if self.meta is None:
            self._pending.extend(events)
            return b""
        return event_frames(events, self.meta)

    def comment_lines(self, events: list[dict[str, Any]]) -> list[bytes] | None:
        """The comment line of each event (what `frames` writes, each then ending an SSE event
        with its blank line), for a reader that takes them as values; None in the event format."""
        if self._event_format:
            return None
        return [b": trace " + dumps(event) for event in events]

    def start(self, chunk: dict[str, Any]) -> bytes:
        """The stream's first chunk: its identity is known, and the frames held until now go out."""
        self.meta = chunk_meta(chunk)
        if self.meta is None or not self._pending:
            return b""
        pending, self._pending = self._pending, []
        return event_frames(pending, self.meta)

    def rest(self) -> bytes:
        """At the end: frames still held (no chunk ever named the stream) go out with a stand-in
        identity."""
        if not self._pending:
            return b""
        pending, self._pending = self._pending, []
        return event_frames(pending, ChunkMeta(id="", model="", created=0))


def ms(value: float) -> int | float:
    """Milliseconds to one decimal, a whole number as an int."""
    try:
        # (Not round(value, 1): with digits, CPython rounds through a decimal string, ~10x the
        # work, and a response's trace rounds ten times.)
        tenths = round(value * 10)
    except (OverflowError, ValueError):  # not a finite number: nothing to round
        return value
    return tenths // 10 if tenths % 10 == 0 else tenths / 10


def duration_text(ms: float) -> tuple[str, str]:
    if ms < 1000:
        whole = round(ms)  # (the same digits as `:.0f`, without a float formatter)
        return f"{whole} ms", f"{whole} 毫秒"
    return f"{ms / 1000:.1f} s", f"{ms / 1000:.1f} 秒"


def replay_text(counts: dict[str, int]) -> tuple[str, str]:
    """The `replaying` status's message (English, Chinese): the replay store's counts."""
    restored, placeholder, missing = counts["restored"], counts["placeholder"], counts["missing"]
    en = f"Reasoning of earlier turns: {restored} restored, {placeholder} placeholder, {missing} missing"
    return en, f"历史推理：恢复 {restored}，占位 {placeholder}，缺失 {missing}"
