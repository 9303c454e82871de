"""Trace taps: the trace builder a chat response gets, fed to the observers that watch it.

The observers themselves (who watches, what they are told) are `proxy.core.events`; this module is
the per-chunk half, compiled with the stream core: `build_trace` picks the builder (none, plain,
tapped, or one that also keeps the answer for an observer that wants the output), and a tapped
builder gives every event to the observers once while the client's stream gets the view its
`X-Trace` asked for (brief renumbered, or nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from proxy.core.controls import TraceMode
from proxy.core.events import OutputSink, RequestObserver, TraceEvents
from proxy.core.stream.trace import TraceBuilder

Tap = Callable[[TraceEvents], None]

# What `X-Trace: brief` shows of the detailed timeline (see docs/trace-events.md).
BRIEF_TYPES = frozenset({"status", "note", "tool_call.start", "warning", "error", "done"})


def trace_tap(observers: Sequence[RequestObserver]) -> Tap | None:
    """One callable feeding every observer that wants trace events, or None if none does."""
    # (Plain loops here and below: every chat request asks these four of its observers, and a
    # comprehension or a generator is a call of its own, per observer for a generator.)
    wanting: list[RequestObserver] = []
    for o in observers:
        if o.wants_trace:
            wanting.append(o)
    if not wanting:
        return None
    if len(wanting) == 1:
        return wanting[0].on_trace

    def tap(events: TraceEvents) -> None:
        for observer in wanting:
            observer.on_trace(events)

    return tap


def tap_needs_detail(observers: Sequence[RequestObserver]) -> bool:
    """Whether some observer watching the trace needs more than the brief events."""
    for o in observers:  # noqa: SIM110 (a loop, not any() over a generator: see trace_tap)
        if o.wants_trace and not o.brief_trace:
            return True
    return False


class TappedTraceBuilder(TraceBuilder):
    """A trace builder whose every event goes to `tap`, while the caller (the client's stream)
    gets the view of `client_mode`: nothing for `off`, the brief subset renumbered so its `seq`
    stays 0, 1, 2…, or everything for `detailed`. The builder is detailed unless neither the tap
    (`detailed_tap`) nor the client needs more than brief.

    Used only when some observer wants trace events (or reads the outcome of a request whose client
    asked for no trace), so a request nobody watches keeps the plain builder (or none at all with
    `X-Trace: off`). It overrides nothing but the view of each public call's events (TraceBuilder's
    `_view`), so each call reaches the tap once, and the common chunk (more of the same) returns
    from the base class's quiet path before reaching it: watching a stream adds nothing per chunk.
    """

    __slots__ = ("_client_gets_all", "_client_mode", "_client_seq", "_tap")

    def __init__(
        self,
        *,
        client_mode: TraceMode,
        tap: Tap,
        detailed_tap: bool = True,
        zh: bool,
        level: str,
        provider: str,
        method: str | None = None,
        titles: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        detailed = detailed_tap or client_mode is TraceMode.DETAILED
        mode = TraceMode.DETAILED if detailed else TraceMode.BRIEF
        super().__init__(mode=mode, zh=zh, level=level, provider=provider, method=method, titles=titles)
        self._viewed = True
        # What the client sees when it is not everything the builder makes.
        self._client_mode = client_mode
        self._client_gets_all = client_mode is mode
        self._tap = tap
        self._client_seq = 0

    def _view(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not events:
            return events
        self._tap(events)
        if self._client_gets_all:
            return events
        if self._client_mode is TraceMode.OFF:
            return []
        shown = []
        seq = self._client_seq
        for event in events:
            if event["type"] in BRIEF_TYPES:
                # (The events are shared with the tap: one whose number differs is copied.)
                shown.append(event if event["seq"] == seq else {**event, "seq": seq})
                seq += 1
        self._client_seq = seq
        return shown


def needs_outcome(observers: Sequence[RequestObserver]) -> bool:
    """Whether some observer reads the builder's outcome at the end (so one must exist)."""
    for o in observers:  # noqa: SIM110 (a loop, not any() over a generator: see trace_tap)
        if o.wants_outcome:
            return True
    return False


def output_sink(observers: Sequence[RequestObserver]) -> OutputSink | None:
    """One callable giving the answer to every observer that asked for it, or None if none did."""
    wanting: list[RequestObserver] = []
    for o in observers:
        if o.wants_output:
            wanting.append(o)
    if not wanting:
        return None

    def sink(messages: list[dict[str, Any]]) -> None:
        for observer in wanting:
            observer.on_output(messages)

    return sink


class AnswerKeepingTraceBuilder(TappedTraceBuilder):
    """A tapped builder that also keeps choice 0's answer (text, tool calls, finish reason) and
    hands it to `output` when the response is done. A non-stream answer is kept from the chunks its
    stream would have carried (TraceBuilder._completion_chunks)."""

    __slots__ = ("_kept_calls", "_kept_finish", "_kept_text", "_output")

    # (Every parameter spelled out, not forwarded as **kwargs: compiled by mypyc, keyword
    # arguments forwarded that way reach the wrong parameters.)
    def __init__(
        self,
        *,
        output: OutputSink,
        client_mode: TraceMode,
        tap: Tap,
        detailed_tap: bool = True,
        zh: bool,
        level: str,
        provider: str,
        method: str | None = None,
        titles: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        super().__init__(
            client_mode=client_mode,
            tap=tap,
            detailed_tap=detailed_tap,
            zh=zh,
            level=level,
            provider=provider,
            method=method,
            titles=titles,
        )
        self._output = output
        self._kept_text: list[str] = []
        self._kept_calls: dict[int, dict[str, str]] = {}
        self._kept_finish: str | None = None

    def on_chunk(self, chunk: dict[str, Any], reasoning: bool, now_ms: float) -> list[dict[str, Any]]:
        self._keep_chunk(chunk)
        return super().on_chunk(chunk, reasoning, now_ms)

    def _completion_chunks(self, body: dict[str, Any], reasoning: bool) -> list[tuple[dict[str, Any], bool]]:
        chunks = super()._completion_chunks(body, reasoning)
        for chunk, _ in chunks:
            self._keep_chunk(chunk)
        return chunks

    def _keep_chunk(self, chunk: dict[str, Any]) -> None:
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._keep(choice)

    def text_rule(self, index: int, field: str, reasoning: bool) -> tuple[bool, Callable[[str], None] | None]:
        # The answer's text is kept even when the chunk needs nothing else.
        passes, tell = super().text_rule(index, field, reasoning)
        if passes and index == 0 and field == "content":
            assert tell is None  # (the base class tells nothing)
            return True, self._kept_text.append
        return passes, tell

    def _keep(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str):
                self._kept_text.append(content)
            for fragment in delta.get("tool_calls") or ():
                if not isinstance(fragment, dict):
                    continue
                index = fragment.get("index")
                if not isinstance(index, int):
                    # Some upstreams omit it when there is one call: an id starts a call, the
                    # pieces after it continue that one.
                    last = max(self._kept_calls, default=-1)
                    index = last + 1 if fragment.get("id") or last < 0 else last
                call = self._kept_calls.setdefault(index, {})
                if isinstance(fragment.get("id"), str):
                    call["id"] = fragment["id"]
                function = fragment.get("function")
                if isinstance(function, dict):
                    for key in ("name", "arguments"):
                        if isinstance(function.get(key), str):
                            call[key] = call.get(key, "") + function[key]
        if isinstance(choice.get("finish_reason"), str):
            self._kept_finish = choice["finish_reason"]

    def _finish(self, now_ms: float) -> list[dict[str, Any]]:
        # (The private half: a whole answer's on_completion finishes through it too.)
        first_time = not self._done
        events = super()._finish(now_ms)
        if first_time:
            self._output([self.answer()])
        return events

    def answer(self) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        text = "".join(self._kept_text)
        if text:
            parts.append({"type": "text", "content": text})
        for index in sorted(self._kept_calls):
            call = self._kept_calls[index]
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "arguments": call.get("arguments"),
                }
            )
        return {"role": "assistant", "parts": parts, "finish_reason": self._kept_finish}


def build_trace(
    client_mode: TraceMode,
    tap: Tap | None,
    *,
    zh: bool,
    level: str,
    provider: str,
    method: str | None,
    titles: Mapping[str, Mapping[str, str]] | None = None,
    output: OutputSink | None = None,
    detailed_tap: bool = True,
    outcome: bool = False,
) -> TraceBuilder | None:
    """The trace builder for one chat response: none when neither the client nor an observer
    wants a trace, a tapped one when an observer does, one that also keeps the answer when an
    observer wants it (`output`). `titles`: tool display titles. `detailed_tap`: whether the tap
    needs the detailed events (tap_needs_detail). `outcome`: an observer reads the builder's
    outcome at the end (needs_outcome), so there is one even when the client asked for no trace
    (brief, shown to nobody)."""
    if output is not None or tap is not None or (outcome and client_mode is TraceMode.OFF):
        tapped = TappedTraceBuilder if output is None else partial(AnswerKeepingTraceBuilder, output=output)
        return tapped(
            client_mode=client_mode,
            tap=tap or _ignore,
            detailed_tap=detailed_tap,
            zh=zh,
            level=level,
            provider=provider,
            method=method,
            titles=titles,
        )
    if client_mode is TraceMode.OFF:
        return None
    return TraceBuilder(mode=client_mode, zh=zh, level=level, provider=provider, method=method, titles=titles)


def _ignore(events: TraceEvents) -> None:
    pass
