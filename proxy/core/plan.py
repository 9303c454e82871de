"""The request plan: what the proxy does with a request, decided from values alone.

A request crosses three pure steps, each separated from the next by the one kind of I/O it needs;
the handlers (proxy.server.handlers) run the I/O and nothing else:

1. `begin(arrival, …)` — from the request line and headers: who the client is (gateway keys),
   the control headers, and where the request goes when the headers decide it (the configured
   upstream, or an allow-listed `X-Upstream-Base-URL`). Every refusal that needs no body happens
   here, so nothing is read from a client that will be refused.
   *I/O: vet a client-chosen upstream's name (DNS), read the body.*
2. `destination_of(intent, arrival, body, …)` and `target(destination, …)` — from the body: the
   destination a routes file picks by model, the model rewritten for a prefix route, the headers
   with the credentials the mode calls for.
   *I/O: the replay store's lookup of remembered reasoning (chat only).*
3. `plan_chat(…)` / `passthrough(…)` — the upstream request itself (URL, headers, body with the
   thinking level applied in the provider's dialect), the response headers that say what was done,
   and the options of the response pipeline (reasoning normalization, trace). For chat, around
   the thinking policy's judgement and the replay store's lookup, proxy.core.plan_finish decides
   the rest (the route, the trace and its notes, the review gate) and calls these.

Settings are passed in as values (`Defaults`), functions as callables (`resolve`: the upstream
allow-list), so tests drive every decision without a server, a socket or the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from proxy.core import paths
from proxy.core.controls import (
    CONTROL_HEADERS,
    UPSTREAM_HEADER,
    Controls,
    HeaderLookup,
    Level,
    ReasoningField,
    ReasoningVisibility,
    TraceFormat,
    TraceMode,
    parse_controls,
    prefers_chinese,
    refuse_control_header_look_alikes,
    reject_repeated_controls,
)
from proxy.core.gateway import GatewayAuth
from proxy.core.headers import filter_headers
from proxy.core.protocols.responses_upstream import responses_request
from proxy.core.providers import Dialect, ProvidersTable, ReplayPolicy
from proxy.core.review_rules import ClientNames
from proxy.core.rewrite import rewrite_body, with_budget
from proxy.core.routing import Destination, RouteTable, replace_model, request_model
from proxy.core.stream import jsonio
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.chunk_template import KnownRun
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.harmony import speaks_harmony
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder

RESPONSES_PATH = "/v1/responses"
# Request headers never forwarded: the control headers, what the HTTP client recomputes, and
# Expect (the server already answered 100-continue; upstream it could hold the body back).
DROP_REQUEST = CONTROL_HEADERS | {"host", "content-length", "expect"}
# On chat completions the proxy must read the body, so it asks for it uncompressed.
DROP_REQUEST_CHAT = DROP_REQUEST | {"accept-encoding"}
# (The per-request values below are plain slotted dataclasses, not frozen ones: a frozen
# dataclass sets each field through object.__setattr__, ~0.4 µs a value on every request.)

# Query parameters that carry a credential (Gemini's `key`, Azure's `api-key`, OAuth's
# `access_token`): in gateway mode a client's never reaches an upstream, like its headers.
CREDENTIAL_PARAMS = frozenset({b"key", b"api-key", b"api_key", b"access_token", b"apikey"})


class HeaderView(HeaderLookup, Protocol):
    """A request's headers: case-insensitive lookup, and every pair as received (starlette's
    `Headers` is one)."""

    def items(self) -> Iterable[tuple[str, str]]: ...

    def keys(self) -> Iterable[str]: ...


@dataclass(frozen=True, slots=True)
class Defaults:
    """The settings the plan reads, as values."""

    level: Level | None
    trace: TraceMode
    trace_format: TraceFormat
    visibility: ReasoningVisibility
    reasoning_field: ReasoningField


@dataclass(slots=True)
class Arrival:
    """What arrived, before the body: the request line as sent and its headers."""

    method: str
    path: str  # decoded: what routing decisions read
    raw_path: bytes  # as sent: what the upstream URL is built from (proxy.core.paths)
    query: bytes
    headers: HeaderView


@dataclass(slots=True)
class UpstreamRequest:
    """The request the upstream client sends (proxy.server.upstream)."""

    method: str
    url: str
    headers: list[tuple[str, str]]  # values as received (latin-1 decoded bytes)
    content: bytes
    client_chosen: bool = False  # X-Upstream-Base-URL: connect through the vetted pool (proxy.server.egress)


@dataclass(slots=True)
class Intent:
    """Step 1's outcome. `destination` None: a routes file decides once the body names the model.
    `vet`: a client-chosen base URL whose name is resolved and vetted before the body is read."""

    client: str | None
    controls: Controls
    destination: Destination | None
    vet: str | None = None
    # A numeric thinking budget the client asked (the Messages API's `budget_tokens`), sent in
    # place of the level's own where the dialect's level carries one (rewrite.with_budget).
    budget_tokens: int | None = None


def read_controls(headers: HeaderView, defaults: Defaults) -> Controls:
    """The control headers, checked on every route: a bad one is the same 400 on a pass-through
    path as on chat completions, never silently dropped."""
    reject_repeated_controls(headers.items())
    refuse_control_header_look_alikes(headers.keys())
    return parse_controls(headers, defaults.level, defaults.trace, defaults.trace_format, defaults.visibility)


def begin(
    arrival: Arrival,
    gateway: GatewayAuth,
    resolve: Callable[[str | None], str],
    defaults: Defaults,
    *,
    routed: bool,
) -> Intent:
    """Step 1. `resolve`: the upstream allow-list (UpstreamPolicy.resolve: None is the configured
    upstream); `routed`: a routes file is configured. Raises the ProxyError that refuses."""
    headers = arrival.headers
    client = gateway.authorize(headers.items())
    controls = read_controls(headers, defaults)
    chosen = headers.get(UPSTREAM_HEADER)
    if chosen is not None:
        gateway.check_client_upstream()
        base_url = resolve(chosen)
        return Intent(client, controls, Destination(base_url, client_chosen=True), vet=base_url)
    if not routed:
        return Intent(client, controls, Destination(resolve(None)))
    return Intent(client, controls, None)


@dataclass(slots=True)
class Target:
    """Step 2's outcome: where the request goes, with which body and headers."""

    destination: Destination
    # The body as sent. None: a chat body built by the proxy (a front door's bridged request) and not
    # serialized yet; `body` serializes `parsed` when first read, so a body the plan rewrites anyway
    # is serialized once, not twice.
    raw: bytes | None
    parsed: dict[str, Any] | None  # the chat body (chat completions only)
    headers: list[tuple[str, str]]  # the client's, with the credentials of the mode (no filtering yet)

    @property
    def body(self) -> bytes:
        raw = self.raw
        if raw is None:
            assert self.parsed is not None
            raw = self.raw = jsonio.dumps(self.parsed)
        return raw

    @property
    def model(self) -> str | None:
        model = self.parsed.get("model") if self.parsed is not None else None
        return model if isinstance(model, str) else None


def destination_of(
    intent: Intent, arrival: Arrival, body: bytes, parsed: dict[str, Any] | None, routes: RouteTable | None
) -> Destination:
    """Step 2a: where the request goes — step 1's decision, or the routes file's by the model the
    body names (404 when no route takes it). Apart from `target`, so the edge can note the route
    even when the body then cannot be sent."""
    if intent.destination is not None:
        return intent.destination
    assert routes is not None
    model = parsed.get("model") if parsed is not None else request_model(arrival.path, body)
    return routes.destination(model)


def target(
    destination: Destination,
    arrival: Arrival,
    body: bytes,
    parsed: dict[str, Any] | None,
    gateway: GatewayAuth,
    forward_headers: Sequence[tuple[str, str]] = (),
) -> Target:
    """Step 2b. `parsed`: the chat body (jsonio.parse_chat_body), None on a pass-through route;
    `forward_headers`: what observers add upstream (a traceparent replaces the client's own)."""
    if destination.model is not None:  # a prefix route: the model without its prefix
        body = replace_model(parsed, body, destination.model)
    headers = gateway.upstream_headers(arrival.headers.items(), destination)
    if forward_headers:
        replaced = {name.lower() for name, _ in forward_headers}
        headers = [pair for pair in headers if pair[0].lower() not in replaced] + list(forward_headers)
    return Target(destination, body, parsed, headers)


def upstream_url(arrival: Arrival, destination: Destination, *, gateway_mode: bool) -> str:
    """The upstream URL from the request's raw path and query (proxy.core.paths); a prefix route's
    model replaces the one a `/v1/models/{id}` path names, and in gateway mode a credential the
    client put in the query string is left out."""
    raw_path = arrival.raw_path
    if destination.model is not None and arrival.path.startswith("/v1/models/"):
        raw_path = b"/v1/models/" + quote(destination.model, safe="").encode("ascii")
    query = scrub_credentials(arrival.query) if gateway_mode else arrival.query
    return paths.upstream_url(destination.base_url, raw_path, query)


def scrub_credentials(query: bytes) -> bytes:
    """The query string without parameters that carry a credential (CREDENTIAL_PARAMS, compared
    case-insensitively on the name as sent); every other byte as it came."""
    if not query:
        return query
    kept = [part for part in query.split(b"&") if part.split(b"=", 1)[0].lower() not in CREDENTIAL_PARAMS]
    return b"&".join(kept)


def passthrough(arrival: Arrival, tgt: Target, *, gateway_mode: bool, read: bool = False) -> UpstreamRequest:
    """Step 3 for every path but chat completions: the request as it came, to its upstream.
    `read`: the proxy reads the answer on its way (its usage, for the thinking policy's budget),
    so it asks for it uncompressed (the client's Accept-Encoding would let the upstream compress
    it, and a compressed answer is relayed unread: proxy.server.relay)."""
    headers = filter_headers(tgt.headers, DROP_REQUEST)
    if read:
        headers = [pair for pair in headers if pair[0].lower() != "accept-encoding"]
        headers.append(("accept-encoding", "identity"))
    return UpstreamRequest(
        arrival.method,
        upstream_url(arrival, tgt.destination, gateway_mode=gateway_mode),
        headers,
        tgt.body,
        client_chosen=tgt.destination.client_chosen,
    )


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
) -> ChatPlan:
    """Step 3 for chat completions. `restored`: the body with remembered reasoning put back by
    the replay store (None when it changed nothing: the body is then sent byte for byte unless a
    level is applied)."""
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
        dialect.reasoning.tags, dialect.reasoning.implicit_open, defaults, intent, model=tgt.model
    )
    return ChatPlan(request, dialect, applied, method if applied else None, response_headers, reasoning, zh)


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
    `/responses`, the body mapped by proxy.core.protocols.responses_upstream), the headers that
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
    (proxy.core.protocols.responses_decode for the Responses API)."""

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
    proxy.server.responses_door). The relay hands it everything the response pipeline writes,
    last, so the chat path's normalization, trace, capture and review gate hold there too."""

    def planned(self, trace: TraceBuilder | None) -> None:
        """The plan is made: the door adds its own notes to the trace before it begins."""

    def feed(self, data: bytes) -> bytes:
        """The pipeline's next output (any split) → the client's bytes."""

    def feed_pieces(self, pieces: Sequence[bytes | KnownRun]) -> bytes:
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
    # review gate matches and shows those (proxy.core.review_rules.ClientTool).
    client_names: ClientNames = field(default_factory=dict)
