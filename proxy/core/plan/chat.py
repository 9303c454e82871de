"""Chat's step 3 of the request plan (proxy.core.plan.request): the upstream request a chat completion
becomes, decided from values alone.

Steps 1 and 2 (proxy.core.plan.request) have decided who the client is, its controls, where the request
goes and with which headers; here the chat body is rewritten in the provider's dialect at the
thinking level (`plan_chat`), or mapped onto the upstream's Responses API when the entry says so
(`plan_responses`), and the response headers that say what was done (`thinking_headers`) and the
response pipeline's options (`reasoning_options`) are set. The types the pipeline and the edge read
about a chat response live here too: `ChatContext`, and the two protocols a chat answer can cross
on its way, `UpstreamDecoder` (an upstream that does not answer in chat completions) and
`FrontDoor` (a client that does not read chat completions). proxy.core.plan.finish calls these
around the thinking policy's judgement and the replay store's lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.core import jsonio
from proxy.core.config.providers import Dialect, ProvidersTable, ReplayPolicy
from proxy.core.controls import LEVEL_REASON_HEADER, Level, ReasoningVisibility, TraceFormat, prefers_chinese
from proxy.core.headers import filter_headers
from proxy.core.plan.request import (
    DROP_REQUEST,
    Arrival,
    Defaults,
    Intent,
    Target,
    UpstreamRequest,
    upstream_url,
)
from proxy.core.plan.rewrite import rewrite_body, with_budget
from proxy.core.protocols.responses.upstream_request import responses_request
from proxy.core.review.rules import ClientNames
from proxy.core.sessions.changes import body_changes
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.chunk_template import DoorPiece, KnownRun
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.harmony import speaks_harmony
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder

RESPONSES_PATH = "/v1/responses"
# On chat completions the proxy must read the body, so it asks for it uncompressed.
DROP_REQUEST_CHAT = DROP_REQUEST | {"accept-encoding"}


@dataclass(slots=True)
class ChatPlan:
    """Step 3 for chat completions: the upstream request, what the response headers say, and how
    the response pipeline treats the answer."""

    request: UpstreamRequest
    dialect: Dialect
    applied: Level | None  # the level whose params (or prompt) were sent
    method: str | None  # "params" or "prompt" when a level was applied
    response_headers: list[tuple[str, str]]  # X-Thinking-Level-Applied, -Provider, -Method
    reasoning: ReasoningOptions
    zh: bool  # the client prefers Chinese (trace texts)
    # What the rewrite changed in the body (proxy.core.sessions.changes): names and summaries only.
    changes: list[dict[str, Any]] | None = None

    @property
    def level_name(self) -> str:
        return self.applied.value if self.applied is not None else "none"


def chat_dialect(table: ProvidersTable, tgt: Target) -> Dialect:
    """The providers-table entry for this chat request's upstream and model."""
    return table.match(tgt.destination.base_url, tgt.model)


def plan_chat(
    arrival: Arrival,
    tgt: Target,
    intent: Intent,
    dialect: Dialect,
    defaults: Defaults,
    *,
    restored: dict[str, Any] | None,
    gateway_mode: bool,
    describe_changes: bool = True,
) -> ChatPlan:
    """Step 3 for chat completions. `restored`: the body with remembered reasoning put back by
    the replay store (None when it changed nothing: the body is then sent byte for byte unless a
    level is applied). `describe_changes`: whether anyone reads what the rewrite changed (the
    sessions, the console); else the plan's `changes` stay None."""
    assert tgt.parsed is not None
    zh = prefers_chinese(arrival.headers.get("accept-language"))
    level = intent.controls.level
    body = restored if restored is not None else tgt.parsed
    applied: Level | None = None
    method: str | None = None
    result = rewrite_body(body, level, dialect, zh=zh)
    rewritten, budget_param = result.body, None
    if intent.budget_tokens is not None and result.method == "params" and level is not Level.OFF:
        rewritten, budget_param = with_budget(rewritten, intent.budget_tokens)
    if level is not None or rewritten is not body:  # (no level: history fields fitted, if needed)
        applied, method = result.level_applied, result.method
        content = jsonio.dumps(rewritten)  # integers above 64 bits kept exact
    else:  # (the body as it came is serialized only here, when it goes unchanged: Target.body)
        content = jsonio.dumps(restored) if restored is not None else tgt.body
    response_headers = thinking_headers(applied, dialect.name, method)
    if level is not None and applied is None and level in dialect.not_applicable:  # said, never silently
        response_headers.append((LEVEL_REASON_HEADER, level_reason(dialect, level)))
    if budget_param is not None:
        response_headers.append((BUDGET_HEADER, f"{budget_param}={intent.budget_tokens}"))
    request = UpstreamRequest(
        "POST",
        upstream_url(arrival, tgt.destination, gateway_mode=gateway_mode),
        [*filter_headers(tgt.headers, DROP_REQUEST_CHAT), ("accept-encoding", "identity")],
        content,
        client_chosen=tgt.destination.client_chosen,
    )
    reasoning = reasoning_options(
        dialect.reasoning.tags,
        dialect.reasoning.opens_implicitly(rewritten),
        defaults,
        intent,
        model=tgt.model,
    )
    changes = body_changes(body, rewritten) if describe_changes and rewritten is not body else None
    return ChatPlan(
        request, dialect, applied, method if applied else None, response_headers, reasoning, zh, changes
    )


def level_reason(dialect: Dialect, level: Level) -> str:
    """What X-Thinking-Level-Reason says of a level the model cannot take."""
    return f"{level.value} is not applicable to this model: {dialect.not_applicable[level]}"


def thinking_headers(
    applied: Level | None, provider: str, method: str | None, upstream_api: str | None = None
) -> list[tuple[str, str]]:
    """X-Thinking-Level-Applied, -Provider, -Method (when a level was applied) and
    -Upstream-API (when not chat completions): what the proxy did, on every model route."""
    headers = [
        ("x-thinking-level-applied", applied.value if applied is not None else "none"),
        ("x-thinking-provider", provider),
    ]
    if method is not None and applied is not None:
        headers.append(("x-thinking-method", method))
    if upstream_api is not None:
        headers.append((UPSTREAM_API_HEADER, upstream_api))
    return headers


def reasoning_options(
    tags: Sequence[str], implicit_open: bool, defaults: Defaults, intent: Intent, *, model: str | None = None
) -> ReasoningOptions:
    """How the pipeline normalizes the answer's reasoning: the dialect's inline tags, the output
    field the settings name, hidden when the client asked. A gpt-oss `model` speaks harmony on any
    upstream (proxy.core.stream.harmony): its content is read as harmony first, and never as
    implicitly inside a think block (its template opens none, whatever the entry says of others)."""
    harmony = speaks_harmony(model)
    return ReasoningOptions(
        tags=tuple(tags),
        implicit_open=implicit_open and not harmony,
        output_field=defaults.reasoning_field,
        hide=intent.controls.visibility is ReasoningVisibility.HIDE,
        harmony=harmony,
    )


# --------------------------------------------------------------------------------------------------
# Chat over an upstream's Responses API (issue 29; docs/responses.md, "Chat over the Responses API")
# --------------------------------------------------------------------------------------------------

# On that route the encrypted reasoning items (as `reasoning_details` on the assistant message that
# made the calls) must go back with the calls they preceded: OpenAI refuses a replayed
# function_call without its reasoning item (store: false).
RESPONSES_REPLAY = ReplayPolicy(mode="tool_calls", field="reasoning_details")
# Says that the client's numeric thinking budget was sent, and in which param.
BUDGET_HEADER = "x-thinking-budget-applied"
UPSTREAM_API_HEADER = "x-thinking-upstream-api"


def responses_effort(dialect: Dialect, parsed: dict[str, Any], level: Level | None) -> str | None:
    """The `reasoning.effort` to send over the Responses API when this chat request goes there: a
    level other than off with an effort for it, and either the entry's `reasoning_visible:
    responses` or its `chat_tools_with_reasoning: responses` with function tools in the request.
    None: chat completions as usual."""
    if level is None or level is Level.OFF or over_responses_why(dialect, parsed) is None:
        return None
    return dialect.responses.effort_for(level)


def over_responses_why(dialect: Dialect, parsed: dict[str, Any]) -> str | None:
    """Which rule of the entry sends this chat request over the Responses API (when it has a
    level): `reasoning_visible` or `chat_tools_with_reasoning`; None when neither applies."""
    if dialect.reasoning_visible == "responses":
        return "reasoning_visible"
    if dialect.chat_tools_with_reasoning != "responses":
        return None
    tools = parsed.get("tools")
    if isinstance(tools, list) and any(isinstance(t, dict) and t.get("type") == "function" for t in tools):
        return "chat_tools_with_reasoning"
    return None


def plan_responses(
    arrival: Arrival,
    tgt: Target,
    intent: Intent,
    dialect: Dialect,
    defaults: Defaults,
    body: dict[str, Any],
    effort: str,
    *,
    gateway_mode: bool,
) -> tuple[ChatPlan, tuple[str, ...]]:
    """Step 3 for a chat request that goes over the upstream's Responses API: its request (to
    `/responses`, the body mapped by proxy.core.protocols.responses.upstream_request), the headers that
    say so, and the fields that could not be carried."""
    mapped = responses_request(body, effort=effort)
    level = intent.controls.level
    assert level is not None
    to_responses = Arrival(
        arrival.method, RESPONSES_PATH, RESPONSES_PATH.encode(), arrival.query, arrival.headers
    )
    request = UpstreamRequest(
        "POST",
        upstream_url(to_responses, tgt.destination, gateway_mode=gateway_mode),
        [*filter_headers(tgt.headers, DROP_REQUEST_CHAT), ("accept-encoding", "identity")],
        jsonio.dumps(mapped.body),
        client_chosen=tgt.destination.client_chosen,
    )
    headers = thinking_headers(level, dialect.name, "params", "responses")
    reasoning = reasoning_options((), False, defaults, intent)  # (no inline tags on this API)
    zh = prefers_chinese(arrival.headers.get("accept-language"))
    return ChatPlan(request, dialect, level, "params", headers, reasoning, zh), mapped.dropped


class UpstreamDecoder(Protocol):
    """An upstream protocol's answer → the internal chat chunks, before the response pipeline
    (proxy.core.protocols.responses.upstream_decode for the Responses API)."""

    def feed(self, data: bytes) -> bytes:
        """The upstream's next bytes (any split) → chat-completion SSE bytes."""

    def feed_pieces(self, data: bytes) -> list[bytes | KnownRun]:
        """As `feed`, with runs of chunks of more of the same apart, their texts known
        (StreamPipeline.feed_pieces takes them without reading them again)."""

    def close(self) -> bytes:
        """The upstream's body ended: what is left, and an error event if it ended early."""

    def completion(self, body: bytes) -> bytes:
        """A whole non-stream answer → a chat completion's JSON."""


class FrontDoor(Protocol):
    """A front door whose client reads the chat answer in another protocol (the Responses API:
    proxy.server.doors.responses). The relay hands it everything the response pipeline writes,
    last, so the chat path's normalization, trace, capture and review gate hold there too."""

    def planned(self, trace: TraceBuilder | None) -> None:
        """The plan is made: the door adds its own notes to the trace before it begins."""

    def feed(self, data: bytes) -> bytes:
        """The pipeline's next output (any split) → the client's bytes."""

    def feed_pieces(self, pieces: Sequence[DoorPiece]) -> bytes:
        """`feed` for the pipeline's output with its runs of more of the same apart, their texts
        known (StreamPipeline.feed_runs): the same bytes as `feed` of the pieces joined."""

    def close(self) -> bytes:
        """The pipeline wrote its last byte (or the stream broke off): what ends the client's."""

    def completion(self, body: bytes) -> bytes:
        """A non-stream answer as the pipeline wrote it → the client's body."""

    async def settle(self) -> None:
        """The answer is whole: the door's own I/O at its end (storing a response), before the
        client's last bytes go out."""


@dataclass(frozen=True, slots=True)
class ChatContext:
    """What the plan decided about a chat response: how the pipeline normalizes and traces it, and
    which collectors see it (the replay store's capture, the review gate)."""

    request_body: dict[str, Any]
    reasoning: ReasoningOptions
    trace: TraceBuilder | None
    trace_format: TraceFormat
    capture: TurnCollector | None = None  # the replay store's collector, when the store is on
    # Set only when a review policy is configured (proxy.review): holds covered tool calls back.
    gate: StreamGate | None = None
    zh: bool = False
    door: FrontDoor | None = None  # None: the client speaks chat completions
    upstream: UpstreamDecoder | None = None  # None: the upstream answers in chat completions
    # The tools the door's client knows by other names (a Responses client's namespaced tools): the
    # review gate matches and shows those (proxy.core.review.rules.ClientTool).
    client_names: ClientNames = field(default_factory=dict)
