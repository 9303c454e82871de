"""The self-hosted entry of providers.yaml through a simulated vLLM server: every model family at
every level (what is sent, what thinking results, where the reasoning ends up), and the
implicit-open families' streams split at every byte offset."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.core.config.providers import ProvidersTable
from proxy.core.controls import Level, TraceFormat
from proxy.core.stream.completion import process_completion
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

ASK = [{"role": "user", "content": "Is a tomato a fruit or a vegetable?"}]
SHIPPED = ProvidersTable.load()

OFF_ET = {"chat_template_kwargs": {"enable_thinking": False}}
ON_ET = {"chat_template_kwargs": {"enable_thinking": True}}
NOTHING: dict[str, Any] = {}

# model (as vLLM serves it) -> {level: (level applied, knobs sent, thinks)}
FAMILIES: dict[str, dict[str, tuple[str, dict[str, Any], bool]]] = {
    "Qwen/Qwen3-8B": {
        "off": ("off", OFF_ET, False),
        "standard": ("standard", ON_ET, True),
        "deep": ("deep", ON_ET, True),
    },
    "zai-org/GLM-4.5-Air": {
        "off": ("off", OFF_ET, False),
        "standard": ("standard", ON_ET, True),
        "deep": ("deep", ON_ET, True),
    },
    "deepseek-ai/DeepSeek-V3.1": {
        "off": ("off", {"chat_template_kwargs": {"thinking": False}}, False),
        "standard": ("standard", {"chat_template_kwargs": {"thinking": True}}, True),
        "deep": ("deep", {"chat_template_kwargs": {"thinking": True}}, True),
    },
    # gpt-oss cannot stop reasoning: off applies nothing (and sends no `none`, which it rejects)
    "openai/gpt-oss-20b": {
        "off": ("none", NOTHING, True),
        "standard": ("standard", NOTHING, True),
        "deep": ("deep", {"reasoning_effort": "high"}, True),
    },
    # always thinking, template opens <think>: nothing to send, reasoning split from content
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": {
        "off": ("none", NOTHING, True),
        "standard": ("standard", NOTHING, True),
        "deep": ("deep", NOTHING, True),
    },
    "Qwen/QwQ-32B": {
        "off": ("none", NOTHING, True),
        "standard": ("standard", NOTHING, True),
        "deep": ("deep", NOTHING, True),
    },
    "Qwen/Qwen3-30B-A3B-Thinking-2507": {
        "off": ("none", NOTHING, True),
        "standard": ("standard", NOTHING, True),
        "deep": ("deep", NOTHING, True),
    },
    "Qwen/Qwen3.6-35B-A3B": {
        "off": ("off", OFF_ET, False),
        "standard": ("standard", ON_ET, True),
        "deep": ("deep", ON_ET, True),
    },
    # thinking mode on: the template prefills <mm:think>, so only </mm:think> comes (cut in two);
    # no documented way off: off sends nothing, and the template's default does not think
    "MiniMaxAI/MiniMax-M3": {
        "off": ("none", NOTHING, False),
        "standard": ("standard", {"chat_template_kwargs": {"thinking_mode": "enabled"}}, True),
        "deep": ("deep", {"chat_template_kwargs": {"thinking_mode": "enabled"}}, True),
    },
}
KNOBS = ("chat_template_kwargs", "reasoning_effort", "enable_thinking", "thinking")


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[BackgroundServer, BackgroundServer]]:
    with BackgroundServer(create_mock_app(MockOptions(chunk_chars=3))) as mock:
        settings = make_settings(upstream_base_url=f"{mock.url}/vllm/v1")
        with BackgroundServer(create_app(settings)) as proxy:
            yield mock, proxy


def answer_texts(response: httpx.Response, stream: bool) -> tuple[str, str]:
    """(reasoning_content, content) as the client gets them."""
    if not stream:
        message = response.json()["choices"][0]["message"]
        return message.get("reasoning_content") or "", message.get("content") or ""
    reasoning = content = ""
    for line in response.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in orjson.loads(line[6:]).get("choices", []):
                delta = choice.get("delta") or {}
                reasoning += delta.get("reasoning_content") or ""
                content += delta.get("content") or ""
    return reasoning, content


CASES = [(model, level) for model, levels in FAMILIES.items() for level in levels]


@pytest.mark.parametrize(("model", "level"), CASES)
@pytest.mark.parametrize("stream", [True, False])
def test_every_self_hosted_family_at_every_level(
    stack: tuple[BackgroundServer, BackgroundServer], model: str, level: str, stream: bool
) -> None:
    mock, proxy = stack
    applied, knobs, thinks = FAMILIES[model][level]
    r = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": model, "messages": ASK, "stream": stream},
        headers={"X-Thinking-Level": level},
        timeout=20,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-provider"] == "self-hosted"
    assert r.headers["x-thinking-level-applied"] == applied
    sent = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    assert {k: sent[k] for k in KNOBS if k in sent} == knobs
    reasoning, content = answer_texts(r, stream)
    assert bool(reasoning) is thinks
    assert content.strip() and "think>" not in content and "think>" not in reasoning
    assert "tomato" in content.lower() or "tomato" in reasoning.lower()


def test_a_minimax_m3_client_s_own_thinking_mode_is_split_too(
    stack: tuple[BackgroundServer, BackgroundServer],
) -> None:
    # No level: the body is the client's; the template still prefills the marker it asked for.
    _, proxy = stack
    body = {
        "model": "MiniMaxAI/MiniMax-M3",
        "messages": ASK,
        "chat_template_kwargs": {"thinking_mode": "enabled"},
    }
    for stream in (True, False):
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json={**body, "stream": stream}, timeout=20)
        assert r.status_code == 200 and r.headers["x-thinking-level-applied"] == "none"
        reasoning, content = answer_texts(r, stream)
        assert reasoning.strip() and content.strip() and "think>" not in content + reasoning


HISTORY = [
    {"role": "user", "content": "Is a tomato a fruit?"},
    {"role": "assistant", "content": "Yes.", "reasoning_content": "botanically it is the ovary of a flower"},
    {"role": "user", "content": "And a cucumber?"},
]


def test_qwen3_6_keeps_earlier_turns_reasoning_when_the_proxy_replays_it(
    stack: tuple[BackgroundServer, BackgroundServer],
) -> None:
    mock, proxy = stack
    body = {"model": "Qwen/Qwen3.6-35B-A3B", "messages": HISTORY}
    r = httpx.post(
        f"{proxy.url}/v1/chat/completions", json=body, headers={"X-Thinking-Level": "standard"}, timeout=20
    )
    assert r.status_code == 200, r.text
    sent = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
    assert sent["chat_template_kwargs"] == {"enable_thinking": True, "preserve_thinking": True}
    assert sent["messages"][1]["reasoning"] == HISTORY[1]["reasoning_content"]
    # the template rendered the earlier turn's reasoning: the prompt holds it
    dropped = {**sent, "chat_template_kwargs": {"enable_thinking": True}}
    direct = httpx.post(f"{mock.url}/vllm/v1/chat/completions", json=dropped, timeout=20).json()
    assert r.json()["usage"]["prompt_tokens"] > direct["usage"]["prompt_tokens"]


def test_an_unknown_family_gets_the_common_enable_thinking_switch() -> None:
    dialect = SHIPPED.match("http://10.0.0.7:8000/v1", "meta-llama/Llama-3.3-70B-Instruct")
    assert dialect.name == "self-hosted" and dialect.model_override is None
    assert {lvl.value: rule.params for lvl, rule in dialect.levels.items()} == {
        "off": OFF_ET,
        "standard": ON_ET,
        "deep": ON_ET,
    }


@pytest.mark.parametrize(
    ("model", "implicit"),
    [
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", True),
        ("deepseek-r1-distill-qwen-32b-q4_k_m.gguf", True),
        ("Qwen/QwQ-32B", True),
        ("qwq:32b", True),
        ("Qwen/QwQ-32B-Preview", False),  # wrote no think tags at all
        ("Qwen/Qwen3-235B-A22B-Thinking-2507", True),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", False),
        ("qwen3:8b", False),
        ("openai/gpt-oss-120b", False),
    ],
)
def test_which_families_are_read_as_implicitly_open(model: str, implicit: bool) -> None:
    assert SHIPPED.match("http://127.0.0.1:8000/v1", model).reasoning.implicit_open is implicit


def test_qwen3_non_thinking_models_offer_only_off() -> None:
    for model in ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-Coder-30B-A3B-Instruct"):
        levels = SHIPPED.match("http://127.0.0.1:8000/v1", model).levels
        assert set(levels) == {Level.OFF} and levels[Level.OFF].params == {}


# --- implicit open, split at every byte offset ---------------------------------------------------


def options_for(model: str) -> ReasoningOptions:
    reasoning = SHIPPED.match("http://127.0.0.1:8000/v1", model).reasoning
    return ReasoningOptions(tags=reasoning.tags, implicit_open=reasoning.implicit_open)


def run(options: ReasoningOptions, pieces: list[bytes]) -> bytes:
    pipeline = StreamPipeline(
        reasoning=options, trace=None, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
    )
    out = pipeline.begin({"messages": ASK}, 0.0)
    for piece in pieces:
        out += pipeline.feed(piece, 1.0)
    return out + pipeline.finish(2.0)


def texts(raw: bytes) -> tuple[str, str]:
    reasoning = content = ""
    for line in raw.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            for choice in orjson.loads(line[6:]).get("choices", []):
                delta = choice.get("delta") or {}
                reasoning += delta.get("reasoning_content") or ""
                content += delta.get("content") or ""
    return reasoning, content


@pytest.mark.parametrize("model", ["deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen/QwQ-32B"])
async def test_implicit_open_streams_give_the_same_answer_at_every_split(model: str) -> None:
    # A short answer in chunks of a dozen characters keeps every-offset splitting quick; the closing
    # tag still arrives cut in two, as the server sends it.
    app = create_mock_app(MockOptions(chunk_chars=12))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        body = {"model": model, "messages": [{"role": "user", "content": "Tomato?"}]}
        raw = (await client.post("/vllm/v1/chat/completions", json={**body, "stream": True})).content
        whole_answer = (await client.post("/vllm/v1/chat/completions", json=body)).content
    assert b"<think>" not in raw and b"</" in raw  # the server's shape: only the closing tag, cut
    options = options_for(model)
    whole = run(options, [raw])
    reasoning, content = texts(whole)
    assert reasoning.strip() and content.strip()
    assert "think>" not in reasoning + content and "</" not in reasoning + content
    for i in range(1, len(raw)):
        assert run(options, [raw[:i], raw[i:]]) == whole, i
    # the non-stream answer splits the same way
    message = orjson.loads(
        process_completion(whole_answer, reasoning=options, trace=None, request_body=body, now_ms=0.0)
    )
    assert message["choices"][0]["message"]["reasoning_content"] == reasoning
    assert message["choices"][0]["message"]["content"] == content


async def test_minimax_m3_streams_give_the_same_answer_at_every_split() -> None:
    # Thinking mode enabled: the template prefilled <mm:think>, so the stream shows only the
    # closing marker, cut in two as the tokenizer cuts it; the entry reads the opening as implicit
    # for exactly such a request.
    model = "MiniMaxAI/MiniMax-M3"
    app = create_mock_app(MockOptions(chunk_chars=12))
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tomato?"}],
        "chat_template_kwargs": {"thinking_mode": "enabled"},
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        raw = (await client.post("/vllm/v1/chat/completions", json={**body, "stream": True})).content
        whole_answer = (await client.post("/vllm/v1/chat/completions", json=body)).content
    assert b"<mm:think>" not in raw and b"</mm" in raw and b"</mm:think>" not in raw
    reasoning_format = SHIPPED.match("http://127.0.0.1:8000/v1", model).reasoning
    assert reasoning_format.opens_implicitly(body)
    assert not reasoning_format.opens_implicitly({**body, "chat_template_kwargs": {}})
    options = ReasoningOptions(tags=reasoning_format.tags, implicit_open=True)
    whole = run(options, [raw])
    reasoning, content = texts(whole)
    assert reasoning.strip() and content.strip()
    assert "think>" not in reasoning + content and "</" not in reasoning + content
    for i in range(1, len(raw)):
        assert run(options, [raw[:i], raw[i:]]) == whole, i
    message = orjson.loads(
        process_completion(whole_answer, reasoning=options, trace=None, request_body=body, now_ms=0.0)
    )["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (reasoning, content)
