"""A chat request mapped onto an upstream's Responses API (issue 29): proxy.core.protocols.
responses_upstream.responses_request, by behaviour. Every body it produces is checked against
openai-python's `ResponseCreateParamsNonStreaming` (the TypedDicts, validated by pydantic, with no
key they do not declare), and the replay of encrypted reasoning is checked against the simulated
OpenAI, which refuses a replayed function_call without the reasoning item it issued before it."""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import httpx
import pytest
from openai.types.responses import (
    EasyInputMessageParam,
    FunctionToolParam,
    Response,
    ResponseFunctionToolCallParam,
    ResponseReasoningItemParam,
)
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from openai.types.responses.response_input_param import FunctionCallOutput
from pydantic import TypeAdapter

from proxy.core.errors import BadRequest
from proxy.core.protocols.responses.upstream_items import (
    ENCRYPTED_FORMAT,
    ENCRYPTED_TYPE,
    completion_from_response,
)
from proxy.core.protocols.responses.upstream_request import (
    UpstreamResponsesRequest,
    responses_request,
)
from proxy.mock import create_mock_app

MODEL = "gpt-5.4"
PARAMS: TypeAdapter[Any] = TypeAdapter(ResponseCreateParamsNonStreaming)
# The input items and tools the mapping writes, by their `type` (a message has none).
ITEM_PARAMS: dict[str, Any] = {
    "message": EasyInputMessageParam,
    "reasoning": ResponseReasoningItemParam,
    "function_call": ResponseFunctionToolCallParam,
    "function_call_output": FunctionCallOutput,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": False,
    },
}
ASK = {"role": "user", "content": "What's the weather in Paris? Use get_weather."}
SECRET = "gAAAAB-opaque-blob=="


def chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": list(messages), **extra}


def consumed(value: Any) -> Any:
    """A validated value with pydantic's lazy iterators (the TypedDicts' `Iterable[...]` fields)
    run, so that every element is validated."""
    if isinstance(value, Mapping):
        return {k: consumed(v) for k, v in value.items()}
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return [consumed(v) for v in value]
    return value


def keys_of(typed_dict: Any) -> set[str]:
    return set(typing.get_type_hints(typed_dict))


def valid(mapped: UpstreamResponsesRequest) -> dict[str, Any]:
    """The body, checked to be a `ResponseCreateParamsNonStreaming` (streamed or not, the same
    shape but `stream`) with no key openai-python does not know, top level, items and tools."""
    body = mapped.body
    consumed(PARAMS.validate_python({k: v for k, v in body.items() if k != "stream"}))
    assert set(body) <= keys_of(ResponseCreateParamsNonStreaming), set(body) - keys_of(
        ResponseCreateParamsNonStreaming
    )
    for item in body["input"]:
        declared = keys_of(ITEM_PARAMS[item.get("type", "message")])
        assert set(item) <= declared, (item, set(item) - declared)
    for tool in body.get("tools", ()):
        assert set(tool) <= keys_of(FunctionToolParam), tool
    return body


def encrypted(item_id: str = "rs_1", data: str = SECRET, summary: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": ENCRYPTED_TYPE,
        "format": ENCRYPTED_FORMAT,
        "id": item_id,
        "data": data,
        "summary": ["Thinking about Paris."] if summary is None else summary,
        "index": 0,
    }


def call(call_id: str = "call_1", name: str = "get_weather", arguments: str = '{"city":"Paris"}') -> Any:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- messages → instructions and input items --------------------------------------------------------


def test_leading_system_and_developer_messages_become_the_instructions() -> None:
    mapped = responses_request(
        chat(
            {"role": "system", "content": "Be brief."},
            {
                "role": "developer",
                "content": [{"type": "text", "text": "Answer in "}, {"type": "text", "text": "French."}],
            },
            ASK,
            {"role": "system", "content": "Mind the units."},
            {"role": "developer", "content": "Celsius."},
        ),
        effort="medium",
    )
    body = valid(mapped)
    assert body["instructions"] == "Be brief.\n\nAnswer in French."
    assert body["input"] == [
        {"role": "user", "content": ASK["content"]},
        {"role": "developer", "content": "Mind the units."},
        {"role": "developer", "content": "Celsius."},
    ]


def test_no_system_message_means_no_instructions() -> None:
    body = valid(responses_request(chat(ASK), effort="medium"))
    assert "instructions" not in body and body["input"] == [{"role": "user", "content": ASK["content"]}]


def test_user_text_and_image_parts_become_input_text_and_input_image() -> None:
    content = [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
    ]
    body = valid(responses_request(chat({"role": "user", "content": content}), effort="high"))
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in these?"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
            ],
        }
    ]


def test_an_assistant_turn_sends_its_encrypted_reasoning_before_its_text_and_calls() -> None:
    assistant = {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "Thinking about Paris.",
        "reasoning_details": [
            encrypted("rs_a", "blob-a", ["First.", "Second."]),
            {"type": "reasoning.text", "text": "plain reasoning", "format": "anthropic-claude-v1"},
            {"type": "reasoning.summary", "summary": "a summary"},
            {**encrypted("rs_other"), "format": "anthropic-claude-v1"},  # another provider's blob
            encrypted("rs_b", "blob-b", []),
        ],
        "tool_calls": [call("call_1"), call("call_2", arguments='{"city":"Lyon"}')],
    }
    history = chat(
        ASK,
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
        tools=[WEATHER],
    )
    body = valid(responses_request(history, effort="medium"))
    assert body["input"][1:] == [
        {
            "type": "reasoning",
            "id": "rs_a",
            "encrypted_content": "blob-a",
            "summary": [
                {"type": "summary_text", "text": "First."},
                {"type": "summary_text", "text": "Second."},
            ],
        },
        {"type": "reasoning", "id": "rs_b", "encrypted_content": "blob-b", "summary": []},
        {"role": "assistant", "content": "Let me look."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city":"Lyon"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
        {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
    ]


def test_an_assistant_turn_without_reasoning_details_or_text_is_just_its_calls() -> None:
    assistant = {"role": "assistant", "content": None, "reasoning_content": "lost", "tool_calls": [call()]}
    body = valid(responses_request(chat(ASK, assistant, tools=[WEATHER]), effort="medium"))
    assert [i.get("type", "message") for i in body["input"]] == ["message", "function_call"]


def test_plain_assistant_text_is_an_assistant_message() -> None:
    body = valid(
        responses_request(chat(ASK, {"role": "assistant", "content": "Sunny."}, ASK), effort="medium")
    )
    assert body["input"][1] == {"role": "assistant", "content": "Sunny."}


@pytest.mark.parametrize("role", ["function", "critic", None])
def test_an_unknown_role_is_a_400_that_names_the_message(role: str | None) -> None:
    with pytest.raises(BadRequest) as raised:
        responses_request(chat(ASK, {"role": role, "content": "x"}), effort="medium")
    assert raised.value.param == "messages[1].role"


@pytest.mark.parametrize("kind", ["input_audio", "file", "video_url"])
def test_an_unsupported_user_part_is_a_400_that_names_the_part(kind: str) -> None:
    content = [{"type": "text", "text": "listen"}, {"type": kind, kind: {"data": "AAAA"}}]
    with pytest.raises(BadRequest) as raised:
        responses_request(chat(ASK, {"role": "user", "content": content}), effort="medium")
    assert raised.value.param == "messages[1].content[1].type"


def test_messages_that_are_not_a_list_or_not_objects_are_a_400() -> None:
    with pytest.raises(BadRequest) as raised:
        responses_request({"model": MODEL, "messages": "hi"}, effort="medium")
    assert raised.value.param == "messages"
    with pytest.raises(BadRequest) as raised:
        responses_request(chat(ASK, "hi"), effort="medium")  # type: ignore[arg-type]
    assert raised.value.param == "messages[1]"


# --- tools, tool_choice, response_format, limits --------------------------------------------------


def test_function_tools_are_flattened_and_other_tools_left_out() -> None:
    bare = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}, "strict": True}}
    custom = {"type": "custom", "custom": {"name": "patch", "description": "Apply a patch."}}
    body = valid(
        responses_request(
            chat(
                ASK,
                tools=[WEATHER, custom, bare],
                tool_choice={"type": "function", "function": {"name": "now"}},
            ),
            effort="medium",
        )
    )
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": WEATHER["function"]["parameters"],  # type: ignore[index]
            "strict": False,
        },
        {"type": "function", "name": "now", "parameters": {"type": "object"}, "strict": True},
    ]
    assert body["tool_choice"] == {"type": "function", "name": "now"}


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
def test_a_tool_choice_string_is_kept(choice: str) -> None:
    body = valid(responses_request(chat(ASK, tools=[WEATHER], tool_choice=choice), effort="medium"))
    assert body["tool_choice"] == choice


def test_an_allowed_tools_choice_takes_the_responses_form() -> None:
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "required",
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        },
    }
    body = valid(responses_request(chat(ASK, tools=[WEATHER], tool_choice=choice), effort="medium"))
    assert body["tool_choice"] == {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "get_weather"}],
    }


def test_without_function_tools_there_are_no_tools_and_no_tool_choice() -> None:
    custom = {"type": "custom", "custom": {"name": "patch"}}
    body = valid(responses_request(chat(ASK, tools=[custom], tool_choice="required"), effort="medium"))
    assert "tools" not in body and "tool_choice" not in body


def test_a_tool_without_strict_stays_non_strict_over_responses() -> None:
    loose = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    body = responses_request(chat(ASK, tools=[loose]), effort="medium").body
    assert body["tools"][0].get("strict") is False


@pytest.mark.parametrize(
    ("response_format", "text_format"),
    [
        (
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "weather",
                    "description": "A forecast.",
                    "schema": {
                        "type": "object",
                        "properties": {"temp": {"type": "number"}},
                        "required": ["temp"],
                        "additionalProperties": False,
                    },
                    "strict": True,
                },
            },
            {
                "type": "json_schema",
                "name": "weather",
                "description": "A forecast.",
                "schema": {
                    "type": "object",
                    "properties": {"temp": {"type": "number"}},
                    "required": ["temp"],
                    "additionalProperties": False,
                },
                "strict": True,
            },
        ),
        ({"type": "json_object"}, {"type": "json_object"}),
        ({"type": "text"}, {"type": "text"}),
    ],
)
def test_response_format_becomes_text_format(
    response_format: dict[str, Any], text_format: dict[str, Any]
) -> None:
    body = valid(responses_request(chat(ASK, response_format=response_format), effort="medium"))
    assert body["text"] == {"format": text_format}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"max_completion_tokens": 500, "max_tokens": 100}, 500),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 64}, 64),
        ({}, None),
    ],
)
def test_max_completion_tokens_wins_over_max_tokens(limits: dict[str, int], expected: int | None) -> None:
    body = valid(responses_request(chat(ASK, **limits), effort="medium"))
    assert body.get("max_output_tokens") == expected
    assert "max_tokens" not in body and "max_completion_tokens" not in body


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
def test_always_stateless_with_encrypted_reasoning_and_the_effort(effort: str) -> None:
    body = valid(responses_request(chat(ASK, store=True, reasoning_effort="none"), effort=effort))
    assert body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": effort, "summary": "auto"}
    assert "reasoning_effort" not in body


def test_kept_fields_go_as_they_came_and_the_rest_is_listed_as_dropped() -> None:
    kept = {
        "temperature": 0.2,
        "top_p": 0.9,
        "user": "u-1",
        "parallel_tool_calls": False,
        "stream": True,
        "metadata": {"run": "7"},
    }
    dropped = {
        "n": 2,
        "stop": ["\n\n"],
        "seed": 7,
        "logprobs": True,
        "top_logprobs": 3,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "logit_bias": {"50256": -100},
    }
    handled = {"stream_options": {"include_usage": True}, "store": True, "reasoning_effort": "high"}
    mapped = responses_request(
        chat(ASK, tools=[WEATHER], **kept, **dropped, **handled, modalities=None), effort="medium"
    )
    body = valid(mapped)
    assert {k: body[k] for k in kept} == kept
    assert set(mapped.dropped) == set(dropped)  # (a null field is not listed)
    assert not set(body) & (set(dropped) | {"messages", "stream_options", "modalities"})


def test_nothing_is_dropped_from_a_plain_request() -> None:
    assert responses_request(chat(ASK, tools=[WEATHER]), effort="medium").dropped == ()


# --- round trips through the simulated OpenAI -----------------------------------------------------


@pytest.fixture
async def openai_mock() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


async def send(client: httpx.AsyncClient, mapped: UpstreamResponsesRequest) -> httpx.Response:
    return await client.post("/openai/v1/responses", json=valid(mapped))


def details_by_hand(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The encrypted reasoning of a Responses output, as `reasoning_details` entries (without the
    decoder: OpenRouter's shape from the item's own fields)."""
    return [
        {
            "type": ENCRYPTED_TYPE,
            "format": ENCRYPTED_FORMAT,
            "id": item["id"],
            "data": item["encrypted_content"],
            "summary": [part["text"] for part in item["summary"]],
        }
        for item in output
        if item["type"] == "reasoning"
    ]


async def first_turn(client: httpx.AsyncClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tool-call turn: the chat request and the simulated OpenAI's answer."""
    request = chat({"role": "system", "content": "Be brief."}, ASK, tools=[WEATHER])
    answer = await send(client, responses_request(request, effort="medium"))
    assert answer.status_code == 200, answer.text
    response = answer.json()
    Response.model_validate(response)
    kinds = [item["type"] for item in response["output"]]
    assert kinds.index("reasoning") < kinds.index("function_call"), kinds
    return request, response


@pytest.mark.parametrize("how", ["decoder", "by_hand"])
async def test_a_replayed_reasoning_item_it_issued_makes_the_next_turn_work(
    openai_mock: httpx.AsyncClient, how: str
) -> None:
    request, response = await first_turn(openai_mock)
    message = completion_from_response(response)["choices"][0]["message"]
    if how == "by_hand":
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": message["tool_calls"],
            "reasoning_details": details_by_hand(response["output"]),
        }
    call_id = message["tool_calls"][0]["id"]
    history = [*request["messages"], message, {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]
    mapped = responses_request({**request, "messages": history}, effort="medium")
    reasoning = next(i for i in mapped.body["input"] if i.get("type") == "reasoning")
    issued = next(i for i in response["output"] if i["type"] == "reasoning")
    assert reasoning["id"] == issued["id"] and reasoning["encrypted_content"] == issued["encrypted_content"]
    answer = await send(openai_mock, mapped)
    assert answer.status_code == 200, answer.text
    final = Response.model_validate(answer.json())
    assert final.output_text and not [i for i in final.output if i.type == "function_call"]


async def test_without_its_reasoning_item_the_replayed_call_is_refused(
    openai_mock: httpx.AsyncClient,
) -> None:
    request, response = await first_turn(openai_mock)
    message = completion_from_response(response)["choices"][0]["message"]
    dropped = {k: v for k, v in message.items() if k != "reasoning_details"}  # what a framework sends back
    call_id = message["tool_calls"][0]["id"]
    history = [*request["messages"], dropped, {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]
    answer = await send(openai_mock, responses_request({**request, "messages": history}, effort="medium"))
    assert answer.status_code == 400, answer.text
    assert "required 'reasoning' item" in answer.json()["error"]["message"]


async def test_a_full_body_is_accepted_by_the_simulated_openai(openai_mock: httpx.AsyncClient) -> None:
    request = chat(
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "What's the weather in Paris? Use get_weather."}],
        },
        tools=[WEATHER],
        tool_choice="auto",
        parallel_tool_calls=True,
        max_completion_tokens=2000,
        temperature=1,
        metadata={"run": "1"},
        response_format={"type": "text"},
    )
    answer = await send(openai_mock, responses_request(request, effort="high"))
    assert answer.status_code == 200, answer.text
    assert Response.model_validate(answer.json()).reasoning.effort == "high"  # type: ignore[union-attr]
