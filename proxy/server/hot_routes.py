"""The front doors' POSTs (and the Responses door's socket) straight to their endpoints, past
Starlette's server error middleware, exception middleware and router.

Every request of the three front doors — `POST /v1/chat/completions`, `POST /v1/responses`,
`POST /v1/messages` — is almost all of a proxy's traffic, and each went through the same ~35
Python calls of Starlette before its endpoint ran: the exception middleware, the router matching
the routes in order, the route's `request_response` wrapper, and two wrappers of `send` (one
coroutine each per message the response writes, so per write of a stream as well). None of them
does anything for these endpoints: their paths take no parameters, the proxy's handlers answer
every error themselves (`Proxy.guarded`: an OpenAI- or Anthropic-shaped body, never an exception
out), and no exception handler is registered. So this middleware, the innermost of the app's own
(inside the browser guard and CORS, which keep applying), calls the endpoint with a `Request` and
sends its `Response`, as the route would. Everything else — another method or path, a root path,
a WebSocket — goes the ordinary way, and the routes stay registered (`app.routes` lists them, and
the router's 404, 405 and trailing-slash answers are unchanged).

What Starlette would still have done, kept: an `HTTPException` an endpoint raises instead of
returning its response is answered as the exception middleware answers it (none of the proxy's
endpoints raises one; a dependency might); one raised while a response is being sent is not (none
of the proxy's responses raises one); anything else is answered as the server error middleware
answers it (a plain-text 500 when the response has not started) and propagates to the server,
exactly as through the router. What it costs and buys: bench/README.md ("Starlette's stack off the
front doors' path", "Layers off the chat path, second cut").

`DoorsFirst`, the proxy's Starlette application, takes the doors' POSTs past that server error
middleware as well (Starlette puts it outside the app's own middleware; it wraps `send` for every
request, one coroutine more per message a response writes): a door's POST, and any scope that is
not HTTP (which it passes on untouched), go straight to the app's own middleware; everything else
through it, as before. For those POSTs HotRoutes answers an endpoint's unexpected exception as it
does — a plain-text 500 through the server's own `send` (past CORS, as from outside), then the
exception on to the server — unless the app has a debug page or a 500 handler: then the server
error middleware keeps every request.

The same for a WebSocket upgrade on a path of `sockets` (the Responses door's `/v1/responses`):
its endpoint gets the server's own `send`, with no wrapper of it per event message (bench/README.md,
"The Responses WebSocket mode, counted"); it handles its own errors, and anything it raises reaches
the server as it did through the router (no handler there converts a WebSocket's exception). One
middleware for both, so that an HTTP request passes one layer of them, not two ("Layers off the
chat path, second cut").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]
# Where DoorsFirst leaves the server's own `send` in a door POST's scope: the 500 for an endpoint's
# unexpected exception goes out through it, as the server error middleware sent it from outside
# the app's middleware (no CORS headers on it). HotRoutes takes it out of the scope at once: kept
# there, it would make a reference cycle of every request (scope, send, the server's request cycle).
SERVER_SEND = "thinkproxy.server_send"


class HotRoutes:
    """ASGI middleware: `POST <path>` for each path of `endpoints` to its endpoint directly, and a
    WebSocket upgrade on a path of `sockets` to its ASGI endpoint."""

    def __init__(
        self, app: ASGIApp, endpoints: Mapping[str, Endpoint], sockets: Mapping[str, ASGIApp] | None = None
    ) -> None:
        self.app = app
        self.endpoints = dict(endpoints)
        self.sockets = dict(sockets or {})

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # (A plain function that decides before anything is awaited: what goes on to the router is
        # the router's own coroutine, and a socket's upgrade its endpoint's, with no frame of this
        # middleware left in their await chains; bench/README.md, "Layers off the chat path".)
        kind = scope["type"]
        if kind == "http":
            endpoint = self.endpoints.get(scope["path"])
            if endpoint is not None and scope["method"] == "POST" and not scope.get("root_path"):
                return self._serve(endpoint, scope, receive, send, scope.pop(SERVER_SEND, None))
        elif kind == "websocket":
            socket = self.sockets.get(scope["path"])
            if socket is not None and not scope.get("root_path"):
                return socket(scope, receive, send)
        return self.app(scope, receive, send)

    async def _serve(
        self, endpoint: Endpoint, scope: Scope, receive: Receive, send: Send, server_send: Send | None
    ) -> None:
        try:
            response = await endpoint(Request(scope, receive, send))
        except HTTPException as exc:
            response = http_exception_response(exc)
        except Exception:
            # What Starlette's server error middleware answers, where DoorsFirst took the POST past
            # it (`server_send`: no debug page, no 500 handler); where it is in charge (no
            # `server_send`), it answers, as for any route.
            if server_send is not None:
                await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, server_send)
            raise
        await response(scope, receive, send)


class DoorsFirst(Starlette):
    """The proxy's Starlette application: the front doors' POSTs past its server error middleware
    (see the module docstring). Everything else of Starlette's is as it is."""

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        hot = next((m for m in self.user_middleware if cast(object, m.cls) is HotRoutes), None)
        handled = 500 in self.exception_handlers or Exception in self.exception_handlers
        if hot is None or self.debug or handled or not isinstance(stack, ServerErrorMiddleware):
            return stack
        return _PastServerErrors(stack, cast(Mapping[str, Endpoint], hot.kwargs["endpoints"]))


class _PastServerErrors:
    """The stack's outermost layer: a door's POST and every scope that is not HTTP straight to
    what the server error middleware wraps; any other request through it."""

    def __init__(self, stack: ServerErrorMiddleware, doors: Mapping[str, Endpoint]) -> None:
        self.stack = stack
        self.inner = stack.app
        self.doors = frozenset(doors)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self.inner(scope, receive, send)  # (the server error middleware passes them on)
        if scope["method"] == "POST" and scope["path"] in self.doors and not scope.get("root_path"):
            scope[SERVER_SEND] = send
            return self.inner(scope, receive, send)
        return self.stack(scope, receive, send)


def http_exception_response(exc: HTTPException) -> Response:
    """What Starlette's ExceptionMiddleware answers for an `HTTPException` (its `http_exception`)."""
    if exc.status_code in {204, 304}:
        return Response(status_code=exc.status_code, headers=exc.headers)
    return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
