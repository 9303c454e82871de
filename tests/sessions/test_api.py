"""The sessions API end to end through the app, with an upstream that reports known usage:
requests grouped by what clients send, their token sums and cost equal to the upstream's counts
priced by genai-prices, Responses chains, tenants kept apart, filters, pages, the export, stats,
and the session id never sent upstream by the proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from genai_prices import Usage, calc_price

from proxy.server.app import create_app
from tests.helpers import Recorder, make_settings

MODEL = "deepseek-v4-pro"
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 200,
    "total_tokens": 1200,
    "prompt_tokens_details": {"cached_tokens": 800},
    "completion_tokens_details": {"reasoning_tokens": 50},
}
SESSION_HEADERS = {"x-session-id", "session-id", "x-claude-code-session-id", "x-codex-turn-metadata"}


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": USAGE,
        },
    )


@asynccontextmanager
async def proxy(recorder: Recorder | None = None, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    # (the console on: without admin keys it is what serves the sessions API to a caller without a key)
    settings = make_settings(**{"ui": not overrides.get("client_keys"), **overrides})
    app = create_app(settings, transport=httpx.MockTransport(recorder or Recorder(answer)))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client,
    ):
        yield client


def chat(**headers: str) -> dict[str, Any]:
    return {
        "json": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        "headers": headers,
    }


def expected_cost(at_ms: int) -> float:
    usage = Usage(input_tokens=1000, cache_read_tokens=800, output_tokens=200)
    when = datetime.fromtimestamp(at_ms / 1000, UTC)
    return float(calc_price(usage, MODEL, provider_id="deepseek", genai_request_timestamp=when).total_price)


async def test_one_session_sums_what_the_upstream_reported_and_prices_it() -> None:
    async with proxy() as client:
        for _ in range(3):
            r = await client.post(
                "/v1/chat/completions", **chat(**{"X-Session-Id": "task-1", "User-Agent": "curl/8"})
            )
            assert r.status_code == 200
        await client.post("/v1/chat/completions", **chat(**{"X-Session-Id": "task-2"}))
        listing = (await client.get("/thinkproxy/sessions")).json()
        assert [s["id"] for s in listing["sessions"]] == ["task-2", "task-1"]
        one = (await client.get("/thinkproxy/sessions/task-1")).json()
    assert one["source"] == "header" and one["client"] == "curl" and one["requests"] == 3
    assert one["tokens"] == {"input": 3000, "cached": 2400, "reasoning": 150, "output": 600}
    assert one["cache_hit_ratio"] == 0.8 and one["doors"] == ["chat"] and one["models"] == [MODEL]
    assert [r["tokens"]["cached"] for r in one["details"]] == [800, 800, 800]
    assert one["cost_usd"] == pytest.approx(sum(expected_cost(r["at"]) for r in one["details"]))
    assert one["cost_usd"] > 0 and one["cost_complete"] is True
    first = one["details"][0]
    assert first["cost_usd"] == pytest.approx(expected_cost(first["at"]))
    # Not streamed: nothing timed the first token or the thinking.
    assert first["ttft_ms"] is None and first["thinking_ms"] is None and first["stream"] is False


async def test_the_proxy_never_sends_a_session_id_upstream_on_its_own() -> None:
    recorder = Recorder(answer)
    async with proxy(recorder) as client:
        await client.post("/v1/chat/completions", **chat())
        await client.post(
            "/v1/messages",
            json={"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
        )
        await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
        assert len((await client.get("/thinkproxy/sessions")).json()["sessions"]) == 3
    assert len(recorder.requests) == 3
    for sent in recorder.requests:
        assert not SESSION_HEADERS & {name.lower() for name in sent.headers}


async def test_claude_code_and_codex_headers_and_every_door() -> None:
    claude = {"X-Claude-Code-Session-Id": "cc-1", "User-Agent": "claude-cli/2.1.332 (external, sdk-cli)"}
    codex = {"session-id": "019a-codex", "user-agent": "codex_exec/0.171.0 (Debian 12.0.0; x86_64)"}
    async with proxy() as client:
        for _ in range(2):
            r = await client.post(
                "/v1/messages",
                json={"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
                headers=claude,
            )
            assert r.status_code == 200, r.text
        r = await client.post("/v1/responses", json={"model": MODEL, "input": "hi"}, headers=codex)
        assert r.status_code == 200, r.text
        cc = (await client.get("/thinkproxy/sessions/cc-1")).json()
        cx = (await client.get("/thinkproxy/sessions/019a-codex")).json()
    assert (cc["source"], cc["client"], cc["doors"], cc["requests"]) == (
        "claude-code",
        "claude-code",
        ["messages"],
        2,
    )
    assert (cx["source"], cx["client"], cx["doors"], cx["requests"]) == ("codex", "codex", ["responses"], 1)
    assert cc["tokens"]["cached"] == 1600 and cx["tokens"]["input"] == 1000
    assert [r["model"] for r in cc["details"]] == [MODEL, MODEL]


async def test_a_responses_chain_is_one_session() -> None:
    async with proxy() as client:
        previous = None
        for _ in range(3):
            body: dict[str, Any] = {"model": MODEL, "input": "next"}
            if previous is not None:
                body["previous_response_id"] = previous
            r = await client.post("/v1/responses", json=body)
            assert r.status_code == 200, r.text
            previous = r.json()["id"]
        listing = (await client.get("/thinkproxy/sessions")).json()["sessions"]
    assert len(listing) == 1
    assert (listing[0]["source"], listing[0]["requests"]) == ("responses", 3)


async def test_in_gateway_mode_sessions_belong_to_their_key() -> None:
    keys = {
        "upstream_api_key": "sk-up",
        "client_keys": ["alice:ck-a", "bob:ck-b"],
        "admin_keys": ["ops:ak-1"],
    }
    admin = {"Authorization": "Bearer ak-1"}
    async with proxy(**keys) as client:
        for key in ("ck-a", "ck-b"):
            r = await client.post(
                "/v1/chat/completions", **chat(**{"X-Session-Id": "same", "Authorization": f"Bearer {key}"})
            )
            assert r.status_code == 200
        r = await client.post(
            "/v1/responses", json={"model": MODEL, "input": "hi"}, headers={"Authorization": "Bearer ck-a"}
        )
        alices = r.json()["id"]
        # Bob names Alice's response: he does not join her session.
        r = await client.post(
            "/v1/responses",
            json={"model": MODEL, "input": "hi", "previous_response_id": alices},
            headers={"Authorization": "Bearer ck-b"},
        )
        for headers in ({}, {"Authorization": "Bearer ck-a"}):
            refused = await client.get("/thinkproxy/sessions", headers=headers)
            assert refused.status_code == 401 and refused.json()["error"]["message"]
        listing = (await client.get("/thinkproxy/sessions", headers=admin)).json()["sessions"]
        alice_only = (await client.get("/thinkproxy/sessions?key=alice", headers=admin)).json()["sessions"]
    ids = {s["id"] for s in listing}
    assert {"alice:same", "bob:same", f"alice:{alices}"} <= ids
    assert (
        f"bob:{alices}" not in ids or next(s for s in listing if s["id"] == f"bob:{alices}")["key"] == "bob"
    )
    alice_session = next(s for s in listing if s["id"] == f"alice:{alices}")
    assert alice_session["requests"] == 1 and alice_session["key"] == "alice"
    assert {s["key"] for s in alice_only} == {"alice"}


async def test_unnamed_keys_each_have_their_own_sessions_and_none_reaches_a_named_keys() -> None:
    """An unnamed key's sessions are scoped by its place in THINKPROXY_CLIENT_KEYS (`_2`), a label
    no key name can take: its `X-Session-Id: alice:s1` is not Alice's `s1`, two unnamed keys
    sending one id make two sessions, and neither joins the other's Responses chain."""
    keys = {
        "upstream_api_key": "sk-up",
        "client_keys": ["alice:ck-a", "ck-u1", "ck-u2"],
        "admin_keys": ["ak-1"],
    }
    admin = {"Authorization": "Bearer ak-1"}
    async with proxy(**keys) as client:
        sends = (("ck-a", "s1"), ("ck-u1", "alice:s1"), ("ck-u1", "same"), ("ck-u2", "same"))
        for key, session in sends:
            r = await client.post(
                "/v1/chat/completions", **chat(**{"X-Session-Id": session, "Authorization": f"Bearer {key}"})
            )
            assert r.status_code == 200, r.text
        r = await client.post(
            "/v1/responses", json={"model": MODEL, "input": "hi"}, headers={"Authorization": "Bearer ck-u1"}
        )
        first = r.json()["id"]
        r = await client.post(
            "/v1/responses",
            json={"model": MODEL, "input": "hi", "previous_response_id": first},
            headers={"Authorization": "Bearer ck-u2"},
        )  # (refused: the response is another tenant's; the refusal is still counted, in _3's own session)
        listing = (await client.get("/thinkproxy/sessions", headers=admin)).json()["sessions"]
        one = await client.get("/thinkproxy/sessions/_2:alice:s1", headers=admin)
    assert one.status_code == 200 and one.json()["requests"] == 1 and one.json()["key"] is None
    requests = {s["id"]: s["requests"] for s in listing}
    assert requests["alice:s1"] == 1
    assert requests["_2:alice:s1"] == 1
    assert requests["_2:same"] == 1 and requests["_3:same"] == 1
    assert requests[f"_2:{first}"] == 1
    assert requests.get(f"_3:{first}") == 1


async def test_filters_pages_export_and_errors() -> None:
    async with proxy() as client:
        for i in range(5):
            await client.post(
                "/v1/chat/completions", **chat(**{"X-Session-Id": f"s{i}", "User-Agent": "curl/8"})
            )
        await client.post(
            "/v1/messages",
            json={"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
            headers={"X-Session-Id": "m", "User-Agent": "Anthropic/Python 2.16.0"},
        )
        page = (await client.get("/thinkproxy/sessions?limit=2")).json()
        second = (await client.get(f"/thinkproxy/sessions?limit=2&cursor={page['next']}")).json()
        assert [s["id"] for s in page["sessions"]] == ["m", "s4"]
        assert [s["id"] for s in second["sessions"]] == ["s3", "s2"]
        assert [
            s["id"] for s in (await client.get("/thinkproxy/sessions?door=messages")).json()["sessions"]
        ] == ["m"]
        assert len((await client.get("/thinkproxy/sessions?client=curl")).json()["sessions"]) == 5
        assert (await client.get("/thinkproxy/sessions?model=other")).json()["sessions"] == []
        future = (await client.get("/thinkproxy/sessions?since=99999999999999")).json()
        assert future["sessions"] == []
        export = await client.get("/thinkproxy/sessions/s1/export")
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [orjson.loads(line) for line in export.content.splitlines()]
        assert [line["type"] for line in lines] == ["session", "request"]
        assert lines[0]["id"] == "s1" and lines[1]["door"] == "chat"
        missing = await client.get("/thinkproxy/sessions/nope")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found"
        for bad in ("limit=0", "limit=x", "cursor=junk", "since=-1"):
            r = await client.get(f"/thinkproxy/sessions?{bad}")
            assert r.status_code == 400 and r.json()["error"]["param"] == bad.split("=")[0], bad
        assert (await client.get("/thinkproxy/stats?bucket=1")).status_code == 400


async def test_stats_from_the_proxys_own_requests() -> None:
    async with proxy() as client:
        for level in ("off", "deep", "deep"):
            await client.post("/v1/chat/completions", **chat(**{"X-Thinking-Level": level}))
        stats = (await client.get("/thinkproxy/stats?bucket=3600")).json()
    assert stats["requests"] == 3 and stats["bucket_s"] == 3600
    (bucket,) = stats["buckets"]
    assert bucket["requests"]["off"] + bucket["requests"]["deep"] + bucket["requests"]["default"] == 3
    assert bucket["tokens"] == {"input": 3000, "cached": 2400, "reasoning": 150, "output": 600}
    assert stats["cache_hit_ratio"] == 0.8
    assert stats["latency"]["total_ms"]["count"] == 3 and stats["latency"]["ttft_ms"]["p50"] is None
    (by_model,) = stats["cost"]["by_model"]
    assert by_model["model"] == MODEL and by_model["requests"] == 3 and by_model["cost_usd"] > 0
    assert all(0 <= row["share"] <= 1 for row in stats["reasoning_share"])


@pytest.mark.parametrize("path", ["/thinkproxy/sessions", "/thinkproxy/stats", "/thinkproxy/sessions/s1"])
async def test_without_admin_keys_only_the_console_serves_the_sessions_api(path: str) -> None:
    """A bring-your-own-key proxy without admin keys and without the console (the default) does not
    show its clients' sessions to anyone who asks; with the console on, or with admin keys, it does."""
    async with proxy(ui=False) as client:
        assert (
            await client.post("/v1/chat/completions", **chat(**{"X-Session-Id": "s1"}))
        ).status_code == 200
        off = await client.get(path)
    assert off.status_code == 404
    error = off.json()["error"]
    assert "THINKPROXY_ADMIN_KEYS" in error["message"] and "THINKPROXY_UI" in error["message"]
    async with proxy(ui=True) as client:
        assert (
            await client.post("/v1/chat/completions", **chat(**{"X-Session-Id": "s1"}))
        ).status_code == 200
        assert (await client.get(path)).status_code == 200
    async with proxy(ui=False, admin_keys=["ops:ak-1"]) as client:
        assert (
            await client.post("/v1/chat/completions", **chat(**{"X-Session-Id": "s1"}))
        ).status_code == 200
        assert (await client.get(path)).status_code == 401
        assert (await client.get(path, headers={"Authorization": "Bearer ak-1"})).status_code == 200


async def test_sessions_can_be_turned_off() -> None:
    async with proxy(sessions=False) as client:
        await client.post("/v1/chat/completions", **chat())
        assert (await client.get("/thinkproxy/sessions")).status_code == 404


async def test_each_request_says_what_the_proxy_changed_in_its_body() -> None:
    async with proxy() as client:
        await client.post("/v1/chat/completions", **chat(**{"X-Session-Id": "c", "X-Thinking-Level": "off"}))
        await client.post("/v1/chat/completions", **chat(**{"X-Session-Id": "c"}))
        details = (await client.get("/thinkproxy/sessions/c")).json()["details"]
    assert details[0]["changes"] == [{"field": "thinking", "change": "set", "summary": "type=disabled"}]
    assert details[1]["changes"] == []  # (no level: the body went as it came)


@pytest.mark.parametrize(
    ("overrides", "counted"), [({}, 0), ({"ui": True}, 1), ({"admin_keys": ["ops:ak-1"]}, 1)]
)
async def test_sessions_are_counted_only_where_someone_may_read_them(
    overrides: dict[str, Any], counted: int
) -> None:
    """Without admin keys and without the console nobody may read the sessions (the API answers
    404), so the proxy does not pay for counting them on every request."""
    app = create_app(
        make_settings(**{"ui": False, **overrides}), transport=httpx.MockTransport(Recorder(answer))
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client,
    ):
        assert (
            await client.post("/v1/chat/completions", **chat(**{"X-Session-Id": "s1"}))
        ).status_code == 200
    assert len(list(app.state.sessions.store.newest_first())) == counted
