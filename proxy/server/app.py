"""The Starlette application: the only inbound I/O of the proxy.

Routes: `POST /v1/chat/completions` (rewritten, normalized, traced), every other `/v1/*` path
forwarded transparently, `GET /healthz`. Everything the proxy decides is delegated to the pure
modules; this module reads requests, calls the upstream client and writes responses.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx
import orjson
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.console import Console
from proxy.console.cors import CORSMiddleware
from proxy.core import paths
from proxy.core.controls import (
    CONTROL_HEADERS,
    UPSTREAM_HEADER,
    Controls,
    Level,
    ReasoningVisibility,
    TraceMode,
    parse_controls,
    prefers_chinese,
    reject_repeated_controls,
)
from proxy.core.errors import ProxyError
from proxy.core.gateway import GatewayAuth, parse_client_keys
from proxy.core.providers import Dialect, ProvidersTable
from proxy.core.request_headers import refuse_control_header_look_alikes
from proxy.core.rewrite import rewrite_body
from proxy.core.routing import (
    Destination,
    RouteTable,
    key_environment,
    replace_model,
    request_model,
    resolve_route_keys,
)
from proxy.core.stream import jsonio
from proxy.core.stream.jsonio import parse_chat_body
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.taps import (
    Listener,
    build_trace,
    needs_outcome,
    notify_end,
    output_sink,
    start_observers,
    tap_needs_detail,
    trace_tap,
    with_forward_headers,
)
from proxy.core.tool_titles import NO_TITLES, ToolTitles, load_tool_titles
from proxy.review.api import ReviewAPI
from proxy.review.service import ReviewService
from proxy.server.access_log import AccessRecord, configure_logging, log_access
from proxy.server.asgi import BODY_LEFT_UNREAD, read_body
from proxy.server.browser_guard import BrowserGuard, HostRule
from proxy.server.egress import ConnectGuard, EgressProxy, Resolve, system_resolve
from proxy.server.models_listing import MISSING_HEADER, ModelsListing
from proxy.server.relay import ChatContext, Relay, client_gone
from proxy.server.replay_service import ReplayService
from proxy.server.request_ids import REQUEST_ID_HEADER, take_request_id
from proxy.server.upstream.common import Upstream, UpstreamRequest
from proxy.server.upstream.factory import build_upstream
from proxy.server.upstream.headers import filter_headers
from proxy.server.upstream.policy import UpstreamPolicy
from proxy.settings import Settings
from proxy.telemetry import build_telemetry
from proxy.telemetry.facts import configured_models

# Request headers never forwarded: the control headers, what the HTTP client recomputes, and
# Expect (the server already answered 100-continue; upstream it could hold the body back).
DROP_REQUEST = CONTROL_HEADERS | {"host", "content-length", "expect"}
# On chat completions the proxy must read the body, so it asks for it uncompressed.
DROP_REQUEST_CHAT = DROP_REQUEST | {"accept-encoding"}

logger = logging.getLogger("thinkproxy.app")

# When the collector looks at the young generation: after this many more container objects made
# than freed (CPython's default is 700). A serving process has ~1,000 objects in flight at any
# time (coroutines, frames, headers of the requests under way); at 700 the collector ran every few
# requests, each time only to find them still alive (scanning and promoting them: ~0.4 ms a
# collection), which was 5.8% of the process's CPU time under non-stream load and 2.9% under
# streaming (timed with gc.callbacks, pinned, 32 connections). At 10,000 it runs when something
# really accumulates (cycles, caches filling), ~50x less often; a young collection then takes ~4 ms.
YOUNG_COLLECTION_THRESHOLD = 10_000


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    table: ProvidersTable
    upstream: Upstream
    policy: UpstreamPolicy
    gateway: GatewayAuth
    guard: ConnectGuard  # resolves upstream names; vets client-chosen ones at connect (proxy.server.egress)
    # Capabilities watching requests (metrics, tracing, console, replay capture): see proxy.core.stream.taps.
    listeners: tuple[Listener, ...] = ()
    routes: RouteTable | None = None  # the routes file (proxy.core.routing), if one is configured
    # Human review of sensitive tool calls (proxy.review): None unless THINKPROXY_REVIEW_TOOLS is set.
    review: ReviewService | None = None
    tool_titles: ToolTitles = field(default_factory=lambda: NO_TITLES)
    # The replay store (proxy.server.replay_service); None with THINKPROXY_STATE=off.
    replay: ReplayService | None = None


def json_error(exc: ProxyError, extra_headers: Sequence[tuple[str, str]] = ()) -> Response:
    headers = dict(extra_headers)
    if exc.status in BODY_LEFT_UNREAD:
        headers["connection"] = "close"  # the edge discards the rest, then closes (proxy.server.edge)
    return Response(exc.body(), status_code=exc.status, media_type="application/json", headers=headers)


def upstream_url(base_url: str, request: Request, model: str | None = None) -> str:
    """The upstream URL for this request, from its raw path and query (see proxy.core.paths)."""
    scope = request.scope
    raw_path = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
    if model is not None and scope["path"].startswith("/v1/models/"):  # a prefix route's model, stripped
        raw_path = b"/v1/models/" + quote(model, safe="").encode("ascii")
    return paths.upstream_url(base_url, raw_path, scope.get("query_string", b""))


def read_controls(headers: Headers, settings: Settings) -> Controls:
    """The control headers, checked on every route: a bad one is the same 400 on a pass-through
    path as on chat completions, never silently dropped."""
    reject_repeated_controls(headers.items())
    refuse_control_header_look_alikes(headers.keys())
    return parse_controls(
        headers,
        settings.default_thinking_level,
        settings.trace,
        settings.trace_format,
        settings.reasoning_visibility,
    )


def thinking_headers(dialect: Dialect, level: Level | None, method: str | None) -> list[tuple[str, str]]:
    headers = [
        ("x-thinking-level-applied", level.value if level is not None else "none"),
        ("x-thinking-provider", dialect.name),
    ]
    if method is not None and level is not None:
        headers.append(("x-thinking-method", method))
    return headers


class Proxy:
    """Request handlers bound to one app's services."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self.log = self._log_and_notify
        self.relay = Relay(services.settings, services.upstream, self._log_and_notify, services.review)
        routes = services.routes
        self.listing = (
            None
            if routes is None
            else ModelsListing.from_settings(services.settings, routes, services.upstream, services.gateway)
        )

    def _log_and_notify(self, record: AccessRecord, started: float) -> None:
        """Every request ends here exactly once: its access line, then its observers."""
        log_access(record, started)
        if record.observers:
            notify_end(record, (time.perf_counter() - started) * 1000.0)

    async def healthz(self, request: Request) -> Response:
        replay = self.s.replay
        if replay is not None and not await replay.reachable():
            # Still 200: without its store the proxy serves (a fault is a miss), so a load balancer
            # should keep it; the body tells monitoring what is wrong.
            return Response(b'{"status":"degraded","state":"unreachable"}', media_type="application/json")
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def chat_completions(self, request: Request) -> Response:
        return await self._handle(request, chat=True)

    async def passthrough(self, request: Request) -> Response:
        return await self._handle(request, chat=False)

    async def models(self, request: Request) -> Response:
        """With a routes file, the models of every route merged; else the upstream's list as is."""
        s = self.s
        if self.listing is None or UPSTREAM_HEADER in request.headers:
            return await self._handle(request, chat=False)
        started = time.perf_counter()
        record = AccessRecord(method=request.method, path=request.url.path)
        bad_request_id = take_request_id(record, request.headers.get(REQUEST_ID_HEADER))
        if s.listeners:
            record.observers = start_observers(s.listeners, record, request.headers.items())
        try:
            if bad_request_id is not None:
                raise bad_request_id
            record.client = s.gateway.authorize(request.headers.items())
            read_controls(request.headers, s.settings)
            merged = await self.listing.get(request.headers.items())
        except ProxyError as exc:
            record.status, record.error = exc.status, exc.code
            self.log(record, started)
            return json_error(exc, record.response_headers)
        headers = dict(record.response_headers)
        if merged.missing:
            headers[MISSING_HEADER] = ", ".join(merged.missing)
        out = merged.body
        record.status, record.bytes_out = 200, len(out)
        self.log(record, started)
        return Response(out, media_type="application/json", headers=headers)

    async def _handle(self, request: Request, *, chat: bool) -> Response:
        started = time.perf_counter()
        record = AccessRecord(
            method=request.method, path=request.url.path, route="chat" if chat else "passthrough"
        )
        bad_request_id = take_request_id(record, request.headers.get(REQUEST_ID_HEADER))
        if self.s.listeners:
            record.observers = start_observers(self.s.listeners, record, request.headers.items())
        try:
            if bad_request_id is not None:
                raise bad_request_id
            return await self._proxy(request, chat, started, record)
        except ClientDisconnect:  # gone while still sending its body: nothing was forwarded
            return client_gone(record, started, self.log)
        except ProxyError as exc:
            return self._error(exc, record, started)
        except Exception:  # the one catch-all before a response starts: a 500, never a text page
            logger.exception("Unexpected error while handling %s %s", request.method, request.url.path)
            failure = ProxyError("The proxy failed to handle this request (an internal error; see its log).")
            return self._error(failure, record, started)

    def _error(self, exc: ProxyError, record: AccessRecord, started: float) -> Response:
        record.status = exc.status
        record.error = exc.code
        self.log(record, started)
        return json_error(exc, record.response_headers)

    async def _proxy(self, request: Request, chat: bool, started: float, record: AccessRecord) -> Response:
        s = self.s
        headers = request.headers
        record.client = s.gateway.authorize(headers.items())
        controls = read_controls(headers, s.settings)
        chosen = headers.get(UPSTREAM_HEADER)
        destination: Destination | None = None
        if chosen is not None:
            s.gateway.check_client_upstream()
            destination = Destination(s.policy.resolve(chosen), client_chosen=True)
            await s.guard.precheck(destination.base_url)  # (through an egress proxy; else at connect)
        elif s.routes is None:
            destination = Destination(s.policy.resolve(None))
        body = await read_body(request, s.settings.max_body_bytes, s.settings.client_body_timeout)
        parsed = parse_chat_body(body) if chat else None
        if destination is None:  # the routes file decides, by the request's model
            assert s.routes is not None
            model = parsed.get("model") if parsed is not None else request_model(request.url.path, body)
            destination = s.routes.destination(model)
            record.upstream_route = destination.route.name if destination.route else None
            if destination.model is not None:
                body = replace_model(parsed, body, destination.model)
        base_url = destination.base_url
        record.upstream_base_url = base_url
        upstream_headers = with_forward_headers(
            s.gateway.upstream_headers(request.headers.items(), destination), record
        )
        if not chat:
            req = UpstreamRequest(
                request.method,
                upstream_url(base_url, request, destination.model),
                filter_headers(upstream_headers, DROP_REQUEST),
                body,
                client_chosen=destination.client_chosen,
            )
            return await self.relay(
                request.receive, req, record, started, extra_headers=record.response_headers, chat=None
            )

        level, trace_mode, trace_format = controls.level, controls.trace, controls.trace_format
        visibility = controls.visibility
        assert parsed is not None
        model = parsed.get("model")
        record.model = model if isinstance(model, str) else None
        record.stream = parsed.get("stream") is True
        record.request_messages = parsed.get("messages")
        record.level_requested = level.value if level is not None else None
        dialect = s.table.match(base_url, model if isinstance(model, str) else None)
        zh = prefers_chinese(headers.get("accept-language"))
        method: str | None = None
        applied: Level | None = None
        content = body
        prepared = None
        if s.replay is not None:  # remembered reasoning back into the history, before the rewrite
            prepared = await s.replay.prepare(parsed, dialect, record.model, headers.items(), record)
            parsed = prepared.body
            content = orjson.dumps(parsed) if prepared.changed else body
        if level is not None:
            result = rewrite_body(parsed, level, dialect, zh=zh)
            applied, method = result.level_applied, result.method
            content = jsonio.dumps(result.body)  # integers above 64 bits kept exact
        extra = thinking_headers(dialect, applied, method) + record.response_headers
        record.provider, record.level = dialect.name, applied.value if applied else "none"
        record.thinking_method = method if applied else None
        req = UpstreamRequest(
            "POST",
            upstream_url(base_url, request),
            [*filter_headers(upstream_headers, DROP_REQUEST_CHAT), ("accept-encoding", "identity")],
            content,
            client_chosen=destination.client_chosen,
        )
        reasoning = ReasoningOptions(
            tags=tuple(dialect.reasoning.tags),
            implicit_open=dialect.reasoning.implicit_open,
            output_field=s.settings.reasoning_field,
            hide=visibility is ReasoningVisibility.HIDE,
        )
        trace = build_trace(
            trace_mode,
            trace_tap(record.observers),
            zh=zh,
            level=applied.value if applied else "none",
            provider=dialect.name,
            method=method if applied else None,
            titles=s.tool_titles,
            output=output_sink(record.observers),
            detailed_tap=tap_needs_detail(record.observers),
            outcome=needs_outcome(record.observers),
        )
        if prepared is not None:
            prepared.annotate(trace)
        capture = prepared.capture if prepared is not None else None
        gate = None
        if s.review is not None:
            s.review.check_request(parsed)
        if s.review is not None and record.stream:
            shown = None if trace_mode is TraceMode.OFF else trace_format
            gate = s.review.stream_gate(shown, zh, s.settings.max_sse_event_bytes)
        chat_context = ChatContext(parsed, reasoning, trace, trace_format, capture, gate=gate, zh=zh)
        return await self.relay(request.receive, req, record, started, extra_headers=extra, chat=chat_context)


def load_routes(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> tuple[RouteTable | None, dict[int, str]]:
    """The routes file the settings name (THINKPROXY_UPSTREAM_BASE_URL as its last route), if any,
    and each route's key from `environ` (default: the process environment over .env). ConfigError
    for a bad file, or in gateway mode for a key variable that is unset."""
    if settings.routes_file is None:
        return None, {}
    table = RouteTable.load(settings.routes_file, settings.upstream_base_url)
    environ = key_environment(os.environ) if environ is None else environ
    return table, resolve_route_keys(table, environ, gateway=settings.gateway_mode)


def create_app(
    settings: Settings | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    table: ProvidersTable | None = None,
    listeners: Sequence[Listener] = (),
    environ: Mapping[str, str] | None = None,
    resolve: Resolve | None = None,
) -> Starlette:
    """Build the proxy app. `transport` lets tests inject respx / httpx.MockTransport; `listeners`
    adds observers (proxy.core.stream.taps) to those the settings turn on; `resolve` is the name resolver
    (tests inject one, so none depends on the machine's DNS)."""
    settings = settings or Settings()
    table = table or ProvidersTable.load(settings.providers_file)
    policy = UpstreamPolicy.from_settings(settings)
    route_table, route_keys = load_routes(settings, environ)
    gateway = GatewayAuth.from_settings(settings, route_keys)
    titles = load_tool_titles(settings.tool_titles_file)
    console = Console.from_settings(settings, titles) if settings.ui else None
    if console is not None:
        listeners = (*listeners, console.feed)
    guard = ConnectGuard(policy, resolve or system_resolve, EgressProxy.from_settings(settings))
    upstream = build_upstream(settings, transport, guard)
    review = ReviewService.from_settings(settings)
    replay = ReplayService.from_settings(settings)
    if replay is not None:
        listeners = (*listeners, replay)
    telemetry = build_telemetry(settings, environ, configured_models(table, route_table))
    services = Services(
        settings,
        table,
        upstream,
        policy,
        gateway,
        guard,
        (*telemetry.listeners, *listeners),
        route_table,
        review,
        tool_titles=titles,
        replay=replay,
    )
    proxy = Proxy(services)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await services.upstream.aclose()
            if services.review is not None:
                await services.review.hub.aclose()
            if console is not None:
                await console.aclose()
            if replay is not None:
                await replay.aclose()
            telemetry.close()

    routes = [
        Route("/healthz", proxy.healthz, methods=["GET", "HEAD"]),
        *telemetry.routes,
        Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
        Route("/v1/models", proxy.models, methods=["GET"]),
        Route(
            "/v1/{path:path}",
            proxy.passthrough,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
        *(console.routes() if console is not None else ()),
    ]
    if review is not None:
        admin = parse_client_keys(
            (k.get_secret_value() for k in settings.admin_keys), "THINKPROXY_ADMIN_KEYS"
        )
        routes += ReviewAPI(review, [*gateway.client_keys, *admin]).routes()
    hosts = HostRule.for_binding(settings.host, settings.allowed_hosts)
    middleware = [Middleware(BrowserGuard, hosts=hosts, cors_origins=settings.cors_origins)]
    if settings.cors_origins:
        middleware.append(Middleware(CORSMiddleware, origins=settings.cors_origins))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.services = services
    app.state.console = console
    return app


def create_served_app(transport: httpx.AsyncBaseTransport | None = None) -> Starlette:
    """The factory `thinkproxy serve` gives uvicorn: it runs in every worker process, so logging is
    configured here, per process, not only in the parent. (`transport`: an in-process upstream,
    for bench/instructions.py, which counts the served app's work.)"""
    from proxy.server.serving import exit_with_parent

    exit_with_parent()  # a worker of `serve --workers N` stops when its parent dies, even by SIGKILL
    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    app = create_app(settings, transport=transport)
    # Everything loaded so far (modules, the providers table, settings) lives as long as the
    # process: moved out of the collector's sight, a full collection scans only what requests
    # made. Without it each one scanned the whole heap, ~90 ms on this machine, stalling every
    # request in flight.
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)
    return app
