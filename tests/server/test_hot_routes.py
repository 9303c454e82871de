"""HotRoutes: the front doors' POSTs reach their endpoints past the router, and answer exactly as
they would through it — errors included — while everything else still goes through the router."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from proxy.console.cors import CORSMiddleware
from proxy.server.hot_routes import SERVER_SEND, DoorsFirst, HotRoutes
from tests.helpers import chat_scope, make_settings, passes_straight_through


async def _echo(request: Request) -> Response:
    body = await request.body()
    return JSONResponse(
        {"path": request.url.path, "bytes": len(body), "via": request.scope.get("router") is not None},
        headers={"x-seen": request.headers.get("x-probe", "")},
    )


async def _teapot(request: Request) -> Response:
    raise HTTPException(418, "short and stout", headers={"x-why": "tea"})


async def _empty(request: Request) -> Response:
    raise HTTPException(204)


async def _broken(request: Request) -> Response:
    raise RuntimeError("boom")


ENDPOINTS: dict[str, Any] = {"/echo": _echo, "/teapot": _teapot, "/empty": _empty, "/broken": _broken}


def _app(hot: bool, *, doors_first: bool = False, cors: bool = False) -> Starlette:
    """The endpoints routed, or (`hot`) served by HotRoutes; `doors_first`: in a DoorsFirst app (the
    doors' POSTs past the server error middleware too); `cors`: behind CORS for app.example."""
    routes = [Route(path, endpoint, methods=["POST"]) for path, endpoint in ENDPOINTS.items()]
    middleware = [Middleware(CORSMiddleware, origins=["https://app.example"])] if cors else []
    if hot:
        middleware.append(Middleware(HotRoutes, endpoints=ENDPOINTS))
    return (DoorsFirst if doors_first else Starlette)(routes=routes, middleware=middleware)


def _answer(
    client: TestClient, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    response = client.request(method, path, content=b"12345", headers={"x-probe": "p", **(headers or {})})
    headers = {k: v for k, v in response.headers.items() if k != "content-length" or response.content}
    return response.status_code, response.content, headers


@pytest.mark.parametrize("path", ["/teapot", "/empty", "/broken"])
@pytest.mark.parametrize(("doors_first", "cors"), [(False, False), (True, False), (True, True)])
def test_an_endpoints_errors_are_answered_as_through_the_router(
    path: str, doors_first: bool, cors: bool
) -> None:
    """Side by side, behind CORS too (an origin it answers for: the server error middleware's 500,
    outermost, never carried CORS's headers, and still does not)."""
    origin = {"origin": "https://app.example"} if cors else {}
    with (
        TestClient(_app(True, doors_first=doors_first, cors=cors), raise_server_exceptions=False) as hot,
        TestClient(_app(False, cors=cors), raise_server_exceptions=False) as routed,
    ):
        assert _answer(hot, "POST", path, origin) == _answer(routed, "POST", path, origin)
        assert _answer(hot, "POST", path, origin)[0] in (418, 204, 500)
    if path == "/broken":  # (and the exception reaches the server, as through the router)
        with (
            TestClient(_app(True, doors_first=doors_first, cors=cors)) as client,
            pytest.raises(RuntimeError),
        ):
            client.post(path, headers=origin)


def test_a_post_reaches_its_endpoint_without_the_router() -> None:
    with TestClient(_app(hot=True)) as client:
        status, body, headers = _answer(client, "POST", "/echo")
    assert status == 200
    assert headers["x-seen"] == "p"
    # The router sets scope["router"] on the way through: the endpoint ran without it.
    assert body == b'{"path":"/echo","bytes":5,"via":false}'


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/echo", 405), ("PUT", "/teapot", 405), ("POST", "/elsewhere", 404), ("POST", "/echo/", 307)],
)
def test_other_methods_and_paths_get_the_routers_answer(method: str, path: str, status: int) -> None:
    with (
        TestClient(_app(hot=True), follow_redirects=False) as hot,
        TestClient(_app(hot=False), follow_redirects=False) as routed,
    ):
        assert _answer(hot, method, path) == _answer(routed, method, path)
        assert _answer(hot, method, path)[0] == status


def test_under_a_root_path_the_router_serves() -> None:
    with TestClient(_app(hot=True), root_path="/prefix") as client:
        response = client.post("/prefix/echo", content=b"1")
    assert response.status_code == 200
    assert response.json()["via"] is True


@pytest.mark.parametrize("answering", ["debug page", "500 handler"])
def test_where_the_server_error_middleware_answers_an_endpoints_crash_it_still_does(answering: str) -> None:
    """A DoorsFirst app with a debug page or a 500 handler keeps the server error middleware for
    every request: its answer to a door's crash, not HotRoutes' plain 500, side by side with the
    router's."""

    async def on_500(request: Request, exc: Exception) -> Response:
        return JSONResponse({"handled": type(exc).__name__}, status_code=500)

    def app(hot: bool) -> Starlette:
        routes = [Route("/broken", _broken, methods=["POST"])]
        middleware = [Middleware(HotRoutes, endpoints=ENDPOINTS)] if hot else []
        if answering == "debug page":
            return (DoorsFirst if hot else Starlette)(debug=True, routes=routes, middleware=middleware)
        handlers = {500: on_500}
        return (DoorsFirst if hot else Starlette)(
            routes=routes, middleware=middleware, exception_handlers=handlers
        )

    with (
        TestClient(app(True), raise_server_exceptions=False) as hot,
        TestClient(app(False), raise_server_exceptions=False) as routed,
    ):
        got, expected = hot.post("/broken"), routed.post("/broken")
    assert (got.status_code, got.headers["content-type"]) == (
        expected.status_code,
        expected.headers["content-type"],
    )
    if answering == "debug page":
        assert "RuntimeError" in got.text and "RuntimeError" in expected.text  # (the traceback page)
    else:
        assert got.json() == expected.json() == {"handled": "RuntimeError"}


def test_a_refused_doors_post_leaves_no_server_send_in_its_scope() -> None:
    """The browser guard refuses a cross-site POST before HotRoutes (which takes the server's own
    `send` out of a door POST's scope) sees it: the guard takes it out too (else scope and send make
    a reference cycle of every refused request)."""
    import asyncio

    from proxy.server.app import create_app

    stack = create_app(make_settings()).build_middleware_stack()
    scope = chat_scope([(b"host", b"127.0.0.1:8000"), (b"origin", b"https://evil.example")])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(stack(scope, receive, send))
    assert sent[0]["status"] == 403
    assert SERVER_SEND not in scope


def test_the_proxys_doors_are_served_past_the_router_behind_the_browser_guard_and_cors() -> None:
    from proxy.server.app import create_app

    app = create_app(make_settings(cors_origins=["https://app.example"]))
    assert isinstance(app, DoorsFirst)
    kinds = [getattr(m.cls, "__name__", "") for m in app.user_middleware]
    assert kinds[-1] == "HotRoutes"  # the innermost: the guard and CORS still see every request
    assert kinds.index("BrowserGuard") < kinds.index("CORSMiddleware") < kinds.index("HotRoutes")
    hot = next(m for m in app.user_middleware if m.cls is HotRoutes)
    assert set(hot.kwargs["endpoints"]) == {"/v1/chat/completions", "/v1/responses", "/v1/messages"}
    assert set(hot.kwargs["sockets"]) == {"/v1/responses"}  # (the Responses door's WebSocket mode)
    with TestClient(app) as client:
        # A cross-site write is still refused by the guard, CORS still answers for an allowed origin.
        refused = client.post("/v1/chat/completions", json={}, headers={"Origin": "https://evil.example"})
        assert refused.status_code == 403
        allowed = client.post("/v1/chat/completions", content=b"{", headers={"Origin": "https://app.example"})
        assert allowed.headers.get("access-control-allow-origin") == "https://app.example"
        assert allowed.status_code == 400  # the door's own answer to a body that is not JSON
        assert allowed.json()["error"]["type"] == "invalid_request_error"


async def test_a_socket_upgrade_on_its_path_goes_straight_to_its_endpoint() -> None:
    """A WebSocket path of `sockets` (the Responses door's `/v1/responses`): its upgrade reaches the
    endpoint with the server's own `send` (no wrapper of it per message); any other scope, an HTTP
    request on that path, and the upgrade under a root path, go on to the app (the router, where the
    route is registered too)."""
    reached: list[tuple[str, str, object]] = []

    async def endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(("endpoint", scope["path"], send))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(("app", scope.get("path", ""), send))

    async def receive() -> dict[str, Any]:
        return {}

    async def send(message: dict[str, Any]) -> None:
        return None

    hot = HotRoutes(app, {}, sockets={"/v1/responses": endpoint})
    await hot({"type": "websocket", "path": "/v1/responses"}, receive, send)
    await hot({"type": "http", "method": "POST", "path": "/v1/responses"}, receive, send)
    await hot({"type": "websocket", "path": "/v1/other"}, receive, send)
    await hot({"type": "websocket", "path": "/api/v1/responses", "root_path": "/api"}, receive, send)
    await hot({"type": "lifespan"}, receive, send)
    assert reached == [
        ("endpoint", "/v1/responses", send),
        ("app", "/v1/responses", send),
        ("app", "/v1/other", send),
        ("app", "/api/v1/responses", send),
        ("app", "", send),
    ]


def test_what_it_does_not_serve_is_the_apps_own_coroutine_and_a_socket_the_endpoints() -> None:
    """Nothing of HotRoutes' stays on the way of what goes on to the router, nor of the socket's
    upgrade (its endpoint's coroutine is the connection's, for its whole life)."""
    post = chat_scope([(b"host", b"proxy.test")])
    routes = lambda app: HotRoutes(app, {"/other": _echo})  # noqa: E731
    assert passes_straight_through(routes, post)
    assert passes_straight_through(routes, {**post, "method": "GET", "path": "/other"})
    assert passes_straight_through(routes, {"type": "lifespan"})
    assert not passes_straight_through(routes, {**post, "path": "/other"})  # (served: its own frame)
    sockets = lambda app: HotRoutes(Starlette(), {}, sockets={"/v1/responses": app})  # noqa: E731
    assert passes_straight_through(sockets, {"type": "websocket", "path": "/v1/responses"})


def test_a_doors_post_and_a_socket_pass_no_server_error_middleware_everything_else_does() -> None:
    """In a DoorsFirst app, a front door's POST and any scope that is not HTTP go straight to the
    app's own middleware (the server error middleware would only pass the latter on, and answers
    nothing for the former: HotRoutes does, as it would); any other request goes through it."""
    from starlette.middleware.errors import ServerErrorMiddleware

    stack = _app(True, doors_first=True, cors=True).build_middleware_stack()
    own = stack.inner  # type: ignore[attr-defined]
    post = chat_scope([(b"host", b"proxy.test")])

    def first_frame(scope: dict[str, Any]) -> Any:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request"}

        async def send(message: dict[str, Any]) -> None:
            return None

        scope = dict(scope)
        coroutine = stack(scope, receive, send)
        coroutine.close()
        # (the server's `send` left for HotRoutes is taken out again: no cycle of scope and send)
        assert SERVER_SEND not in scope
        return coroutine.cr_code

    assert first_frame({**post, "path": "/echo"}) is HotRoutes._serve.__code__
    through_it = ServerErrorMiddleware.__call__.__code__
    assert first_frame({**post, "path": "/echo", "method": "GET"}) is through_it
    assert first_frame({**post, "path": "/elsewhere"}) is through_it
    assert first_frame({**post, "path": "/echo", "root_path": "/api"}) is through_it
    assert first_frame({"type": "websocket", "path": "/echo", "headers": []}) is not through_it
    assert isinstance(own, CORSMiddleware)
    # (with a debug page or a 500 handler, the server error middleware answers otherwise: kept for all)
    debug = DoorsFirst(debug=True, middleware=[Middleware(HotRoutes, endpoints=ENDPOINTS)])
    assert isinstance(debug.build_middleware_stack(), ServerErrorMiddleware)
