"""The replay store end to end: real clients that drop reasoning → proxy (uvicorn) → simulated
upstream enforcing the providers' replay rules; memory and a real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from proxy.core.config.providers import ProvidersTable
from proxy.core.replay.keys import Secrets
from proxy.mock import MockOptions, create_mock_app
from proxy.mock.scenarios import Depth, answer
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.state import MemoryStore
from tests.helpers import make_settings
from tests.realredis import RedisServer, running_redis

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
QUESTION = "What is the weather in Paris?"
REPLAY = "x-thinking-replay"

# A tool loop offers its tools (without them no answer is captured: see may_be_replayed).
TOOLS_F = [{"type": "function", "function": {"name": "f"}}]


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"rain in {city}"


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def table_for(mock: BackgroundServer) -> ProvidersTable:
    table = ProvidersTable.load()
    for entry in ("deepseek", "kimi", "openrouter", "gemini"):
        table = table.with_extra_patterns(entry, [f"127.0.0.1:{mock.port}/{entry}/v1"])
    return table


def proxy_for(mock: BackgroundServer, dialect: str = "deepseek", **overrides: Any) -> BackgroundServer:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/{dialect}/v1",
        allowed_upstreams=[f"127.0.0.1:{mock.port}"],
        **overrides,
    )
    return BackgroundServer(create_app(settings, table=table_for(mock)))


def mock_log(mock: BackgroundServer) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = httpx.get(f"{mock.url}/_mock/requests").json()
    return log


def last_upstream_body(mock: BackgroundServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    return body


def sdk(proxy: BackgroundServer, key: str = "sk-tenant-a", **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy.url}/v1",
        api_key=key,
        max_retries=0,
        timeout=20,
        default_headers={"X-Thinking-Level": "standard", **headers},
    )


def plain_dict_loop_turn_one(
    client: openai.OpenAI, model: str, **kw: Any
) -> tuple[list[dict[str, Any]], Any]:
    """Turn 1 of an agent loop that rebuilds messages as plain dicts (dropping everything but the
    OpenAI fields, as most frameworks do), with the tool results appended."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], **kw)  # type: ignore[arg-type]
    message = first.choices[0].message
    assert message.tool_calls
    messages.append(
        {
            "role": "assistant",
            "content": message.content or "",
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in message.tool_calls
            ],
        }
    )
    for c in message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": c.id, "content": "rain, 12 °C"})
    return messages, first


def one_call_history(call_id: str) -> list[dict[str, Any]]:
    """The question, one assistant turn calling get_weather (as a client sends it back: without
    its reasoning), and the tool's answer."""
    call = {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    return [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "rain"},
    ]


def expected_turn_one_reasoning(mock: BackgroundServer) -> str:
    """What the simulated model reasoned on turn 1 (deterministic from its request body)."""
    turn_one = next(
        r["body"]
        for r in mock_log(mock)
        if r["path"].endswith("/chat/completions") and len(r["body"]["messages"]) == 1
    )
    return answer(turn_one, Depth.STANDARD).reasoning


# --- LangChain ChatOpenAI (drops reasoning_content) ----------------------------------------------


def langchain_loop(proxy: BackgroundServer, streamed: bool) -> AIMessage:
    llm = ChatOpenAI(
        base_url=f"{proxy.url}/v1",
        api_key="sk-tenant-a",  # type: ignore[arg-type]
        model="deepseek-flash",
        max_retries=0,
        timeout=20,
        default_headers={"X-Thinking-Level": "standard"},
    ).bind_tools([get_weather])
    messages: list[BaseMessage] = [HumanMessage(QUESTION)]
    if streamed:
        chunks = list(llm.stream(messages))
        first: Any = chunks[0]
        for chunk in chunks[1:]:
            first = first + chunk
    else:
        first = llm.invoke(messages)
    assert first.tool_calls, "turn 1 must end in a tool call"
    messages.append(first)
    for call in first.tool_calls:
        messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    final = llm.invoke(messages)
    assert isinstance(final, AIMessage)
    return final


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
def test_langchain_tool_loop_fails_without_the_store(mock: BackgroundServer, streamed: bool) -> None:
    with proxy_for(mock, state="off") as proxy, pytest.raises(openai.BadRequestError) as caught:
        langchain_loop(proxy, streamed)
    assert "The reasoning_content in the thinking mode must be passed back to the API." in str(caught.value)


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
def test_langchain_tool_loop_passes_with_the_store_and_gets_its_own_reasoning_back(
    mock: BackgroundServer, streamed: bool
) -> None:
    httpx.delete(f"{mock.url}/_mock/requests")
    with proxy_for(mock) as proxy:
        final = langchain_loop(proxy, streamed)
    assert "rain in Paris" in str(final.content)
    sent = last_upstream_body(mock)["messages"][1]
    assert sent["role"] == "assistant"
    assert sent["reasoning_content"] == expected_turn_one_reasoning(mock)


# --- OpenAI SDK, plain dicts ----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_openai_sdk_plain_dict_loop(mock: BackgroundServer, stream: bool) -> None:
    with proxy_for(mock, state="off") as proxy:
        client = sdk(proxy)
        messages, _ = plain_dict_loop_turn_one(client, "deepseek-flash")
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="deepseek-flash", messages=messages)  # type: ignore[arg-type]
    with proxy_for(mock) as proxy:
        client = sdk(proxy)
        if stream:
            messages = []
            chunks = list(
                client.chat.completions.create(
                    model="deepseek-flash",
                    messages=[{"role": "user", "content": QUESTION}],
                    tools=[WEATHER_TOOL],  # type: ignore[list-item]
                    stream=True,
                )
            )
            said = "".join(
                getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
            )
            calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or []) if tc.id]
            messages = one_call_history(calls[0].id)
        else:
            messages, first = plain_dict_loop_turn_one(client, "deepseek-flash")
            said = first.choices[0].message.model_extra["reasoning_content"]
        raw = client.chat.completions.with_raw_response.create(model="deepseek-flash", messages=messages)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert raw.headers[REPLAY] == "restored=1, placeholder=0, missing=0"
    assert said and last_upstream_body(mock)["messages"][1]["reasoning_content"] == said


def test_no_header_when_the_history_needs_nothing(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        raw = sdk(proxy).chat.completions.with_raw_response.create(
            model="deepseek-flash", messages=[{"role": "user", "content": "hi"}]
        )
    assert REPLAY not in raw.headers


# --- Kimi: every assistant tool-call message -------------------------------------------------------


def test_kimi_every_tool_call_turn_gets_its_reasoning_back(mock: BackgroundServer) -> None:
    with proxy_for(mock, "kimi") as proxy:
        client = sdk(proxy)
        messages, first = plain_dict_loop_turn_one(client, "kimi-k2.5")
        reasoning_one = first.choices[0].message.model_extra["reasoning_content"]
        done = client.chat.completions.create(model="kimi-k2.5", messages=messages)  # type: ignore[arg-type]
        messages.append({"role": "assistant", "content": done.choices[0].message.content})
        messages.append({"role": "user", "content": "And the weather in Rome?"})
        second = client.chat.completions.create(model="kimi-k2.5", messages=messages, tools=[WEATHER_TOOL])  # type: ignore[arg-type]
        call = second.choices[0].message.tool_calls[0]  # type: ignore[index]
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call.id, "type": "function", "function": call.function.model_dump()}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "sun"})
        raw = client.chat.completions.with_raw_response.create(model="kimi-k2.5", messages=messages)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert raw.headers[REPLAY] == "restored=2, placeholder=0, missing=0"
    sent = last_upstream_body(mock)["messages"]
    assert sent[1]["reasoning_content"] == reasoning_one
    assert sent[5]["reasoning_content"] == second.choices[0].message.model_extra["reasoning_content"]


def test_kimi_turn_never_seen_gets_the_documented_placeholder(mock: BackgroundServer) -> None:
    history = one_call_history("call_elsewhere")
    with proxy_for(mock, "kimi") as proxy:
        raw = sdk(proxy).chat.completions.with_raw_response.create(model="kimi-k2.5", messages=history)  # type: ignore[arg-type]
    assert raw.headers[REPLAY] == "restored=0, placeholder=1, missing=0"
    assert last_upstream_body(mock)["messages"][1]["reasoning_content"] == ""


# --- OpenRouter reasoning_details, Gemini thought signatures --------------------------------------


def test_openrouter_details_come_back_unchanged_and_never_to_another_model(mock: BackgroundServer) -> None:
    model = "anthropic/claude-sonnet-4.5"
    with proxy_for(mock, "openrouter") as proxy:
        client = sdk(proxy)
        messages, first = plain_dict_loop_turn_one(client, model)
        details = first.choices[0].message.model_extra["reasoning_details"]
        assert any("signature" in d for d in details)
        client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
        assert last_upstream_body(mock)["messages"][1]["reasoning_details"] == details
        # Another model behind the router is another provider: its signatures would be invalid.
        client.chat.completions.create(model="google/gemini-3-pro-preview", messages=messages)  # type: ignore[arg-type]
        assert "reasoning_details" not in last_upstream_body(mock)["messages"][1]


def test_openrouter_streamed_details_come_back_as_one_message(mock: BackgroundServer) -> None:
    model = "anthropic/claude-sonnet-4.5"
    with proxy_for(mock, "openrouter") as proxy:
        client = sdk(proxy)
        chunks = list(
            client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": QUESTION}],
                tools=[WEATHER_TOOL],  # type: ignore[list-item]
                stream=True,
            )
        )
        call_id = next(
            tc.id for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or []) if tc.id
        )
        messages = one_call_history(call_id)
        client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
    sent = last_upstream_body(mock)["messages"][1]["reasoning_details"]
    text = "".join(
        d.get("text", "")
        for c in chunks
        if c.choices
        for d in (c.choices[0].delta.model_extra or {}).get("reasoning_details") or []
    )
    assert sent[0]["type"] == "reasoning.text" and sent[0]["text"] == text and sent[0]["signature"]
    assert sent[1]["type"] == "reasoning.encrypted"


def test_gemini_signature_restored_only_to_gemini(mock: BackgroundServer) -> None:
    model = "gemini-3-flash-preview"
    with proxy_for(mock, "gemini") as proxy:
        client = sdk(proxy)
        messages, first = plain_dict_loop_turn_one(client, model)
        extra = first.choices[0].message.tool_calls[0].model_extra["extra_content"]  # type: ignore[index]
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)  # type: ignore[arg-type]
        assert raw.http_response.status_code == 200
        assert raw.headers[REPLAY] == "restored=1, placeholder=0, missing=0"
        assert last_upstream_body(mock)["messages"][1]["tool_calls"][0]["extra_content"] == extra
        # The same history sent to another provider: the signature stays with Gemini.
        other = sdk(proxy, **{"X-Upstream-Base-URL": f"{mock.url}/openrouter/v1"})
        other.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
        assert "extra_content" not in last_upstream_body(mock)["messages"][1]["tool_calls"][0]
        # And a history made elsewhere gets no signature of Gemini's: Google's documented
        # placeholder for a history it did not produce (providers.yaml `missing_signature`).
        elsewhere, _ = plain_dict_loop_turn_one(other, "anthropic/claude-sonnet-4.5")
        response = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": model, "messages": elsewhere},
            headers={"Authorization": "Bearer sk-tenant-a"},
        )
        sent = last_upstream_body(mock)["messages"][1]["tool_calls"][0]["extra_content"]
    assert response.status_code == 200, response.text
    assert sent == {"google": {"thought_signature": "skip_thought_signature_validator"}}


# --- tenants, TTL, trace ----------------------------------------------------------------------


def test_one_tenant_never_reads_another_tenants_turns(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        messages, _ = plain_dict_loop_turn_one(sdk(proxy, "sk-tenant-a"), "deepseek-flash")
        raw_b = sdk(proxy, "sk-tenant-b").chat.completions.with_raw_response.create(
            model="deepseek-flash",
            messages=messages,  # type: ignore[arg-type]
        )
        assert raw_b.headers[REPLAY] == "restored=0, placeholder=1, missing=0"
        assert last_upstream_body(mock)["messages"][1]["reasoning_content"] == ""
        raw_a = sdk(proxy, "sk-tenant-a").chat.completions.with_raw_response.create(
            model="deepseek-flash",
            messages=messages,  # type: ignore[arg-type]
        )
        assert raw_a.headers[REPLAY] == "restored=1, placeholder=0, missing=0"


def test_gateway_mode_tenant_is_the_client_key(mock: BackgroundServer) -> None:
    with proxy_for(mock, upstream_api_key="sk-upstream", client_keys="ck-one,ck-two") as proxy:
        messages, _ = plain_dict_loop_turn_one(sdk(proxy, "ck-one"), "deepseek-flash")
        two = sdk(proxy, "ck-two").chat.completions.with_raw_response.create(
            model="deepseek-flash", messages=messages
        )  # type: ignore[arg-type]
        one = sdk(proxy, "ck-one").chat.completions.with_raw_response.create(
            model="deepseek-flash", messages=messages
        )  # type: ignore[arg-type]
    assert two.headers[REPLAY].startswith("restored=0")
    assert one.headers[REPLAY].startswith("restored=1")


def test_remembered_turns_expire_after_the_ttl(mock: BackgroundServer) -> None:
    clock = [1000.0]
    with proxy_for(mock, state_ttl=60) as proxy:
        store = proxy.server.config.app.state.services.replay.store  # type: ignore[attr-defined]
        assert isinstance(store, MemoryStore)
        store.clock = lambda: clock[0]
        client = sdk(proxy)
        messages, _ = plain_dict_loop_turn_one(client, "deepseek-flash")
        # The turn is stored when the response ends, on the server's thread: wait for it before
        # moving the clock, or it would be stored at the later time (a race, not an expiry).
        deadline = time.monotonic() + 10
        while len(store) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(store) >= 1
        clock[0] += 59
        fresh = client.chat.completions.with_raw_response.create(model="deepseek-flash", messages=messages)  # type: ignore[arg-type]
        clock[0] += 2
        stale = client.chat.completions.with_raw_response.create(model="deepseek-flash", messages=messages)  # type: ignore[arg-type]
    assert fresh.headers[REPLAY].startswith("restored=1")
    assert stale.headers[REPLAY] == "restored=0, placeholder=1, missing=0"


def test_trace_says_what_was_restored_and_how_long_the_tools_took(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        client = sdk(proxy, **{"X-Trace": "detailed"})
        messages, _ = plain_dict_loop_turn_one(client, "deepseek-flash")
        body = client.chat.completions.create(model="deepseek-flash", messages=messages).model_dump()  # type: ignore[arg-type]
    trace = body["trace"]
    assert [e.get("stage") for e in trace[:2]] == ["analyzing", "replaying"]
    assert {k: trace[1][k] for k in ("restored", "placeholder", "missing")} == {
        "restored": 1,
        "placeholder": 0,
        "missing": 0,
    }
    result = next(e for e in trace if e["type"] == "tool_result")
    assert isinstance(result["duration_ms"], int | float) and result["duration_ms"] >= 0


# --- malformed histories --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"type": "function"}]}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": "call_1"}],
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": {"text": 5}, "tool_calls": [None]},
        ],
        [{"role": "wizard", "tool_calls": [{"id": "call_1"}]}, {"role": "user", "content": [1, 2]}],
        ["not a message", None, 3],
        {"role": "user"},
    ],
)
@pytest.mark.parametrize("dialect", ["deepseek", "openrouter", "gemini"])
def test_malformed_histories_are_forwarded_as_they_came(
    mock: BackgroundServer, messages: Any, dialect: str
) -> None:
    with proxy_for(mock, dialect) as proxy:
        response = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            content=orjson.dumps({"model": "m", "messages": messages}),
            headers={"Authorization": "Bearer sk-a", "Content-Type": "application/json"},
        )
    assert response.status_code < 500
    assert REPLAY not in response.headers
    assert last_upstream_body(mock)["messages"] == messages


# --- Redis: two replicas, outage ----------------------------------------------------------------


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


def test_two_replicas_share_one_redis(mock: BackgroundServer, redis_server: RedisServer) -> None:
    with (
        proxy_for(mock, state_url=redis_server.url) as one,
        proxy_for(mock, state_url=redis_server.url) as two,
    ):
        messages, first = plain_dict_loop_turn_one(sdk(one), "deepseek-flash")
        raw = sdk(two).chat.completions.with_raw_response.create(model="deepseek-flash", messages=messages)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert raw.headers[REPLAY] == "restored=1, placeholder=0, missing=0"
    assert (
        last_upstream_body(mock)["messages"][1]["reasoning_content"]
        == first.choices[0].message.model_extra["reasoning_content"]
    )


def healthz(proxy: BackgroundServer) -> tuple[int, dict[str, Any]]:
    response = httpx.get(f"{proxy.url}/healthz", timeout=20)
    return response.status_code, response.json()


def metric_value(proxy: BackgroundServer, series: str) -> float:
    for line in httpx.get(f"{proxy.url}/metrics", timeout=20).text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[1])
    return 0.0


def test_redis_outage_is_a_miss_the_tool_loop_goes_on_and_is_reported(
    mock: BackgroundServer, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="thinkproxy.replay")
    with proxy_for(mock, state_url=redis_server.url) as proxy:
        client = sdk(proxy)
        messages, _ = plain_dict_loop_turn_one(client, "deepseek-flash")
        assert healthz(proxy) == (200, {"status": "ok"})
        redis_server.stop()
        # Turn 2: the store's fault is a miss, and DeepSeek's miss policy sends the placeholder it
        # accepts, so the loop goes on (the simulated DeepSeek answers 400 without it).
        statuses, headers = [], []
        for _ in range(3):
            response = httpx.post(
                f"{proxy.url}/v1/chat/completions",
                json={"model": "deepseek-flash", "messages": messages},
                headers={"Authorization": "Bearer sk-tenant-a", "X-Thinking-Level": "standard"},
                timeout=20,
            )
            statuses.append(response.status_code)
            headers.append(response.headers.get(REPLAY))
        assert statuses == [200, 200, 200]
        assert headers == ["restored=0, placeholder=1, missing=0"] * 3
        assert last_upstream_body(mock)["messages"][1]["reasoning_content"] == ""
        assert metric_value(proxy, 'thinkproxy_state_errors_total{operation="read"}') == 3
        # Degraded, not down: a load balancer keeps an instance that still serves.
        assert healthz(proxy) == (200, {"status": "degraded", "state": "unreachable"})
        # A request that needs nothing is served normally, and its capture fails quietly.
        fine = client.chat.completions.create(
            model="deepseek-flash",
            messages=[{"role": "user", "content": QUESTION}],
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
        )
        assert fine.choices[0].message.tool_calls
        redis_server.start()  # back (empty): health follows
        deadline = time.monotonic() + 15
        while healthz(proxy) != (200, {"status": "ok"}):
            assert time.monotonic() < deadline, "health never came back after Redis did"
            time.sleep(0.1)
    outage_lines = [r for r in caplog.records if r.name == "thinkproxy.replay"]
    assert len(outage_lines) == 1  # once per interval, however many requests met the fault
    assert "redis" in outage_lines[0].getMessage()
    assert "I have a tool" not in caplog.text  # reasoning is never logged


def test_redis_never_reachable_serves_the_tool_loop_and_counts_every_fault(mock: BackgroundServer) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{sock.getsockname()[1]}/0"
    with proxy_for(mock, "kimi", state_url=url) as proxy:
        messages, _ = plain_dict_loop_turn_one(sdk(proxy), "kimi-k2.5")
        assert healthz(proxy) == (200, {"status": "degraded", "state": "unreachable"})
        response = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "kimi-k2.5", "messages": messages},
            headers={"Authorization": "Bearer sk-tenant-a", "X-Thinking-Level": "standard"},
            timeout=20,
        )
        assert response.status_code == 200, response.text
        assert response.headers[REPLAY] == "restored=0, placeholder=1, missing=0"
        # Turn 1's capture failed in the background (counted with the next request), turn 2's
        # lookup in the request itself.
        assert metric_value(proxy, 'thinkproxy_state_errors_total{operation="write"}') == 1
        assert metric_value(proxy, 'thinkproxy_state_errors_total{operation="read"}') == 1


# --- cost: one round trip whatever the history ------------------------------------------------


async def test_hundreds_of_tool_calls_cost_one_redis_round_trip(redis_server: RedisServer) -> None:
    import redis as sync_redis

    from proxy.core.events import AccessRecord
    from proxy.server.replay_service import ReplayService
    from proxy.state import RedisStore

    dialect = ProvidersTable.load().match("https://api.deepseek.com/v1", "deepseek-flash")
    service = ReplayService(RedisStore(redis_server.url, ttl=60), b"secret")
    headers = [("authorization", "Bearer sk-tenant-a")]
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    try:
        for i in range(300):  # remember 300 tool-call turns, as if the proxy had served them
            record = AccessRecord("POST", "/v1/chat/completions", status=200)
            prepared = await service.prepare(
                {"messages": [], "tools": TOOLS_F}, dialect, "deepseek-flash", headers, record
            )
            assert prepared.capture is not None
            call = {
                "index": 0,
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "f", "arguments": "{}"},
            }
            prepared.capture.chunk({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
            prepared.capture.reasoning(0, f"thought {i}")
            service.capture(record)
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": "ok"})
        await service.drain()
        admin = sync_redis.Redis.from_url(redis_server.url)
        admin.config_resetstat()
        record = AccessRecord("POST", "/v1/chat/completions", status=200)
        prepared = await service.prepare({"messages": messages}, dialect, "deepseek-flash", headers, record)
        stats = admin.info("commandstats")
        admin.close()
    finally:
        await service.aclose()
    assert prepared.result is not None
    assert prepared.result.counts.as_dict() == {"restored": 300, "placeholder": 0, "missing": 0}
    assert prepared.body["messages"][599]["reasoning_content"] == "thought 299"
    assert stats["cmdstat_mget"]["calls"] == 1
    assert {name for name in stats if not name.startswith("cmdstat_config")} == {"cmdstat_mget"}


async def test_a_burst_of_concurrent_requests_is_served_by_a_bounded_pool(redis_server: RedisServer) -> None:
    import asyncio

    from proxy.core.events import AccessRecord
    from proxy.server.replay_service import ReplayService
    from proxy.state import RedisStore

    dialect = ProvidersTable.load().match("https://api.deepseek.com/v1", "deepseek-flash")
    # A generous timeout: what is tested is that callers wait for one of the few connections
    # instead of failing at once, not how fast this machine is.
    store = RedisStore(redis_server.url, ttl=60, max_connections=16, timeout=10.0)
    service = ReplayService(store, b"secret")
    headers = [("authorization", "Bearer sk-tenant-a")]
    call = {"index": 0, "id": "call_burst", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    try:
        record = AccessRecord("POST", "/v1/chat/completions", status=200)
        prepared = await service.prepare(
            {"messages": [], "tools": TOOLS_F}, dialect, "deepseek-flash", headers, record
        )
        assert prepared.capture is not None
        prepared.capture.chunk({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
        prepared.capture.reasoning(0, "thought")
        service.capture(record)
        await service.drain()
        history = {
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}]
        }

        async def one() -> dict[str, int]:
            record = AccessRecord("POST", "/v1/chat/completions", status=200)
            done = await service.prepare(history, dialect, "deepseek-flash", headers, record)
            assert done.result is not None
            return done.result.counts.as_dict()

        outcomes = await asyncio.gather(*(one() for _ in range(200)))
    finally:
        await service.aclose()
    assert outcomes == [{"restored": 1, "placeholder": 0, "missing": 0}] * 200
    assert service.totals["unavailable"] == 0


async def test_a_plain_chat_is_not_collected_and_a_tool_loop_is() -> None:
    """Only an answer that could be replayed later is collected: no tools offered (and no `keep`
    policy) means nothing per streamed chunk and nothing stored."""
    from proxy.core.events import AccessRecord
    from proxy.server.replay_service import ReplayService
    from proxy.state import MemoryStore

    table = ProvidersTable.load()
    deepseek = table.match("https://api.deepseek.com/v1", "deepseek-flash")  # tool_calls policy
    service = ReplayService(MemoryStore(ttl=60), b"secret")
    headers = [("authorization", "Bearer sk-tenant-a")]
    record = AccessRecord("POST", "/v1/chat/completions", status=200)
    plain = await service.prepare(
        {"messages": [{"role": "user", "content": "hi"}]}, deepseek, "m", headers, record
    )
    assert plain.capture is None
    service.capture(record)  # nothing to store, and no error
    assert service.totals["captured"] == 0
    looped = await service.prepare({"messages": [], "tools": TOOLS_F}, deepseek, "m", headers, record)
    assert looped.capture is not None


# --- the end of a response and the client's next turn --------------------------------------------


class _SlowCloseStream(httpx.AsyncByteStream):
    """An upstream body whose close takes a while after the last byte (the proxy's work after a
    response's last byte may wait like this: closing an httpx response awaits its pool's locks)."""

    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self.inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self.inner:
            yield part

    async def aclose(self) -> None:
        await asyncio.sleep(0.3)
        await self.inner.aclose()


class _SlowClosingTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_SlowCloseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("stream", [False, True])
def test_the_next_turn_sent_the_moment_an_answer_ended_gets_its_reasoning(
    mock: BackgroundServer, stream: bool
) -> None:
    """The client has the whole answer (and sends its next turn at once) before the proxy has
    finished with the response that carried it: the turn must not be missed in between."""
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        allowed_upstreams=[f"127.0.0.1:{mock.port}"],
        http_transport="httpx",
    )
    app = create_app(settings, table=table_for(mock), transport=_SlowClosingTransport())
    headers = {"Authorization": "Bearer sk-tenant-race", "X-Thinking-Level": "standard"}
    first_body = {
        "model": "deepseek-flash",
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [WEATHER_TOOL],
        "stream": stream,
    }
    with BackgroundServer(app) as proxy, httpx.Client(base_url=proxy.url, timeout=20) as client:
        first = client.post("/v1/chat/completions", json=first_body, headers=headers)
        assert first.status_code == 200
        if stream:
            events = [
                orjson.loads(line[6:]) for line in first.text.splitlines() if line.startswith("data: {")
            ]
            call_id = next(
                c["id"]
                for e in events
                for ch in e["choices"]
                for c in ch["delta"].get("tool_calls") or []
                if c.get("id")
            )
        else:
            call_id = first.json()["choices"][0]["message"]["tool_calls"][0]["id"]
        history = one_call_history(call_id)
        second = client.post(
            "/v1/chat/completions",
            json={"model": "deepseek-flash", "messages": history, "tools": [WEATHER_TOOL]},
            headers=headers,
        )
    assert second.status_code == 200
    assert second.headers[REPLAY] == "restored=1, placeholder=0, missing=0"


def _tool_chunk(call_id: str) -> dict[str, Any]:
    call = {"index": 0, "id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}


def _history_naming(call_id: str) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": "ok"},
        ],
        "tools": TOOLS_F,
    }


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_lookup_waits_for_the_open_response_that_carries_the_turn(backend: str) -> None:
    """The next turn arrives before the end of the response it answers was recorded: the lookup
    waits for that end (only for a response that carries a missed turn) and reads again."""
    import asyncio

    from proxy.core.events import AccessRecord
    from proxy.server.replay_service import WRITE_WAIT_S, ReplayService
    from proxy.state import MemoryStore, RedisStore, StateStore

    dialect = ProvidersTable.load().match("https://api.deepseek.com/v1", "deepseek-flash")
    headers = [("authorization", "Bearer sk-tenant-a")]
    with running_redis() if backend == "redis" else _no_redis() as redis:
        store: StateStore = RedisStore(redis.url, ttl=60) if redis else MemoryStore(ttl=60)
        service = ReplayService(store, b"secret")
        try:
            first = AccessRecord("POST", "/v1/chat/completions", status=200)
            prepared = await service.prepare(
                {"messages": [], "tools": TOOLS_F}, dialect, "deepseek-flash", headers, first
            )
            assert prepared.capture is not None
            prepared.capture.chunk(_tool_chunk("call_open"))
            prepared.capture.reasoning(0, "thought")
            # Another open response of the tenant that carries nothing asked for: never waited on.
            other = AccessRecord("POST", "/v1/chat/completions", status=200)
            unrelated = await service.prepare(
                {"messages": [], "tools": TOOLS_F}, dialect, "deepseek-flash", headers, other
            )
            assert unrelated.capture is not None
            unrelated.capture.chunk(_tool_chunk("call_other"))

            async def end_later() -> None:
                await asyncio.sleep(0.05)
                service.capture(first)

            ending = asyncio.create_task(end_later())
            started = time.monotonic()
            second = AccessRecord("POST", "/v1/chat/completions", status=200)
            restored = await service.prepare(_history_naming("call_open"), dialect, "m", headers, second)
            waited = time.monotonic() - started
            await ending
            assert restored.result is not None
            assert restored.result.counts.as_dict() == {"restored": 1, "placeholder": 0, "missing": 0}
            assert restored.body["messages"][1]["reasoning_content"] == "thought"
            assert 0.04 <= waited < WRITE_WAIT_S
            # A turn no open response carries is a miss at once (the unrelated one is still open).
            started = time.monotonic()
            third = AccessRecord("POST", "/v1/chat/completions", status=200)
            missed = await service.prepare(_history_naming("call_never"), dialect, "m", headers, third)
            assert time.monotonic() - started < 0.04
            assert missed.result is not None and missed.result.counts.placeholder == 1
            for record in (other, second, third):
                service.capture(record)
            assert service._open == {} and service._open_count == 0  # every end recorded
        finally:
            await service.aclose()


@contextlib.contextmanager
def _no_redis() -> Iterator[None]:
    yield None


# --- the per-tenant share (issue 41 review, item 2) ----------------------------------------------


class _QueuedMemory:
    """A memory store the service does not recognise as one: its writes take the background
    queue (the path a Redis store takes), then land in the same memory store."""

    name = "queued-memory"

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    async def get_many(self, keys: Any) -> list[bytes | None]:
        return await self.inner.get_many(keys)

    async def put_many(self, items: Any, *, tenant: str | None = None) -> None:
        await self.inner.put_many(items, tenant=tenant)

    async def touch_many(self, keys: Any) -> None:
        await self.inner.touch_many(keys)

    async def delete_many(self, keys: Any) -> None:
        await self.inner.delete_many(keys)

    async def ping(self) -> None:
        pass

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("path", ["memory", "queued"])
async def test_one_tenants_replay_flood_never_evicts_another_tenants_stored_response(path: str) -> None:
    """Replay entries are written with their tenant: tenant A's flood of remembered turns counts
    toward A's share, so once the store is full A's own entries give way, not tenant B's response."""
    from proxy.core.events import AccessRecord
    from proxy.server.replay_service import ReplayService

    memory = MemoryStore(ttl=60, max_bytes=400_000)  # a share of 50,000 bytes per tenant
    store: Any = memory if path == "memory" else _QueuedMemory(memory)
    service = ReplayService(store, b"secret")
    dialect = ProvidersTable.load().match("https://api.deepseek.com/v1", "deepseek-flash")
    await memory.put_many([("tenant-b:response", b"b" * 5_000)], tenant="tenant-b")
    headers = [("authorization", "Bearer sk-tenant-a")]
    try:
        for i in range(400):  # ~1 MB of remembered turns: more than the whole store holds
            record = AccessRecord("POST", "/v1/chat/completions", status=200)
            prepared = await service.prepare(
                {"messages": [], "tools": TOOLS_F}, dialect, "m", headers, record
            )
            assert prepared.capture is not None
            prepared.capture.chunk(_tool_chunk(f"call_flood_{i}"))
            prepared.capture.reasoning(0, f"thought {i} " + "x" * 2_500)
            service.capture(record)
            await service.drain()
        assert service.totals["captured"] == 400
        assert memory.bytes <= memory.max_bytes
        assert await memory.get_many(["tenant-b:response"]) == [b"b" * 5_000]
        tenant_a = Secrets(b"secret").tenants("sk-tenant-a").current
        assert memory.tenant_bytes(tenant_a) > 0  # A's entries are counted as A's
    finally:
        await service.aclose()
