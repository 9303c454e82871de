"""The console's live feed: a `Listener` (proxy.core.events) that keeps a bounded ring of request
summaries and pushes them to whoever watches `/thinkproxy/events`.

Cost per request: one observer object, the request's trace events appended to a bounded list
(trace events are rare: a handful per response, none for the chunks in between), and at the end
the record's facts kept in the ring with the events. The summary the console lists is made from
them when the ring is read (and kept), or at once when someone watches or a shared feed publishes
it. Nothing happens per chunk, and nothing is serialized unless someone is subscribed — except
the end-of-request publication to Redis when a shared feed is configured (once per request).

What it holds is bounded in bytes, not only in count: the ring keeps at most RING_BYTES of
requests (each one's size counted from above when it ends, summary.request_held), and each watcher
at most SUBSCRIBER_BYTES, counting what was handed to its connection and may still sit in its
buffer (the snapshot, then the frame last sent; proxy.console.routes).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from proxy.console.summary import (
    MAX_EVENTS,
    MAX_TOOLS,
    RecordFacts,
    bounded_event,
    request_held,
    summarize,
    tool_entry,
)
from proxy.core.events import RequestObserver, TraceEvents

if TYPE_CHECKING:
    from proxy.console.shared import SharedFeed
    from proxy.core.events import AccessRecord

logger = logging.getLogger("thinkproxy.console")

# What one watcher may fall behind by: frames are dropped beyond either bound (a `gap` event
# then says how many), and a watcher that missed SUBSCRIBER_GAP in a row, reading nothing, is let
# go (the page reconnects and starts from a fresh snapshot). A stuck watcher holds at most
# SUBSCRIBER_BYTES here, whatever the traffic.
SUBSCRIBER_QUEUE = 256  # frames
SUBSCRIBER_BYTES = 1 << 20
SUBSCRIBER_GAP = 1024  # frames missed in a row
MAX_SUBSCRIBERS = 64  # live views open at once on one process; more are refused (503)
# What the ring of finished requests may hold, whatever THINKPROXY_UI_HISTORY says: the oldest go
# first. One request keeps at most ~1 MiB (every string at its cap in 4-byte characters), so
# 200 such requests were ~200 MiB and the allowed 10,000 far more; typical ones are a few KiB, so
# the count bound decides for them.
RING_BYTES = 32 << 20


class _Gap:
    """Frames dropped in a row, where they would have been."""

    __slots__ = ("dropped",)

    def __init__(self) -> None:
        self.dropped = 1


class FrameQueue:
    """One watcher's frames, bounded in count and bytes; what did not fit is one `gap` frame in
    its place (`event: gap`, `data: {"dropped": n}`), so the reader knows to re-read the listing.

    The bytes bound counts `sending` too: what the reader handed to the watcher's connection and
    may still be in its write buffer (a watcher that does not read keeps the snapshot and the
    next frame there; see proxy.console.routes)."""

    __slots__ = ("_frames", "_items", "_ready", "nbytes", "sending")

    def __init__(self) -> None:
        self._items: deque[bytes | _Gap] = deque()
        self._frames = 0
        self.nbytes = 0  # queued
        self.sending = 0  # handed to the connection, not known to have left it
        self._ready = asyncio.Event()

    def qsize(self) -> int:
        return len(self._items)

    @property
    def room(self) -> int:
        """Bytes this watcher may still be given."""
        return max(SUBSCRIBER_BYTES - self.nbytes - self.sending, 0)

    def put(self, frame: bytes) -> int:
        """Queues `frame`, or drops it; returns 0, or how many frames in a row are dropped now."""
        items = self._items
        if self._frames < SUBSCRIBER_QUEUE and len(frame) <= self.room:
            items.append(frame)
            self._frames += 1
            self.nbytes += len(frame)
            self._ready.set()
            return 0
        last = items[-1] if items else None
        if isinstance(last, _Gap):
            last.dropped += 1
            return last.dropped
        items.append(_Gap())
        self._ready.set()
        return 1

    def get_nowait(self) -> bytes:
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.popleft()
        if isinstance(item, _Gap):
            return sse_frame("gap", {"dropped": item.dropped})
        self._frames -= 1
        self.nbytes -= len(item)
        return item

    async def get(self) -> bytes:
        # Cancelled while waiting (the reader's keep-alive timeout), nothing is lost.
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        return self.get_nowait()

    def clear(self) -> None:
        self._items.clear()
        self._frames = 0
        self.nbytes = 0


class Subscriber:
    """One watcher of the feed: its frames; `overflowed` once it was let go for not reading."""

    __slots__ = ("overflowed", "queue")

    def __init__(self) -> None:
        self.queue = FrameQueue()
        self.overflowed = False

    def push(self, frame: bytes) -> None:
        if self.queue.put(frame) >= SUBSCRIBER_GAP:
            self.overflowed = True  # the reader, when it wakes, sees it and ends
            self.queue.clear()


def sse_frame(event: str, data: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class Recent(NamedTuple):
    entries: list[dict[str, Any]]  # newest first
    shared: bool  # every replica's (the shared feed answered)
    omitted: int  # requests among the newest `history` that were not read, for their size


class Feed:
    """The ring of recent requests (newest first) and the watchers of new ones."""

    def __init__(
        self,
        history: int,
        *,
        replica: str | None = None,
        shared: SharedFeed | None = None,
        max_bytes: int = RING_BYTES,
    ) -> None:
        self.history = history
        self.max_bytes = max_bytes
        self.replica = replica or os.urandom(4).hex()
        self.shared = shared
        self._ring: deque[FeedObserver] = deque()  # finished requests, bounded in `finished`
        self.ring_bytes = 0  # what they hold (FeedObserver.held)
        self._subscribers: set[Subscriber] = set()
        self._counter = 0
        self._per_session: dict[str, int] = {}  # rows in the ring per session (FeedObserver.session_key)

    # -- Listener ---------------------------------------------------------------------------------

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> FeedObserver:
        self._counter += 1
        return FeedObserver(self, record, self._counter)

    # -- reading ------------------------------------------------------------------------------------

    def local(self) -> list[dict[str, Any]]:
        return [finished.entry() for finished in self._ring]

    async def recent(self, max_bytes: int) -> Recent:
        """The newest requests (every replica's when the shared feed answers, read up to about
        `max_bytes` of them: the caller cuts to its exact bound as it serializes them)."""
        local = self.local()
        if self.shared is None:
            return Recent(local, False, 0)
        found = await self.shared.recent(self.history, max_bytes)
        if found is None:
            return Recent(local, False, 0)
        shared, omitted = found
        # What this replica finished a moment ago may not have reached Redis yet.
        seen = {entry["id"] for entry in shared}
        merged = shared + [entry for entry in local if entry["id"] not in seen]
        merged.sort(key=lambda entry: entry.get("started_at", 0), reverse=True)
        return Recent(fair_cut(merged, self.history), True, omitted)

    # -- watching -------------------------------------------------------------------------------

    @property
    def watched(self) -> bool:
        return bool(self._subscribers)

    @property
    def watchers(self) -> int:
        return len(self._subscribers)

    def subscribe(self) -> Subscriber | None:
        """A new watcher, or None when MAX_SUBSCRIBERS are already watching."""
        if len(self._subscribers) >= MAX_SUBSCRIBERS:
            return None
        subscriber = Subscriber()
        self._subscribers.add(subscriber)
        return subscriber

    async def follow_replicas(self) -> None:
        """With a shared feed, make sure the other replicas' requests reach this one's watchers."""
        if self.shared is not None:
            await self.shared.follow(self)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def broadcast(self, event: str, data: dict[str, Any]) -> None:
        if not self._subscribers:
            return
        frame = sse_frame(event, data)
        for subscriber in list(self._subscribers):
            subscriber.push(frame)
            if subscriber.overflowed:
                self._subscribers.discard(subscriber)

    # -- from observers ------------------------------------------------------------------------------

    def _uncount(self, request: FeedObserver) -> None:
        """What a request that left the ring held no longer counts."""
        self.ring_bytes -= request.held
        left = self._per_session[request.session_key] - 1
        if left:
            self._per_session[request.session_key] = left
        else:
            del self._per_session[request.session_key]

    def finished(self, request: FeedObserver) -> None:
        ring = self._ring
        ring.appendleft(request)
        self.ring_bytes += request.held
        session = request.session_key
        per_session = self._per_session
        per_session[session] = per_session.get(session, 0) + 1
        # Past the count, a session holding more than its share gives up its own oldest row (an
        # agent's flood must not push every other session out of a page opened after it); else,
        # and by bytes, the oldest go. The newest always stays (a request holds at most ~1 MiB,
        # far below the budget; a smaller budget still shows the last request).
        if len(ring) > self.history and per_session[session] > session_share(self.history):
            oldest = _oldest_of(ring, session)
            ring.remove(oldest)
            self._uncount(oldest)
        while len(ring) > self.history or (self.ring_bytes > self.max_bytes and len(ring) > 1):
            self._uncount(ring.pop())
        if self._subscribers or self.shared is not None:
            entry = request.entry()
            self.broadcast("request", entry)
            if self.shared is not None:
                self.shared.publish(entry)


def session_share(history: int) -> int:
    """The rows one session may keep once the list is full: a quarter of it."""
    return max(1, history // 4)


def _oldest_of(ring: deque[FeedObserver], session: str) -> FeedObserver:
    """The session's oldest row (the session holds rows: the newest is one of them)."""
    return next(request for request in reversed(ring) if request.session_key == session)


def fair_cut(entries: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """At most `limit` summaries (newest first) cut as the ring cuts: sessions holding more than
    their share lose their oldest rows first, then the oldest go. For the replicas' merged list,
    whose Redis stream keeps the newest by age alone."""
    if len(entries) <= limit:
        return entries
    keys = [entry.get("session") or entry.get("id") for entry in entries]
    counts: dict[Any, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    share, excess, dropped = session_share(limit), len(entries) - limit, set()
    for index in range(len(entries) - 1, -1, -1):
        if excess == 0:
            break
        if counts[keys[index]] > share:
            counts[keys[index]] -= 1
            dropped.add(index)
            excess -= 1
    return [entry for index, entry in enumerate(entries) if index not in dropped][:limit]


class FeedObserver(RequestObserver):
    """One request as the feed sees it (proxy.core.events.RequestObserver).

    Trace events are only kept as they come (a list extended, bounded); what the summary reads of
    them (tool calls, the `done` figures) is found when a summary is made: once at the end, or
    per trace call while someone watches. Only events beyond MAX_EVENTS, which are not kept, are
    looked at as they come, so that their tool calls and `done` still count."""

    __slots__ = (
        "_entry",
        "done",
        "dropped",
        "duration_ms",
        "events",
        "facts",
        "feed",
        "held",
        "number",
        "record",
        "started_at_ms",
        "tools",
    )
    wants_trace = True

    def __init__(self, feed: Feed, record: AccessRecord, number: int) -> None:
        self.feed = feed
        self.record: AccessRecord | None = record  # until the end; then its facts
        self.facts: RecordFacts | None = None
        self.duration_ms: float | None = None
        self._entry: dict[str, Any] | None = None
        self.number = number  # this replica's count of requests: the console's id is both
        self.started_at_ms = int(time.time() * 1000)
        self.events: list[Mapping[str, Any]] = []  # each cut to the console's bounds
        self.dropped = 0
        # Of the events not kept: their tool calls and `done`.
        self.tools: list[dict[str, Any]] = []
        self.done: Mapping[str, Any] | None = None
        self.held = 0  # bytes, once finished (what the ring counts)

    def on_trace(self, events: TraceEvents) -> None:
        kept = self.events
        room = MAX_EVENTS - len(kept)
        if room >= len(events):
            kept.extend(map(bounded_event, events))
        else:
            room = max(room, 0)
            kept.extend(map(bounded_event, events[:room]))
            self.dropped += len(events) - room
            self._note_unkept(events[room:])
        if self.feed.watched:
            self.feed.broadcast("progress", self.summary(None))

    def _note_unkept(self, events: TraceEvents) -> None:
        for event in events:
            kind = event["type"]
            if kind == "tool_call.start" and len(self.tools) < MAX_TOOLS:
                self.tools.append(tool_entry(event))
            elif kind == "done":
                self.done = bounded_event(event)

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        self.facts = RecordFacts.of(record)
        self.record = None
        self.duration_ms = duration_ms
        # Counted once, here: a few dozen objects for a usual request (bench/console_overhead.py).
        self.held = request_held(self.facts, self.events, self.tools, self.done)
        self.feed.finished(self)

    @property
    def session_key(self) -> str:
        """The agent session the row belongs to (proxy.sessions), or its own when it has none."""
        session = self.facts.session if self.facts is not None else None
        return session if session is not None else f"#{self.number}"

    def entry(self) -> dict[str, Any]:
        """The finished request's summary (made once)."""
        if self._entry is None:
            self._entry = self.summary(self.duration_ms)
        return self._entry

    def summary(self, duration_ms: float | None) -> dict[str, Any]:
        tools: list[dict[str, Any]] = []
        done = self.done
        for event in self.events:
            kind = event["type"]
            if kind == "tool_call.start":
                if len(tools) < MAX_TOOLS:
                    tools.append(tool_entry(event))
            elif kind == "done":
                done = event
        if self.tools:
            tools = (tools + self.tools)[:MAX_TOOLS]
        source = self.facts or self.record
        assert source is not None
        return summarize(
            source,
            request_id=f"{self.feed.replica}-{self.number}",
            replica=self.feed.replica,
            started_at_ms=self.started_at_ms,
            events=self.events,
            events_dropped=self.dropped,
            tools=tools,
            done=done,
            duration_ms=duration_ms,
        )
