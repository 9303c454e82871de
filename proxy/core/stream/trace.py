"""The trace: a summarized timeline of what the model is doing, built from one response.

Pure: chunks (already normalized by the reasoning extractor) and clock readings in, event dicts
out. The event vocabulary is documented in docs/trace-events.md and docs/trace-event.schema.json.
This module is the state machine (stages, reasoning, tool calls, `done`); the parts it leans on
are modules of their own: which call a streamed tool-call fragment belongs to and when its
arguments close (proxy.core.stream.tool_args), what it reads out of requests and whole completions
(proxy.core.stream.trace_input), how events are written into a stream (proxy.core.stream.trace_format)
what a finished answer showed (proxy.core.stream.trace_outcome: its outcome, the warning) and what
each event says, in which language (proxy.core.stream.trace_writer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from proxy.core.controls import TraceMode
from proxy.core.stream.tool_args import ToolCall, ToolCalls
from proxy.core.stream.trace_format import ChunkMeta, chunk_meta, ms
from proxy.core.stream.trace_input import (
    answered_tool_calls,
    completion_as_chunks,
    first_choice,
    writable_usage,
)
from proxy.core.stream.trace_outcome import TraceOutcome, in_content_warning, output_limit, starved_warning
from proxy.core.stream.trace_writer import EventWriter

# Bound on client- or model-controlled text copied into an `error` event.
_MAX_ERROR_CHARS = 300


class Stage(StrEnum):
    ANALYZING = "analyzing"
    THINKING = "thinking"
    TOOL_CALLING = "tool_calling"
    ANSWERING = "answering"


_STAGE_TEXT: dict[Stage, tuple[str, str]] = {
    Stage.ANALYZING: ("Analyzing the request", "正在分析请求"),
    Stage.THINKING: ("Thinking", "正在思考"),
    Stage.TOOL_CALLING: ("Calling tools", "正在调用工具"),
    Stage.ANSWERING: ("Writing the answer", "正在整理答案"),
}


class TraceBuilder:
    """Turns one response into trace events, at the moment each thing happens.

    Contract: `begin` once when the request is known, then `on_chunk` per chunk (stream) or
    `on_completion` once (non-stream), `on_error` on a mid-stream failure, and `finish` at the
    end (idempotent; `on_completion` calls it itself). Every call returns the events its input
    caused, in order, with `seq` 0, 1, 2… across the response. Clock readings (`now_ms`) are
    milliseconds on any monotonic clock; `t_ms` = `now_ms - origin_ms`, so pass
    `origin_ms` = the reading when the request arrived (default 0: readings are already
    "ms since the request arrived"). Times never go backwards, even if readings do.

    Only choice 0 is traced. Mode `off` returns nothing; `brief` keeps status, tool_call.start,
    error and done; `detailed` returns everything. No event ever carries reasoning text, system
    prompt text or a raw tool payload — only summaries (proxy.core.stream.summaries).
    """

    # Slots: a builder (with a subclass's few more) has more attributes than CPython 3.11 keeps
    # in a shared-key instance dict (30); past that each instance got a dict of its own, slower
    # to fill and to read on every call.
    __slots__ = (
        "_answered", "_begun", "_detailed", "_done", "_expect_reasoning", "_finish_reason", "_held_done",
        "_hold_done", "_in_content", "_last_t", "_level", "_max_tokens", "_method", "_notes", "_off",
        "_origin", "_provider", "_quiet", "_reasoned", "_reasoning_since", "_reasoning_total", "_replay",
        "_stage", "_starved", "_tool_durations", "_tools", "_ttft", "_usage", "_viewed", "_writer", "_zh",
        "response",
    )  # fmt: skip

    def __init__(
        self,
        *,
        mode: TraceMode,
        zh: bool,
        level: str,
        provider: str,
        method: str | None = None,
        origin_ms: float = 0.0,
        titles: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self._off = mode is TraceMode.OFF
        # Numbers the events and writes them in the trace's language, tools with their titles.
        self._writer = EventWriter(zh, titles)
        self._detailed = mode is TraceMode.DETAILED
        self._zh = zh
        self._level = level
        self._provider = provider
        self._method = method
        self._origin = origin_ms
        self._last_t = 0.0
        # The answer's id and model, from the first chunk that has them (or the completion).
        self.response: ChunkMeta | None = None
        self._begun = False
        self._done = False
        self._stage: Stage | None = None
        self._reasoning_since: float | None = None
        self._reasoning_total = 0.0
        self._reasoned = False
        # Answer text came; reasoning used the request's output limit, leaving none (trace_outcome).
        self._answered = self._starved = False
        # The model always reasons: an answer with text and none is warned of (trace_outcome).
        self._expect_reasoning = self._in_content = False
        self._max_tokens: int | None = None
        self._ttft: float | None = None
        # Tool calls in order of appearance, and which call each later fragment belongs to.
        self._tools = ToolCalls()
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        # Set while a chunk of more-of-the-same (see on_chunk) cannot cause an event.
        self._quiet: Stage | None = None
        # What the replay store did for this request's history (see note_replay).
        self._replay: dict[str, int] | None = None
        self._tool_durations: Mapping[str, float] = {}
        self._notes: list[tuple[str, str, dict[str, Any]]] = []
        # Set while a review gate may hold the response (proxy.core.stream.gate, run by
        # proxy.review): `done` waits for the hold.
        self._hold_done = False
        self._held_done: dict[str, Any] | None = None
        # Whether each public call's events go through `_view` (a subclass that shows the caller
        # less than it builds, or tells someone else: proxy.core.stream.taps.TappedTraceBuilder). A flag,
        # not a stored callable: a bound method kept on the instance would make every builder a
        # reference cycle, left for the cyclic collector.
        self._viewed = False

    # -- public API ------------------------------------------------------------------------------

    def note_replay(self, counts: dict[str, int] | None, tool_durations: Mapping[str, float]) -> None:
        """Before `begin`: the replay store's outcome for the history (a `status` event with stage
        `replaying` follows `analyzing`), and the client-side round trip of each answered tool call."""
        self._replay = counts
        self._tool_durations = tool_durations

    def expect_reasoning(self) -> None:
        """Before `finish`: the model always reasons (providers.yaml `reasoning.always`), so an answer
        with text and no reasoning is a `warning` (`reasoning_in_content`) and marked in the outcome."""
        self._expect_reasoning = True

    def add_note(self, en: str, zh: str, **fields: Any) -> None:
        """Before `begin`: a `note` event (both modes; docs/trace-events.md), e.g. tools left out."""
        self._notes.append((en, zh, fields))

    def begin(self, request_body: dict[str, Any] | None, now_ms: float) -> list[dict[str, Any]]:
        """`status: analyzing`, then (detailed) a `tool_result` per answered tool call in the request."""
        out = self._begin(request_body, now_ms)
        return self._view(out) if self._viewed else out

    def _begin(self, request_body: dict[str, Any] | None, now_ms: float) -> list[dict[str, Any]]:
        # (The public methods call each other's private halves, so that a subclass's `_view`
        # sees each public call's events once, together.)
        if self._off or self._begun:
            return []
        self._begun = True
        self._max_tokens = output_limit(request_body)
        t = self._clock(now_ms)
        out: list[dict[str, Any]] = []
        self._set_stage(Stage.ANALYZING, t, out)
        if self._replay is not None:
            out.append(self._writer.replaying(t, self._replay))
        for en, zh, fields in self._notes:
            out.append(self._writer.event("note", t, self._writer.text(en, zh), **fields))
        if self._detailed and isinstance(request_body, dict):
            for call_id, name, content in answered_tool_calls(request_body.get("messages")):
                out.append(
                    self._writer.tool_result(t, call_id, name, content, self._tool_durations.get(call_id))
                )
        return out

    def on_chunk(self, chunk: dict[str, Any], reasoning: bool, now_ms: float) -> list[dict[str, Any]]:
        """The events one normalized `chat.completion.chunk` causes (usually none)."""
        if self._off or self._done:
            return []
        choices = chunk.get("choices")
        quiet = self._quiet
        if quiet is not None and chunk.get("usage") is None and type(choices) is list:
            # The common chunk: more of the same (answer text, or reasoning while thinking). Only
            # a change of what the model does causes an event, so this path must stay cheap.
            if not choices:
                return []
            if len(choices) == 1 and type(choices[0]) is dict:
                choice = choices[0]
                delta = choice.get("delta")
                if choice.get("finish_reason") is None:
                    if delta is None:
                        return []
                    if type(delta) is dict and not delta.get("tool_calls"):
                        if quiet is Stage.ANSWERING:
                            if not (reasoning or delta.get("reasoning_content") or delta.get("reasoning")):
                                return []
                        elif not delta.get("content"):
                            return []
        out = self._observe(chunk, choices, reasoning, now_ms)
        return self._view(out) if self._viewed else out

    def text_rule(self, index: int, field: str, reasoning: bool) -> tuple[bool, Callable[[str], None] | None]:
        """For chunks of one choice whose delta carries only more text in `field` (`reasoning`:
        a reasoning field), recognized without being parsed (proxy.core.stream.chunk_template): (True, what
        to tell of each text, if anything) when they cause no event and change nothing, as
        `on_chunk`'s quiet path would decide; (False, None) when each must be parsed and given to
        `on_chunk`. Valid until the next call of any other method."""
        if self._off or self._done:
            return True, None
        quiet = self._quiet
        return quiet is not None and (quiet is Stage.THINKING) == reasoning, None

    def on_error(self, message: str, now_ms: float, code: str | None = None) -> list[dict[str, Any]]:
        """An `error` event for a failure after the stream started."""
        if self._off or self._done:
            return []
        out = self._ensure_begun(now_ms)
        text = message if len(message) <= _MAX_ERROR_CHARS else message[:_MAX_ERROR_CHARS] + "…"
        out.append(self._writer.error(self._clock(now_ms), text, code))
        return self._view(out) if self._viewed else out

    def finish(self, now_ms: float) -> list[dict[str, Any]]:
        """Closes open reasoning and tool calls, then `done`. A second call returns []."""
        out = self._finish(now_ms)
        return self._view(out) if self._viewed else out

    def _finish(self, now_ms: float) -> list[dict[str, Any]]:
        if self._off or self._done:
            return []
        out = self._ensure_begun(now_ms)
        t = self._clock(now_ms)
        self._close_reasoning(t, out)
        self._close_calls(t, out)
        answered = self._answered or bool(self._tools.calls)
        warning = starved_warning(
            self._finish_reason, self._reasoned, answered, self._usage, self._max_tokens, self._zh
        )
        if warning is not None:
            self._starved = True
            out.append(self._writer.event("warning", t, warning[0], **warning[1]))
        unsplit = in_content_warning(self._expect_reasoning, self._reasoned, self._answered, self._zh)
        if unsplit is not None:
            self._in_content = True
            out.append(self._writer.event("warning", t, unsplit[0], **unsplit[1]))
        self._done = True
        total = t
        fields: dict[str, Any] = {"finish_reason": self._finish_reason}
        if self._usage is not None:
            fields["usage"] = writable_usage(self._usage)
        fields.update(
            ttft_ms=ms(self._ttft) if self._ttft is not None else None,
            reasoning_ms=ms(self._reasoning_total),
            total_ms=ms(total),
            level=self._level,
            provider=self._provider,
            method=self._method,
        )
        if self._hold_done:
            self._held_done = fields  # the exchange is not over: `release_done` ends it
            return out
        out.append(self._writer.done(t, total, fields))
        return out

    def hold_done(self) -> None:
        """Before `finish`: a review gate may hold the answer back (proxy.core.stream.gate), so `finish`
        closes what is open but keeps `done` until `release_done`, whose time includes the hold."""
        self._hold_done = True

    def note(self, event: dict[str, Any], now_ms: float) -> list[dict[str, Any]]:
        """An event of the review gate (`review.request`, `review.decision`) while `done` is held:
        numbered and timed with the builder's own, for the listeners; returns the caller's view."""
        if self._off or not self._hold_done:
            return []
        fields = {k: v for k, v in event.items() if k not in ("type", "seq", "t_ms", "message")}
        message = event.get("message")
        out = [self._writer.event(str(event["type"]), self._clock(now_ms), str(message or ""), **fields)]
        return self._view(out) if self._viewed else out

    def release_done(self, now_ms: float, finish_reason: str | None = None) -> list[dict[str, Any]]:
        """The `done` that `finish` kept back, at `now_ms` (its total includes the hold), with the
        finish reason the client was given when the gate changed it; [] when none is held."""
        fields = self._held_done
        if self._off or fields is None:
            return []
        self._held_done = None
        t = self._clock(now_ms)
        fields = {**fields, "total_ms": ms(t)}
        if finish_reason is not None:
            fields["finish_reason"] = finish_reason
        out = [self._writer.done(t, t, fields)]
        return self._view(out) if self._viewed else out

    def outcome(self) -> TraceOutcome | None:
        """The finished response's usage and times, the same as its `done` event's; None until
        `finish` (and always with mode `off`, which observes nothing). Listeners read it at the
        end instead of watching the events (proxy.core.events: `wants_outcome`)."""
        if not self._done:
            return None
        reasoning = self._reasoning_total if self._reasoned else None
        tools = tuple([call.name for call in self._tools.calls])
        return TraceOutcome(
            self._usage, self._ttft, reasoning, self._starved, self._in_content, self._finish_reason, tools
        )

    def on_completion(self, body: dict[str, Any], reasoning: bool, now_ms: float) -> list[dict[str, Any]]:
        """A whole non-stream `chat.completion`: the events its stream would have caused, then done."""
        if self._off or self._done:
            return []
        self.response = chunk_meta(body)
        out: list[dict[str, Any]] = []
        for chunk, carries_reasoning in self._completion_chunks(body, reasoning):
            # (Not on_chunk: its quiet path skips only chunks that would cause nothing here.)
            out += self._observe(chunk, chunk["choices"], carries_reasoning, now_ms)
        out += self._finish(now_ms)
        return self._view(out) if self._viewed else out

    def _completion_chunks(self, body: dict[str, Any], reasoning: bool) -> list[tuple[dict[str, Any], bool]]:
        """The chunks a stream of this completion would have carried (a subclass may read them)."""
        return completion_as_chunks(body, reasoning)

    def _view(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the caller gets of one public call's events (when `_viewed`; see __init__)."""
        return events

    # -- stream observation ----------------------------------------------------------------------

    def _observe(
        self, chunk: dict[str, Any], choices: Any, reasoning: bool, now_ms: float
    ) -> list[dict[str, Any]]:
        out = self._ensure_begun(now_ms)
        t = self._clock(now_ms)
        if self.response is None:
            self.response = chunk_meta(chunk)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choice = first_choice(choices)
        delta = choice.get("delta") if choice is not None else None
        if not isinstance(delta, dict):
            delta = {}
        if reasoning or delta.get("reasoning_content") or delta.get("reasoning"):
            self._first_token(t)
            self._close_calls(t, out)
            self._set_stage(Stage.THINKING, t, out)
            self._reasoned = True
            if self._reasoning_since is None:
                self._reasoning_since = t
                if self._detailed:
                    out.append(self._writer.reasoning_start(t))
        content = delta.get("content")
        if content:  # a non-empty string, or a non-empty list of content parts
            self._first_token(t)
            # Models often emit a line break between their reasoning and a tool call: that is not
            # the start of an answer.
            if not (isinstance(content, str) and content.isspace()):
                self._answered = True
                self._close_reasoning(t, out)
                self._close_calls(t, out)
                self._set_stage(Stage.ANSWERING, t, out)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list) and tool_calls:
            self._first_token(t)
            self._close_reasoning(t, out)
            self._set_stage(Stage.TOOL_CALLING, t, out)
            positions: list[ToolCall] = []
            for position, fragment in enumerate(tool_calls):
                if isinstance(fragment, dict):
                    positions.append(self._tool_fragment(fragment, position, t, out))
            self._tools.positions = positions
        finish_reason = choice.get("finish_reason") if choice is not None else None
        if isinstance(finish_reason, str):
            self._finish_reason = finish_reason
            self._close_reasoning(t, out)
            self._close_calls(t, out)
        self._quiet = self._quiet_stage()
        return out

    def _tool_fragment(
        self, fragment: dict[str, Any], position: int, t: float, out: list[dict[str, Any]]
    ) -> ToolCall:
        call, has_arguments = self._tools.take(fragment, position, self._detailed)
        # A name may come in pieces (some upstreams send it with an empty `arguments`); it is
        # whole once the first argument text arrives, or when the call ends.
        if not call.started and call.name and has_arguments:
            self._start_call(call, t, out)
        if call.started and not call.ended and call.scanner.closed:
            self._end_call(call, t, out)
        return call

    def _start_call(self, call: ToolCall, t: float, out: list[dict[str, Any]]) -> None:
        call.started = True
        out.append(self._writer.tool_call_start(t, call))

    def _end_call(self, call: ToolCall, t: float, out: list[dict[str, Any]]) -> None:
        if not call.started:
            self._start_call(call, t, out)
        self._tools.end(call)
        if self._detailed:
            out.append(self._writer.tool_call_end(t, call))

    def _close_calls(self, t: float, out: list[dict[str, Any]]) -> None:
        if self._tools.open:
            for call in sorted(self._tools.calls, key=lambda c: c.index):
                if not call.ended:
                    self._end_call(call, t, out)

    def _close_reasoning(self, t: float, out: list[dict[str, Any]]) -> None:
        if self._reasoning_since is None:
            return
        duration = t - self._reasoning_since
        self._reasoning_since = None
        self._reasoning_total += duration
        if self._detailed:
            out.append(self._writer.reasoning_end(t, duration))

    # -- small pieces ------------------------------------------------------------------------------

    def _quiet_stage(self) -> Stage | None:
        """The stage in which a chunk of more-of-the-same can be skipped, if the state allows it."""
        if self._tools.open or self._ttft is None:
            return None
        if self._stage is Stage.ANSWERING and self._reasoning_since is None:
            return Stage.ANSWERING
        if self._stage is Stage.THINKING and self._reasoning_since is not None:
            return Stage.THINKING
        return None

    def _ensure_begun(self, now_ms: float) -> list[dict[str, Any]]:
        return [] if self._begun else self._begin(None, now_ms)

    def _clock(self, now_ms: float) -> float:
        t = max(now_ms - self._origin, self._last_t)
        self._last_t = t
        return t

    def _first_token(self, t: float) -> None:
        if self._ttft is None:
            self._ttft = t

    def _set_stage(self, stage: Stage, t: float, out: list[dict[str, Any]]) -> None:
        if self._stage is not stage:
            self._stage = stage
            en, zh = _STAGE_TEXT[stage]
            out.append(self._writer.event("status", t, zh if self._zh else en, stage=stage.value))
