"""The Starlette application: the only inbound I/O of the proxy.

Routes: `POST /v1/chat/completions` (rewritten, normalized, traced), every other `/v1/*` path
forwarded transparently, `GET /healthz`. Everything the proxy decides is delegated to the pure
modules; this module reads requests, calls the upstream client and writes responses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Send

from proxy import paths
from proxy.access_log import AccessRecord, configure_logging, log_access
from proxy.asgi import ClientWatch, DeadlineExceeded, RelayResponse, UpstreamStalled, body_piece
from proxy.dialects import Dialect, ProvidersTable
from proxy.egress import ConnectGuard, EgressProxy, Resolve, system_resolve
from proxy.errors import BadRequest, PayloadTooLarge, ProxyError, UpstreamTimeout
from proxy.gateway import GatewayAuth
from proxy.levels import (
    CONTROL_HEADERS,
    LEVEL_HEADER,
    REASONING_HEADER,
    TRACE_FORMAT_HEADER,
    TRACE_HEADER,
    UPSTREAM_HEADER,
    Level,
    ReasoningVisibility,
    parse_level,
    parse_reasoning_visibility,
    parse_trace_format,
    parse_trace_mode,
    prefers_chinese,
)
from proxy.observe import Listener, build_trace, notify_end, start_observers, trace_tap
from proxy.pipeline import StreamFailure, StreamPipeline, process_completion
from proxy.reasoning import ReasoningOptions
from proxy.rewrite import rewrite_body
from proxy.settings import Settings
from proxy.trace import TraceBuilder
from proxy.upstream import (
    TRANSPORT_ERRORS,
    Upstream,
    UpstreamRequest,
    UpstreamResponse,
    build_upstream,
    describe_upstream,
    filter_headers,
    read_timeout_error,
    translate_error,
)
from proxy.upstream_policy import UpstreamPolicy

# Request headers never forwarded: the control headers, and what the HTTP client recomputes.
DROP_REQUEST = CONTROL_HEADERS | {"host", "content-length"}
# On chat completions the proxy must read the body, so it asks for it uncompressed.
DROP_REQUEST_CHAT = DROP_REQUEST | {"accept-encoding"}
# The server adds its own Date; the upstream's would make a second one.
DROP_RESPONSE_RELAYED = frozenset({"content-length", "date"})
DROP_RESPONSE_DECODED = frozenset({"content-length", "content-encoding", "date"})
# Upstream headers a client may rely on (rate limits, request ids) are kept with everything else;
# these are the ones the proxy sets on SSE so that no intermediary buffers or caches the stream.
SSE_HEADERS = (("cache-control", "no-cache"), ("x-accel-buffering", "no"))

ELAPSED = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    table: ProvidersTable
    upstream: Upstream
    policy: UpstreamPolicy
    gateway: GatewayAuth
    guard: ConnectGuard
    # Capabilities watching requests (metrics, tracing, console, replay capture): see proxy.observe.
    listeners: tuple[Listener, ...] = ()


def json_error(exc: ProxyError, extra_headers: Sequence[tuple[str, str]] = ()) -> Response:
    headers = dict(extra_headers)
    return Response(exc.body(), status_code=exc.status, media_type="application/json", headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"Request body of {int(declared)} bytes exceeds the limit of {limit} bytes "
            "(THINKPROXY_MAX_BODY_BYTES)."
        )
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise PayloadTooLarge(
                f"Request body exceeds the limit of {limit} bytes (THINKPROXY_MAX_BODY_BYTES)."
            )
        parts.append(part)
    return b"".join(parts)


def upstream_url(base_url: str, request: Request) -> str:
    """The upstream URL for this request, from its raw path and query (see proxy.paths)."""
    scope = request.scope
    raw_path = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
    return paths.upstream_url(base_url, raw_path, scope.get("query_string", b""))


def thinking_headers(
    dialect: Dialect | None, level: Level | None, method: str | None
) -> list[tuple[str, str]]:
    if dialect is None:
        return []
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

    def _log_and_notify(self, record: AccessRecord, started: float) -> None:
        """Every request ends here exactly once: its access line, then its observers."""
        log_access(record, started)
        if record.observers:
            notify_end(record, (time.perf_counter() - started) * 1000.0)

    async def healthz(self, request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def chat_completions(self, request: Request) -> Response:
        return await self._handle(request, chat=True)

    async def passthrough(self, request: Request) -> Response:
        return await self._handle(request, chat=False)

    async def _handle(self, request: Request, *, chat: bool) -> Response:
        started = time.perf_counter()
        record = AccessRecord(
            method=request.method, path=request.url.path, route="chat" if chat else "passthrough"
        )
        if self.s.listeners:
            record.observers = start_observers(self.s.listeners, record, request.headers.items())
        try:
            return await self._proxy(request, chat, started, record)
        except ClientDisconnect:  # gone while still sending its body: nothing was forwarded
            return self._client_gone(record, started)
        except ProxyError as exc:
            record.status = exc.status
            record.error = exc.code
            self.log(record, started)
            return json_error(exc, record.response_headers)

    async def _proxy(self, request: Request, chat: bool, started: float, record: AccessRecord) -> Response:
        s = self.s
        headers = request.headers
        s.gateway.authorize(headers.items())
        chosen = headers.get(UPSTREAM_HEADER)
        base_url = s.policy.resolve(chosen)
        if chosen is not None:
            await s.guard.precheck(base_url)  # (only through an egress proxy; else vetted at connect)
        upstream_headers = s.gateway.upstream_headers(request.headers.items(), base_url)
        if record.forward_headers:
            upstream_headers += record.forward_headers
        body = await read_body(request, s.settings.max_body_bytes)
        if not chat:
            req = UpstreamRequest(
                request.method,
                upstream_url(base_url, request),
                filter_headers(upstream_headers, DROP_REQUEST),
                body,
                client_chosen=chosen is not None,
            )
            return await self._watched(request, req, record, started, [], None)

        level = parse_level(headers.get(LEVEL_HEADER), s.settings.default_thinking_level)
        trace_mode = parse_trace_mode(headers.get(TRACE_HEADER), s.settings.trace)
        trace_format = parse_trace_format(headers.get(TRACE_FORMAT_HEADER), s.settings.trace_format)
        visibility = parse_reasoning_visibility(
            headers.get(REASONING_HEADER), s.settings.reasoning_visibility
        )
        parsed = parse_chat_body(body)
        model = parsed.get("model")
        record.model = model if isinstance(model, str) else None
        record.stream = parsed.get("stream") is True
        record.level_requested = level.value if level is not None else None
        dialect = s.table.match(base_url, model if isinstance(model, str) else None)
        zh = prefers_chinese(headers.get("accept-language"))
        method: str | None = None
        applied: Level | None = None
        content = body
        if level is not None:
            result = rewrite_body(parsed, level, dialect, zh=zh)
            applied, method = result.level_applied, result.method
            content = orjson.dumps(result.body)
        extra = thinking_headers(dialect, applied, method)
        record.provider, record.level = dialect.name, applied.value if applied else "none"
        record.thinking_method = method if applied else None
        record.response_headers = extra
        req = UpstreamRequest(
            "POST",
            upstream_url(base_url, request),
            [*filter_headers(upstream_headers, DROP_REQUEST_CHAT), ("accept-encoding", "identity")],
            content,
            client_chosen=chosen is not None,
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
        )
        chat_context = ChatContext(parsed, reasoning, trace, trace_format)
        return await self._watched(request, req, record, started, extra, chat_context)

    async def _watched(
        self,
        request: Request,
        req: UpstreamRequest,
        record: AccessRecord,
        started: float,
        extra: list[tuple[str, str]],
        chat: ChatContext | None,
    ) -> Response:
        """Relay with a disconnect watch; a streamed response takes the watch over, else it ends here."""
        watch = ClientWatch(request.receive, self.s.settings.read_timeout)
        try:
            response = await self._relay(watch, req, record, started, extra_headers=extra, chat=chat)
        except BaseException:
            watch.close()
            raise
        if not isinstance(response, RelayResponse):
            watch.close()
        return response

    async def _relay(
        self,
        watch: ClientWatch,
        req: UpstreamRequest,
        record: AccessRecord,
        started: float,
        *,
        extra_headers: list[tuple[str, str]],
        chat: ChatContext | None = None,
    ) -> Response:
        upstream = self.s.upstream
        total = self.s.settings.total_timeout
        try:
            response = await watch.run(upstream.open(req), total)
        except DeadlineExceeded:
            raise self._total_timeout(req.url) from None
        except UpstreamStalled:
            raise read_timeout_error(req.url) from None
        if response is None:
            return self._client_gone(record, started)
        watch.last_read = time.perf_counter()
        record.upstream_status = response.status
        content_type = response.header("content-type") or ""
        is_sse = content_type.startswith("text/event-stream")

        def elapsed_ms() -> float:
            return (time.perf_counter() - started) * 1000.0

        async def close(completed: bool) -> None:
            await response.aclose()
            record.status = response.status
            if not completed:
                record.error = record.error or "client_disconnected"
            self.log(record, started)

        ok = 200 <= response.status < 300
        if chat is None or not ok or not (is_sse or content_type.startswith("application/json")):
            # Errors and bodies the proxy does not understand travel back exactly as they came.
            headers = filter_headers(response.headers, DROP_RESPONSE_RELAYED) + extra_headers
            return RelayResponse(
                partial(self._relay_raw, response, req.url, record, watch),
                status_code=response.status,
                headers=headers,
                watch=watch,
                on_close=close,
            )
        if not is_sse:
            try:
                raw = await watch.run(read_all(response, watch), total)
            except DeadlineExceeded:
                raise self._total_timeout(req.url) from None
            except UpstreamStalled:
                raise read_timeout_error(req.url) from None
            except TRANSPORT_ERRORS as exc:
                raise translate_error(exc, req.url) from exc
            finally:
                await response.aclose()
            if raw is None:
                return self._client_gone(record, started)
            out = process_completion(
                raw,
                reasoning=chat.reasoning,
                trace=chat.trace,
                request_body=chat.request_body,
                now_ms=elapsed_ms(),
            )
            headers = filter_headers(response.headers, DROP_RESPONSE_DECODED) + extra_headers
            record.status = response.status
            record.bytes_out = len(out)
            self.log(record, started)
            return Response(out, status_code=response.status, headers=dict(headers))

        pipeline = StreamPipeline(
            reasoning=chat.reasoning,
            trace=chat.trace,
            trace_format=chat.trace_format,
            max_event_bytes=self.s.settings.max_sse_event_bytes,
        )
        headers = (
            filter_headers(response.headers, DROP_RESPONSE_DECODED | {"cache-control"})
            + list(SSE_HEADERS)
            + extra_headers
        )
        return RelayResponse(
            partial(self._relay_stream, response, pipeline, chat, req.url, elapsed_ms, record, watch),
            status_code=response.status,
            headers=headers,
            watch=watch,
            on_close=close,
        )

    def _total_timeout(self, url: str) -> UpstreamTimeout:
        total = self.s.settings.total_timeout
        return UpstreamTimeout(
            f"Upstream {describe_upstream(url)} did not answer within the total timeout of "
            f"{total:g} s (THINKPROXY_TOTAL_TIMEOUT)."
        )

    def _client_gone(self, record: AccessRecord, started: float) -> Response:
        record.status = CLIENT_CLOSED_REQUEST
        record.error = "client_disconnected"
        self.log(record, started)
        return Response(status_code=CLIENT_CLOSED_REQUEST)  # nobody reads it; ASGI wants a response

    async def _relay_raw(
        self, response: UpstreamResponse, url: str, record: AccessRecord, watch: ClientWatch, send: Send
    ) -> None:
        clock = time.perf_counter
        try:
            async for piece in response.reader(decoded=False):
                watch.last_read = clock()
                record.bytes_out += len(piece)
                await send(body_piece(piece))
        except TRANSPORT_ERRORS as exc:
            # Headers are already sent: all that is left is to end the body early.
            record.error = translate_error(exc, url).code
        except asyncio.CancelledError:
            if not watch.stalled:
                raise
            watch.absorb_stall()
            record.error = "upstream_timeout"
            raise UpstreamStalled from None

    async def _relay_stream(
        self,
        response: UpstreamResponse,
        pipeline: StreamPipeline,
        chat: ChatContext,
        url: str,
        elapsed_ms: ELAPSED,
        record: AccessRecord,
        watch: ClientWatch,
        send: Send,
    ) -> None:
        clock = time.perf_counter
        started = clock() - elapsed_ms() / 1000.0
        deadline = started + self.s.settings.total_timeout
        first = pipeline.begin(chat.request_body, elapsed_ms())
        if first:
            await send(body_piece(first))
        err: ProxyError | None = None
        try:
            # (uvicorn's send does not raise when the client is gone, so what this catches is the
            # upstream's failure; the client leaving is the disconnect watch's business.)
            async for piece in response.reader(decoded=True):
                now = clock()  # one clock read per upstream read: this loop runs for every chunk
                watch.last_read = now
                out = pipeline.feed(piece, (now - started) * 1000.0)
                if out:
                    record.bytes_out += len(out)
                    await send(body_piece(out))
                if pipeline.closed:  # e.g. an oversized event ended the stream: stop reading
                    record.error = record.error or "stream_ended_by_proxy"
                    return
                if now > deadline:
                    failure = StreamFailure(
                        f"Upstream stream exceeded the total timeout of {self.s.settings.total_timeout:g} s "
                        "(THINKPROXY_TOTAL_TIMEOUT).",
                        code="upstream_timeout",
                    )
                    record.error = failure.code
                    await send(body_piece(pipeline.fail(failure, elapsed_ms())))
                    return
        except TRANSPORT_ERRORS as exc:
            err = translate_error(exc, url)
        except asyncio.CancelledError:
            if not watch.stalled:
                raise
            watch.absorb_stall()
            err = read_timeout_error(url)
        if err is not None:
            record.error = err.code
            failure = StreamFailure(err.message, type=err.type, code=err.code)
            await send(body_piece(pipeline.fail(failure, elapsed_ms())))
            return
        tail = pipeline.finish(elapsed_ms())
        if tail:
            record.bytes_out += len(tail)
            await send(body_piece(tail))


async def read_all(response: UpstreamResponse, watch: ClientWatch) -> bytes:
    """A whole (decoded) body, each read counting as upstream activity for the read timeout."""
    pieces = []
    async for piece in response.reader(decoded=True):
        watch.last_read = time.perf_counter()
        pieces.append(piece)
    return b"".join(pieces)


CLIENT_CLOSED_REQUEST = 499  # nginx's convention for "the client left before the answer"


@dataclass(frozen=True, slots=True)
class ChatContext:
    request_body: dict[str, Any]
    reasoning: ReasoningOptions
    trace: TraceBuilder | None
    trace_format: Any


def parse_chat_body(body: bytes) -> dict[str, Any]:
    if not body:
        raise BadRequest(
            "Request body is empty: send a JSON object with model and messages.", code="invalid_json"
        )
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"Request body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise BadRequest(
            f"Request body must be a JSON object, got {type(parsed).__name__}.", code="invalid_json"
        )
    return parsed


def create_app(
    settings: Settings | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    table: ProvidersTable | None = None,
    listeners: Sequence[Listener] = (),
    resolve: Resolve | None = None,
) -> Starlette:
    """Build the proxy app. `transport` lets tests inject respx / httpx.MockTransport; `listeners`
    adds observers (proxy.observe) to those the settings turn on; `resolve` is the name resolver
    (tests inject one, so none depends on the machine's DNS)."""
    settings = settings or Settings()
    table = table or ProvidersTable.load(settings.providers_file)
    policy = UpstreamPolicy.from_settings(settings)
    gateway = GatewayAuth.from_settings(settings)
    guard = ConnectGuard(policy, resolve or system_resolve, EgressProxy.from_settings(settings))
    upstream = build_upstream(settings, transport, guard)
    services = Services(settings, table, upstream, policy, gateway, guard, tuple(listeners))
    proxy = Proxy(services)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await services.upstream.aclose()

    routes = [
        Route("/healthz", proxy.healthz, methods=["GET", "HEAD"]),
        Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
        Route(
            "/v1/{path:path}",
            proxy.passthrough,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.services = services
    return app


def create_served_app() -> Starlette:
    """The factory `thinkproxy serve` gives uvicorn: it runs in every worker process, so logging is
    configured here, per process, not only in the parent."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    return create_app(settings)
