"""A front door's request to an upstream that serves the door's API itself, written once for the
Responses door (proxy.server.doors.responses_native) and the Messages door (messages_native):
`forward_native`, the level applied to the body, judged by the thinking policy, the proxy's own
blobs left out, the record and the trace headers filled, the answer relayed as it came with its
usage read (and, in gateway mode, the ids of a native upstream's stored state kept to the tenant
that made them); a `NativeRoute` says the door's own parts (its body knobs, its judge, its blobs,
its URL and headers)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from proxy.core.body_splice import splice
from proxy.core.config.providers import Dialect
from proxy.core.controls import Level
from proxy.core.events import AccessRecord
from proxy.core.headers import filter_headers
from proxy.core.native_usage import UsageReader
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import request as plan
from proxy.core.policy.auto_rules import Features, client_kind, features_of
from proxy.core.review.rules import refuse_unreviewed_route
from proxy.policy.service import ThinkingPolicy
from proxy.server import levels
from proxy.server.asgi import RelayResponse
from proxy.server.doors.common import Body, Headers
from proxy.server.doors.held_levels import HeldLevels
from proxy.server.doors.native_owners import NativeOwners
from proxy.server.handlers import Proxy
from proxy.server.relay import Relay

Planned = tuple[Body | None, Level | None]  # the body to send (None: as it came), the level applied
# The body with the level applied as the door's own knobs: (body, level, dialect, the level header sent).
LevelBody = Callable[[Body, Level | None, Dialect, bool], Planned]
# The key's ceiling and budget on the body that would go (proxy.server.policy_gate).
Judge = Callable[[ThinkingPolicy, Body, Planned, Dialect, AccessRecord], Awaitable[Planned]]


def _as_they_are(headers: Headers) -> Headers:
    return headers


def _no_rules(body: Body, level: Level | None, dialect: Dialect, header: bool) -> Headers:
    return []


@dataclass(frozen=True, slots=True)
class NativeRoute:
    """What one door's native forwarding does its own way (forward_native does the rest)."""

    route: str  # the trace headers' route ("responses", "messages")
    level_body: LevelBody
    judge: Judge
    strip: Callable[[Body], tuple[Body | None, int]]  # the proxy's own sealed reasoning left out, how many
    url: Callable[[plan.Arrival, plan.Target, Dialect, bool], str]  # (…, gateway mode) → the endpoint
    headers: Callable[[Headers], Headers] = _as_they_are  # the request headers as the upstream takes them
    left_out_header: str | None = None  # the response header counting what `strip` left out (None: none)
    review_path: str | None = None  # the path the review rules read (None: the request's own)
    # The model's own rules: what it refuses before the upstream (raises the door's error), and
    # the response headers that say what was asked and not applied. (body, level, dialect, header)
    rules: Callable[[Body, Level | None, Dialect, bool], Headers] = _no_rules


async def forward_native(
    proxy: Proxy,
    route: NativeRoute,
    request: Request,
    arrival: plan.Arrival,
    intent: plan.Intent,
    tgt: plan.Target,
    dialect: Dialect,
    record: AccessRecord,
    started: float,
    owners: NativeOwners | None = None,
    relay: Relay | None = None,
    held: HeldLevels | None = None,
) -> Response:
    """A door's request to an upstream that serves the door's API itself: the level as the
    upstream's own knobs, the answer as it came (its usage read for budgets and the usage book).
    `relay`: another transport for the same request (a Responses WebSocket's upstream socket,
    proxy.server.upstream.responses_socket); None: the app's HTTP relay.
    With a review policy set, a request that could call tools is refused (the gate reads chat
    answers: a native answer would go around it). In gateway mode with `owners` (an upstream that
    stores state), the request may only continue state its tenant created, and the answer's ids
    are recorded as that tenant's as they go by (proxy.server.doors.native_owners). With `held`
    (an upstream whose answers are continued by id), the level `auto` chose is kept per answer and
    a continuation without user text keeps it (proxy.server.doors.held_levels)."""
    s = proxy.s
    if s.review is not None:  # the gate reads chat answers: a native answer would go around it
        refuse_unreviewed_route(arrival.method, route.review_path or arrival.path, tgt.body)
    assert tgt.parsed is not None
    # Gateway mode: stored state (a response, its items) is used only by the tenant that created it.
    tenants = owners.tenants(request.headers.items()) if owners is not None and owners.active else None
    if owners is not None and tenants is not None:
        await owners.check_continuation(tenants, tgt.parsed)
    # (the client's own field, read as the door's level_body reads it when no level overrides it)
    _, client_level = route.level_body(tgt.parsed, None, dialect, False)
    kind = client_kind(request.headers.items())
    parsed, model = tgt.parsed, record.model or ""

    def features() -> Features:
        return features_of(route.route, route.route, parsed, model, kind)

    def continued() -> tuple[Level, str] | None:
        # (a continuation by id with no user message: the tool loop of the turn it continues)
        previous = parsed.get("previous_response_id")
        if held is None or not isinstance(previous, str) or features().last_user:
            return None
        return held.get(record.client, previous)

    choice = levels.choose(intent.ask, client_level, features, record, continued)
    level = choice.level
    record.response_headers.extend(route.rules(tgt.parsed, level, dialect, choice.forced))
    changed, applied = route.level_body(tgt.parsed, level, dialect, choice.forced)
    if s.thinking is not None:  # the key's ceiling and budget judge the body that would go
        changed, applied = await route.judge(s.thinking, tgt.parsed, (changed, applied), dialect, record)
    stripped, left_out = route.strip(changed if changed is not None else tgt.parsed)
    changed = stripped if stripped is not None else changed
    if left_out and route.left_out_header is not None:
        record.response_headers.append((route.left_out_header, str(left_out)))
    record.level_requested = level.value if level is not None else None
    record.provider = dialect.name
    record.level = applied.value if applied is not None else "none"
    record.thinking_method = "params" if applied is not None else None
    headers = plan_chat.thinking_headers(applied, dialect.name, "params", route.route)
    request_out = plan.UpstreamRequest(
        "POST",
        route.url(arrival, tgt, dialect, s.gateway.enabled),
        # Only encodings the proxy decodes (Codex asks for zstd): identity, as on chat.
        [
            *route.headers(filter_headers(tgt.headers, plan_chat.DROP_REQUEST_CHAT)),
            ("accept-encoding", "identity"),
        ],
        # A changed body keeps the bytes of every value the proxy left alone: Anthropic binds a
        # thinking block to the exact prefix before it (proxy.core.body_splice).
        tgt.body if changed is None else splice(tgt.body, tgt.parsed, changed),
        client_chosen=tgt.destination.client_chosen,
    )
    extra = headers + record.response_headers
    # (its answer's usage is read as it goes by: budgets and the usage book count it)
    usage = UsageReader(limit=s.settings.max_response_bytes)
    response = await (relay or proxy.relay)(
        request, request_out, record, started, extra_headers=extra, chat=None, usage=usage
    )
    if (
        owners is not None
        and tenants is not None
        # (over an upstream WebSocket a store: false response is continued too, on that socket)
        and (tgt.parsed.get("store") is not False or relay is not None)
        and isinstance(response, RelayResponse)
        and 200 <= response.status_code < 300
    ):
        response.produce = owners.tap(response.produce, tenants.current)  # (whose id this is)
    if (
        held is not None
        and choice.rule is not None
        and choice.level is not None
        and isinstance(response, RelayResponse)
        and 200 <= response.status_code < 300
    ):
        response.produce = held.tap(response.produce, record.client, choice.level, choice.rule)
    return response
