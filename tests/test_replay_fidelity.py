"""Replay fidelity, end to end through a real proxy with the replay store in front of the simulated
providers: each upstream gets reasoning back in the field it reads (or none at all), every turn's
where the model keeps its thinking, and a replayed history is the same bytes on every request (an
upstream's prefix cache hits only on an identical prefix)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
ASK = {"role": "user", "content": "What is the weather in Paris? Réponds en français, s'il te plaît."}


class RawBodies:
    """ASGI middleware in front of the simulated upstream: every chat request's body, as bytes."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        with self._lock:
            self.bodies.append(b"".join(chunks))
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def last(self) -> bytes:
        return self.bodies[-1]


class Stack:
    def __init__(self, mock: BackgroundServer, raw: RawBodies, proxy: BackgroundServer) -> None:
        self.mock, self.raw, self.proxy = mock, raw, proxy

    def post(self, dialect: str, body: dict[str, Any], key: str = "sk-a", **headers: str) -> httpx.Response:
        return httpx.post(
            f"{self.proxy.url}/v1/chat/completions",
            json=body,
            headers={
                "X-Upstream-Base-URL": f"{self.mock.url}/{dialect}/v1",
                "Authorization": f"Bearer {key}",
                **headers,
            },
            timeout=20,
        )

    def direct(self, dialect: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{self.mock.url}/{dialect}/v1/chat/completions", json=body, timeout=20)

    def sent(self) -> dict[str, Any]:
        body: dict[str, Any] = orjson.loads(self.raw.last())
        return body


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    raw = RawBodies(create_mock_app(MockOptions(chunk_chars=16)))
    with BackgroundServer(raw) as mock:
        table = simulated_table(mock.port)
        table = table.with_extra_patterns("groq", [f"127.0.0.1:{mock.port}/groq"])
        table = table.with_extra_patterns("gemini", [f"127.0.0.1:{mock.port}/gemini"])
        # /vllm is on loopback: the self-hosted entry, as a vLLM server on the operator's network.
        settings = make_settings(
            upstream_base_url=f"{mock.url}/deepseek/v1", allowed_upstreams=[f"127.0.0.1:{mock.port}"]
        )
        with BackgroundServer(create_app(settings, table=table)) as proxy:
            yield Stack(mock, raw, proxy)


def messages_bytes(raw: bytes) -> bytes:
    """The `messages` array of a JSON body exactly as it was written."""
    text = raw.decode()
    start = text.index('"messages":') + len('"messages":')
    while text[start] in " \n\t":
        start += 1
    _, end = json.JSONDecoder().raw_decode(text, start)
    return text[start:end].encode()


def each_message(raw: bytes) -> list[bytes]:
    """Each message of the `messages` array exactly as written (split at top-level commas)."""
    array = messages_bytes(raw).decode()
    decoder = json.JSONDecoder()
    out, at = [], 1
    while array[at] != "]":
        while array[at] in " ,\n\t":
            at += 1
        _, end = decoder.raw_decode(array, at)
        out.append(array[at:end].encode())
        at = end
        while array[at] in " \n\t":
            at += 1
    return out


def tool_turn(answer: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The assistant message a client that drops reasoning sends back, and its first call id."""
    message = answer["choices"][0]["message"]
    calls = [{k: c[k] for k in ("id", "type", "function")} for c in message["tool_calls"]]
    return {"role": "assistant", "content": message.get("content"), "tool_calls": calls}, calls[0]["id"]


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": '{"temp_c": 18, "sky": "clear"}'}


# -- 1. the field each upstream reads ----------------------------------------------------------------


@pytest.mark.parametrize("level", [None, "standard", "deep"])
def test_groq_never_gets_reasoning_in_its_history_whoever_put_it_there(
    stack: Stack, level: str | None
) -> None:
    # The client itself sends reasoning_content back (as DeepSeek-minded clients do).
    history = [
        ASK,
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "I should look it up."},
        {"role": "user", "content": "Go on."},
    ]
    body = {"model": "openai/gpt-oss-120b", "messages": history}
    assert stack.direct("groq", body).status_code == 400  # what Groq answers to it
    headers = {"X-Thinking-Level": level} if level else {}
    r = stack.post("groq", body, **headers)
    assert r.status_code == 200, r.text
    assert stack.sent()["messages"][1] == {"role": "assistant", "content": "Let me check."}
    assert b"reasoning" not in messages_bytes(stack.raw.last())


def test_groq_tool_loop_with_the_store_on_sends_no_reasoning_back(stack: Stack) -> None:
    body = {"model": "openai/gpt-oss-120b", "messages": [ASK], "tools": TOOLS, "stream": True}
    assert stack.post("groq", body, key="sk-groq").status_code == 200
    first = stack.post("groq", {**body, "stream": False}, key="sk-groq").json()
    turn, call_id = tool_turn(first)
    r = stack.post("groq", {**body, "messages": [ASK, turn, result(call_id)]}, key="sk-groq")
    assert r.status_code == 200, r.text
    assert "x-thinking-replay" not in r.headers  # strip: nothing looked up, no placeholder
    assert b"reasoning" not in messages_bytes(stack.raw.last())


def test_vllm_gets_the_clients_reasoning_content_in_the_field_it_reads(stack: Stack) -> None:
    reasoning = "The user wants Paris weather; the tool takes a city. " * 6
    history = [ASK, {"role": "assistant", "content": "Il fait beau.", "reasoning_content": reasoning}, ASK]
    body = {"model": "Qwen/Qwen3-8B", "messages": history}
    r = stack.post("vllm", body)
    assert r.status_code == 200, r.text
    assert stack.sent()["messages"][1] == {
        "role": "assistant",
        "content": "Il fait beau.",
        "reasoning": reasoning,
    }
    # What vLLM rendered: the same prompt as a client sending `reasoning` itself, and more than
    # what forwarding reasoning_content unchanged gets it (dropped: vllm#38488).
    moved = r.json()["usage"]["prompt_tokens"]
    right = [ASK, {"role": "assistant", "content": "Il fait beau.", "reasoning": reasoning}, ASK]
    assert stack.direct("vllm", {**body, "messages": right}).json()["usage"]["prompt_tokens"] == moved
    assert stack.direct("vllm", body).json()["usage"]["prompt_tokens"] < moved


def test_vllm_tool_loop_gets_its_remembered_reasoning_as_reasoning(stack: Stack) -> None:
    body = {"model": "Qwen/Qwen3-8B", "messages": [ASK], "tools": TOOLS}
    first = stack.post("vllm", body, key="sk-vllm").json()
    said = first["choices"][0]["message"]["reasoning_content"]  # the proxy's normalized field
    turn, call_id = tool_turn(first)
    r = stack.post("vllm", {**body, "messages": [ASK, turn, result(call_id)]}, key="sk-vllm")
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-replay"] == "restored=1, placeholder=0, missing=0"
    sent = stack.sent()["messages"][1]
    assert sent["reasoning"] == said and "reasoning_content" not in sent


def test_sglang_gets_a_clients_reasoning_in_the_field_it_reads(stack: Stack) -> None:
    # The same model family as on vLLM, the other field: SGLang reads reasoning_content only.
    reasoning = "The user wants Paris weather; the tool takes a city. " * 6
    history = [ASK, {"role": "assistant", "content": "Il fait beau.", "reasoning": reasoning}, ASK]
    body = {"model": "Qwen/Qwen3-8B", "messages": history}
    r = stack.post("sglang", body)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-provider"] == "sglang"
    assert stack.sent()["messages"][1] == {
        "role": "assistant",
        "content": "Il fait beau.",
        "reasoning_content": reasoning,
    }
    moved = r.json()["usage"]["prompt_tokens"]
    assert stack.direct("sglang", body).json()["usage"]["prompt_tokens"] < moved  # `reasoning`: lost
    # its answers come back in reasoning_content, normalized like every other upstream's
    assert r.json()["choices"][0]["message"]["reasoning_content"]


def test_sglang_tool_loop_gets_its_remembered_reasoning_as_reasoning_content(stack: Stack) -> None:
    body = {"model": "Qwen/Qwen3-8B", "messages": [ASK], "tools": TOOLS}
    first = stack.post("sglang", body, key="sk-sglang").json()
    said = first["choices"][0]["message"]["reasoning_content"]
    turn, call_id = tool_turn(first)
    r = stack.post("sglang", {**body, "messages": [ASK, turn, result(call_id)]}, key="sk-sglang")
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-replay"] == "restored=1, placeholder=0, missing=0"
    sent = stack.sent()["messages"][1]
    assert sent["reasoning_content"] == said and "reasoning" not in sent


# -- 2. every turn, where the model keeps its thinking --------------------------------------------


def test_kimi_k2_7_code_gets_every_earlier_turns_reasoning_back(stack: Stack) -> None:
    # Preserved Thinking is always on for kimi-k2.7-code: plain answers carry theirs too. Kimi
    # documents no error for a plain turn without it, so the check is on what the upstream saw.
    model = "kimi-k2.7-code"
    first = stack.post("kimi", {"model": model, "messages": [ASK]}, key="sk-kimi").json()["choices"][0][
        "message"
    ]
    assert first["reasoning_content"]
    answer = {"role": "assistant", "content": first["content"]}  # the client dropped the reasoning
    history = [ASK, answer, {"role": "user", "content": "And tomorrow?"}]
    r = stack.post("kimi", {"model": model, "messages": history}, key="sk-kimi")
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-replay"] == "restored=1, placeholder=0, missing=0"
    assert stack.sent()["messages"][1] == {**answer, "reasoning_content": first["reasoning_content"]}
    # kimi-k2.5 (no Preserved Thinking): a plain turn is not looked up.
    r = stack.post("kimi", {"model": "kimi-k2.5", "messages": history}, key="sk-kimi")
    assert "x-thinking-replay" not in r.headers and stack.sent()["messages"][1] == answer


# -- 3. byte-stable replay ------------------------------------------------------------------------


def test_deepseek_tool_loop_replays_the_same_bytes_on_every_later_request(stack: Stack) -> None:
    key = "sk-cache"
    body: dict[str, Any] = {"model": "deepseek-v4-pro", "tools": TOOLS, "stream": True}
    first = stack.post("deepseek", {**body, "messages": [ASK], "stream": False}, key=key).json()
    turn, call_id = tool_turn(first)
    loop = [ASK, turn, result(call_id)]
    second = stack.post("deepseek", {**body, "messages": loop}, key=key)
    assert second.status_code == 200 and second.headers["x-thinking-replay"].startswith("restored=1")
    sent_second = stack.raw.last()
    answer = "".join(
        orjson.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in second.text.split("\n\n")
        if line.startswith("data: {") and orjson.loads(line[6:]).get("choices")
    )
    later = [*loop, {"role": "assistant", "content": answer}, {"role": "user", "content": "Et demain ?"}]
    for level in (None, None, "standard"):  # the same history twice, then with a level
        headers = {"X-Thinking-Level": level} if level else {}
        r = stack.post("deepseek", {**body, "messages": later}, key=key, **headers)
        assert r.status_code == 200, r.text
        sent = stack.raw.last()
        assert each_message(sent)[:3] == each_message(sent_second), level
        assert messages_bytes(sent).startswith(messages_bytes(sent_second)[:-1])


def test_gemini_signatures_are_replayed_the_same_way_after_the_next_user_message(stack: Stack) -> None:
    key, model = "sk-gemini", "gemini-3-pro-preview"
    body: dict[str, Any] = {"model": model, "tools": TOOLS}
    first = stack.post("gemini", {**body, "messages": [ASK]}, key=key).json()
    turn, call_id = tool_turn(first)  # the client dropped extra_content (the thought signature)
    loop = [ASK, turn, result(call_id)]
    second = stack.post("gemini", {**body, "messages": loop}, key=key)
    assert second.status_code == 200, second.text
    sent_second = stack.raw.last()
    assert b"thought_signature" in each_message(sent_second)[1]
    later = [*loop, {"role": "assistant", "content": "18 °C."}, {"role": "user", "content": "Tomorrow?"}]
    r = stack.post("gemini", {**body, "messages": later}, key=key)
    assert r.status_code == 200, r.text
    assert each_message(stack.raw.last())[:3] == each_message(sent_second)


SKIP_SIGNATURE = "skip_thought_signature_validator"


@pytest.mark.parametrize("level", [None, "standard", "deep"])
@pytest.mark.parametrize("model", ["gemini-3-flash-preview", "gemini-3-pro-preview"])
def test_a_history_another_provider_produced_reaches_gemini_3_with_the_documented_placeholder(
    stack: Stack, level: str | None, model: str
) -> None:
    # A tool loop DeepSeek answered, continued on Gemini 3: its call has no signature Gemini made.
    key = f"sk-switch-{model}-{level}"
    first = stack.post("deepseek", {"model": "deepseek-v4-pro", "tools": TOOLS, "messages": [ASK]}, key=key)
    turn, call_id = tool_turn(first.json())
    loop = [ASK, turn, result(call_id)]
    body = {"model": model, "tools": TOOLS, "messages": loop}
    refused = stack.direct("gemini", body)  # as it came: Gemini's own 400
    assert refused.status_code == 400 and "missing a thought_signature" in refused.text
    headers = {"X-Thinking-Level": level} if level else {}
    r = stack.post("gemini", body, key=key, **headers)
    assert r.status_code == 200, r.text
    [call] = orjson.loads(each_message(stack.raw.last())[1])["tool_calls"]
    assert call["extra_content"] == {"google": {"thought_signature": SKIP_SIGNATURE}}


def test_gemini_s_own_signature_wins_over_the_placeholder(stack: Stack) -> None:
    key, model = "sk-gemini-own", "gemini-3-flash-preview"
    first = stack.post("gemini", {"model": model, "tools": TOOLS, "messages": [ASK]}, key=key).json()
    own = first["choices"][0]["message"]["tool_calls"][0]["extra_content"]
    turn, call_id = tool_turn(first)  # dropped by the client; the store has it
    r = stack.post(
        "gemini", {"model": model, "tools": TOOLS, "messages": [ASK, turn, result(call_id)]}, key=key
    )
    assert r.status_code == 200, r.text
    [call] = orjson.loads(each_message(stack.raw.last())[1])["tool_calls"]
    assert call["extra_content"] == own and own["google"]["thought_signature"] != SKIP_SIGNATURE


@pytest.mark.parametrize(
    ("model", "refused", "message"),
    [
        (
            "gemini-3-flash-preview",
            "minimal",
            "Invalid reasoning_effort: minimal. Valid values are: high, low, medium, none",
        ),
        ("gemini-3-pro-preview", "medium", "Thinking level MEDIUM is not supported for this model."),
    ],
)
def test_gemini_3_levels_send_what_each_model_accepts(
    stack: Stack, model: str, refused: str, message: str
) -> None:
    # The client's own effort, one this model refuses: Gemini's 400, passed back as it came...
    body = {"model": model, "messages": [ASK], "reasoning_effort": refused}
    direct = stack.direct("gemini", body)
    assert direct.status_code == 400 and message in direct.text
    untouched = stack.post("gemini", body)
    assert (untouched.status_code, untouched.content) == (400, direct.content)
    # ...and every level the entry offers sends a value (or none) the model takes.
    for level, sent_effort in (("standard", None), ("deep", "high")):
        r = stack.post("gemini", body, **{"X-Thinking-Level": level})
        assert r.status_code == 200, (level, r.text)
        assert stack.sent().get("reasoning_effort") == sent_effort
    off = stack.post("gemini", body, **{"X-Thinking-Level": "off"})
    assert off.headers["x-thinking-level-applied"] == "none"
    assert "cannot turn thinking off" in off.headers["x-thinking-level-reason"]


def test_kimi_k2_6_asks_to_keep_the_reasoning_it_is_given_back(stack: Stack) -> None:
    key, model = "sk-kimi-keep", "kimi-k2.6"
    first = stack.post(
        "kimi", {"model": model, "messages": [ASK]}, key=key, **{"X-Thinking-Level": "standard"}
    )
    said = first.json()["choices"][0]["message"]
    history = [
        ASK,
        {"role": "assistant", "content": said["content"]},
        {"role": "user", "content": "Et demain ?"},
    ]
    r = stack.post("kimi", {"model": model, "messages": history}, key=key, **{"X-Thinking-Level": "standard"})
    assert r.status_code == 200, r.text
    body = stack.sent()
    assert body["thinking"] == {"type": "enabled", "keep": "all"}
    assert body["messages"][1]["reasoning_content"] == said["reasoning_content"]  # the plain turn too


def test_every_turn_history_is_the_same_bytes_when_restored_twice(stack: Stack) -> None:
    key, model = "sk-kimi-cache", "kimi-k2.7-code"
    first = stack.post("kimi", {"model": model, "messages": [ASK]}, key=key).json()["choices"][0]["message"]
    history = [
        ASK,
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": "Et demain ?"},
    ]
    sent = []
    for _ in range(2):
        assert stack.post("kimi", {"model": model, "messages": history}, key=key).status_code == 200
        sent.append(stack.raw.last())
    assert sent[0] == sent[1]
