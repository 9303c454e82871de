"""Token accounting end to end, through a real proxy to the simulated upstream: a server that
reports no reasoning count (vLLM, Ollama) gets the proxy's estimate in the usage the client
reads, marked, and counted `estimated` in the metrics; one that reports (DeepSeek) is passed as
it came and counted `reported`; cache hits reach the metrics and the console."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

ASK = [{"role": "user", "content": "What's the weather in Paris right now?"}]
THINK = {"x-thinking-level": "deep"}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        allowed_upstreams=[f"http://127.0.0.1:{mock.port}"],
        ui=True,
    )
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
        yield server


def client(proxy: BackgroundServer, mock: BackgroundServer, dialect: str) -> openai.OpenAI:
    headers = {**THINK, "x-upstream-base-url": f"{mock.url}/{dialect}/v1"}
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", default_headers=headers)


def direct_usage(mock: BackgroundServer, dialect: str) -> dict[str, Any]:
    """What the upstream itself reports for the same request (the mock is deterministic)."""
    body = {"model": "m", "messages": ASK, "reasoning_effort": "high"}
    usage: dict[str, Any] = httpx.post(f"{mock.url}/{dialect}/v1/chat/completions", json=body).json()["usage"]
    return usage


def metric(proxy: BackgroundServer, name: str, **labels: str) -> float:
    total = 0.0
    for line in httpx.get(f"{proxy.url}/metrics").text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("dialect", ["vllm", "ollama"])
def test_an_upstream_without_a_count_gets_the_estimate_marked_in_the_stream(
    proxy: BackgroundServer, mock: BackgroundServer, dialect: str
) -> None:
    before = metric(proxy, "thinkproxy_reasoning_tokens_total", source="estimated")
    stream = client(proxy, mock, dialect).chat.completions.create(
        model="m",
        messages=ASK,
        stream=True,
        stream_options={"include_usage": True},  # type: ignore[arg-type]
    )
    chunks = list(stream)
    reasoning = "".join(
        getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
    )
    usage = chunks[-1].usage
    assert reasoning and usage is not None and usage.completion_tokens_details is not None
    details = usage.completion_tokens_details
    assert details.reasoning_tokens and 0 < details.reasoning_tokens <= usage.completion_tokens
    assert (details.model_extra or {}).get("reasoning_tokens_estimated") is True
    upstream = direct_usage(mock, dialect)
    assert "completion_tokens_details" not in upstream or upstream["completion_tokens_details"] is None
    # The counts the upstream made stay its own.
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        upstream["prompt_tokens"], upstream["completion_tokens"], upstream["total_tokens"],
    )  # fmt: skip
    after = metric(proxy, "thinkproxy_reasoning_tokens_total", source="estimated")
    assert after == before + details.reasoning_tokens


def test_a_completion_without_a_count_gets_it_too(proxy: BackgroundServer, mock: BackgroundServer) -> None:
    answer = client(proxy, mock, "vllm").chat.completions.create(model="m", messages=ASK)  # type: ignore[arg-type]
    assert answer.usage is not None and answer.usage.completion_tokens_details is not None
    assert answer.usage.completion_tokens_details.reasoning_tokens
    assert answer.usage.completion_tokens_details.model_extra == {"reasoning_tokens_estimated": True}


@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_door_keeps_the_estimate_marked(
    proxy: BackgroundServer, mock: BackgroundServer, stream: bool
) -> None:
    sdk = client(proxy, mock, "vllm")
    if stream:
        with sdk.responses.stream(model="m", input="What's the weather in Paris right now?") as events:
            response = events.get_final_response()
    else:
        response = sdk.responses.create(model="m", input="What's the weather in Paris right now?")
    assert response.usage is not None
    details = response.usage.output_tokens_details
    assert details.reasoning_tokens and details.reasoning_tokens <= response.usage.output_tokens
    assert details.model_extra == {"reasoning_tokens_estimated": True}


def test_a_reported_count_passes_as_it_came(proxy: BackgroundServer, mock: BackgroundServer) -> None:
    before = metric(
        proxy, "thinkproxy_reasoning_tokens_total", source="reported", gen_ai_provider_name="deepseek"
    )
    answer = client(proxy, mock, "deepseek").chat.completions.create(model="m", messages=ASK)  # type: ignore[arg-type]
    reported = direct_usage(mock, "deepseek")["completion_tokens_details"]["reasoning_tokens"]
    assert answer.usage is not None and answer.usage.completion_tokens_details is not None
    assert answer.usage.completion_tokens_details.reasoning_tokens == reported
    assert not answer.usage.completion_tokens_details.model_extra
    after = metric(
        proxy, "thinkproxy_reasoning_tokens_total", source="reported", gen_ai_provider_name="deepseek"
    )
    assert after == before + reported


def test_a_stream_without_usage_gets_none_but_is_counted(
    proxy: BackgroundServer, mock: BackgroundServer
) -> None:
    ollama = {"source": "estimated", "gen_ai_provider_name": "ollama"}
    before = metric(proxy, "thinkproxy_reasoning_tokens_total", **ollama)
    chunks = list(client(proxy, mock, "ollama").chat.completions.create(model="m", messages=ASK, stream=True))  # type: ignore[arg-type]
    assert all(c.usage is None for c in chunks)
    assert metric(proxy, "thinkproxy_reasoning_tokens_total", **ollama) > before


CACHED_ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "deepseek-flash",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Rain.", "reasoning_content": "Paris: look it up."},
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 100,
        "completion_tokens": 12,
        "total_tokens": 112,
        "prompt_tokens_details": {"cached_tokens": 0},  # (DeepSeek may send both shapes)
        "prompt_cache_hit_tokens": 64,
        "prompt_cache_miss_tokens": 36,
        "completion_tokens_details": {"reasoning_tokens": 8},
    },
}


async def cached_upstream(request: Request) -> Response:
    return Response(orjson.dumps(CACHED_ANSWER), media_type="application/json")


def test_cache_hits_reach_the_metrics_and_the_console() -> None:
    upstream_app = Starlette(routes=[Route("/v1/chat/completions", cached_upstream, methods=["POST"])])
    with BackgroundServer(upstream_app) as upstream:
        settings = make_settings(upstream_base_url=f"{upstream.url}/v1", ui=True)
        with BackgroundServer(create_app(settings)) as proxy:
            answer = httpx.post(
                f"{proxy.url}/v1/chat/completions", json={"model": "deepseek-flash", "messages": ASK}
            ).json()
            assert answer["usage"] == CACHED_ANSWER["usage"]  # a reported count: nothing added
            assert (
                metric(proxy, "thinkproxy_cached_input_tokens_total", gen_ai_request_model="deepseek-flash")
                == 64
            )
            listed = httpx.get(f"{proxy.url}/thinkproxy/requests").json()
            usage = listed["data"][0]["usage"]
            assert usage["cached_tokens"] == 64
            assert (usage["reasoning_tokens"], usage["reasoning_tokens_source"]) == (8, "reported")
