"""CORS (THINKPROXY_CORS_ORIGINS): none by default; preflight for the control headers from an
allowed origin; the X-Thinking-* response headers exposed; requests without Origin untouched."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.server.app import create_app
from tests.helpers import chat_scope, make_settings, passes_straight_through

PREFLIGHT = [(b"origin", b"https://app.example"), (b"access-control-request-method", b"POST")]
CONTROL = (
    "x-thinking-level, x-trace, x-trace-format, x-reasoning, x-upstream-base-url, authorization, content-type"
)


def app_with(**overrides: Any) -> httpx.AsyncClient:
    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "id": "c",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"content": "hi"}}],
            },
        )

    app = create_app(make_settings(**overrides), transport=httpx.MockTransport(upstream))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy.test")


def preflight(origin: str, headers: str = CONTROL) -> dict[str, str]:
    return {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": headers,
    }


async def test_no_cors_by_default() -> None:
    async with app_with() as client:
        r = await client.options("/v1/chat/completions", headers=preflight("https://app.example"))
        assert "access-control-allow-origin" not in r.headers


async def test_preflight_allows_the_control_headers_for_an_allowed_origin() -> None:
    async with app_with(cors_origins=["https://app.example"]) as client:
        r = await client.options("/v1/chat/completions", headers=preflight("https://app.example"))
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "https://app.example"
    allowed = {h.strip() for h in r.headers["access-control-allow-headers"].split(",")}
    assert allowed >= {h.strip() for h in CONTROL.split(",")}
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["vary"] == "Origin"


async def test_preflight_refuses_other_origins_and_unknown_headers_with_a_reason() -> None:
    async with app_with(cors_origins=["https://app.example"]) as client:
        other = await client.options("/v1/chat/completions", headers=preflight("https://evil.example"))
        odd = await client.options(
            "/v1/chat/completions", headers=preflight("https://app.example", "x-thinking-level, x-odd")
        )
    assert other.status_code == 400 and "THINKPROXY_CORS_ORIGINS" in other.json()["error"]["message"]
    assert "access-control-allow-origin" not in other.headers
    assert odd.status_code == 400 and "x-odd" in odd.json()["error"]["message"]


async def test_cross_origin_response_exposes_the_thinking_headers() -> None:
    async with app_with(cors_origins=["https://app.example"]) as client:
        r = await client.post(
            "/v1/chat/completions",
            json={"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]},
            headers={"origin": "https://app.example", "x-thinking-level": "deep"},
        )
        plain = await client.post(
            "/v1/chat/completions",
            json={"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-thinking-level": "deep"},
        )
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    exposed = r.headers["access-control-expose-headers"]
    assert "x-thinking-level-applied" in exposed and "x-thinking-provider" in exposed
    # the level's story: where it came from, the auto rule that chose it, why it was not applied
    for name in ("x-thinking-level-source", "x-thinking-level-rule", "x-thinking-level-reason"):
        assert name in exposed, name
    assert r.headers["x-thinking-level-applied"] == "deep"
    assert "access-control-allow-origin" not in plain.headers  # no Origin: nothing added


async def test_wildcard_origin() -> None:
    async with app_with(cors_origins=["*"]) as client:
        r = await client.options("/v1/models", headers=preflight("http://localhost:5173", "authorization"))
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == "http://localhost:5173"


async def test_preflight_allows_the_documented_request_id_and_trace_context() -> None:
    async with app_with(cors_origins=["https://app.example"]) as client:
        r = await client.options(
            "/v1/chat/completions",
            headers=preflight("https://app.example", f"{CONTROL}, x-request-id, traceparent, tracestate"),
        )
    assert r.status_code == 204, r.text
    allowed = {h.strip() for h in r.headers["access-control-allow-headers"].split(",")}
    assert {"x-request-id", "traceparent", "tracestate"} <= allowed


def test_a_request_without_origin_is_the_inner_apps_own_coroutine() -> None:
    """A request with no Origin (every SDK) passes with nothing of CORS's on its way: the inner
    app's coroutine is the request's (one from an allowed origin too, with CORS's `send`: above)."""
    from proxy.console.cors import CORSMiddleware

    cors = lambda app: CORSMiddleware(app, ["https://app.example"])  # noqa: E731
    post = chat_scope([(b"host", b"proxy.test"), (b"content-type", b"application/json")])
    assert passes_straight_through(cors, post)
    assert passes_straight_through(cors, {**post, "headers": [(b"origin", b"https://evil.example")]})
    assert passes_straight_through(cors, {"type": "websocket", "path": "/v1/responses", "headers": []})
    assert not passes_straight_through(cors, {**post, "method": "OPTIONS", "headers": PREFLIGHT})
