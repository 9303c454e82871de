"""The request handlers: they run the I/O a request plan (proxy.core.plan.request) asks for, and nothing
else decides here.

Chat completions and every other `/v1/*` path go through the same three plan steps; between them
a handler vets a client-chosen upstream's name, reads the body, and asks the replay store for
remembered reasoning; then the relay (proxy.server.relay) sends the upstream request and streams
the answer back through the response pipeline. A chat request's last steps are
proxy.core.plan.finish's; `run_chat` only awaits between them. Every request ends in `finish`
exactly once: its access-log line, then its observers.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import quote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from proxy.core.config.providers import Dialect, ProvidersTable
from proxy.core.config.routing import RouteTable
from proxy.core.config.tool_titles import NO_TITLES, ToolTitles
from proxy.core.controls import UPSTREAM_HEADER, Level
from proxy.core.errors import ProxyError
from proxy.core.events import AccessRecord, Listener, notify_end, start_observers
from proxy.core.gateway import GatewayAuth
from proxy.core.native_usage import UsageReader, model_asked
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import finish as plan_finish
from proxy.core.plan import request as plan
from proxy.core.plan.chat import FrontDoor
from proxy.core.protocols import chat as chat_door
from proxy.core.review.rules import NO_CLIENT_NAMES, ClientNames, refuse_unreviewed_route
from proxy.policy.service import ThinkingPolicy
from proxy.review.service import ReviewService
from proxy.server import levels, policy_gate
from proxy.server.access_log import log_access
from proxy.server.asgi import BODY_LEFT_UNREAD, read_body
from proxy.server.egress import ConnectGuard
from proxy.server.header_view import headers_of
from proxy.server.models_listing import MISSING_HEADER, ModelsListing, listed_with_levels
from proxy.server.relay import Relay, client_gone
from proxy.server.replay_service import ReplayService
from proxy.server.request_ids import REQUEST_ID_HEADER, take_request_id
from proxy.server.upstream.common import Upstream
from proxy.server.upstream.policy import UpstreamPolicy
from proxy.settings import Settings

logger = logging.getLogger("thinkproxy.app")
# What Starlette's URL writes otherwise than the scope's path holds it (quoted): the record shows
# such a path as `request.url.path` does, so that `/v1/models%3Fk=x` never reads as a query.
_URL_QUOTES = re.compile(r"[?#\\]")

# A front door's own error body for the proxy's errors (the Messages door's Anthropic shape);
# None: the OpenAI shape every other route answers with.
ErrorBody = Callable[[ProxyError], bytes]


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    table: ProvidersTable
    upstream: Upstream
    policy: UpstreamPolicy
    gateway: GatewayAuth
    guard: ConnectGuard  # resolves upstream names; vets client-chosen ones at connect (proxy.server.egress)
    # Capabilities watching requests (metrics, tracing, console, replay capture): proxy.core.events.
    listeners: tuple[Listener, ...] = ()
    routes: RouteTable | None = None  # the routes file (proxy.core.config.routing), if one is configured
    # Human review of sensitive tool calls (proxy.review): None unless THINKPROXY_REVIEW_TOOLS is set.
    review: ReviewService | None = None
    tool_titles: ToolTitles = field(default_factory=lambda: NO_TITLES)
    # The replay store (proxy.server.replay_service); None with THINKPROXY_STATE=off.
    replay: ReplayService | None = None
    # The thinking policy (proxy.policy): None without THINKPROXY_POLICY_FILE.
    thinking: ThinkingPolicy | None = None
    # Whether a listener reads what the proxy changed in a body (the sessions' or the console's).
    describe_changes: bool = True


def defaults_of(settings: Settings) -> plan.Defaults:
    return plan.Defaults(
        settings.default_thinking_level,
        settings.trace,
        settings.trace_format,
        settings.reasoning_visibility,
        settings.reasoning_field,
    )


def json_error(
    exc: ProxyError, extra_headers: Sequence[tuple[str, str]] = (), render: ErrorBody | None = None
) -> Response:
    headers = dict(extra_headers)
    if exc.status in BODY_LEFT_UNREAD:
        headers["connection"] = "close"  # the edge discards the rest, then closes (proxy.server.edge)
    body = exc.body() if render is None else render(exc)
    return Response(body, status_code=exc.status, media_type="application/json", headers=headers)


def arrival_of(request: Request) -> plan.Arrival:
    scope = request.scope
    raw_path = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
    return plan.Arrival(
        scope["method"], scope["path"], raw_path, scope.get("query_string", b""), headers_of(scope)
    )


class Proxy:
    """Request handlers bound to one app's services."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self.defaults = defaults_of(services.settings)
        self.setup = plan_finish.ChatSetup(
            self.defaults,
            services.settings.max_sse_event_bytes,
            services.tool_titles,
            services.review,
            describe_changes=services.describe_changes,
        )
        self.log = self.finish
        self.relay = Relay(services.settings, services.upstream, self.finish, services.review)
        routes = services.routes
        self.listing = (
            None
            if routes is None
            else ModelsListing.from_settings(services.settings, routes, services.upstream, services.gateway)
        )

    def finish(self, record: AccessRecord, started: float) -> None:
        """Every request ends here exactly once: its access line, then its observers."""
        log_access(record, started)
        if record.observers:
            for observer, exc in notify_end(record, (time.perf_counter() - started) * 1000.0):
                logger.error(
                    "An observer failed at the end of a request (%s)", type(observer).__name__, exc_info=exc
                )

    async def healthz(self, request: Request) -> Response:
        replay = self.s.replay
        if replay is not None and not await replay.reachable():
            # Still 200: without its store the proxy serves (a fault is a miss), so a load balancer
            # should keep it; the body tells monitoring what is wrong.
            return Response(b'{"status":"degraded","state":"unreachable"}', media_type="application/json")
        return Response(b'{"status":"ok"}', media_type="application/json")

    # (Each route hands `guarded` its own step as a partial: no closure and no dispatching level
    # of its own between the route and its work; bench/README.md, "Layers off the chat path".)
    async def chat_completions(self, request: Request) -> Response:
        return await self.guarded(request, "chat", partial(self.forward_chat, request))

    async def passthrough(self, request: Request) -> Response:
        return await self.guarded(request, "passthrough", partial(self.forward_passthrough, request))

    async def models(self, request: Request) -> Response:
        """With a routes file, the models of every route merged; else the upstream's list as is."""
        s = self.s
        if self.listing is None or UPSTREAM_HEADER in request.headers:
            if s.settings.models_with_levels:  # (the answer read, each model's `(level)` forms added)
                return await self.guarded(request, "passthrough", partial(self._models_with_levels, request))
            return await self.guarded(request, "passthrough", partial(self.forward_passthrough, request))
        started = time.perf_counter()
        record, bad_request_id = self._record(request, "passthrough")
        try:
            if bad_request_id is not None:
                raise bad_request_id
            record.client = s.gateway.authorize(request.headers.items())
            plan.read_controls(request.headers, self.defaults)
            merged = await self.listing.get(request.headers.items())
        except ProxyError as exc:
            return self.error(exc, record, started)
        headers = dict(record.response_headers)
        if merged.missing:
            headers[MISSING_HEADER] = ", ".join(merged.missing)
        out = merged.body
        record.status, record.bytes_out = 200, len(out)
        self.finish(record, started)
        return Response(out, media_type="application/json", headers=headers)

    async def _models_with_levels(self, request: Request, record: AccessRecord, started: float) -> Response:
        arrival, _, tgt = await self.arrive(request, record, parse=False)
        req = plan.passthrough(arrival, tgt, gateway_mode=self.s.gateway.enabled, read=True)
        status, out = await listed_with_levels(self.s.upstream, req, self.s.settings.max_response_bytes)
        record.status, record.upstream_status, record.bytes_out = status, status, len(out)
        self.finish(record, started)
        return Response(out, status, media_type="application/json", headers=dict(record.response_headers))

    def _record(self, request: Request, route: str) -> tuple[AccessRecord, ProxyError | None]:
        """The request's record, its request id taken first (observers read it when they start),
        and the error a malformed X-Request-Id is (raised inside the handler's error handling)."""
        scope = request.scope
        headers = headers_of(scope)
        path: str = scope["path"]
        if not path.isprintable() or _URL_QUOTES.search(path) is not None or path.startswith("//"):
            # (as Starlette's URL reads it: tabs and line ends dropped, `?`, `#` and `\` quoted)
            path = request.url.path
        record = AccessRecord(method=scope["method"], path=path, route=route)
        bad_request_id = take_request_id(record, headers.get(REQUEST_ID_HEADER))
        if self.s.listeners:
            record.observers = start_observers(self.s.listeners, record, headers.items())
        return record, bad_request_id

    async def guarded(
        self,
        request: Request,
        route: str,
        run: Callable[[AccessRecord, float], Awaitable[Response]],
        render: ErrorBody | None = None,
    ) -> Response:
        """One request's record and its ending, whatever happens: a refusal is an OpenAI-shaped
        error (`render`: a front door's own shape), a client gone mid-body a 499, anything
        unexpected a 500 (never a text page)."""
        started = time.perf_counter()
        record, bad_request_id = self._record(request, route)
        try:
            if bad_request_id is not None:
                raise bad_request_id
            return await run(record, started)
        except ClientDisconnect:  # gone while still sending its body: nothing was forwarded
            return client_gone(record, started, self.finish)
        except ProxyError as exc:
            return self.error(exc, record, started, render)
        except Exception:  # the one catch-all before a response starts: a 500, never a text page
            logger.exception("Unexpected error while handling %s %s", request.method, request.url.path)
            failure = ProxyError("The proxy failed to handle this request (an internal error; see its log).")
            return self.error(failure, record, started, render)

    def error(
        self, exc: ProxyError, record: AccessRecord, started: float, render: ErrorBody | None = None
    ) -> Response:
        record.status = exc.status
        record.error = exc.code
        self.finish(record, started)
        return json_error(exc, record.response_headers, render)

    async def forward(self, request: Request, chat: bool, started: float, record: AccessRecord) -> Response:
        """A request forwarded as the chat route (`chat`) or the pass-through route forwards it,
        inside a caller's `guarded` (the doors' routes that end as a pass-through)."""
        if chat:
            return await self.forward_chat(request, record, started)
        return await self.forward_passthrough(request, record, started)

    async def forward_chat(self, request: Request, record: AccessRecord, started: float) -> Response:
        arrival, intent, tgt = await self.arrive(request, record, parse=True)
        assert tgt.parsed is not None
        dialect = plan_chat.chat_dialect(self.s.table, tgt)
        return await self.run_chat(
            request, arrival, intent, tgt, tgt.parsed, record, started, dialect=dialect
        )

    async def forward_passthrough(self, request: Request, record: AccessRecord, started: float) -> Response:
        arrival, _, tgt = await self.arrive(request, record, parse=False)
        # (with a policy, a generation route is budgeted and its answer read: /v1/completions, …)
        asked = model_asked(arrival.method, arrival.path, tgt.body) if self.s.thinking else None
        req = plan.passthrough(arrival, tgt, gateway_mode=self.s.gateway.enabled, read=bool(asked))
        if asked is None:
            return await self.relay_as_it_came(request, req, record, started, reaches_model=False)
        record.model = asked.model
        dialect = self.s.table.match(tgt.destination.base_url, asked.model)
        level, off = policy_gate.relayed_asks(asked.body, arrival.path, dialect)
        return await self.relay_as_it_came(
            request, req, record, started, True, asks=asked.output_cap, level=level, can_turn_off=off
        )

    async def relay_as_it_came(
        self,
        request: Request,
        req: plan.UpstreamRequest,
        record: AccessRecord,
        started: float,
        reaches_model: bool,
        *,
        asks: int | None = None,
        level: Level | None = None,
        can_turn_off: bool = True,
    ) -> Response:
        """A request relayed as it came, its answer untouched. One that reaches a model (a native
        compaction, `/v1/completions`, …) is admitted by the thinking policy first (its thinking
        cannot be turned off or lowered: knobs above the key's ceiling (`level`) and a spent
        budget refuse it; `asks`: its own output cap, for the reservation) and its answer's token
        counts are read as it goes by (proxy.core.native_usage), for the budget and the usage book."""
        usage = None
        if reaches_model:
            if self.s.thinking is not None:
                await policy_gate.admit(self.s.thinking, record, asks, level, can_turn_off=can_turn_off)
            usage = UsageReader(limit=self.s.settings.max_response_bytes)
        extra = record.response_headers
        return await self.relay(request, req, record, started, extra_headers=extra, chat=None, usage=usage)

    async def arrive(
        self, request: Request, record: AccessRecord, *, parse: bool
    ) -> tuple[plan.Arrival, plan.Intent, plan.Target]:
        """Steps 1 and 2 of every proxied request, with their I/O: who and where from the headers,
        the body (parsed as a JSON request when `parse`: chat, the Responses door), the route."""
        s = self.s
        arrival = arrival_of(request)
        intent = plan.begin(arrival, s.gateway, s.policy.resolve, self.defaults, routed=s.routes is not None)
        record.client = intent.client
        if intent.vet is not None:
            await s.guard.precheck(intent.vet)  # (through an egress proxy; else at connect)
        body = await read_body(request, s.settings.max_body_bytes, s.settings.client_body_timeout)
        parsed = chat_door.parse_request(body) if parse else None
        body, suffix = levels.take_suffix(parsed, body, record)  # (before anything reads the model)
        intent.ask = levels.ask_for(intent, suffix, s.thinking)
        if not parse and s.review is not None:
            refuse_unreviewed_route(arrival.method, arrival.path, body)
        destination = plan.destination_of(intent, arrival, body, parsed, s.routes)
        record.upstream_route = destination.route.name if destination.route else None
        record.upstream_base_url = destination.base_url
        tgt = plan.target(destination, arrival, body, parsed, s.gateway, record.forward_headers)
        return arrival, intent, tgt

    async def run_chat(
        self,
        request: Request,
        arrival: plan.Arrival,
        intent: plan.Intent,
        tgt: plan.Target,
        parsed: dict[str, Any],
        record: AccessRecord,
        started: float,
        *,
        dialect: Dialect,
        door: FrontDoor | None = None,
        client_names: ClientNames = NO_CLIENT_NAMES,
        client_level: Level | None = None,
    ) -> Response:
        """Step 3 of a chat request: the awaits between the plan's last steps (proxy.core.plan.
        finish): the thinking policy's judgement, the replay store's lookup, the relay.
        `dialect`: the target's providers-table entry, looked up once per request by whoever read
        it first (the chat route, or the door: proxy.server.doors.common.Door.arrive); `door`: a
        front door other than chat completions (proxy.server.doors.responses) whose client reads
        the answer in its own protocol; `client_names`: the tools its client knows by other names
        than the upstream's (the review gate matches and shows those); `client_level`: the level
        the door's own field asked (its `reasoning.effort`, `thinking`), weighed against the
        header, the model's suffix and the key's default (proxy.server.levels)."""
        s = self.s
        record.model = tgt.model
        record.stream = parsed.get("stream") is True
        record.request_messages = parsed.get("messages")
        header_pairs = arrival.headers.items()  # (read by the level's settle and the replay store)
        intent = levels.settle_chat(
            intent,
            parsed,
            dialect,
            record,
            header_pairs,
            bridged=door is not None,
            client_level=client_level,
        )
        policy_note = None
        if s.thinking is not None:  # the key's ceiling and budget, before anything is planned
            # (judged on what would really be sent: the level, or the body's own knobs it leaves)
            judged = await policy_gate.judge_chat(s.thinking, intent, tgt, dialect, record)
            intent, tgt, policy_note = judged.intent, judged.target, judged.note
            assert tgt.parsed is not None
            parsed = tgt.parsed
        route = plan_finish.route_chat(dialect, parsed, intent.controls, bridged=door is not None)
        prepared = None
        if s.replay is not None:  # remembered reasoning back into the history, before the rewrite
            prepared = await s.replay.prepare(parsed, route.dialect, record.model, header_pairs, record)
            parsed = prepared.body
        done = plan_finish.finish_chat(
            self.setup,
            arrival,
            intent,
            tgt,
            route,
            parsed,
            record,
            gateway_mode=s.gateway.enabled,
            prepared=prepared,
            policy_note=policy_note,
            door=door,
            client_names=client_names,
        )
        extra = done.plan.response_headers + record.response_headers
        return await self.relay(
            request, done.plan.request, record, started, extra_headers=extra, chat=done.context
        )
