"""Each simulated provider: where its reasoning goes, and which of its own knobs it honours."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.mock import MockOptions, create_mock_app

QUESTION = "How do tides work on the open ocean?"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockOptions(chunk_chars=4))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        yield c


def chunks_of(text: str) -> list[dict[str, Any]]:
    data = [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]
    return [orjson.loads(d) for d in data if d != "[DONE]"]


def deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks if c["choices"]]


def content_text(chunks: list[dict[str, Any]]) -> str:
    """Concatenated string content (Mistral's thinking arrays are not content)."""
    return "".join(d["content"] for d in deltas(chunks) if isinstance(d.get("content"), str))


async def stream(client: httpx.AsyncClient, dialect: str, **extra: Any) -> list[dict[str, Any]]:
    body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True, **extra}
    response = await client.post(f"/{dialect}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return chunks_of(response.text)


async def complete(client: httpx.AsyncClient, dialect: str, **extra: Any) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": QUESTION}], **extra}
    response = await client.post(f"/{dialect}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    completion: dict[str, Any] = response.json()
    return completion


def field_text(chunks: list[dict[str, Any]], field: str) -> str:
    return "".join(d.get(field) or "" for d in deltas(chunks))


# --- reasoning_content dialects and their switches ---------------------------------------------


@pytest.mark.parametrize("dialect", ["deepseek", "qwen", "kimi"])
async def test_reasoning_content_dialects(client: httpx.AsyncClient, dialect: str) -> None:
    chunks = await stream(client, dialect)
    reasoning = field_text(chunks, "reasoning_content")
    assert QUESTION in reasoning
    assert QUESTION in content_text(chunks)
    assert "<think>" not in content_text(chunks)
    message = (await complete(client, dialect))["choices"][0]["message"]
    assert message["reasoning_content"] == reasoning


@pytest.mark.parametrize(
    ("dialect", "off"),
    [
        ("deepseek", {"thinking": {"type": "disabled"}}),
        ("kimi", {"thinking": {"type": "disabled"}}),
        ("qwen", {"enable_thinking": False}),
    ],
)
async def test_switching_thinking_off_removes_reasoning(
    client: httpx.AsyncClient, dialect: str, off: dict[str, Any]
) -> None:
    chunks = await stream(client, dialect, **off)
    assert field_text(chunks, "reasoning_content") == ""
    assert QUESTION in content_text(chunks)
    assert "reasoning_content" not in (await complete(client, dialect, **off))["choices"][0]["message"]


async def test_deepseek_shape_matches_the_real_chunks(client: httpx.AsyncClient) -> None:
    chunks = await stream(client, "deepseek", model="deepseek-v4-pro")
    assert all(c["system_fingerprint"].startswith("fp_") for c in chunks)
    assert deltas(chunks)[0] == {"role": "assistant", "content": None, "reasoning_content": ""}
    assert deltas(chunks)[1]["content"] is None
    assert list(chunks[1]) == ["id", "object", "created", "model", "system_fingerprint", "choices"]
    assert list(chunks[1]["choices"][0]) == ["index", "delta", "logprobs", "finish_reason"]


@pytest.mark.parametrize("model", ["deepseek-chat", "DeepSeek-Reasoner"])
async def test_deepseek_refuses_a_retired_model_as_the_real_api_does(
    client: httpx.AsyncClient, model: str
) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}], "stream": True}
    response = await client.post("/deepseek/v1/chat/completions", json=body)
    assert response.status_code == 400
    supported = "deepseek-flash, deepseek-v4-pro"
    assert response.json() == {
        "error": {
            "message": f"The supported API model names are {supported}, but you passed {model}.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }


async def test_deepseek_lists_and_serves_its_current_models(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/deepseek/v1/models")).json()
    assert [m["id"] for m in listed["data"]] == ["deepseek-flash", "deepseek-v4-pro"]
    for model in ("deepseek-flash", "deepseek-v4-pro", "deepseek-v4-flash"):
        assert (await complete(client, "deepseek", model=model))["model"] == model


async def test_kimi_reports_usage_inside_the_finishing_choice(client: httpx.AsyncClient) -> None:
    final = (await stream(client, "kimi"))[-1]
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["choices"][0]["usage"]["total_tokens"] > 0


async def test_kimi_thinking_model_cannot_be_switched_off(client: httpx.AsyncClient) -> None:
    chunks = await stream(client, "kimi", model="kimi-k2-thinking", thinking={"type": "disabled"})
    assert field_text(chunks, "reasoning_content")


async def test_qwen_always_thinking_model_rejects_false(client: httpx.AsyncClient) -> None:
    body = {"model": "qwq-plus", "messages": [{"role": "user", "content": "hi"}], "enable_thinking": False}
    response = await client.post("/qwen/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()
    assert error["error"]["code"] == "invalid_parameter_error"
    assert list(error) == ["error", "id", "request_id"]


# --- deep knobs make reasoning visibly longer --------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "field", "deep"),
    [
        ("deepseek", "reasoning_content", {"reasoning_effort": "max"}),
        ("deepseek", "reasoning_content", {"reasoning_effort": "high"}),
        ("qwen", "reasoning_content", {"enable_thinking": True, "thinking_budget": 16384}),
        ("kimi", "reasoning_content", {"reasoning_effort": "high"}),
        ("ollama", "reasoning", {"reasoning_effort": "high"}),
        ("openrouter", "reasoning", {"reasoning": {"effort": "high"}}),
        ("openrouter", "reasoning", {"reasoning": {"max_tokens": 16000}}),
    ],
)
async def test_deep_knobs_lengthen_reasoning(
    client: httpx.AsyncClient, dialect: str, field: str, deep: dict[str, Any]
) -> None:
    standard = field_text(await stream(client, dialect), field)
    deeper = field_text(await stream(client, dialect, **deep), field)
    assert len(deeper) > 2 * len(standard) > 0


async def test_small_qwen_budget_is_not_deep(client: httpx.AsyncClient) -> None:
    standard = field_text(await stream(client, "qwen"), "reasoning_content")
    small = field_text(await stream(client, "qwen", thinking_budget=1024), "reasoning_content")
    assert small == standard


async def test_a_knob_of_another_provider_has_no_effect(client: httpx.AsyncClient) -> None:
    # Qwen ignores reasoning_effort and DeepSeek ignores enable_thinking, as the real APIs do.
    assert field_text(await stream(client, "qwen", reasoning_effort="none"), "reasoning_content")
    assert field_text(await stream(client, "deepseek", enable_thinking=False), "reasoning_content")


# --- MiniMax: inline tags split across chunks, or reasoning_details ----------------------------


async def test_minimax_inline_think_tags_are_split_across_chunks(client: httpx.AsyncClient) -> None:
    chunks = await stream(client, "minimax")
    pieces = [d.get("content") or "" for d in deltas(chunks)]
    text = "".join(pieces)
    assert text.startswith("<think>\n")
    reasoning, _, answer = text.removeprefix("<think>\n").partition("\n</think>\n\n")
    assert QUESTION in reasoning and QUESTION in answer
    assert not any("<think>" in p or "</think>" in p for p in pieces)
    assert "<thi" in pieces and "nk>\n" in pieces


async def test_minimax_chunk_size_does_not_rejoin_the_tags() -> None:
    app = create_mock_app(MockOptions(chunk_chars=500))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        pieces = [d.get("content") or "" for d in deltas(await stream(c, "minimax"))]
    assert not any("<think>" in p or "</think>" in p for p in pieces)


@pytest.mark.parametrize(
    ("dialect", "extra"), [("minimax", {"reasoning_split": True}), ("minimax-split", {})]
)
async def test_minimax_split_uses_reasoning_details(
    client: httpx.AsyncClient, dialect: str, extra: dict[str, Any]
) -> None:
    chunks = await stream(client, dialect, **extra)
    details = [item for d in deltas(chunks) for item in d.get("reasoning_details") or []]
    assert details
    assert all(
        set(item) == {"type", "id", "format", "index", "text"} and item["type"] == "reasoning.text"
        for item in details
    )
    assert QUESTION in "".join(item["text"] for item in details)
    assert "<think>" not in content_text(chunks)
    message = (await complete(client, dialect, **extra))["choices"][0]["message"]
    assert message["reasoning_details"][0]["type"] == "reasoning.text"
    assert "<think>" not in message["content"]


async def test_minimax_non_stream_keeps_inline_tags(client: httpx.AsyncClient) -> None:
    message = (await complete(client, "minimax"))["choices"][0]["message"]
    assert message["content"].startswith("<think>\n") and "\n</think>\n\n" in message["content"]


# --- Ollama, OpenRouter ------------------------------------------------------------------------


async def test_ollama_uses_reasoning_and_honours_none(client: httpx.AsyncClient) -> None:
    chunks = await stream(client, "ollama")
    assert QUESTION in field_text(chunks, "reasoning")
    assert all(d["role"] == "assistant" for d in deltas(chunks))
    assert field_text(await stream(client, "ollama", reasoning_effort="none"), "reasoning") == ""
    assert (await complete(client, "ollama"))["choices"][0]["message"]["reasoning"]


async def test_ollama_rejects_an_unknown_effort(client: httpx.AsyncClient) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "max"}
    response = await client.post("/ollama/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        'invalid reasoning value: \'max\' (must be "high", "medium", "low", or "none")'
    )


async def test_openrouter_reasoning_details_end_with_signature_and_encrypted(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        "/openrouter/v1/chat/completions",
        json={"messages": [{"role": "user", "content": QUESTION}], "stream": True},
    )
    assert response.text.startswith(": OPENROUTER PROCESSING\n\n")
    reasoning_deltas = [d for d in deltas(chunks_of(response.text)) if d.get("reasoning")]
    for delta in reasoning_deltas:
        assert delta["reasoning_details"][0] == {**delta["reasoning_details"][0], "text": delta["reasoning"]}
    last = reasoning_deltas[-1]["reasoning_details"]
    assert last[0]["signature"]
    assert last[1]["type"] == "reasoning.encrypted" and last[1]["data"]
    assert all(len(d["reasoning_details"]) == 1 for d in reasoning_deltas[:-1])


@pytest.mark.parametrize(
    "off",
    [{"reasoning": {"effort": "none"}}, {"reasoning": {"enabled": False}}, {"reasoning": {"exclude": True}}],
)
async def test_openrouter_reasoning_can_be_turned_off_or_excluded(
    client: httpx.AsyncClient, off: dict[str, Any]
) -> None:
    chunks = await stream(client, "openrouter", **off)
    assert field_text(chunks, "reasoning") == ""
    assert QUESTION in content_text(chunks)


async def test_openrouter_refuses_both_knobs(client: httpx.AsyncClient) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "reasoning": {"effort": "high"},
        "reasoning_effort": "high",
    }
    response = await client.post("/openrouter/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert "Only one of reasoning and reasoning_effort" in response.json()["error"]["message"]


# --- Mistral -----------------------------------------------------------------------------------


async def test_mistral_thinking_arrays_then_strings(client: httpx.AsyncClient) -> None:
    chunks = await stream(client, "mistral")
    contents = [d["content"] for d in deltas(chunks) if d.get("content")]
    arrays = [c for c in contents if isinstance(c, list)]
    first_string = next(i for i, c in enumerate(contents) if isinstance(c, str))
    assert arrays and all(isinstance(c, list) for c in contents[:first_string])
    assert all(isinstance(c, str) for c in contents[first_string:])
    thinking = "".join(
        part["thinking"][0]["text"] for c in arrays for part in c if part["type"] == "thinking"
    )
    assert QUESTION in thinking
    message = (await complete(client, "mistral"))["choices"][0]["message"]
    assert [part["type"] for part in message["content"]] == ["thinking", "text"]


@pytest.mark.parametrize(
    ("extra", "thinks"),
    [
        ({"model": "mistral-small-latest"}, False),
        ({"model": "mistral-small-latest", "reasoning_effort": "none"}, False),
        ({"model": "mistral-small-latest", "reasoning_effort": "high"}, True),
        ({"model": "magistral-small-latest", "reasoning_effort": "none"}, True),
    ],
)
async def test_mistral_effort_is_a_switch(
    client: httpx.AsyncClient, extra: dict[str, Any], thinks: bool
) -> None:
    contents = [d.get("content") for d in deltas(await stream(client, "mistral", **extra))]
    assert any(isinstance(c, list) for c in contents) is thinks
    assert QUESTION in "".join(c for c in contents if isinstance(c, str))


# --- implicit-open local template, prompted reasoning ------------------------------------------


async def test_local_content_starts_inside_reasoning(client: httpx.AsyncClient) -> None:
    chunks = await stream(client, "local")
    text = content_text(chunks)
    assert "<think>" not in text
    reasoning, _, answer = text.partition("\n</think>\n\n")
    assert QUESTION in reasoning and QUESTION in answer
    assert not any("</think>" in (d.get("content") or "") for d in deltas(chunks))
    assert "timings" in chunks[-1]


@pytest.mark.parametrize(
    "off", [{"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}]
)
async def test_local_thinking_off_has_no_tags(client: httpx.AsyncClient, off: dict[str, Any]) -> None:
    text = content_text(await stream(client, "local", **off))
    assert "think>" not in text and QUESTION in text


async def test_prompted_model_answers_plainly_without_instruction(client: httpx.AsyncClient) -> None:
    text = content_text(await stream(client, "prompted", reasoning_effort="high"))
    assert "think>" not in text and QUESTION in text


@pytest.mark.parametrize(
    ("instruction", "deep"),
    [
        ("Reason step by step inside <think>...</think> before answering.", False),
        ("Think thoroughly, in depth, inside <think></think> tags first.", True),
        ("回答之前，请先逐步思考。把思考过程写在 <think> 和 </think> 标签之间。", False),
        ("回答之前，请全面而细致地推理。把全部推理过程写在 <think> 和 </think> 标签之间。", True),
    ],
)
async def test_prompted_model_thinks_in_tags_when_asked(
    client: httpx.AsyncClient, instruction: str, deep: bool
) -> None:
    messages = [{"role": "system", "content": instruction}, {"role": "user", "content": QUESTION}]
    chunks = await stream(client, "prompted", messages=messages)
    pieces = [d.get("content") or "" for d in deltas(chunks)]
    text = "".join(pieces)
    assert text.startswith("<think>\n")
    reasoning, _, answer = text.removeprefix("<think>\n").partition("\n</think>\n\n")
    assert QUESTION in answer
    assert ("Let me look at this more carefully" in reasoning) is deep
    assert not any("<think>" in p or "</think>" in p for p in pieces)


# --- OpenAI ------------------------------------------------------------------------------------


async def test_openai_sends_no_reasoning_text_only_tokens(client: httpx.AsyncClient) -> None:
    chunks = await stream(client, "openai", stream_options={"include_usage": True})
    for delta in deltas(chunks):
        assert not {"reasoning", "reasoning_content", "reasoning_details"} & set(delta)
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
    assert all("usage" in c for c in chunks)  # usage: null on every chunk when include_usage is on


@pytest.mark.parametrize(("effort", "compare"), [("none", "zero"), ("high", "more")])
async def test_openai_effort_changes_reasoning_tokens(
    client: httpx.AsyncClient, effort: str, compare: str
) -> None:
    def reasoning_tokens(completion: dict[str, Any]) -> int:
        return int(completion["usage"]["completion_tokens_details"]["reasoning_tokens"])

    standard = reasoning_tokens(await complete(client, "openai"))
    tokens = reasoning_tokens(await complete(client, "openai", reasoning_effort=effort))
    assert tokens == 0 if compare == "zero" else tokens > standard


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"reasoning_effort": "max"}, "unsupported_value"),
        ({"reasoning_effort": "minimal"}, "unsupported_value"),
        ({"max_tokens": 100}, "unsupported_parameter"),
        ({"model": "gpt-4.1-mini", "reasoning_effort": "high"}, "unsupported_parameter"),
    ],
)
async def test_openai_rejects_what_its_models_reject(
    client: httpx.AsyncClient, extra: dict[str, Any], code: str
) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], **extra}
    response = await client.post("/openai/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["param"]


async def test_openai_accepts_max_tokens_on_a_non_reasoning_model(client: httpx.AsyncClient) -> None:
    completion = await complete(client, "openai", model="gpt-4.1-mini", max_tokens=50)
    assert completion["system_fingerprint"].startswith("fp_")
    assert completion["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


# --- vllm: a self-hosted server, each model family with its own chat-template switch -----------

VLLM_SWITCHES = [
    # (model, body that turns thinking off, body that turns it on; None = no such body)
    ("Qwen/Qwen3-8B", {"chat_template_kwargs": {"enable_thinking": False}}, {}),
    ("zai-org/GLM-4.5-Air", {"chat_template_kwargs": {"enable_thinking": False}}, {}),
    ("deepseek-ai/DeepSeek-V3.1", {}, {"chat_template_kwargs": {"thinking": True}}),
]


@pytest.mark.parametrize(("model", "off", "on"), VLLM_SWITCHES)
async def test_vllm_honours_only_each_familys_own_switch(
    client: httpx.AsyncClient, model: str, off: dict[str, Any], on: dict[str, Any]
) -> None:
    assert field_text(await stream(client, "vllm", model=model, **on), "reasoning")
    assert not field_text(await stream(client, "vllm", model=model, **off), "reasoning")
    # another family's switch does nothing
    wrong = {"chat_template_kwargs": {"thinking": False, "enable_thinking": True}}
    if model.startswith("deepseek"):
        assert not field_text(await stream(client, "vllm", model=model, **wrong), "reasoning")
    else:
        wrong = {"chat_template_kwargs": {"thinking": False}}
        assert field_text(await stream(client, "vllm", model=model, **wrong), "reasoning")


async def test_vllm_gpt_oss_takes_reasoning_effort_and_refuses_none(client: httpx.AsyncClient) -> None:
    model = "openai/gpt-oss-20b"
    medium = field_text(await stream(client, "vllm", model=model), "reasoning")
    high = field_text(await stream(client, "vllm", model=model, reasoning_effort="high"), "reasoning")
    assert medium and len(high) > len(medium)
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}], "reasoning_effort": "none"}
    r = await client.post("/vllm/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "reasoning_effort"


@pytest.mark.parametrize("model", ["deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen/QwQ-32B"])
async def test_vllm_always_thinking_families_open_think_in_the_template(
    client: httpx.AsyncClient, model: str
) -> None:
    chunks = await stream(client, "vllm", model=model, chat_template_kwargs={"enable_thinking": False})
    text = content_text(chunks)
    assert "<think>" not in text and "</think>" in text  # only the closing tag comes back
    assert not field_text(chunks, "reasoning")
    message = (await complete(client, "vllm", model=model))["choices"][0]["message"]
    assert message["content"] == text


# --- an output limit: the answer is cut where max_tokens runs out -------------------------------


@pytest.mark.parametrize("limit", [{"max_tokens": 8}, {"max_completion_tokens": 8}])
async def test_a_small_output_limit_spent_on_reasoning_leaves_no_answer(
    client: httpx.AsyncClient, limit: dict[str, int]
) -> None:
    """Reasoning comes first and counts against the limit (DeepSeek's max_tokens, OpenAI's
    max_completion_tokens): a limit the reasoning uses up ends the answer with finish_reason
    length and no content."""
    chunks = await stream(client, "deepseek", reasoning_effort="high", **limit)
    assert field_text(chunks, "reasoning_content") and not content_text(chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    completion = await complete(client, "deepseek", reasoning_effort="high", **limit)
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "length" and not choice["message"]["content"]
    assert choice["message"]["reasoning_content"]
    usage = completion["usage"]
    assert usage["completion_tokens"] == usage["completion_tokens_details"]["reasoning_tokens"] == 8


async def test_an_output_limit_past_the_reasoning_cuts_the_answer(client: httpx.AsyncClient) -> None:
    whole = (await complete(client, "deepseek"))["choices"][0]
    cut = (await complete(client, "deepseek", max_tokens=40))["choices"][0]
    assert whole["finish_reason"] == "stop" and cut["finish_reason"] == "length"
    assert cut["message"]["reasoning_content"] == whole["message"]["reasoning_content"]
    assert whole["message"]["content"].startswith(cut["message"]["content"]) and cut["message"]["content"]
    roomy = (await complete(client, "deepseek", max_tokens=4096))["choices"][0]
    assert roomy == whole | {"message": roomy["message"]} and roomy["message"] == whole["message"]


# --- Gemini 3's reasoning_effort values, per model (the live API's refusals) --------------------


@pytest.mark.parametrize(
    ("model", "effort", "refusal"),
    [
        (
            "gemini-3-flash-preview",
            "minimal",
            "Invalid reasoning_effort: minimal. Valid values are: high, low, medium, none",
        ),
        ("gemini-3-pro-preview", "medium", "Thinking level MEDIUM is not supported for this model."),
        ("gemini-3-flash-preview", "none", None),
        ("gemini-3-pro-preview", "high", None),
        ("gemini-2.5-flash", "minimal", None),
    ],
)
async def test_gemini_3_models_refuse_the_efforts_they_lack(
    client: httpx.AsyncClient, model: str, effort: str, refusal: str | None
) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}], "reasoning_effort": effort}
    response = await client.post("/gemini/v1/chat/completions", json=body)
    if refusal is None:
        assert response.status_code == 200, response.text
    else:
        assert response.status_code == 400
        [error] = response.json()  # the endpoint's list-wrapped error
        assert (
            error["error"]["message"].startswith(refusal) and error["error"]["status"] == "INVALID_ARGUMENT"
        )


# --- SGLang: vLLM's families, the other reasoning field ------------------------------------------


async def test_sglang_writes_reasoning_content_and_reads_only_it(client: httpx.AsyncClient) -> None:
    chunks = await stream(client, "sglang", model="Qwen/Qwen3-8B")
    assert field_text(chunks, "reasoning_content") and not field_text(chunks, "reasoning")
    said = "The user wants the capital; it is Paris. " * 5
    counts = []
    for field in ("reasoning_content", "reasoning"):
        history = [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "Paris.", field: said},
            {"role": "user", "content": QUESTION},
        ]
        answer = await client.post(
            "/sglang/v1/chat/completions", json={"model": "Qwen/Qwen3-8B", "messages": history}
        )
        counts.append(answer.json()["usage"]["prompt_tokens"])
    assert counts[0] > counts[1]  # `reasoning` is not a field SGLang reads
