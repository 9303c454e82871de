"""CORS for browser front-ends on other origins (`THINKPROXY_CORS_ORIGINS`, default none).

A plain ASGI middleware, installed only when origins are configured. Requests without an `Origin`
header (every SDK, every server-side client) pass straight through; a cross-origin response gets
its `Access-Control-*` headers added to the start message and nothing else is touched, so a
stream's chunks are forwarded as they are.

Preflight: the control headers (X-Thinking-Level, X-Trace, X-Trace-Format, X-Reasoning,
X-Upstream-Base-URL), Authorization, Content-Type, X-Request-Id, the W3C trace context
(traceparent, tracestate) and the OpenAI SDKs' own headers are allowed;
the proxy's response headers (X-Thinking-*, X-Request-Id) are exposed to the page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.controls import CONTROL_HEADERS
from proxy.core.errors import error_body

ALLOWED_HEADERS = CONTROL_HEADERS | {
    "authorization",
    "content-type",
    "accept",
    "accept-language",
    "api-key",
    "x-api-key",
    "openai-organization",
    "openai-project",
    "openai-beta",
    # Documented request headers of the proxy's own: a request id, and W3C trace context.
    "x-request-id",
    "traceparent",
    "tracestate",
}
ALLOWED_HEADER_PREFIXES = ("x-stainless-",)  # the OpenAI SDKs' telemetry headers
ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
EXPOSED_HEADERS = (
    "x-thinking-level-applied, x-thinking-provider, x-thinking-method, x-thinking-replay, "
    "x-thinking-models-missing, x-thinking-level-source, x-thinking-level-rule, x-thinking-level-reason, "
    "x-thinking-policy, x-thinking-upstream-api, x-thinking-omitted-tools, x-request-id"
)
MAX_AGE = "600"


def header_allowed(name: str) -> bool:
    return name in ALLOWED_HEADERS or name.startswith(ALLOWED_HEADER_PREFIXES)


class CORSMiddleware:
    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.any_origin = "*" in origins
        self.origins = frozenset(o.rstrip("/").lower() for o in origins if o != "*")

    def _allowed(self, origin: str) -> bool:
        return self.any_origin or origin.lower() in self.origins

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # (A plain function that decides before anything is awaited: a request without an Origin,
        # or from an origin not allowed, is the inner app's own coroutine, with no frame of this
        # middleware in its await chain; bench/README.md, "Layers off the chat path, second cut".)
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        origin = requested = None
        for name, value in scope["headers"]:
            if name == b"origin":
                origin = value.decode("latin-1")
            elif name == b"access-control-request-method":
                requested = value.decode("latin-1")
        if origin is None:
            return self.app(scope, receive, send)
        if scope["method"] == "OPTIONS" and requested is not None:
            return self._preflight(scope, origin, send)
        if not self._allowed(origin):
            return self.app(
                scope, receive, send
            )  # no CORS headers: the browser keeps the answer from the page
        added = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-expose-headers", EXPOSED_HEADERS.encode()),
            (b"vary", b"Origin"),
        ]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *added]}
            await send(message)

        return self.app(scope, receive, send_with_cors)

    async def _preflight(self, scope: Scope, origin: str, send: Send) -> None:
        asked = ""
        for name, value in scope["headers"]:
            if name == b"access-control-request-headers":
                asked = value.decode("latin-1")
        names = [h.strip().lower() for h in asked.split(",") if h.strip()]
        refused = [h for h in names if not header_allowed(h)]
        if not self._allowed(origin):
            problem = (
                f"Origin {origin!r} is not allowed: add it to THINKPROXY_CORS_ORIGINS (comma-separated)."
            )
        elif refused:
            problem = f"Header(s) not allowed in cross-origin requests: {', '.join(refused)}."
        else:
            problem = None
        if problem is not None:
            body = error_body(problem, "invalid_request_error", "cors_refused")
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"vary", b"Origin")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        headers = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
            (b"access-control-allow-headers", ", ".join(names).encode("latin-1")),
            (b"access-control-max-age", MAX_AGE.encode()),
            (b"vary", b"Origin"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
