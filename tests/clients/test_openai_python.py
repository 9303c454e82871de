"""openai-python's `responses.create` through the proxy to the simulated DeepSeek (a chat-only
upstream: the proxy bridges): stream, non-stream, `previous_response_id`, and a tool loop whose
reasoning the proxy must replay."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.clients.conftest import API_KEY, MODEL, Proxy, Upstream, assert_reasoning_replayed

pytestmark = pytest.mark.spawns

EVENT = TypeAdapter(ResponseStreamEvent)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def text_of(content: Any) -> str:
    """A chat message's text: a string, or the texts of its parts."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def client(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base, api_key=API_KEY, max_retries=0, timeout=60)


def test_stream_events_parse_as_their_types_in_order(proxy: Proxy, upstream: Upstream) -> None:
    with client(proxy).responses.create(model=MODEL, input="Why is the sky blue?", stream=True) as stream:
        events = list(stream)

    kinds = [event.type for event in events]
    for event in events:  # every event validates strictly as the type its `type` names
        validated = EVENT.validate_python(event.to_dict())
        assert type(validated) is type(event), (event.type, type(event).__name__)
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.completed", kinds
    assert "[DONE]" not in kinds
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(events))), numbers

    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    done = [e.item.id for e in events if e.type == "response.output_item.done"]
    assert added == done, (added, done)

    reasoning = "".join(
        e.delta
        for e in events
        if e.type in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
    )
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert reasoning.strip(), f"no reasoning deltas in {kinds}"
    assert "Why is the sky blue?" in text, text
    first_text = kinds.index("response.output_text.delta")
    assert any(k.startswith("response.reasoning") for k in kinds[:first_text]), kinds

    final = events[-1].response
    assert final.status == "completed"
    assert final.output_text == text
    assert final.usage is not None and final.usage.output_tokens > 0
    assert final.usage.output_tokens_details.reasoning_tokens > 0

    (chat,) = upstream.chat_requests()
    assert chat["stream"] is True
    assert chat["messages"][-1]["role"] == "user"


def test_non_stream(proxy: Proxy, upstream: Upstream) -> None:
    answer = client(proxy).responses.create(model=MODEL, input="Why is the sky blue?")

    Response.model_validate(answer.to_dict())  # strictly, not only as the SDK built it
    assert answer.status == "completed"
    assert "Why is the sky blue?" in answer.output_text
    kinds = [item.type for item in answer.output]
    assert kinds[0] == "reasoning" and "message" in kinds, kinds
    assert answer.usage is not None and answer.usage.output_tokens_details.reasoning_tokens > 0
    (chat,) = upstream.chat_requests()
    assert chat["messages"][-1]["role"] == "user"


def test_previous_response_id_carries_the_conversation(proxy: Proxy, upstream: Upstream) -> None:
    sdk = client(proxy)
    first = sdk.responses.create(model=MODEL, input="My name is Ada Lovelace.", store=True)
    second = sdk.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id)

    assert second.status == "completed"
    chats = upstream.chat_requests()
    assert len(chats) == 2, upstream.describe()
    messages = chats[1]["messages"]
    said = [(m["role"], text_of(m.get("content"))) for m in messages]
    assert ("user", "My name is Ada Lovelace.") in said, said
    assert ("assistant", first.output_text) in said, said
    assert said[-1] == ("user", "What is my name?"), said


def test_tool_loop_by_previous_response_id_replays_reasoning(proxy: Proxy, upstream: Upstream) -> None:
    """DeepSeek refuses a tool result whose assistant turn lost its reasoning_content; the client
    sends only the call's output and the previous response's id."""
    sdk = client(proxy)
    first = sdk.responses.create(model=MODEL, input="What is the weather in Paris?", tools=[WEATHER])
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1, first.output
    assert calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}

    output: Any = {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"celsius": 21}'}
    second = sdk.responses.create(model=MODEL, input=[output], tools=[WEATHER], previous_response_id=first.id)

    assert second.status == "completed", second
    assert "get_weather" in second.output_text and "21" in second.output_text, second.output_text
    assert_reasoning_replayed(upstream.chat_requests(), upstream.describe)
