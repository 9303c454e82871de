"""Holding tool calls back until a person decides. Pure: bytes, decisions and clock readings in,
bytes out.

`StreamGate` sits after the stream pipeline (it reads the pipeline's output, which is well-formed
SSE) and exists only when a review policy is configured, so a proxy without one pays nothing.
From the first tool-call fragment on, it holds the stream back until that call's name is known;
a call the policy does not cover lets what was held go; a call it covers keeps everything after
it held (its fragments, later calls, the finish chunk, the closing trace and `[DONE]`), while
content and reasoning before it have already streamed. When the upstream is done, `held_calls()`
says what to review; `release(decisions, now_ms)` gives the bytes the client gets instead:

- approve: the held events unchanged;
- modify: the call's first fragment carries the reviewer's arguments, its other fragments none;
- reject / timeout: the call's fragments are removed (the remaining calls renumbered from 0), an
  assistant text saying why is added before the finish chunk, and the finish reason becomes
  `stop` when no call is left.

What the gate can attribute, and what it removes instead (failing closed), are the rules it shares
with non-stream completions (proxy.core.stream.gate_rules; those: proxy.core.stream.gate_completion);
following the calls as their fragments come is proxy.core.stream.gate_calls.
Every event is read, named `event: trace` or not (SDKs parse named events as chunks too); a data
event the gate cannot read as JSON is withheld.

`data: [DONE]` is always kept until the end: the relay puts the trace's closing events (`done`,
which includes the hold) before it (`flush` / `release` take them). Trace frames held with the
calls are renumbered after the gate's `review.request` so `seq` stays 0, 1, 2… for the client;
`review.decision` and `done` come last, at the time of the decision, so `t_ms` never decreases.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.controls import TraceFormat
from proxy.core.jsonio import dumps
from proxy.core.review.rules import (
    NO_CLIENT_NAMES,
    ClientNames,
    Decision,
    HeldCall,
    ReviewPolicy,
    Verdict,
    client_extra,
    rejection_text,
    shown_name,
)
from proxy.core.stream.gate_calls import CallTracker, rewrite_calls
from proxy.core.stream.gate_rules import (
    call_fragments,
    decision_for,
    finish_reason,
    is_json,
    ms,
    read_object,
    retimed,
    review_event,
    set_finish_reason,
)
from proxy.core.stream.sse import SSEDecoder, SSEEvent, comment_frame, data_frame
from proxy.core.stream.trace_format import ChunkMeta, chunk_meta, event_frames

DONE = b"[DONE]"
_TRACE_COMMENT = b": trace "
_WITHHELD = b": thinkproxy: an event that is not JSON was withheld (tool calls are under review)\n\n"


@dataclass(slots=True)
class _Held:
    """One held event: its raw bytes, and what the gate understood of it."""

    raw: bytes
    chunk: dict[str, Any] | None = None  # a data event's JSON object (cleared of what was removed)
    trace: dict[str, Any] | None = None  # a trace frame's event
    done: bool = False  # data: [DONE]


class StreamGate:
    def __init__(
        self,
        policy: ReviewPolicy,
        *,
        new_id: Callable[[], str],
        trace_format: TraceFormat | None,
        zh: bool,
        max_event_bytes: int,
        names: ClientNames = NO_CLIENT_NAMES,
    ) -> None:
        self._names = names  # the tools the client knows by other names (review_rules.ClientTool)
        self._new_id = new_id
        self._trace_format = trace_format  # None: the client gets no trace
        self._zh = zh
        self._decoder = SSEDecoder(max_event_bytes)
        self._calls = CallTracker(policy, names)  # (its `holding` and `covered` hold the stream)
        self._held: list[_Held] = []
        self._next_seq = 0  # the first trace seq the client has not been given
        self._last_t = 0.0  # the latest t_ms the client has been given
        self._held_t: float | None = None  # the t_ms of the first trace event held with the calls
        self._meta: ChunkMeta | None = None
        self._reviews: list[HeldCall] = []
        self._final: _Held | None = None  # data: [DONE], kept for the closing events

    # -- feeding ---------------------------------------------------------------------------------
    def feed(self, data: bytes) -> bytes:
        """The pipeline's output bytes; returns what may go to the client now."""
        if not data:
            return b""
        out: list[bytes] = []
        for event in self._decoder.feed(data):
            self._take(event, out)
        return b"".join(out)

    @property
    def holding(self) -> bool:
        return self._calls.covered

    def flush(self, closing: Sequence[dict[str, Any]] = ()) -> bytes:
        """The upstream is done and no held call is covered (a call whose name never settled, say):
        what was held goes to the client, then `closing` (the trace's last events) and [DONE].
        Nothing while a covered call awaits review."""
        if self._calls.covered:
            return b""
        out = [h.raw for h in self._held]
        self._held.clear()
        self._calls.holding = False
        out.append(self._frames(list(closing)))
        if self._final is not None:
            out.append(self._final.raw)
            self._final = None
        return b"".join(out)

    def discard(self) -> None:
        """The exchange failed: what was held never reaches the client (nobody reviewed it)."""
        self._held.clear()
        self._final = None
        self._calls.holding = self._calls.covered = False

    def _take(self, event: SSEEvent, out: list[bytes]) -> None:
        held = self._understand(event)
        if held.done or self._final is not None:
            if self._final is None:
                self._final = held
            return  # nothing follows [DONE]; it waits for the closing events
        if held.chunk is not None:
            if self._meta is None:
                self._meta = chunk_meta(held.chunk)
            if self._calls.track_calls(held.chunk):
                # Something was removed: what the client gets is the chunk without it.
                held.raw = data_frame(dumps(held.chunk))
        if self._calls.holding:
            self._held.append(held)
            if held.trace is not None and self._held_t is None:
                t = held.trace.get("t_ms")
                if isinstance(t, int | float) and not isinstance(t, bool):
                    self._held_t = float(t)
            if not self._calls.covered and self._calls.names_settled():
                # Every call so far is one the policy does not cover: let them go.
                self._calls.holding = False
                self._held_t = None
                out.extend(h.raw for h in self._held)
                for h in self._held:
                    if h.trace is not None:
                        self._seen_seq(h.trace)
                self._held.clear()
            return
        if held.trace is not None:
            self._seen_seq(held.trace)
        out.append(held.raw)

    def _understand(self, event: SSEEvent) -> _Held:
        data = event.data
        if data is None:
            if event.raw.startswith(_TRACE_COMMENT):
                return _Held(event.raw, trace=read_object(event.raw[len(_TRACE_COMMENT) :]))
            return _Held(event.raw)
        if data == DONE:
            return _Held(event.raw, done=True)
        parsed = read_object(data)
        if parsed is None:
            if is_json(data):
                return _Held(event.raw)  # JSON, but no object: no chunk an SDK could take a call from
            return _Held(_WITHHELD)
        trace = parsed.get("trace") if event.event == b"trace" else None
        return _Held(event.raw, chunk=parsed, trace=trace if isinstance(trace, dict) else None)

    def _seen_seq(self, trace: dict[str, Any]) -> None:
        seq = trace.get("seq")
        if isinstance(seq, int):
            self._next_seq = max(self._next_seq, seq + 1)
        t = trace.get("t_ms")
        if isinstance(t, int | float) and not isinstance(t, bool):
            self._last_t = max(self._last_t, float(t))

    # -- after the upstream ended ----------------------------------------------------------------
    def held_calls(
        self, *, now: float, timeout: float, extra: dict[str, Any] | None = None
    ) -> list[HeldCall]:
        """The calls to review (once; later calls return the same list)."""
        if not self._reviews:
            self._reviews = [
                HeldCall(
                    review_id=self._new_id(),
                    index=call.index,
                    call_id=call.id,
                    tool=shown_name(call.name, self._names),
                    arguments="".join(call.arguments),
                    created=now,
                    expires=now + timeout,
                    extra=client_extra(call.name, self._names, extra),
                )
                for call in sorted(self._calls.calls.values(), key=lambda c: c.index)
                if call.covered
            ]
        return self._reviews

    def removed_calls(self) -> list[tuple[HeldCall, Decision]]:
        """The calls removed without a review, each with the reason the client is told."""
        return self._calls.removed_calls(self._zh)

    def finish_after(self, decisions: dict[str, Decision]) -> str | None:
        """The finish reason `release` gives the client when it changes it (no call left), or None."""
        refused = {c.index for c in self._reviews if not decision_for(decisions, c).releases_call}
        if self._calls.removed or refused:
            return "tool_calls" if any(i not in refused for i in self._calls.calls) else "stop"
        return None

    def review_events(self, now_ms: float) -> list[dict[str, Any]]:
        """`review.request` events for the held calls (not numbered), at the time the hold began:
        the first trace event held with the calls, or `now_ms`; never before what the client saw."""
        t = max(self._last_t, min(now_ms, self._held_t) if self._held_t is not None else now_ms)
        return [{**review_event("review.request", c, self._zh), "t_ms": t} for c in self._reviews]

    def decision_events(self, decisions: dict[str, Decision]) -> list[dict[str, Any]]:
        """`review.decision` events for the held calls (not numbered, no time)."""
        return [
            review_event("review.decision", c, self._zh, decision_for(decisions, c)) for c in self._reviews
        ]

    def request_frames(self, now_ms: float) -> bytes:
        """`review.request` trace frames for the held calls (nothing when the client has no trace)."""
        return self._frames(self.review_events(now_ms))

    def release(
        self, decisions: dict[str, Decision], now_ms: float, closing: Sequence[dict[str, Any]] = ()
    ) -> bytes:
        """The held events as the decisions make them; then a `review.decision` per call and the
        trace's closing events (`closing`, from the trace builder) at `now_ms`, then [DONE]."""
        verdicts = {c.index: (c, decision_for(decisions, c)) for c in self._reviews}
        refused = [(c, d) for c, d in verdicts.values() if not d.releases_call]
        refused += self.removed_calls()
        refused_indexes = {c.index for c, d in verdicts.values() if not d.releases_call}
        kept = [i for i in sorted(self._calls.calls) if i not in refused_indexes]
        renumber = {old: new for new, old in enumerate(kept)}
        modified = {c.index: d.arguments for c, d in verdicts.values() if d.verdict is Verdict.MODIFY}
        wrote_args: set[int] = set()
        finish_seen = False
        out: list[bytes] = []
        ending: list[dict[str, Any]] = []  # the held `done` (a pipeline that did not defer it)
        for held in self._held:
            chunk = held.chunk
            if chunk is not None and (call_fragments(chunk) or finish_reason(chunk) is not None):
                if finish_reason(chunk) is not None:
                    finish_seen = True
                    if refused:
                        out.append(data_frame(orjson.dumps(self._text_chunk(refused))))
                        set_finish_reason(chunk, "tool_calls" if kept else "stop")
                if refused or modified:
                    rewritten = rewrite_calls(chunk, renumber, modified, wrote_args)
                    if rewritten is not None:
                        out.append(data_frame(dumps(rewritten)))
                else:
                    out.append(held.raw)
            elif held.trace is not None:
                if held.trace.get("type") == "done":
                    ending.append(held.trace)
                else:
                    out.append(self._frames([held.trace]))
            else:
                out.append(held.raw)
        if refused and not finish_seen:
            out.append(data_frame(orjson.dumps(self._text_chunk(refused))))
            out.append(data_frame(orjson.dumps(self._finish_chunk("tool_calls" if kept else "stop"))))
        decided = [{**e, "t_ms": now_ms} for e in self.decision_events(decisions)]
        closing_events = [retimed(e, now_ms, kept) for e in [*ending, *closing]]
        out.append(self._frames([*decided, *closing_events]))
        if self._final is not None:
            out.append(self._final.raw)
        else:
            out.append(data_frame(DONE))
        self._held.clear()
        self._final = None
        self._calls.holding = self._calls.covered = False
        return b"".join(out)

    # -- pieces ----------------------------------------------------------------------------------
    def _frames(self, events: list[dict[str, Any]]) -> bytes:
        if self._trace_format is None or not events:
            return b""
        numbered = []
        for event in events:
            at = event.get("t_ms")
            if isinstance(at, int | float) and not isinstance(at, bool):
                self._last_t = max(float(at), self._last_t)
            numbered.append({**event, "seq": self._next_seq, "t_ms": ms(self._last_t)})
            self._next_seq += 1
        if self._trace_format is TraceFormat.EVENT:
            return event_frames(numbered, self._meta or ChunkMeta(id="", model="", created=0))
        return b"".join(comment_frame(_TRACE_COMMENT[2:] + orjson.dumps(e)) for e in numbered)

    def _base_chunk(self) -> dict[str, Any]:
        meta = self._meta or ChunkMeta(id="", model="", created=0)
        return {"id": meta.id, "object": meta.object, "created": meta.created, "model": meta.model}

    def _text_chunk(self, refused: list[tuple[HeldCall, Decision]]) -> dict[str, Any]:
        text = rejection_text(refused, self._zh)
        return {
            **self._base_chunk(),
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        }

    def _finish_chunk(self, reason: str) -> dict[str, Any]:
        return {**self._base_chunk(), "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}
