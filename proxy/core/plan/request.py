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
3. `plan_chat(…)` (proxy.core.plan.chat) / `passthrough(…)` — the upstream request itself (URL,
   headers, body with the thinking level applied in the provider's dialect), the response headers
   that say what was done, and the options of the response pipeline (reasoning normalization,
   trace). For chat, around the thinking policy's judgement and the replay store's lookup,
   proxy.core.plan.finish decides the rest (the route, the trace and its notes, the review gate)
   and calls these.

This module holds steps 1 and 2 and the pass-through's step 3: the values every route shares
(`Arrival`, `Intent`, `Target`, `UpstreamRequest`) and the upstream URL. Chat's step 3 — its plan,
the route over the Responses API, the thinking headers, and the types the response pipeline reads
(`ChatContext`, `FrontDoor`) — is proxy.core.plan.chat's.

Settings are passed in as values (`Defaults`), functions as callables (`resolve`: the upstream
allow-list), so tests drive every decision without a server, a socket or the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from proxy.core import jsonio, paths
from proxy.core.config.routing import Destination, RouteTable, replace_model, request_model
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
    check_control_headers,
    parse_controls,
)
from proxy.core.gateway import GatewayAuth
from proxy.core.headers import filter_headers
from proxy.core.plan.levels import NO_ASK, Asked, LevelAsk

# Request headers never forwarded: the control headers, what the HTTP client recomputes, and
# Expect (the server already answered 100-continue; upstream it could hold the body back).
DROP_REQUEST = CONTROL_HEADERS | {"host", "content-length", "expect"}
# (The per-request values below are plain slotted dataclasses, not frozen ones: a frozen
# dataclass sets each field through object.__setattr__, ~0.4 µs a value on every request.)

# Query parameters that carry a credential (Gemini's `key`, Azure's `api-key`, OAuth's
# `access_token`): in gateway mode a client's never reaches an upstream, like its headers.
CREDENTIAL_PARAMS = frozenset({b"key", b"api-key", b"api_key", b"access_token", b"apikey"})


class HeaderView(HeaderLookup, Protocol):
    """A request's headers: case-insensitive lookup, and every pair as received, names in lower
    case as ASGI gives them (starlette's `Headers` is one; the control headers' checks,
    proxy.core.controls.check_control_headers, compare the names as they are)."""

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
    # What the header, the model's suffix and the key's default say of the level, read before the
    # body's own field decides between them (proxy.core.plan.levels.decide).
    ask: LevelAsk = NO_ASK


def read_controls(headers: HeaderView, defaults: Defaults) -> Controls:
    """The control headers, checked on every route: a bad one is the same 400 on a pass-through
    path as on chat completions, never silently dropped."""
    if not check_control_headers(headers.items()):  # (most requests send none: each is its default)
        return Controls(defaults.level, defaults.trace, defaults.trace_format, defaults.visibility)
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
    ask = level_ask(controls, defaults)
    chosen = headers.get(UPSTREAM_HEADER)
    if chosen is not None:
        gateway.check_client_upstream()
        base_url = resolve(chosen)
        return Intent(client, controls, Destination(base_url, client_chosen=True), vet=base_url, ask=ask)
    if not routed:
        return Intent(client, controls, Destination(resolve(None)), ask=ask)
    return Intent(client, controls, None, ask=ask)


def level_ask(controls: Controls, defaults: Defaults) -> LevelAsk:
    """What the headers and the settings say of the level (the model's suffix and the key's
    default are added once the body and the key are read: proxy.server.levels)."""
    header = Asked(controls.level, controls.level_auto) if controls.level_header else None
    default = Asked(defaults.level) if defaults.level is not None else None
    return LevelAsk(header, None, default)


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
