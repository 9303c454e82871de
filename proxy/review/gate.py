"""Holding tool calls back until a person decides. Pure: bytes and decisions in, bytes out.

`StreamGate` sits after the stream pipeline (it reads the pipeline's output, which is well-formed
SSE) and exists only when a review policy is configured, so a proxy without one pays nothing.
From the first tool-call fragment on, it holds the stream back until that call's name is known;
a call the policy does not cover lets what was held go; a call it covers keeps everything after
it held (its fragments, later calls, the finish chunk, the closing trace and `[DONE]`), while
content and reasoning before it have already streamed. When the upstream is done, `held_calls()`
says what to review; `release(decisions)` gives the bytes the client gets instead:

- approve: the held events unchanged;
- modify: the call's first fragment carries the reviewer's arguments, its other fragments none;
- reject / timeout: the call's fragments are removed (the remaining calls renumbered from 0), an
  assistant text saying why is added before the finish chunk, and the finish reason becomes
  `stop` when no call is left.

Trace frames held with the calls are renumbered after the gate's own `review.request` and
`review.decision` events so `seq` stays 0, 1, 2… for the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.levels import TraceFormat
from proxy.review.policy import Decision, HeldCall, ReviewPolicy, Verdict, rejection_text
from proxy.sse import SSEDecoder, SSEEvent, comment_frame, data_frame
from proxy.trace import ChunkMeta, chunk_meta, event_frames

DONE = b"[DONE]"
_TRACE_COMMENT = b": trace "


@dataclass(slots=True)
class _Call:
    index: int
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    name_complete: bool = False
    covered: bool = False


@dataclass(slots=True)
class _Held:
    """One held event: its raw bytes, and what the gate understood of it."""

    raw: bytes
    chunk: dict[str, Any] | None = None  # a data event's JSON chunk
    trace: dict[str, Any] | None = None  # a trace frame's event
    done: bool = False  # data: [DONE]


def review_event(kind: str, call: HeldCall, zh: bool, decision: Decision | None = None) -> dict[str, Any]:
    """A `review.request` / `review.decision` trace event (seq and t_ms are set by the caller)."""
    event: dict[str, Any] = {"type": kind, "id": call.review_id, "tool": call.tool, "call_id": call.call_id}
    if decision is None:
        event["message"] = f"等待人工审核：{call.tool}" if zh else f"Waiting for a reviewer: {call.tool}"
        event["input_summary"] = call.summary
        event["expires"] = call.expires
    else:
        event["decision"] = decision.verdict.value
        if decision.comment:
            event["comment"] = decision.comment
        verdict_zh = {"approve": "已批准", "modify": "已修改", "reject": "已拒绝", "timeout": "审核超时"}
        event["message"] = (
            f"{call.tool}：{verdict_zh[decision.verdict.value]}"
            if zh
            else f"{call.tool}: {decision.verdict.value}"
        )
    return event


class StreamGate:
    def __init__(
        self,
        policy: ReviewPolicy,
        *,
        new_id: Callable[[], str],
        trace_format: TraceFormat | None,
        zh: bool,
        max_event_bytes: int,
    ) -> None:
        self._policy = policy
        self._new_id = new_id
        self._trace_format = trace_format  # None: the client gets no trace
        self._zh = zh
        self._decoder = SSEDecoder(max_event_bytes)
        self._calls: dict[int, _Call] = {}
        self._held: list[_Held] = []
        self._holding = False
        self._covered = False  # a covered call was seen: hold to the end
        self._next_seq = 0  # the first trace seq the client has not been given
        self._last_t = 0.0
        self._meta: ChunkMeta | None = None
        self._reviews: list[HeldCall] = []

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
        return self._covered

    def flush(self) -> bytes:
        """The upstream is done and no held call is covered (a call whose name never settled, say):
        what was held goes to the client. Nothing while a covered call awaits review."""
        if self._covered or not self._held:
            return b""
        out = b"".join(h.raw for h in self._held)
        self._held.clear()
        self._holding = False
        return out

    def discard(self) -> None:
        """The exchange failed: what was held never reaches the client (nobody reviewed it)."""
        self._held.clear()
        self._holding = self._covered = False

    def _take(self, event: SSEEvent, out: list[bytes]) -> None:
        held = self._understand(event)
        if held.trace is not None and not self._holding:
            self._seen_seq(held.trace)
        if held.chunk is not None:
            if self._meta is None:
                self._meta = chunk_meta(held.chunk)
            self._track_calls(held.chunk)
        if self._holding:
            self._held.append(held)
            if not self._covered and self._names_settled():
                # Every call so far is one the policy does not cover: let them go.
                self._holding = False
                out.extend(h.raw for h in self._held)
                for h in self._held:
                    if h.trace is not None:
                        self._seen_seq(h.trace)
                self._held.clear()
            return
        out.append(held.raw)

    def _understand(self, event: SSEEvent) -> _Held:
        data = event.data
        if data is None:
            if event.raw.startswith(_TRACE_COMMENT):
                return _Held(event.raw, trace=_loads(event.raw[len(_TRACE_COMMENT) :]))
            return _Held(event.raw)
        if data == DONE:
            return _Held(event.raw, done=True)
        parsed = _loads(data)
        if event.event == b"trace":
            trace = parsed.get("trace") if parsed is not None else None
            return _Held(event.raw, trace=trace if isinstance(trace, dict) else None)
        return _Held(event.raw, chunk=parsed)

    def _seen_seq(self, trace: dict[str, Any]) -> None:
        seq = trace.get("seq")
        if isinstance(seq, int):
            self._next_seq = max(self._next_seq, seq + 1)
        t = trace.get("t_ms")
        if isinstance(t, int | float):
            self._last_t = max(self._last_t, float(t))

    def _track_calls(self, chunk: dict[str, Any]) -> None:
        for fragment in _fragments(chunk):
            index = fragment.get("index")
            if type(index) is not int:
                index = len(self._calls)
            call = self._calls.get(index)
            if call is None:
                call = self._calls[index] = _Call(index)
                self._holding = True  # nothing of a new call goes out before its name is known
            if isinstance(fragment.get("id"), str) and fragment["id"]:
                call.id = fragment["id"]
            function = fragment.get("function")
            if not isinstance(function, dict):
                continue
            name = function.get("name")
            if isinstance(name, str) and name and name != call.name:
                call.name = name if name.startswith(call.name) else call.name + name
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                call.arguments.append(arguments)
                call.name_complete = True
            if call.name and self._policy.matches(call.name) and not call.covered:
                call.covered = self._covered = True
        if _finish_reason(chunk) is not None:
            for call in self._calls.values():
                call.name_complete = True

    def _names_settled(self) -> bool:
        return all(call.name_complete for call in self._calls.values())

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
                    tool=call.name,
                    arguments="".join(call.arguments),
                    created=now,
                    expires=now + timeout,
                    extra=dict(extra or {}),
                )
                for call in sorted(self._calls.values(), key=lambda c: c.index)
                if call.covered
            ]
        return self._reviews

    def request_frames(self) -> bytes:
        """`review.request` trace events for the held calls (nothing when the client has no trace)."""
        return self._frames([review_event("review.request", c, self._zh) for c in self._reviews])

    def release(self, decisions: dict[str, Decision]) -> bytes:
        """The held events as the decisions make them, preceded by a `review.decision` per call."""
        verdicts = {
            c.index: (c, decisions.get(c.review_id, Decision(Verdict.TIMEOUT))) for c in self._reviews
        }
        out = [self._frames([review_event("review.decision", c, self._zh, d) for c, d in verdicts.values()])]
        refused = [(c, d) for c, d in verdicts.values() if not d.releases_call]
        kept = [i for i in sorted(self._calls) if i not in {c.index for c, _ in refused}]
        renumber = {old: new for new, old in enumerate(kept)}
        modified = {c.index: d.arguments for c, d in verdicts.values() if d.verdict is Verdict.MODIFY}
        wrote_args: set[int] = set()
        finish_seen = False
        for held in self._held:
            if held.trace is not None:
                out.append(self._frames([self._retraced(held.trace, kept)]))
            elif held.chunk is not None and (
                _fragments(held.chunk) or _finish_reason(held.chunk) is not None
            ):
                chunk = held.chunk
                if _finish_reason(chunk) is not None:
                    finish_seen = True
                    if refused:
                        out.append(data_frame(orjson.dumps(self._text_chunk(refused))))
                    if not kept:
                        _set_finish_reason(chunk, "stop")
                if refused or modified:
                    rewritten = _rewrite_calls(chunk, renumber, modified, wrote_args)
                    if rewritten is not None:
                        out.append(data_frame(orjson.dumps(rewritten)))
                else:
                    out.append(held.raw)
            elif held.done:
                if refused and not finish_seen:
                    out.append(data_frame(orjson.dumps(self._text_chunk(refused))))
                    out.append(
                        data_frame(orjson.dumps(self._finish_chunk("stop" if not kept else "tool_calls")))
                    )
                    finish_seen = True
                out.append(held.raw)
            else:
                out.append(held.raw)
        self._held.clear()
        self._holding = self._covered = False
        return b"".join(out)

    # -- pieces ----------------------------------------------------------------------------------
    def _retraced(self, trace: dict[str, Any], kept: list[int]) -> dict[str, Any]:
        event = {**trace}
        if event.get("type") == "done" and not kept:
            event["finish_reason"] = "stop"
        return event

    def _frames(self, events: list[dict[str, Any]]) -> bytes:
        if self._trace_format is None or not events:
            return b""
        numbered = []
        for event in events:
            numbered.append({**event, "seq": self._next_seq, "t_ms": event.get("t_ms", self._last_t)})
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


def _rewrite_calls(
    chunk: dict[str, Any], renumber: dict[int, int], modified: dict[int, str | None], wrote_args: set[int]
) -> dict[str, Any] | None:
    """The chunk with refused calls removed, kept ones renumbered, modified arguments put in;
    None when nothing of it is left to send."""
    chunk = orjson.loads(orjson.dumps(chunk))  # a private copy: the held original stays as it came
    choice = _choice0(chunk)
    if choice is None:
        return chunk
    delta = choice.get("delta")
    fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
    if not isinstance(fragments, list) or not isinstance(delta, dict):
        return chunk
    position = 0
    kept_fragments = []
    for fragment in fragments:
        if not isinstance(fragment, dict):
            continue
        index = fragment.get("index")
        if type(index) is not int:
            index = position
        position += 1
        if index not in renumber:
            continue  # a refused call: nothing of it reaches the client
        fragment = {**fragment, "index": renumber[index]}
        if index in modified:
            function = fragment.get("function")
            function = dict(function) if isinstance(function, dict) else {}
            if index in wrote_args:
                function.pop("arguments", None)
                if not function.get("name") and not fragment.get("id"):
                    continue  # a fragment that only carried the replaced arguments
            else:
                function["arguments"] = modified[index] or "{}"
                wrote_args.add(index)
            fragment["function"] = function
        kept_fragments.append(fragment)
    if kept_fragments:
        delta["tool_calls"] = kept_fragments
    else:
        del delta["tool_calls"]
        if not delta and choice.get("finish_reason") is None and chunk.get("usage") is None:
            return None
    return chunk


def _loads(data: bytes) -> dict[str, Any] | None:
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _choice0(chunk: dict[str, Any]) -> dict[str, Any] | None:
    choices = chunk.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                return choice
    return None


def _fragments(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    choice = _choice0(chunk)
    delta = choice.get("delta") if choice is not None else None
    fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
    return [f for f in fragments if isinstance(f, dict)] if isinstance(fragments, list) else []


def _finish_reason(chunk: dict[str, Any]) -> str | None:
    choice = _choice0(chunk)
    reason = choice.get("finish_reason") if choice is not None else None
    return reason if isinstance(reason, str) else None


def _set_finish_reason(chunk: dict[str, Any], reason: str) -> None:
    choice = _choice0(chunk)
    if choice is not None:
        choice["finish_reason"] = reason


# -- non-stream responses --------------------------------------------------------------------------


def completion_held_calls(
    completion: dict[str, Any],
    policy: ReviewPolicy,
    *,
    new_id: Callable[[], str],
    now: float,
    timeout: float,
    extra: dict[str, Any] | None = None,
) -> list[HeldCall]:
    """The calls of a `chat.completion` (choice 0) that the policy holds for review."""
    held = []
    for position, call in enumerate(_message_calls(completion)):
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not policy.matches(name):
            continue
        arguments = function.get("arguments") if isinstance(function, dict) else None
        call_id = call.get("id")
        held.append(
            HeldCall(
                review_id=new_id(),
                index=position,
                call_id=call_id if isinstance(call_id, str) else "",
                tool=name,
                arguments=arguments if isinstance(arguments, str) else "",
                created=now,
                expires=now + timeout,
                extra=dict(extra or {}),
            )
        )
    return held


def release_completion(
    completion: dict[str, Any], reviews: list[HeldCall], decisions: dict[str, Decision], zh: bool
) -> dict[str, Any]:
    """The completion as the decisions make it (a new dict), with review events in its trace."""
    out: dict[str, Any] = orjson.loads(orjson.dumps(completion))
    verdicts = {c.index: (c, decisions.get(c.review_id, Decision(Verdict.TIMEOUT))) for c in reviews}
    choice = _first_message_choice(out)
    if choice is not None:
        message = choice["message"]
        calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
        kept = []
        for position, call in enumerate(calls):
            verdict = verdicts.get(position)
            if verdict is None:
                kept.append(call)
                continue
            _, decision = verdict
            if decision.verdict is Verdict.MODIFY and isinstance(call, dict):
                call = {
                    **call,
                    "function": {**call.get("function", {}), "arguments": decision.arguments or "{}"},
                }
            if decision.releases_call:
                kept.append(call)
        refused = [(c, d) for c, d in verdicts.values() if not d.releases_call]
        if refused:
            text = rejection_text(refused, zh)
            content = message.get("content")
            message["content"] = f"{content}\n\n{text}" if isinstance(content, str) and content else text
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            choice["finish_reason"] = "stop"
    trace = out.get("trace")
    if isinstance(trace, list):
        seq = max((e.get("seq", -1) for e in trace if isinstance(e, dict)), default=-1) + 1
        t_ms = max((e.get("t_ms", 0) for e in trace if isinstance(e, dict)), default=0)
        events = [review_event("review.request", c, zh) for c in reviews]
        events += [review_event("review.decision", c, zh, d) for c, d in verdicts.values()]
        for offset, event in enumerate(events):
            trace.append({**event, "seq": seq + offset, "t_ms": t_ms})
        for event in trace:
            if isinstance(event, dict) and event.get("type") == "done" and choice is not None:
                event["finish_reason"] = choice.get("finish_reason")
    return out


def _first_message_choice(completion: dict[str, Any]) -> dict[str, Any] | None:
    choice = _choice0(completion)
    if choice is None or not isinstance(choice.get("message"), dict):
        return None
    return choice


def _message_calls(completion: dict[str, Any]) -> list[dict[str, Any]]:
    choice = _first_message_choice(completion)
    calls = choice["message"].get("tool_calls") if choice is not None else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
