"""Listeners of what the proxy does: one plug for metrics, tracing, the console and the replay store.

Each capability that wants to watch requests registers a `Listener` with the app. Per request the
app asks every listener to `start`; a listener not interested returns None and costs nothing more.
The observers a request gets then see:

- `on_trace(events)`: the *detailed* trace events of a chat response as they happen (the same
  dicts the trace builder makes — never reasoning text or raw payloads; see proxy.trace), whatever
  trace mode the client asked for. Only asked of observers whose `wants_trace` is true; events are
  shared between observers and must not be mutated.
- `on_end(record, duration_ms)`: exactly once, when the request's access-log line is written (every
  path writes exactly one), with the final `AccessRecord`.

`start` runs before anything is forwarded, so an observer may add headers to the upstream request
(`record.forward_headers`, e.g. a W3C `traceparent`) or to the response (`record.response_headers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from proxy.levels import TraceMode
from proxy.trace import TraceBuilder

if TYPE_CHECKING:
    from proxy.access_log import AccessRecord

TraceEvents = Sequence[dict[str, Any]]
Tap = Callable[[TraceEvents], None]

# What `X-Trace: brief` shows of the detailed timeline (see docs/trace-events.md).
BRIEF_TYPES = frozenset({"status", "tool_call.start", "error", "done"})


class RequestObserver(Protocol):
    wants_trace: bool

    def on_trace(self, events: TraceEvents) -> None: ...

    def on_end(self, record: AccessRecord, duration_ms: float) -> None: ...


class Listener(Protocol):
    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> RequestObserver | None:
        """Called when a request arrives (record has method, path, request id); None = not watching."""
        ...


def start_observers(
    listeners: Sequence[Listener], record: AccessRecord, headers: Iterable[tuple[str, str]]
) -> list[RequestObserver]:
    if not listeners:
        return []
    pairs = list(headers)
    started = (listener.start(record, pairs) for listener in listeners)
    return [observer for observer in started if observer is not None]


def trace_tap(observers: Sequence[RequestObserver]) -> Tap | None:
    """One callable feeding every observer that wants trace events, or None if none does."""
    wanting = [o for o in observers if o.wants_trace]
    if not wanting:
        return None
    if len(wanting) == 1:
        return wanting[0].on_trace

    def tap(events: TraceEvents) -> None:
        for observer in wanting:
            observer.on_trace(events)

    return tap


class TappedTraceBuilder(TraceBuilder):
    """A detailed trace builder whose every event goes to `tap`, while the caller (the client's
    stream) gets the view of `client_mode`: nothing for `off`, the brief subset renumbered so its
    `seq` stays 0, 1, 2…, or everything for `detailed`.

    Used only when some observer wants trace events, so a request nobody watches keeps the plain
    builder (or none at all with `X-Trace: off`).
    """

    def __init__(self, *, client_mode: TraceMode, tap: Tap, **kwargs: Any) -> None:
        super().__init__(mode=TraceMode.DETAILED, **kwargs)
        self._client_mode = client_mode
        self._tap = tap
        self._client_seq = 0

    def _client_view(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not events:
            return events
        self._tap(events)
        mode = self._client_mode
        if mode is TraceMode.DETAILED:
            return events
        if mode is TraceMode.OFF:
            return []
        shown = []
        for event in events:
            if event["type"] in BRIEF_TYPES:
                shown.append({**event, "seq": self._client_seq})
                self._client_seq += 1
        return shown

    def begin(self, request_body: dict[str, Any] | None, now_ms: float) -> list[dict[str, Any]]:
        return self._client_view(super().begin(request_body, now_ms))

    def on_chunk(self, chunk: dict[str, Any], reasoning: bool, now_ms: float) -> list[dict[str, Any]]:
        return self._client_view(super().on_chunk(chunk, reasoning, now_ms))

    def on_error(self, message: str, now_ms: float, code: str | None = None) -> list[dict[str, Any]]:
        return self._client_view(super().on_error(message, now_ms, code))

    def finish(self, now_ms: float) -> list[dict[str, Any]]:
        return self._client_view(super().finish(now_ms))

    def _ensure_begun(self, now_ms: float) -> list[dict[str, Any]]:
        # The base class's own begin: its events are tapped and filtered with the rest of the call's.
        return [] if self._begun else TraceBuilder.begin(self, None, now_ms)

    # on_completion is inherited: it calls the methods above, so its events are already filtered.


def build_trace(
    client_mode: TraceMode,
    tap: Tap | None,
    *,
    zh: bool,
    level: str,
    provider: str,
    method: str | None,
    titles: Mapping[str, Mapping[str, str]] | None = None,
) -> TraceBuilder | None:
    """The trace builder for one chat response: none when neither the client nor an observer
    wants a trace, a tapped one when an observer does. `titles`: tool display titles."""
    if tap is not None:
        return TappedTraceBuilder(
            client_mode=client_mode,
            tap=tap,
            zh=zh,
            level=level,
            provider=provider,
            method=method,
            titles=titles,
        )
    if client_mode is TraceMode.OFF:
        return None
    return TraceBuilder(mode=client_mode, zh=zh, level=level, provider=provider, method=method, titles=titles)


def notify_end(record: AccessRecord, duration_ms: float) -> None:
    for observer in record.observers:
        observer.on_end(record, duration_ms)
