"""The Starlette application: its routes and the wiring of its services, nothing else.

Routes: `POST /v1/chat/completions` (rewritten, normalized, traced), `POST /v1/responses` and
its stored responses (proxy.server.doors.responses), `POST /v1/messages` and its token count
(proxy.server.doors.messages), `GET /v1/models` (merged across routes),
every other `/v1/*` path forwarded transparently, `GET /healthz`, and the
capabilities' own (metrics, console, reviews). The handlers are proxy.server.handlers; what they
decide is proxy.core.plan.request's.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route, WebSocketRoute

from proxy.console import Console
from proxy.console.cors import CORSMiddleware
from proxy.console.routes import AdminAccess
from proxy.core.config.providers import ProvidersTable
from proxy.core.config.routing import (
    RouteTable,
    key_environment,
    resolve_route_keys,
)
from proxy.core.config.tool_titles import load_tool_titles
from proxy.core.events import Listener
from proxy.core.gateway import GatewayAuth, parse_client_keys
from proxy.policy.api import UsageAPI
from proxy.policy.service import ThinkingPolicy
from proxy.review.api import ReviewAPI
from proxy.review.service import ReviewService
from proxy.server import reload
from proxy.server.access_log import configure_logging
from proxy.server.browser_guard import BrowserGuard, HostRule
from proxy.server.doors.messages import MessagesDoor
from proxy.server.doors.native_owners import refuse_conversations
from proxy.server.doors.responses import ResponsesDoor
from proxy.server.doors.responses_input_items import InputItems
from proxy.server.doors.responses_ws import ResponsesSocket
from proxy.server.egress import ConnectGuard, EgressProxy, Resolve, system_resolve
from proxy.server.handlers import Proxy, Services
from proxy.server.hot_routes import DoorsFirst, HotRoutes
from proxy.server.replay_service import ReplayService
from proxy.server.upstream.factory import build_upstream
from proxy.server.upstream.policy import UpstreamPolicy
from proxy.sessions.api import SessionsAPI
from proxy.sessions.pricing import CostListener, Pricing
from proxy.sessions.service import SessionsService
from proxy.settings import Settings
from proxy.telemetry import build_telemetry
from proxy.telemetry.facts import configured_models

# When the collector looks at the young generation: after this many more container objects made
# than freed (CPython's default is 700). A serving process has ~1,000 objects in flight at any
# time (coroutines, frames, headers of the requests under way); at 700 the collector ran every few
# requests, each time only to find them still alive (scanning and promoting them: ~0.4 ms a
# collection), which was 5.8% of the process's CPU time under non-stream load and 2.9% under
# streaming (timed with gc.callbacks, pinned, 32 connections). At 10,000 it runs when something
# really accumulates (cycles, caches filling), ~50x less often; a young collection then takes ~4 ms.
YOUNG_COLLECTION_THRESHOLD = 10_000
# The methods a `/v1/…` path the proxy does not serve itself is passed through for.
PASSTHROUGH_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


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
    adds observers (proxy.core.events) to those the settings turn on; `resolve` is the name resolver
    (tests inject one, so none depends on the machine's DNS)."""
    settings = settings or Settings()
    table = table or ProvidersTable.load(settings.providers_file)
    policy = UpstreamPolicy.from_settings(settings)
    route_table, route_keys = load_routes(settings, environ)
    gateway = GatewayAuth.from_settings(settings, route_keys)
    titles = load_tool_titles(settings.tool_titles_file)
    # The policy counts each answer in its usage book (and budget) before the console shows it.
    thinking = ThinkingPolicy.from_settings(settings, gateway.client_keys)
    sessions = SessionsService.from_settings(settings)
    # Counted only where someone may read them (admin keys, or the console's page): otherwise the
    # API answers 404 and the per-request cost would buy nothing (docs/sessions.md).
    counted = sessions is not None and bool(settings.ui or settings.admin_keys)
    # Each answer's cost goes on its record first: the usage book, sessions and console read it
    # (with none of them, nobody does: no price is looked up).
    if thinking is not None or counted or settings.ui:
        pricing = Pricing((lambda model: thinking.policy.price_for(model)) if thinking is not None else None)
        listeners = (*listeners, CostListener(pricing))
    if thinking is not None:
        listeners = (*listeners, thinking)
    # The sessions' listener ends before the console's: it names each row's session and client.
    if sessions is not None and counted:
        listeners = (*listeners, sessions.listener)
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
        thinking=thinking,
        describe_changes=counted or console is not None,  # (their readers: sessions, console)
    )
    proxy = Proxy(services)
    if sessions is not None:  # (each key's sessions apart, by the current gateway's keys)
        sessions.listener.scope_of = lambda headers: proxy.s.gateway.session_scope(headers)
    responses = ResponsesDoor(proxy)
    messages = MessagesDoor(proxy)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # SIGHUP reads the policy and routes files again (proxy.server.reload).
        remove = reload.install(
            asyncio.get_running_loop(), lambda: reload.reload_files(proxy, thinking, load_routes)
        )
        try:
            yield
        finally:
            remove()
            if thinking is not None:
                await thinking.aclose()
            await services.upstream.aclose()
            if services.review is not None:
                await services.review.hub.aclose()
            if console is not None:
                await console.aclose()
            if sessions is not None:
                await sessions.aclose()
            if replay is not None:
                await replay.aclose()
            telemetry.close()

    socket = ResponsesSocket(responses)
    routes = [
        Route("/healthz", proxy.healthz, methods=["GET", "HEAD"]),
        *telemetry.routes,
        Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
        Route("/v1/models", proxy.models, methods=["GET"]),
        Route("/v1/responses", responses.create, methods=["POST"]),
        Route("/v1/responses/compact", responses.compact, methods=["POST"]),
        Route("/v1/responses/{response_id}", responses.retrieve, methods=["GET"]),
        Route("/v1/responses/{response_id}", responses.delete, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", InputItems(responses).list, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", responses.cancel, methods=["POST"]),
        WebSocketRoute("/v1/responses", socket),
        Route("/v1/messages", messages.create, methods=["POST"]),
        Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"]),
        # Gateway mode: a conversation object would be every tenant's (proxy.server.doors.native_owners).
        *(
            Route(path, refuse_conversations(proxy), methods=PASSTHROUGH_METHODS)
            for path in ("/v1/conversations", "/v1/conversations/{rest:path}")
            if gateway.enabled
        ),
        Route(
            "/v1/{path:path}",
            proxy.passthrough,
            methods=PASSTHROUGH_METHODS,
        ),
        *(console.routes() if console is not None else ()),
    ]
    if thinking is not None:
        names = [key.name for key in gateway.client_keys if key.name is not None]
        routes += UsageAPI(thinking, AdminAccess.from_settings(settings), names).routes()
    if sessions is not None:
        routes += SessionsAPI(sessions, AdminAccess.from_settings(settings), console=settings.ui).routes()
    if review is not None:
        admin = parse_client_keys(
            (k.get_secret_value() for k in settings.admin_keys), "THINKPROXY_ADMIN_KEYS"
        )
        routes += ReviewAPI(review, [*gateway.client_keys, *admin]).routes()
    hosts = HostRule.for_binding(settings.host, settings.allowed_hosts)
    middleware = [Middleware(BrowserGuard, hosts=hosts, cors_origins=settings.cors_origins)]
    if settings.cors_origins:
        middleware.append(Middleware(CORSMiddleware, origins=settings.cors_origins))
    # (innermost: the front doors' POSTs skip Starlette's exception middleware and router; so an
    # exception handler added to the app would not see them: answer errors in the doors' `guarded`.
    # The Responses socket's upgrade too: its events skip the router's wrapper of `send`.)
    doors = {
        "/v1/chat/completions": proxy.chat_completions,
        "/v1/responses": responses.create,
        "/v1/messages": messages.create,
    }
    middleware.append(Middleware(HotRoutes, endpoints=doors, sockets={"/v1/responses": socket}))
    app = DoorsFirst(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.services = services
    app.state.proxy = proxy
    app.state.console = console
    app.state.sessions = sessions
    app.state.responses_socket = socket  # (its limits, for tests that shorten them)
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
