"""The chat plan's last steps (proxy.core.plan.finish), driven by values: the route (chat
completions or the upstream's Responses API, and the replay policy that follows), the upstream
request, the record's provider and level, the trace and its notes, the review gate and the trace
format by door. No server, no store, no policy service: their outcomes are plain values here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pytest

from proxy.core.config.providers import ProvidersTable
from proxy.core.controls import Controls, ReasoningField, ReasoningVisibility, TraceFormat, TraceMode
from proxy.core.errors import BadRequest
from proxy.core.events import AccessRecord
from proxy.core.gateway import GatewayAuth
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import finish as plan_finish
from proxy.core.plan import request as plan
from proxy.core.protocols.responses.upstream_request import ResponsesAnswer
from proxy.core.review.rules import NO_CLIENT_NAMES, ClientNames, ClientTool, ReviewPolicy
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.chunk_template import KnownRun
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.trace import TraceBuilder

DEFAULTS = plan.Defaults(
    None, TraceMode.BRIEF, TraceFormat.COMMENT, ReasoningVisibility.SHOW, ReasoningField.REASONING_CONTENT
)
SETUP = plan_finish.ChatSetup(DEFAULTS, max_event_bytes=65536)
BYOK = GatewayAuth(None, ())
TABLE = ProvidersTable.load()
DEEPSEEK = "https://api.deepseek.com/v1"
OPENAI = "https://api.openai.com/v1"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


class Headers(dict[str, str]):
    """Lower-case names, as the plan reads them (starlette's Headers in the server)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__((k.lower(), v) for k, v in pairs)
        self.pairs = pairs

    def items(self) -> Any:
        return list(self.pairs)


@dataclass
class Request:
    """One chat request through steps 1 and 2, as the handler has it before step 3."""

    arrival: plan.Arrival
    intent: plan.Intent
    tgt: plan.Target
    body: dict[str, Any]
    dialect: Any
    record: AccessRecord


def request(base_url: str, body: dict[str, Any], headers: list[tuple[str, str]] | None = None) -> Request:
    path = "/v1/chat/completions"
    arrival = plan.Arrival("POST", path, path.encode(), b"", Headers(headers or []))
    intent = plan.begin(arrival, BYOK, lambda _chosen: base_url, DEFAULTS, routed=False)
    raw = orjson.dumps(body)
    tgt = plan.target(plan.destination_of(intent, arrival, raw, body, None), arrival, raw, body, BYOK)
    record = AccessRecord(method="POST", path=path)
    record.stream = body.get("stream") is True
    return Request(arrival, intent, tgt, body, plan_chat.chat_dialect(TABLE, tgt), record)


def finish(
    r: Request,
    setup: plan_finish.ChatSetup = SETUP,
    *,
    bridged: bool = False,
    door: plan_chat.FrontDoor | None = None,
    **kwargs: Any,
) -> plan_finish.FinishedChat:
    route = plan_finish.route_chat(r.dialect, r.body, r.intent.controls, bridged=bridged or door is not None)
    body = kwargs["prepared"].body if kwargs.get("prepared") is not None else r.body
    return plan_finish.finish_chat(
        setup, r.arrival, r.intent, r.tgt, route, body, r.record, gateway_mode=False, door=door, **kwargs
    )


def notes(trace: TraceBuilder | None) -> list[dict[str, Any]]:
    assert trace is not None
    return [event for event in trace.begin(None, 0.0) if event["type"] == "note"]


# --- 3a: the route --------------------------------------------------------------------------------


def test_a_plain_chat_request_goes_over_chat_completions_with_its_entrys_replay_policy() -> None:
    r = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK}, [("x-thinking-level", "deep")])
    route = plan_finish.route_chat(r.dialect, r.body, r.intent.controls, bridged=False)
    assert route.effort is None and route.dialect is r.dialect


def test_function_tools_with_a_level_go_over_responses_and_replay_its_reasoning_items() -> None:
    r = request(
        OPENAI, {"model": "gpt-5.4", "messages": ASK, "tools": [WEATHER]}, [("x-thinking-level", "deep")]
    )
    route = plan_finish.route_chat(r.dialect, r.body, r.intent.controls, bridged=False)
    assert route.effort == "high"
    assert route.dialect.replay == plan_chat.RESPONSES_REPLAY and route.dialect.name == r.dialect.name
    assert r.dialect.replay != plan_chat.RESPONSES_REPLAY  # the table's entry is left as it is


def test_a_front_doors_request_never_goes_over_responses() -> None:
    r = request(
        OPENAI, {"model": "gpt-5.4", "messages": ASK, "tools": [WEATHER]}, [("x-thinking-level", "deep")]
    )
    route = plan_finish.route_chat(r.dialect, r.body, r.intent.controls, bridged=True)
    assert route.effort is None and route.dialect is r.dialect


def test_without_a_level_function_tools_stay_on_chat_completions() -> None:
    r = request(OPENAI, {"model": "gpt-5.4", "messages": ASK, "tools": [WEATHER]})
    assert plan_finish.route_chat(r.dialect, r.body, r.intent.controls, bridged=False).effort is None


# --- trace formats by door ------------------------------------------------------------------------


@pytest.mark.parametrize("asked", [TraceFormat.COMMENT, TraceFormat.EVENT])
@pytest.mark.parametrize("mode", [TraceMode.BRIEF, TraceMode.DETAILED, TraceMode.OFF])
def test_the_stream_and_the_gate_carry_the_trace_as_asked_on_chat_and_as_comments_at_a_door(
    asked: TraceFormat, mode: TraceMode
) -> None:
    controls = Controls(None, mode, asked, ReasoningVisibility.SHOW)
    assert plan_finish.stream_trace_format(controls, bridged=False) is asked
    assert plan_finish.stream_trace_format(controls, bridged=True) is TraceFormat.COMMENT
    shown = None if mode is TraceMode.OFF else asked
    assert plan_finish.gate_trace_format(controls, bridged=False) is shown
    assert plan_finish.gate_trace_format(controls, bridged=True) is (
        None if shown is None else TraceFormat.COMMENT
    )


# --- 3b: the plan, the record, the trace ----------------------------------------------------------


def test_a_chat_request_is_planned_recorded_and_traced() -> None:
    r = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK}, [("x-thinking-level", "deep")])
    done = finish(r)
    assert done.plan.request.url == f"{DEEPSEEK}/chat/completions"
    assert orjson.loads(done.plan.request.content)["reasoning_effort"] == "max"
    assert (r.record.provider, r.record.level, r.record.thinking_method) == ("deepseek", "deep", "params")
    ctx = done.context
    assert ctx.request_body is r.body and ctx.trace_format is TraceFormat.COMMENT
    assert ctx.trace is not None and ctx.upstream is None and ctx.door is None
    assert ctx.gate is None and ctx.capture is None and notes(ctx.trace) == []


def test_no_trace_when_the_client_asks_none_and_no_observer_reads_one() -> None:
    r = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK}, [("x-trace", "off")])
    done = finish(r)
    assert done.context.trace is None and r.record.level == "none"
    assert done.plan.request.content == r.tgt.body  # no level: the body byte for byte


def test_the_trace_speaks_the_clients_language_and_the_event_format_is_kept_on_chat() -> None:
    r = request(
        DEEPSEEK,
        {"model": "deepseek-v4-pro", "messages": ASK},
        [("accept-language", "zh-CN"), ("x-trace-format", "event")],
    )
    ctx = finish(r).context
    assert ctx.zh and ctx.trace_format is TraceFormat.EVENT


def test_the_policys_note_goes_into_the_trace() -> None:
    r = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK}, [("x-thinking-level", "standard")])
    ctx = finish(r, policy_note=("capped at standard", "上限为标准", "team-a")).context
    (note,) = notes(ctx.trace)
    assert note["code"] == "thinking_policy" and note["rule"] == "team-a"


def test_over_responses_the_request_goes_to_responses_and_says_so() -> None:
    body = {"model": "gpt-5.4", "messages": ASK, "tools": [WEATHER], "stream": True, "logit_bias": {"1": 2}}
    body["stream_options"] = {"include_usage": True}
    r = request(OPENAI, body, [("x-thinking-level", "standard")])
    done = finish(r)
    assert done.plan.request.url == f"{OPENAI}/responses"
    assert orjson.loads(done.plan.request.content)["reasoning"]["effort"] == "medium"
    assert ("x-thinking-upstream-api", "responses") in done.plan.response_headers
    assert isinstance(done.context.upstream, ResponsesAnswer)
    (note,) = notes(done.context.trace)
    assert note["code"] == "upstream_responses_api" and note["fields"] == ["logit_bias"]
    assert (r.record.level, r.record.thinking_method) == ("standard", "params")


# --- the replay store's outcome -------------------------------------------------------------------


@dataclass
class Prepared:
    body: dict[str, Any]
    changed: bool
    capture: TurnCollector | None = None
    annotated: list[TraceBuilder | None] = field(default_factory=list)

    def annotate(self, trace: TraceBuilder | None) -> None:
        self.annotated.append(trace)


def test_a_restored_history_is_sent_and_the_store_annotates_the_trace_before_other_notes() -> None:
    r = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK})
    restored = {**r.body, "messages": [*ASK, {"role": "assistant", "content": "x", "reasoning_content": "r"}]}
    prepared = Prepared(restored, changed=True, capture=TurnCollector())
    done = finish(r, prepared=prepared, policy_note=("en", "zh", "rule"))
    assert orjson.loads(done.plan.request.content) == restored
    assert prepared.annotated == [done.context.trace]
    assert done.context.capture is prepared.capture and done.context.request_body is restored
    assert [n["code"] for n in notes(done.context.trace)] == ["thinking_policy"]


def test_an_unchanged_history_goes_byte_for_byte() -> None:
    r = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK, "n": 1})
    done = finish(r, prepared=Prepared(dict(r.body), changed=False))
    assert done.plan.request.content == r.tgt.body


# --- the review gate ------------------------------------------------------------------------------


@dataclass
class Review:
    refuse: bool = False
    checked: list[dict[str, Any]] = field(default_factory=list)
    gates: list[tuple[TraceFormat | None, bool, int, ClientNames]] = field(default_factory=list)

    def check_request(self, body: dict[str, Any]) -> None:
        self.checked.append(body)
        if self.refuse:
            raise BadRequest("send n=1", param="n")

    def stream_gate(
        self,
        trace_format: TraceFormat | None,
        zh: bool,
        max_event_bytes: int,
        names: ClientNames = NO_CLIENT_NAMES,
    ) -> StreamGate:
        self.gates.append((trace_format, zh, max_event_bytes, names))
        return StreamGate(
            ReviewPolicy(("send_*",)),
            new_id=lambda: "rv_1",
            trace_format=trace_format,
            zh=zh,
            max_event_bytes=max_event_bytes,
            names=names,
        )


def reviewed(review: Review) -> plan_finish.ChatSetup:
    return plan_finish.ChatSetup(DEFAULTS, max_event_bytes=1000, review=review)


def test_a_streamed_answer_under_review_gets_a_gate_showing_the_trace_as_asked() -> None:
    review = Review()
    r = request(
        DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK, "stream": True}, [("x-trace-format", "event")]
    )
    ctx = finish(r, reviewed(review)).context
    assert review.checked == [r.body] and ctx.gate is not None
    assert review.gates == [(TraceFormat.EVENT, False, 1000, NO_CLIENT_NAMES)]


def test_a_non_stream_answer_is_checked_but_not_gated() -> None:
    review = Review()
    r = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK})
    assert finish(r, reviewed(review)).context.gate is None
    assert review.checked == [r.body] and review.gates == []


def test_the_reviews_refusal_comes_after_the_record_names_provider_and_level() -> None:
    r = request(
        DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK, "n": 2}, [("x-thinking-level", "deep")]
    )
    with pytest.raises(BadRequest):
        finish(r, reviewed(Review(refuse=True)))
    assert (r.record.provider, r.record.level) == ("deepseek", "deep")


# --- a front door ---------------------------------------------------------------------------------


@dataclass
class Door:
    planned_with: list[TraceBuilder | None] = field(default_factory=list)

    def planned(self, trace: TraceBuilder | None) -> None:
        self.planned_with.append(trace)

    def feed(self, data: bytes) -> bytes:
        return data

    def feed_pieces(self, pieces: Sequence[bytes | KnownRun]) -> bytes:
        return b""

    def close(self) -> bytes:
        return b""

    def completion(self, body: bytes) -> bytes:
        return body

    async def settle(self) -> None:
        return None


def test_a_front_door_gets_its_trace_as_comments_its_gate_by_its_names_and_plans_last() -> None:
    review, door = Review(), Door()
    names: ClientNames = {"mail__send_email": ClientTool("send_email", "mail")}
    body = {"model": "gpt-5.4", "messages": ASK, "tools": [WEATHER], "stream": True}
    r = request(OPENAI, body, [("x-thinking-level", "deep"), ("x-trace-format", "event")])
    done = finish(r, reviewed(review), door=door, client_names=names)
    ctx = done.context
    assert done.plan.request.url == f"{OPENAI}/chat/completions"  # never over Responses at a door
    assert ctx.door is door and ctx.upstream is None and ctx.client_names is names
    assert ctx.trace_format is TraceFormat.COMMENT
    assert review.gates == [(TraceFormat.COMMENT, False, 1000, names)]
    assert door.planned_with == [ctx.trace] and ctx.trace is not None


# --- a bridged body is serialized once ------------------------------------------------------------


def bridged(r: Request) -> Request:
    """The request as a front door hands it on: its chat body built, not serialized (raw None)."""
    tgt = plan.Target(r.tgt.destination, None, r.body, r.tgt.headers)
    return Request(r.arrival, r.intent, tgt, r.body, r.dialect, r.record)


def test_a_bridged_body_the_plan_rewrites_is_serialized_only_as_rewritten() -> None:
    r = bridged(
        request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK}, [("x-thinking-level", "deep")])
    )
    done = finish(r, door=Door())
    assert orjson.loads(done.plan.request.content)["reasoning_effort"] == "max"
    assert r.tgt.raw is None  # never serialized as it came: only the rewritten body was


def test_a_bridged_body_sent_as_built_is_serialized_when_first_read() -> None:
    r = bridged(request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK, "n": 1}))
    done = finish(r, door=Door())
    assert done.plan.request.content == orjson.dumps(r.body) and r.tgt.raw is done.plan.request.content
    assert r.tgt.body is r.tgt.raw  # read again: the same bytes, not serialized again


def test_a_bridged_body_whose_history_is_unchanged_keeps_its_lazy_bytes() -> None:
    r = bridged(request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK, "n": 1}))
    done = finish(r, door=Door(), prepared=Prepared(dict(r.body), changed=False))
    assert done.plan.request.content == orjson.dumps(r.body)


def test_what_the_rewrite_changed_is_described_only_for_a_reader() -> None:
    """The sessions and the console read what the proxy changed in a body; with neither on, the
    plan does not spend a description nobody reads."""
    asked = [("x-thinking-level", "off")]
    read = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK}, asked)
    finish(read)
    assert read.record.notes["changes"] == [
        {"field": "thinking", "change": "set", "summary": "type=disabled"}
    ]
    unread = request(DEEPSEEK, {"model": "deepseek-v4-pro", "messages": ASK}, asked)
    done = finish(unread, replace(SETUP, describe_changes=False))
    assert "changes" not in unread.record.notes
    assert orjson.loads(done.plan.request.content)["thinking"] == {
        "type": "disabled"
    }  # (rewritten all the same)
