"""Budgets on every route that reaches a model, whatever the trace says (issue 41, items 5 and 6).

A gateway with a policy in front of a scripted upstream that reports known counts: native
Responses (OpenAI's entry), native Messages (Anthropic's), `/v1/responses/compact` and
`/v1/completions` relayed as they came, and a DeepSeek chat answer that reports 5,000 reasoning
tokens but shows two characters of reasoning. What each answer reports is what its key's budget
is charged; a spent budget is refused on every one of those routes; the trace, the metrics and the
console being off changes nothing; and twenty requests at once overshoot a budget by at most one
answer, with the counts in the process or in a real Redis."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.core.config.providers import ProvidersTable, default_providers_path
from proxy.core.config.yamlfile import load_config
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings
from tests.realredis import RedisServer, running_redis

GENEROUS_S = 30.0  # how long a count may take to land (it is written after the answer ends)
ADMIN = {"authorization": "Bearer ak-ops"}
THINKING = "Rayleigh scattering makes short wavelengths scatter more. " * 40

RESPONSES_USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 100},
    "output_tokens": 3010,
    "output_tokens_details": {"reasoning_tokens": 3000},
    "total_tokens": 3130,
}


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: " + str(e["type"]).encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )


async def responses(request: Request) -> Response:
    body = await request.json()
    answer = {"id": "resp_1", "object": "response", "model": "gpt-5.4", "status": "completed"}
    if body.get("stream"):
        return Response(
            sse(
                {"type": "response.created", "response": {**answer, "status": "in_progress", "usage": None}},
                {"type": "response.output_text.delta", "delta": "Blue."},
                {"type": "response.completed", "response": {**answer, "usage": RESPONSES_USAGE}},
            ),
            media_type="text/event-stream",
        )
    return JSONResponse({**answer, "output": [], "usage": RESPONSES_USAGE})


def compressed_when_asked(request: Request, answer: dict[str, Any]) -> Response:
    """The answer gzipped when the request accepts gzip (as OpenAI's API does: Codex asks zstd)."""
    body = orjson.dumps(answer)
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers = {"content-encoding": "gzip"}
        return Response(gzip.compress(body), media_type="application/json", headers=headers)
    return Response(body, media_type="application/json")


async def compact(request: Request) -> Response:
    usage = {"input_tokens": 50, "output_tokens": 710, "output_tokens_details": {"reasoning_tokens": 700}}
    answer = {"id": "cmp_1", "object": "response.compaction", "output": [], "usage": usage}
    return compressed_when_asked(request, answer)


async def completions(request: Request) -> Response:
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 900,
        "completion_tokens_details": {"reasoning_tokens": 800},
    }
    answer = {"object": "text_completion", "model": "gpt-5.4", "choices": [{"text": "Blue."}], "usage": usage}
    return compressed_when_asked(request, answer)


async def messages(request: Request) -> Response:
    body = await request.json()
    usage = {"input_tokens": 30, "cache_read_input_tokens": 200, "output_tokens": 2000}
    if body.get("stream"):
        return Response(
            sse(
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_1",
                        "type": "message",
                        "model": "claude-sonnet-4-5",
                        "content": [],
                        "usage": {**usage, "output_tokens": 1},
                    },
                },
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""},
                },
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": THINKING},
                },
                {"type": "content_block_stop", "index": 0},
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 2000},
                },
                {"type": "message_stop"},
            ),
            media_type="text/event-stream",
        )
    content = [
        {"type": "thinking", "thinking": THINKING, "signature": "sig"},
        {"type": "text", "text": "Blue."},
    ]
    return JSONResponse(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": content,
            "stop_reason": "end_turn",
            "usage": usage,
        }
    )


async def deepseek(request: Request) -> Response:
    """Reports 5,000 reasoning tokens but shows two characters of reasoning; waits a moment when
    asked (`x-script-wait`), so that concurrent requests are in flight together."""
    body = await request.json()
    wait = float(request.headers.get("x-script-wait", "0"))
    if wait:
        await asyncio.sleep(wait)
    reasoning = int(request.headers.get("x-script-reasoning", "5000"))
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": reasoning + 10,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    message = {"role": "assistant", "reasoning_content": "hm", "content": "Blue."}
    if body.get("stream"):
        chunks = [
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "model": "deepseek-v4-pro",
                "choices": [{"index": 0, "delta": message, "finish_reason": None}],
            },
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "model": "deepseek-v4-pro",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": usage,
            },
        ]

        async def stream() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")
    return JSONResponse(
        {
            "id": "c1",
            "object": "chat.completion",
            "model": "deepseek-v4-pro",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage,
        }
    )


UPSTREAM = Starlette(
    routes=[
        Route("/openai/v1/responses", responses, methods=["POST"]),
        Route("/openai/v1/responses/compact", compact, methods=["POST"]),
        Route("/openai/v1/completions", completions, methods=["POST"]),
        Route("/anthropic/v1/messages", messages, methods=["POST"]),
        Route("/deepseek/v1/chat/completions", deepseek, methods=["POST"]),
    ]
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[BackgroundServer]:
    with BackgroundServer(UPSTREAM) as server:
        yield server


def table(port: int) -> ProvidersTable:
    """The shipped table: OpenAI's entry (native Responses) at /openai, Anthropic's at /claude with
    its native Messages base at /anthropic, DeepSeek's at /deepseek."""
    data = load_config(default_providers_path().read_text(), "providers.yaml")
    for entry, prefix in (("openai", "openai"), ("anthropic", "claude"), ("deepseek", "deepseek")):
        data["providers"][entry]["match"].append(f"127.0.0.1:{port}/{prefix}")
    for holder in (data["providers"]["anthropic"], *data["providers"]["anthropic"].get("models", ())):
        if "messages" in holder:
            holder["messages"]["base_url"] = f"http://127.0.0.1:{port}/anthropic"
    return ProvidersTable.from_text(json.dumps(data, default=str))


def gateway(
    upstream: BackgroundServer, tmp_path: Path, policy: str, prefix: str = "openai", **overrides: Any
) -> BackgroundServer:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    settings = make_settings(
        upstream_base_url=f"{upstream.url}/{prefix}/v1",
        upstream_api_key="sk-operator",
        client_keys=["bob:ck-bob", "carol:ck-carol"],
        admin_keys=["ops:ak-ops"],
        policy_file=path,
        **overrides,
    )
    return BackgroundServer(create_app(settings, table=table(upstream.port)))


BIG = "keys:\n  bob: {reasoning_tokens: {limit: 1000000, per: day}}\n"
BOB = {"authorization": "Bearer ck-bob"}


def report(proxy: BackgroundServer) -> dict[str, Any]:
    out: dict[str, Any] = httpx.get(f"{proxy.url}/thinkproxy/usage", headers=ADMIN, timeout=20).json()
    return out


def spent_becomes(proxy: BackgroundServer, expected: int, client: str = "bob") -> int:
    """The key's spend once it is `expected` (the count lands after the answer ends), or what it is
    when the generous deadline passes."""
    deadline = time.monotonic() + GENEROUS_S
    while True:
        spent = int(report(proxy)["clients"][client]["budget"]["spent"])
        if spent == expected or time.monotonic() > deadline:
            return spent
        time.sleep(0.02)


def post(proxy: BackgroundServer, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{proxy.url}{path}", json=body, headers={**BOB, **headers}, timeout=20)


RESPONSES_ASK = {"model": "gpt-5.4", "input": "Why is the sky blue?"}
MESSAGES_ASK = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 4096,
    "messages": [{"role": "user", "content": "Why is the sky blue?"}],
}
CHAT_ASK = {"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": "Why is the sky blue?"}]}


# -- item 5: the native doors and the routes relayed as they came -----------------------------------
def test_native_responses_answers_are_counted(upstream: BackgroundServer, tmp_path: Path) -> None:
    with gateway(upstream, tmp_path, BIG) as proxy:
        assert post(proxy, "/v1/responses", RESPONSES_ASK).status_code == 200
        assert post(proxy, "/v1/responses", {**RESPONSES_ASK, "stream": True}).status_code == 200
        assert spent_becomes(proxy, 6000) == 6000
        bob = report(proxy)["clients"]["bob"]
    assert bob["requests"] == 2 and bob["reasoning_tokens"] == 6000
    assert bob["input_tokens"] == 240 and bob["cached_input_tokens"] == 200 and bob["output_tokens"] == 6020


def test_native_messages_answers_are_counted_with_their_thinking_estimated(
    upstream: BackgroundServer, tmp_path: Path
) -> None:
    from proxy.core.usage import text_tokens

    policy = BIG + 'prices:\n  "claude-*": {input: 3.0, output: 15.0, cached_input: 0.3}\n'
    with gateway(upstream, tmp_path, policy, prefix="claude") as proxy:
        version = {"anthropic-version": "2023-06-01"}
        assert post(proxy, "/v1/messages", MESSAGES_ASK, **version).status_code == 200
        assert post(proxy, "/v1/messages", {**MESSAGES_ASK, "stream": True}, **version).status_code == 200
        # Anthropic reports no thinking count: the output its visible text does not account for
        # (the stream shows only thinking; the body's "Blue." too), not the thinking text's estimate.
        both = 2000 + (2000 - text_tokens("Blue."))
        assert text_tokens(THINKING) < 2000
        assert spent_becomes(proxy, both) == both
        bob = report(proxy)["clients"]["bob"]
    assert bob["requests"] == 2 and bob["reasoning_tokens_estimated"] == both
    assert (
        bob["input_tokens"] == 2 * 230 and bob["cached_input_tokens"] == 400 and bob["output_tokens"] == 4000
    )
    assert bob["cost_usd"] == pytest.approx(2 * (30 * 3.0 + 200 * 0.3 + 2000 * 15.0) / 1e6, abs=1e-6)


def test_compact_and_other_model_routes_are_counted_and_refused_once_spent(
    upstream: BackgroundServer, tmp_path: Path
) -> None:
    policy = "keys:\n  bob: {reasoning_tokens: {limit: 1000, per: day}}\n"
    with gateway(upstream, tmp_path, policy) as proxy:
        assert post(proxy, "/v1/responses/compact", RESPONSES_ASK).status_code == 200
        assert spent_becomes(proxy, 700) == 700
        assert post(proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi"}).status_code == 200
        assert spent_becomes(proxy, 1500) == 1500
        refused = [
            post(proxy, "/v1/responses/compact", RESPONSES_ASK),
            post(proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi"}),
            post(proxy, "/v1/responses", RESPONSES_ASK),
        ]
        assert spent_becomes(proxy, 1500) == 1500  # (the refused ones set nothing aside)
    for r in refused:
        assert r.status_code == 429 and r.json()["error"]["code"] == "reasoning_budget_exceeded"
        assert r.headers["x-thinking-policy"] == "reasoning_tokens=1000/day; on_exhausted=refuse"
        assert int(r.headers["retry-after"]) > 0


@pytest.mark.parametrize("encoding", ["gzip", "gzip, deflate, br, zstd"])
def test_a_route_relayed_as_it_came_is_counted_when_its_client_accepts_a_compressed_answer(
    upstream: BackgroundServer, tmp_path: Path, encoding: str
) -> None:
    # The upstream would compress; the proxy asks it for identity so the answer can be read.
    policy = "keys:\n  bob: {reasoning_tokens: {limit: 1000, per: day}}\n"
    with gateway(upstream, tmp_path, policy) as proxy:
        ask = {"accept-encoding": encoding}
        compacted = post(proxy, "/v1/responses/compact", RESPONSES_ASK, **ask)
        assert spent_becomes(proxy, 700) == 700
        completed = post(proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi"}, **ask)
        assert spent_becomes(proxy, 1500) == 1500
    assert compacted.status_code == 200 and compacted.json()["object"] == "response.compaction"
    assert completed.status_code == 200 and completed.json()["usage"]["completion_tokens"] == 900


def test_a_route_relayed_as_it_came_cannot_be_sent_with_thinking_off_so_it_is_refused(
    upstream: BackgroundServer, tmp_path: Path
) -> None:
    policy = "keys:\n  bob: {reasoning_tokens: {limit: 100, per: day}, on_exhausted: 'off'}\n"
    with gateway(upstream, tmp_path, policy) as proxy:
        assert post(proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi"}).status_code == 200
        assert spent_becomes(proxy, 800) == 800
        refused = post(proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi"})
        native = post(proxy, "/v1/responses", RESPONSES_ASK)  # (a door that can turn it off does)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "reasoning_budget_exceeded"
    assert "cannot turn thinking off" in refused.json()["error"]["message"]
    assert refused.headers["x-thinking-policy"] == "reasoning_tokens=100/day; on_exhausted=off"
    assert native.status_code == 200 and native.headers["x-thinking-level-applied"] in ("off", "none")


def test_a_route_relayed_as_it_came_whose_knobs_pass_the_ceiling_is_refused_with_the_rule(
    upstream: BackgroundServer, tmp_path: Path
) -> None:
    # Its body is not rewritten, so it cannot be sent at the ceiling: refused, nothing sent.
    policy = "keys:\n  bob: {max_level: standard}\n"
    with gateway(upstream, tmp_path, policy) as proxy:
        refused = post(
            proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi", "reasoning_effort": "high"}
        )
        served = post(
            proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi", "reasoning_effort": "low"}
        )
        plain = post(proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "thinking_level_above_ceiling"
    assert refused.headers["x-thinking-policy"] == "max_level=standard"
    assert served.status_code == plain.status_code == 200


def test_routes_that_reach_no_model_are_never_refused(upstream: BackgroundServer, tmp_path: Path) -> None:
    policy = "keys:\n  bob: {reasoning_tokens: {limit: 1, per: day}}\n"
    with gateway(upstream, tmp_path, policy) as proxy:
        assert post(proxy, "/v1/completions", {"model": "gpt-5.4", "prompt": "Hi"}).status_code == 200
        spent_becomes(proxy, 800)
        # (the upstream has no such route: its 404 comes back, not the policy's 429)
        files = httpx.get(f"{proxy.url}/v1/files", headers=BOB, timeout=20)
    assert files.status_code == 404


# -- item 6: the outcome is read whatever the trace, the metrics and the console say ----------------
@pytest.mark.parametrize("stream", [False, True])
def test_reported_reasoning_is_counted_with_the_trace_metrics_and_console_off(
    upstream: BackgroundServer, tmp_path: Path, stream: bool
) -> None:
    with gateway(upstream, tmp_path, BIG, prefix="deepseek", metrics=False, ui=False, trace="off") as proxy:
        for _ in range(5):
            r = post(proxy, "/v1/chat/completions", {**CHAT_ASK, "stream": stream}, **{"x-trace": "off"})
            assert r.status_code == 200
        assert spent_becomes(proxy, 25_000) == 25_000


# -- item 6: reserved at admission, settled at the end ---------------------------------------------------
async def at_once(url: str, count: int) -> list[int]:
    async with httpx.AsyncClient(timeout=GENEROUS_S) as client:
        headers = {**BOB, "x-script-wait": "0.3", "x-script-reasoning": "600", "x-thinking-level": "deep"}
        answers = await asyncio.gather(
            *(client.post(f"{url}/v1/chat/completions", json=CHAT_ASK, headers=headers) for _ in range(count))
        )
    return [a.status_code for a in answers]


def overshoot_is_one_answer_at_most(proxies: list[BackgroundServer]) -> None:
    urls = [p.url for p in proxies]

    async def run() -> list[int]:
        groups = await asyncio.gather(*(at_once(url, 20 // len(urls)) for url in urls))
        return [status for group in groups for status in group]

    statuses = asyncio.run(run())
    served = statuses.count(200)
    assert served >= 1 and set(statuses) <= {200, 429}
    spent = spent_becomes(proxies[0], served * 600)
    assert spent == served * 600
    assert spent <= 1000 + 600  # the limit, and one answer: not 20 x 600 = 12 x the budget


LIMITED = "keys:\n  bob: {reasoning_tokens: {limit: 1000, per: day}}\n"


def test_concurrent_requests_overshoot_by_one_answer_at_most(
    upstream: BackgroundServer, tmp_path: Path
) -> None:
    with gateway(upstream, tmp_path, LIMITED, prefix="deepseek") as proxy:
        overshoot_is_one_answer_at_most([proxy])


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


def test_concurrent_requests_on_two_replicas_sharing_redis_overshoot_by_one_answer_at_most(
    upstream: BackgroundServer, redis: RedisServer, tmp_path: Path
) -> None:
    one = gateway(upstream, tmp_path, LIMITED, prefix="deepseek", state_url=redis.url)
    two = gateway(upstream, tmp_path, LIMITED, prefix="deepseek", state_url=redis.url)
    with one, two:
        overshoot_is_one_answer_at_most([one, two])
