"""The simulated upstream as a Starlette app: routes, the request log, and sending fault steps.

The mock's I/O, with `sending` (an answer written step by step). Content comes from `scenarios`,
provider shapes from `dialects`, faults from `faults`, embeddings from `embeddings`; this module
reads requests, records them, and hands the answer to `sending`.

Routes (a `{dialect}` path prefix picks the provider shape; without it, the default dialect):
    POST [/{dialect}]/v1/chat/completions     (also [/{dialect}]/chat/completions)
    POST [/{dialect}]/v1/responses            (also [/{dialect}]/responses): OpenAI's Responses
                                               API where the provider has one (`responses`)
    POST [/{prefix}]/v1/messages              Anthropic's Messages API (proxy.mock.messages)
    GET  [/{dialect}]/v1/models
    POST [/{dialect}]/v1/embeddings
    GET  /_mock/requests, GET /_mock/requests/last, DELETE /_mock/requests (a chat request's
         entry has the usage its answer reported: `reported_usage`)
    GET  /_mock/messages/raw                    the last Messages request's body, as it came
    GET  /                                      what this server offers
"""

from __future__ import annotations

import gzip
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import anyio
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from proxy.core.errors import error_body
from proxy.mock import faults
from proxy.mock.dialects import (
    DIALECTS,
    REGISTRY,
    Counts,
    Dialect,
    Turn,
    count_tokens,
    dialect_named,
    models_payload,
)
from proxy.mock.embeddings import embeddings
from proxy.mock.faults import BadMockHeader, Canned, Fault, Plan, Step
from proxy.mock.messages import messages_routes
from proxy.mock.prompt_cache import PromptCache
from proxy.mock.responses.routes import ResponsesApi
from proxy.mock.responses.socket import serve_socket
from proxy.mock.scenarios import Script, answer, cut, output_limit
from proxy.mock.sending import StepResponse, install_log_filter

__all__ = ["DIALECTS", "MockOptions", "create_mock_app"]

LOG_SIZE = 100
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})
HUGE_MARKER = "\x00huge\x00"  # never produced by a scenario; replaced by the padding


@dataclass(frozen=True)
class MockOptions:
    """Server-wide defaults; `X-Mock-Pace-Ms` and `X-Mock-Chunk-Chars` override per request."""

    default_dialect: str = "deepseek"
    pace_ms: float = 0.0  # delay between streamed chunks
    chunk_chars: int = 4  # roughly how much text per chunk


def create_mock_app(options: MockOptions = MockOptions()) -> Starlette:
    """A new simulated upstream; each app keeps its own request log."""
    if dialect_named(options.default_dialect) is None:
        raise ValueError(f"unknown dialect {options.default_dialect!r}; known: {', '.join(DIALECTS)}")
    if options.pace_ms < 0 or options.chunk_chars < 1:
        raise ValueError("pace_ms must be >= 0 and chunk_chars >= 1")
    install_log_filter()
    mock = _MockUpstream(options)
    routes = [
        Route("/", mock.index, methods=["GET"]),
        Route("/_mock/requests", mock.requests, methods=["GET", "DELETE"]),
        Route("/_mock/requests/last", mock.last_request, methods=["GET"]),
        Route("/v1/chat/completions", mock.chat, methods=["POST"]),
        Route("/chat/completions", mock.chat, methods=["POST"]),
        Route("/v1/responses", mock.responses, methods=["POST"]),
        Route("/responses", mock.responses, methods=["POST"]),
        Route("/v1/models", mock.models, methods=["GET"]),
        Route("/v1/embeddings", mock.embeddings, methods=["POST"]),
        Route("/{dialect}/v1/chat/completions", mock.chat, methods=["POST"]),
        Route("/{dialect}/chat/completions", mock.chat, methods=["POST"]),
        Route("/{dialect}/v1/responses", mock.responses, methods=["POST"]),
        WebSocketRoute("/v1/responses", mock.responses_socket),
        WebSocketRoute("/{dialect}/v1/responses", mock.responses_socket),
        Route("/{dialect}/responses", mock.responses, methods=["POST"]),
        Route("/{dialect}/v1/models", mock.models, methods=["GET"]),
        Route("/{dialect}/v1/embeddings", mock.embeddings, methods=["POST"]),
        *messages_routes(mock._record),
    ]
    app = Starlette(routes=routes)
    app.state.mock = mock
    return app


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, headers=headers, media_type="application/json")


def _mock_error(status: int, message: str, code: str, param: str | None = None) -> Response:
    body = error_body(message, "invalid_request_error", code, param)
    return Response(body, status_code=status, media_type="application/json")


def fingerprint(value: str) -> str:
    """`Bearer sk-abc…wxyz` → `Bearer sk-…wxyz`: enough to tell keys apart, never the key."""
    scheme, _, token = value.strip().rpartition(" ")
    shown = f"{token[:3]}…{token[-4:]}" if len(token) > 8 else "…"
    return f"{scheme} {shown}" if scheme else shown


class _MockUpstream:
    """Endpoints and the per-app request log."""

    def __init__(self, options: MockOptions) -> None:
        self.options = options
        self.log: deque[dict[str, Any]] = deque(maxlen=LOG_SIZE)
        self.prompt_cache = PromptCache()  # (DeepSeek's context caching: proxy.mock.prompt_cache)
        self.responses_api = ResponsesApi()

    # --- the request log ---------------------------------------------------------------------

    def _record(self, request: Request, raw: bytes, dialect: str | None) -> Any:
        """Log the request and return its parsed JSON body (None when there is none or it is not JSON)."""
        body: Any = None
        parsed = True
        if raw:
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                parsed = False
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            value = fingerprint(value) if name in SECRET_HEADERS else value
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.log.append(
            {
                "path": request.url.path,
                "query": request.url.query,
                "method": request.method,
                "dialect": dialect,
                "headers": headers,
                "body": body if parsed else raw.decode("utf-8", "replace"),
            }
        )
        return body if parsed else _UNPARSED

    async def requests(self, request: Request) -> Response:
        if request.method == "DELETE":
            cleared = len(self.log)
            self.log.clear()
            return _json({"cleared": cleared})
        return _json(list(self.log))

    async def last_request(self, request: Request) -> Response:
        if not self.log:
            return _mock_error(404, "No request received yet.", "mock_no_requests")
        return _json(self.log[-1])

    async def index(self, request: Request) -> Response:
        return _json(
            {
                "service": "thinkproxy simulated upstream",
                "default_dialect": self.options.default_dialect,
                "dialects": list(DIALECTS),
                "routes": [
                    "POST [/{dialect}]/v1/chat/completions",
                    "POST [/{dialect}]/v1/responses",
                    "GET [/{dialect}]/v1/responses (WebSocket mode, where the provider serves it)",
                    "GET [/{dialect}]/v1/models",
                    "POST [/{dialect}]/v1/embeddings",
                    "GET|DELETE /_mock/requests",
                    "GET /_mock/requests/last",
                ],
                "responses_dialects": [n for n in DIALECTS if REGISTRY[n].responses_api is not None],
                "faults": [f.value for f in Fault],
                "headers": [
                    faults.FAULT_HEADER,
                    faults.PACE_HEADER,
                    faults.CHUNK_HEADER,
                    faults.STALL_HEADER,
                    faults.HUGE_HEADER,
                    faults.DELAY_HEADER,
                ],
            }
        )

    # --- models and embeddings ---------------------------------------------------------------

    def _dialect(self, request: Request) -> Dialect | None:
        return dialect_named(request.path_params.get("dialect", self.options.default_dialect))

    def _unknown_dialect(self, request: Request) -> Response:
        name = request.path_params.get("dialect", "")
        message = f"Unknown mock dialect {name!r}; known: {', '.join(DIALECTS)}."
        return _mock_error(404, message, "mock_unknown_dialect")

    async def models(self, request: Request) -> Response:
        dialect = self._dialect(request)
        self._record(request, b"", dialect.name if dialect else None)
        if dialect is None:
            return self._unknown_dialect(request)
        return _json(models_payload(dialect))

    async def embeddings(self, request: Request) -> Response:
        dialect = self._dialect(request)
        body = self._record(request, await request.body(), dialect.name if dialect else None)
        if dialect is None:
            return self._unknown_dialect(request)
        if not isinstance(body, dict) or "input" not in body:
            return Response(
                dialect.error_body("'input' is a required property", param="input"),
                status_code=400,
                media_type="application/json",
            )
        return _json(embeddings(body))

    # --- what every answer starts with ---------------------------------------------------------

    async def _arrive(self, request: Request) -> tuple[Dialect, Any] | Response:
        """Log the request; its dialect and parsed body (or `_UNPARSED`), or the mock's 404 for a
        dialect prefix it does not know."""
        dialect = self._dialect(request)
        body = self._record(request, await request.body(), dialect.name if dialect else None)
        if dialect is None:
            return self._unknown_dialect(request)
        return dialect, body

    def _admit(self, request: Request, dialect: Dialect) -> tuple[Plan, str] | Response:
        """The fault plan and a request id, or the status fault that replaces the answer."""
        try:
            plan = faults.parse_plan(
                request.headers, pace_ms=self.options.pace_ms, chunk_chars=self.options.chunk_chars
            )
        except BadMockHeader as exc:
            return _mock_error(400, str(exc), "mock_bad_header", param=exc.header)
        request_id = faults.new_request_id()
        canned = self._canned(dialect, plan, request_id)
        if canned is not None:
            return Response(canned.body, canned.status, dict(canned.headers), media_type=canned.media_type)
        return plan, request_id

    # --- the Responses API -------------------------------------------------------------------

    async def responses(self, request: Request) -> Response:
        arrived = await self._arrive(request)
        if isinstance(arrived, Response):
            return arrived
        dialect, body = arrived
        traits = dialect.responses_api
        if traits is None:  # the provider has no such route: its own 404, before any fault
            missing = dialect.unknown_route(request.method, request.url.path)
            return Response(missing.body, missing.status, media_type=missing.media_type)
        admitted = self._admit(request, dialect)
        if isinstance(admitted, Response):
            return admitted
        plan, request_id = admitted
        reply = self.responses_api.reply(dialect, traits, None if body is _UNPARSED else body, plan)
        headers = {"x-request-id": request_id}
        if reply.status != 200:
            return Response(reply.body, reply.status, headers, media_type=reply.media_type)
        if plan.has(Fault.GZIP):
            headers["content-encoding"] = "gzip"
        if reply.streaming:
            headers["cache-control"] = "no-cache"
        elif plan.has(Fault.SLOW_FIRST):
            await anyio.sleep(plan.delay_s)  # as on chat: a slow non-stream answer is silent
        if reply.steps is not None:
            return StepResponse(_finish(reply.steps, plan), headers=headers, media_type=reply.media_type)
        payload = gzip.compress(reply.body, mtime=0) if plan.has(Fault.GZIP) else reply.body
        return Response(payload, 200, headers, media_type=reply.media_type)

    async def responses_socket(self, websocket: WebSocket) -> None:
        """`GET [/{dialect}]/v1/responses` upgraded: the WebSocket mode (proxy.mock.responses.socket)."""
        name = websocket.path_params.get("dialect", self.options.default_dialect)
        await serve_socket(
            websocket,
            self.responses_api,
            dialect_named(name),
            self.options.pace_ms,
            self.options.chunk_chars,
            self._record_socket,
            self._canned,
        )

    def _record_socket(self, websocket: WebSocket, method: str, body: Any) -> None:
        """A WebSocket's upgrade (`GET`), message or end (`WS`) in the request log."""
        headers: dict[str, str] = {}
        for name, value in websocket.headers.items():
            value = fingerprint(value) if name in SECRET_HEADERS else value
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.log.append(
            {
                "path": websocket.url.path,
                "query": websocket.url.query,
                "method": method,
                "dialect": websocket.path_params.get("dialect", self.options.default_dialect),
                "headers": headers,
                "body": body,
                "websocket": True,
            }
        )

    # --- chat completions --------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        arrived = await self._arrive(request)
        if isinstance(arrived, Response):
            return arrived
        dialect, body = arrived
        admitted = self._admit(request, dialect)
        if isinstance(admitted, Response):
            return admitted
        plan, request_id = admitted
        headers = {"x-request-id": request_id}

        problem = _shape_problem(body)
        if problem is not None:
            return Response(dialect.error_body(problem), 400, headers, media_type="application/json")
        depth = dialect.depth(body)
        rejection = dialect.check(body, depth)
        if rejection is not None:
            return Response(rejection.body, rejection.status, headers, media_type="application/json")

        script, _ = cut(answer(body, depth), output_limit(body))
        if plan.has(Fault.REASONING_IN_CONTENT) and script.reasoning:
            script = replace(script, reasoning="", content=f"{script.reasoning}\n\n{script.content}")
        streaming = body.get("stream") is True
        stream_options = body.get("stream_options")
        created = int(time.time())
        turn = Turn(
            id=dialect.new_id(created),
            created=created,
            model=str(body.get("model") or dialect.default_model),
            body=body,
            depth=depth,
            include_usage=streaming
            and isinstance(stream_options, dict)
            and stream_options.get("include_usage") is True,
            chunk_chars=plan.chunk_chars,
        )
        counts = count_tokens(body, script)
        if dialect.caches_prompts:
            counts = replace(counts, cached=min(self.prompt_cache.hit(body), counts.prompt))
        if not streaming or turn.include_usage:
            # What the answer reports, in the request's log entry (the last: nothing awaited since
            # it was logged), so tests compare the proxy's accounting with what it was told.
            self.log[-1]["reported_usage"] = dialect.usage(counts)
        if plan.has(Fault.GZIP):
            headers["content-encoding"] = "gzip"
        if streaming:
            return _stream(dialect, script, turn, counts, plan, headers)
        if plan.has(Fault.SLOW_FIRST):
            await anyio.sleep(plan.delay_s)  # no headers either: a slow non-stream answer is silent
        return _complete(dialect, script, turn, counts, plan, headers)

    @staticmethod
    def _canned(dialect: Dialect, plan: Plan, request_id: str) -> Canned | None:
        if plan.has(Fault.BAD_REQUEST):
            rejection = dialect.sample_rejection()
            return Canned(rejection.status, {"x-request-id": request_id}, rejection.body)
        if plan.has(Fault.RATE_LIMITED):
            return faults.rate_limited(request_id)
        if plan.has(Fault.SERVER_ERROR):
            return faults.server_error(request_id)
        if plan.has(Fault.NON_SSE):
            return faults.non_sse(request_id)
        return None


def _stream(
    dialect: Dialect, script: Script, turn: Turn, counts: Counts, plan: Plan, headers: dict[str, str]
) -> Response:
    frames = dialect.frames(script, turn, counts)
    huge: Iterable[bytes] = ()
    if plan.has(Fault.HUGE_LINE):
        # A content chunk whose data line (without its blank-line end) is X-Mock-Huge-Bytes long.
        template = dialect.content_frame(turn, HUGE_MARKER)
        huge = faults.padded(template, _marker_bytes(), plan.huge_bytes + 2)
    tail = 2 + (1 if turn.include_usage and dialect.usage_chunk else 0)  # finish (+ usage) + [DONE]
    steps = faults.stream_steps(frames, plan, huge_at=len(frames) - tail, huge=huge)
    headers["cache-control"] = "no-cache"
    return StepResponse(_finish(steps, plan), headers=headers, media_type="text/event-stream")


def _complete(
    dialect: Dialect, script: Script, turn: Turn, counts: Counts, plan: Plan, headers: dict[str, str]
) -> Response:
    if plan.has(Fault.HUGE_LINE):
        template = orjson.dumps(dialect.completion(Script(script.reasoning, HUGE_MARKER), turn, counts))
        pieces = faults.padded(template, _marker_bytes(), plan.huge_bytes)
        return StepResponse(_finish(pieces, plan), headers=headers, media_type="application/json")
    payload = orjson.dumps(dialect.completion(script, turn, counts))
    if plan.has(Fault.INVALID_JSON):
        payload = payload[: len(payload) // 2]
    if plan.has(Fault.DISCONNECT) or plan.has(Fault.STALL):
        steps = faults.body_steps(payload, plan)
        return StepResponse(_finish(steps, plan), headers=headers, media_type="application/json")
    if plan.has(Fault.GZIP):
        payload = gzip.compress(payload, mtime=0)
    return Response(payload, 200, headers, media_type="application/json")


_UNPARSED = object()


def _shape_problem(body: Any) -> str | None:
    """What a provider would refuse before looking at the content, or None."""
    if body is _UNPARSED:
        return "Failed to parse the request body as JSON."
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty array."
    return None


def _marker_bytes() -> bytes:
    return orjson.dumps(HUGE_MARKER)[1:-1]  # as it appears inside a JSON string


def _finish(steps: Iterable[Step], plan: Plan) -> Iterable[Step]:
    """Unpaced bytes go out in few sends; gzip last so it compresses what is actually sent."""
    sent = faults.coalesce(steps)
    return faults.gzip_steps(sent) if plan.has(Fault.GZIP) else sent
