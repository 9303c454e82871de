"""The chat plan's last steps (proxy.core.plan.request, step 3 for chat), decided from values alone.

A chat request (chat completions, or a front door's request bridged to chat: proxy.server.
responses_door, messages_door) waits twice after step 2: for the thinking policy's judgement of
its level (proxy.server.policy_gate) and for the replay store's lookup of remembered reasoning
(proxy.server.replay_service). What is decided around those waits is here:

3a. `route_chat(dialect, body, level, bridged=…)` — after the policy's judgement: which API the
    request goes over (chat completions, or the upstream's Responses API with an effort) and so
    the replay policy the store reads the history with.
    *I/O: the replay store's lookup.*
3b. `finish_chat(setup, …)` — the upstream request (`plan_chat` or `plan_responses`), the
    record's provider and level, the trace (built for the client and the observers, with the
    notes of the replay store, the policy and the Responses route), the review gate's refusal or
    gate, and the trace format a stream carries: the `ChatContext` the relay runs.

The handler (proxy.server.handlers.Proxy.run_chat) runs the waits between them and nothing else.
The app's parts the step calls (the replay store's outcome, the review service) are read through
the small protocols below, so tests drive every decision with plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from proxy.core.config.providers import Dialect
from proxy.core.config.tool_titles import NO_TITLES, ToolTitles
from proxy.core.controls import Controls, TraceFormat, TraceMode
from proxy.core.events import AccessRecord
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import request as plan
from proxy.core.plan.chat import ChatContext, ChatPlan, FrontDoor
from proxy.core.protocols.responses.upstream_request import ResponsesAnswer, over_responses_note, wants_usage
from proxy.core.review.rules import NO_CLIENT_NAMES, ClientNames
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.response_stream import front_door
from proxy.core.stream.taps import build_trace, needs_outcome, output_sink, tap_needs_detail, trace_tap
from proxy.core.stream.trace import TraceBuilder

PolicyNote = tuple[str, str, str]  # the thinking policy's trace note: English, Chinese, the rule


class Replayed(Protocol):
    """The replay store's outcome for this request (proxy.server.replay_service.Prepared)."""

    @property
    def body(self) -> dict[str, Any]:
        """The chat body, with remembered reasoning put back where the history needed it."""

    @property
    def changed(self) -> bool:
        """Whether anything was put back (else the body goes as it came)."""

    @property
    def capture(self) -> TurnCollector | None:
        """The collector of this answer's reasoning, when it may be replayed later."""

    def annotate(self, trace: TraceBuilder | None) -> None:
        """The trace's `replaying` status and tool-result durations."""


class RequestReview(Protocol):
    """Human review of sensitive tool calls (proxy.review.service.ReviewService)."""

    def check_request(self, body: dict[str, Any]) -> None:
        """Raises the ProxyError that refuses a request whose calls the gate could not see."""

    def stream_gate(
        self, trace_format: TraceFormat | None, zh: bool, max_event_bytes: int, names: ClientNames = ...
    ) -> StreamGate:
        """A gate for one streamed answer."""


@dataclass(frozen=True, slots=True)
class ChatSetup:
    """What the last step reads of the app, as values (built once per app)."""

    defaults: plan.Defaults
    max_event_bytes: int  # THINKPROXY_MAX_SSE_EVENT_BYTES: the gate's bound on one held event
    titles: ToolTitles = field(default_factory=lambda: NO_TITLES)
    review: RequestReview | None = None  # None unless THINKPROXY_REVIEW_TOOLS is set
    # Whether a listener reads what the proxy changed in a body (the sessions, the console): the
    # description costs ~1% of a plain request, so it is made only for a reader.
    describe_changes: bool = True


@dataclass(slots=True)  # (per request: not frozen, see proxy.core.plan.request)
class ChatRoute:
    """Step 3a's outcome: the dialect the rest of the plan reads (its replay policy the Responses
    API's when the request goes there) and the effort sent there (None: chat completions)."""

    dialect: Dialect
    effort: str | None = None


def route_chat(dialect: Dialect, body: dict[str, Any], controls: Controls, *, bridged: bool) -> ChatRoute:
    """Step 3a. Function tools with a level on an upstream whose chat completions refuses them, or
    any level where the entry wants the reasoning seen: over its Responses API, where its encrypted
    reasoning is replayed with the calls it preceded (plan_chat.responses_effort). A front door's
    request (`bridged`) always goes over chat completions."""
    effort = None if bridged else plan_chat.responses_effort(dialect, body, controls.level)
    if effort is None:
        return ChatRoute(dialect)
    return ChatRoute(replace(dialect, replay=plan_chat.RESPONSES_REPLAY), effort)


def stream_trace_format(controls: Controls, *, bridged: bool) -> TraceFormat:
    """How the stream carries the trace: as the client asked on chat completions; as comments on
    a front door's stream (its own events carry no trace frames)."""
    return TraceFormat.COMMENT if bridged else controls.trace_format


def gate_trace_format(controls: Controls, *, bridged: bool) -> TraceFormat | None:
    """How the review gate shows a held call in the stream's trace: None when the client asked for
    no trace, else as the stream carries it (stream_trace_format)."""
    if controls.trace is TraceMode.OFF:
        return None
    return stream_trace_format(controls, bridged=bridged)


@dataclass(slots=True)  # (per request: not frozen, see proxy.core.plan.request)
class FinishedChat:
    """Step 3b's outcome: the upstream request and its response headers (`plan`), and what the
    relay runs the answer through (`context`)."""

    plan: ChatPlan
    context: ChatContext


def finish_chat(
    setup: ChatSetup,
    arrival: plan.Arrival,
    intent: plan.Intent,
    tgt: plan.Target,
    route: ChatRoute,
    body: dict[str, Any],
    record: AccessRecord,
    *,
    gateway_mode: bool,
    prepared: Replayed | None = None,
    policy_note: PolicyNote | None = None,
    door: FrontDoor | None = None,
    client_names: ClientNames = NO_CLIENT_NAMES,
) -> FinishedChat:
    """Step 3b, once the policy has judged (`intent`, `tgt` as it left them; `policy_note` when it
    changed the level) and the replay store has looked (`prepared`; `body` the chat body as it
    stands after both). Sets the record's provider, level and method; raises the review's refusal
    (after those are set, so the access line names them)."""
    restored = body if prepared is not None and prepared.changed else None
    if restored is None and body is not tgt.parsed:
        tgt = plan.Target(tgt.destination, tgt.raw, body, tgt.headers)
    dialect, effort, controls = route.dialect, route.effort, intent.controls
    dropped: tuple[str, ...] = ()
    if effort is None:
        chat_plan = plan_chat.plan_chat(
            arrival,
            tgt,
            intent,
            dialect,
            setup.defaults,
            restored=restored,
            gateway_mode=gateway_mode,
            describe_changes=setup.describe_changes,
        )
    else:
        chat_plan, dropped = plan_chat.plan_responses(
            arrival, tgt, intent, dialect, setup.defaults, body, effort, gateway_mode=gateway_mode
        )
    record.provider, record.level = dialect.name, chat_plan.level_name
    record.thinking_method = chat_plan.method
    if chat_plan.changes:  # (for the sessions and the console: what the proxy changed)
        record.notes["changes"] = chat_plan.changes
    trace = chat_trace(setup, chat_plan, controls, record)
    if prepared is not None:
        prepared.annotate(trace)
    if trace is not None:
        if record.level_rule is not None:  # (`auto` chose the level: which rule, proxy.core.plan.levels)
            rule = record.level_rule
            trace.add_note(
                f"Thinking level auto: {rule}", f"自动思考级别：{rule}", code="auto_level", rule=rule
            )
        if policy_note is not None:
            en, zh, rule = policy_note
            trace.add_note(en, zh, code="thinking_policy", rule=rule)
        if effort is not None:
            note = over_responses_note(dropped, plan_chat.over_responses_why(dialect, body))
            trace.add_note(*note, code="upstream_responses_api", fields=list(dropped))
        level = controls.level
        if level is not None and chat_plan.applied is None and level in dialect.not_applicable:
            reason = plan_chat.level_reason(dialect, level)
            trace.add_note(reason, reason, code="level_not_applicable", level=level.value)
        if dialect.reasoning.always:
            trace.expect_reasoning()  # an answer without any is counted (trace_outcome)
    bridged = door is not None
    gate = None
    review = setup.review
    if review is not None:
        review.check_request(body)
        if record.stream:
            shown = gate_trace_format(controls, bridged=bridged)
            gate = review.stream_gate(shown, chat_plan.zh, setup.max_event_bytes, client_names)
    context = ChatContext(
        body,
        chat_plan.reasoning,
        trace,
        stream_trace_format(controls, bridged=bridged),
        prepared.capture if prepared is not None else None,
        gate=gate,
        zh=chat_plan.zh,
        door=door,
        upstream=None if effort is None else ResponsesAnswer(include_usage=wants_usage(body)),
        client_names=client_names,
    )
    front_door(door).planned(trace)  # (the door's own notes; a chat client's door has none)
    return FinishedChat(chat_plan, context)


def chat_trace(
    setup: ChatSetup, chat_plan: ChatPlan, controls: Controls, record: AccessRecord
) -> TraceBuilder | None:
    """The trace builder for the answer: the client's trace mode, and whatever the record's
    observers read of it (proxy.core.stream.taps.build_trace); None when nobody wants one."""
    observers = record.observers
    return build_trace(
        controls.trace,
        trace_tap(observers),
        zh=chat_plan.zh,
        level=chat_plan.level_name,
        provider=chat_plan.dialect.name,
        method=chat_plan.method,
        titles=setup.titles,
        output=output_sink(observers),
        detailed_tap=tap_needs_detail(observers),
        outcome=needs_outcome(observers),
    )
