"""The simulated upstream's Responses API (`POST [/{dialect}]/v1/responses`): every event and
object validates against openai-python's types, the stateless reasoning rule can be failed, and
the request errors carry OpenAI's words."""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.shared import Reasoning
from pydantic import TypeAdapter

from proxy.mock import MockDisconnect, create_mock_app
from proxy.mock.responses.inputs import EFFORTS
from proxy.mock.responses.seal import seal, unseal

EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
NATIVE = ["openai", "openrouter", "vllm", "ollama"]
MODELS = {"openai": "gpt-5.1", "openrouter": "openai/gpt-5.1", "vllm": "Qwen/Qwen3-8B", "ollama": "qwen3:8b"}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
QUESTION = "Café ✓ weather in Paris: what is it like today?"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as c:
        yield c


class SseReader:
    """A small SSE reader (the spec's line rules for `event:`, `data:` and comments) fed bytes in
    any pieces: a line is decoded only once it is whole."""

    def __init__(self) -> None:
        self.buffer = b""
        self.event: str | None = None
        self.data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        *lines, self.buffer = (self.buffer + chunk).split(b"\n")
        out = []
        for raw in lines:
            line = raw.decode().removesuffix("\r")
            if not line:
                if self.data:
                    out.append((self.event, "\n".join(self.data)))
                self.event, self.data = None, []
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                if name == "event":
                    self.event = value.removeprefix(" ")
                elif name == "data":
                    self.data.append(value.removeprefix(" "))
        return out


def read_events(body: bytes) -> list[dict[str, Any]]:
    """The events of a stream, each checked: its `event:` line names its type, it validates."""
    events = []
    for name, data in SseReader().feed(body):
        event = orjson.loads(data)
        assert name == event["type"]
        EVENTS.validate_python(event)
        events.append(event)
    return events


def ask(dialect: str = "openai", **extra: Any) -> dict[str, Any]:
    return {"model": MODELS[dialect], "input": QUESTION, **extra}


async def post(client: httpx.AsyncClient, body: dict[str, Any], dialect: str = "openai") -> httpx.Response:
    return await client.post(f"/{dialect}/v1/responses", json=body)


def text_of(response: httpx.Response) -> str:
    """The answer's text, from a response that validates."""
    assert response.status_code == 200, response.text
    return Response.model_validate(response.json()).output_text


def joined(events: list[dict[str, Any]], kind: str) -> str:
    """The text the deltas of one kind add up to."""
    return "".join(e["delta"] for e in events if e["type"] == kind)


def of_type(items: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [i for i in items if i["type"] == kind]


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


# --- the shapes, validated -----------------------------------------------------------------------


@pytest.mark.parametrize("dialect", NATIVE)
@pytest.mark.parametrize("tools", [[], [WEATHER]])
async def test_non_stream_answer_is_a_valid_response(
    client: httpx.AsyncClient, dialect: str, tools: list[Any]
) -> None:
    body = ask(dialect, tools=tools, reasoning={"summary": "auto"}, include=["reasoning.encrypted_content"])
    response = await post(client, body, dialect)
    assert response.status_code == 200, response.text
    parsed = Response.model_validate(response.json())
    assert parsed.status == "completed" and parsed.id.startswith("resp_")
    kinds = [item.type for item in parsed.output]
    assert kinds == ["reasoning", "function_call" if tools else "message"]
    assert parsed.usage is not None and parsed.usage.output_tokens_details.reasoning_tokens > 0
    assert parsed.usage.total_tokens == parsed.usage.input_tokens + parsed.usage.output_tokens


@pytest.mark.parametrize("dialect", NATIVE)
@pytest.mark.parametrize("tools", [[], [WEATHER]])
async def test_stream_events_validate_and_add_up_to_the_final_response(
    client: httpx.AsyncClient, dialect: str, tools: list[Any]
) -> None:
    body = ask(dialect, tools=tools, stream=True, reasoning={"summary": "detailed"})
    response = await post(client, body, dialect)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert b"[DONE]" not in response.content
    events = read_events(response.content)
    types = [e["type"] for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert types[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    output = events[-1]["response"]["output"]
    assert [e["item"] for e in events if e["type"] == "response.output_item.done"] == output
    final = Response.model_validate(events[-1]["response"])
    summary = [p.text for item in final.output if item.type == "reasoning" for p in item.summary]
    assert joined(events, "response.reasoning_summary_text.delta") == "".join(summary) != ""
    if tools:
        arguments = of_type(output, "function_call")[0]["arguments"]
        assert joined(events, "response.function_call_arguments.delta") == arguments == '{"city":"Paris"}'
    else:
        assert joined(events, "response.output_text.delta") == final.output_text
        assert "Café ✓ weather in Paris" in final.output_text


async def test_stream_split_at_every_byte_parses_to_the_same_events(client: httpx.AsyncClient) -> None:
    body = ask(stream=True, reasoning={"summary": "auto"}, include=["reasoning.encrypted_content"])
    raw = (await client.post("/openai/v1/responses", json=body, headers={"X-Mock-Chunk-Chars": "3"})).content
    whole = SseReader().feed(raw)
    assert len(whole) > 20 and "✓" in raw.decode()
    for offset in range(len(raw) + 1):
        reader = SseReader()
        assert reader.feed(raw[:offset]) + reader.feed(raw[offset:]) == whole, offset


async def test_reasoning_text_shows_on_self_hosted_servers_only(client: httpx.AsyncClient) -> None:
    vllm = (await post(client, ask("vllm", stream=True), "vllm")).content
    openai = (await post(client, ask("openai", stream=True))).content
    vllm_types = {e["type"] for e in read_events(vllm)}
    assert {"response.reasoning_text.delta", "response.reasoning_text.done"} <= vllm_types
    openai_events = read_events(openai)
    assert not any("reasoning_text" in e["type"] or "summary" in e["type"] for e in openai_events)
    reasoning = of_type(openai_events[-1]["response"]["output"], "reasoning")
    assert reasoning == [{"id": reasoning[0]["id"], "type": "reasoning", "summary": []}]  # nothing asked


async def test_openai_pads_deltas_with_obfuscation(client: httpx.AsyncClient) -> None:
    events = read_events((await post(client, ask(stream=True))).content)
    deltas = [e for e in events if e["type"].endswith(".delta")]
    assert deltas and all("obfuscation" in e for e in deltas)


async def test_custom_tools_are_called_with_free_text(client: httpx.AsyncClient) -> None:
    tool = {"type": "custom", "name": "run_sql", "description": "Run one SQL query"}
    body = ask(input="Count the users", tools=[tool], stream=True)
    events = read_events((await post(client, body)).content)
    call = of_type(events[-1]["response"]["output"], "custom_tool_call")[0]
    assert call["name"] == "run_sql" and call["input"] == "Count the users"
    assert joined(events, "response.custom_tool_call_input.delta") == call["input"]
    follow_up = [
        {"role": "user", "content": "Count the users"},
        *events[-1]["response"]["output"],
        {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "42"},
    ]
    assert 'The run_sql tool returned: "42"' in text_of(
        await post(client, ask(input=follow_up, tools=[tool]))
    )


async def test_hosted_tools_are_accepted_and_never_called(client: httpx.AsyncClient) -> None:
    response = await post(client, ask(tools=[{"type": "web_search"}]))
    parsed = Response.model_validate(response.json())
    assert [item.type for item in parsed.output] == ["reasoning", "message"]


# --- reasoning.effort -----------------------------------------------------------------------------


def test_the_accepted_efforts_are_the_sdks() -> None:
    assert set(EFFORTS) == set(
        typing.get_args(typing.get_args(Reasoning.model_fields["effort"].annotation)[0])
    )


async def test_an_effort_outside_the_list_is_openais_invalid_value(client: httpx.AsyncClient) -> None:
    response = await post(client, ask(reasoning={"effort": "extreme"}))
    assert response.status_code == 400
    assert error_of(response) == {
        "message": "Invalid value: 'extreme'. Supported values are: 'none', 'minimal', 'low', 'medium', "
        "'high', 'xhigh', and 'max'.",
        "type": "invalid_request_error",
        "param": "reasoning.effort",
        "code": "invalid_value",
    }


async def test_an_effort_the_model_does_not_take_is_unsupported(client: httpx.AsyncClient) -> None:
    minimal = await post(client, ask(reasoning={"effort": "minimal"}))
    assert minimal.status_code == 400
    assert (
        error_of(minimal)["param"] == "reasoning.effort" and error_of(minimal)["code"] == "unsupported_value"
    )
    non_reasoning = await post(client, ask(model="gpt-4.1-mini", reasoning={"effort": "low"}))
    assert error_of(non_reasoning)["code"] == "unsupported_parameter"


async def test_effort_sets_how_much_the_model_thinks(client: httpx.AsyncClient) -> None:
    def reasoning_tokens(response: httpx.Response) -> int:
        tokens: int = response.json()["usage"]["output_tokens_details"]["reasoning_tokens"]
        return tokens

    none = await post(client, ask(reasoning={"effort": "none"}))
    low = await post(client, ask(reasoning={"effort": "low"}))
    high = await post(client, ask(reasoning={"effort": "high"}))
    assert of_type(none.json()["output"], "reasoning") == [] and reasoning_tokens(none) == 0
    assert none.json()["reasoning"]["effort"] == "none"
    assert 0 < reasoning_tokens(low) < reasoning_tokens(high)


# --- request validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message", "param", "code"),
    [
        ({"input": "hi"}, "Missing required parameter: 'model'.", "model", "missing_required_parameter"),
        (
            {"model": "gpt-5.1", "input": "hi", "tools": [{"type": "function", "function": {"name": "f"}}]},
            "Missing required parameter: 'tools[0].name'.",
            "tools[0].name",
            "missing_required_parameter",
        ),
        (
            {"model": "gpt-5.1", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "Missing required parameter: 'input[0].call_id'.",
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"model": "gpt-5.1", "input": {"role": "user"}},
            "Invalid type for 'input': expected one of a string or array of input items, "
            "but got an object instead.",
            "input",
            "invalid_type",
        ),
        (
            {"model": "gpt-5.1", "input": "hi", "max_output_tokens": 10},
            "Invalid 'max_output_tokens': integer below minimum value. "
            "Expected a value >= 16, but got 10 instead.",
            "max_output_tokens",
            "integer_below_min_value",
        ),
    ],
)
async def test_request_errors_are_openais(
    client: httpx.AsyncClient, body: dict[str, Any], message: str, param: str, code: str
) -> None:
    response = await post(client, body)
    assert response.status_code == 400
    assert error_of(response) == {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": code,
    }


async def test_a_body_that_is_not_json_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.post("/openai/v1/responses", content=b"{not json")
    assert response.status_code == 400 and "parse" in error_of(response)["message"]


# --- the stateless reasoning rule -------------------------------------------------------------------


async def first_turn(client: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    body = ask(**{"tools": [WEATHER], "store": False, "include": ["reasoning.encrypted_content"], **extra})
    response = await post(client, body)
    assert response.status_code == 200
    output: dict[str, Any] = response.json()
    return output


def second_turn(items: list[dict[str, Any]], call_id: str, **extra: Any) -> dict[str, Any]:
    conversation = [
        {"role": "user", "content": QUESTION},
        *items,
        {"type": "function_call_output", "call_id": call_id, "output": "Sunny, 21 °C"},
    ]
    return ask(input=conversation, tools=[WEATHER], store=False, **extra)


async def test_store_false_tool_call_without_its_reasoning_is_refused(client: httpx.AsyncClient) -> None:
    reasoning, call = (await first_turn(client))["output"]
    response = await post(client, second_turn([call], call["call_id"]))
    assert response.status_code == 400
    assert error_of(response) == {
        "message": f"Item '{call['id']}' of type 'function_call' was provided without its required "
        f"'reasoning' item: '{reasoning['id']}'.",
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }
    without_ids = {k: v for k, v in call.items() if k != "id"}
    by_call_id = await post(client, second_turn([without_ids], call["call_id"]))
    assert error_of(by_call_id)["message"].startswith(f"Item '{call['call_id']}' of type 'function_call'")


async def test_store_false_tool_call_with_the_mocks_sealed_reasoning_is_answered(
    client: httpx.AsyncClient,
) -> None:
    reasoning, call = (await first_turn(client))["output"]
    assert reasoning["encrypted_content"].startswith("gAAAAA")
    as_returned = await post(client, second_turn([reasoning, call], call["call_id"]))
    assert 'The get_weather tool returned: "Sunny, 21 °C"' in text_of(as_returned)
    stripped = {k: v for k, v in reasoning.items() if k in ("type", "summary", "encrypted_content")}
    assert (await post(client, second_turn([stripped, call], call["call_id"]))).status_code == 200


async def test_a_forged_or_foreign_blob_is_refused(client: httpx.AsyncClient) -> None:
    reasoning, call = (await first_turn(client))["output"]
    blob = reasoning["encrypted_content"]
    forged = blob[:-8] + ("A" if blob[-8] != "A" else "B") + blob[-7:]
    assert unseal(forged) is None and unseal(blob) is not None
    response = await post(
        client, second_turn([{**reasoning, "encrypted_content": forged}, call], call["call_id"])
    )
    assert response.status_code == 400
    assert error_of(response) == {
        "message": f"The encrypted content {forged[:4]}...{forged[-4:]} could not be verified.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_encrypted_content",
    }
    other = {**reasoning, "encrypted_content": seal("rs_other", "someone else's thoughts", 1)}
    wrong_one = await post(client, second_turn([other, call], call["call_id"]))
    assert "without its required 'reasoning' item" in error_of(wrong_one)["message"]


async def test_reasoning_must_come_in_the_same_turn(client: httpx.AsyncClient) -> None:
    reasoning, call = (await first_turn(client))["output"]
    body = second_turn([reasoning, {"role": "user", "content": "and now?"}, call], call["call_id"])
    assert (await post(client, body)).status_code == 400


async def test_store_false_reasoning_without_its_blob_is_not_found(client: httpx.AsyncClient) -> None:
    reasoning, call = (await first_turn(client, include=[]))["output"]
    assert "encrypted_content" not in reasoning
    response = await post(client, second_turn([reasoning, call], call["call_id"]))
    assert response.status_code == 404
    assert error_of(response)["message"] == (
        f"Item with id '{reasoning['id']}' not found. Items are not persisted when `store` is set to false. "
        "Try again with `store` set to true, or remove this item from your input."
    )


async def test_a_reasoning_item_needs_a_following_item(client: httpx.AsyncClient) -> None:
    reasoning, _ = (await first_turn(client))["output"]
    body = ask(input=[{"role": "user", "content": QUESTION}, reasoning], store=False)
    response = await post(client, body)
    assert error_of(response)["message"] == (
        f"Item '{reasoning['id']}' of type 'reasoning' was provided without its required following item."
    )


async def test_a_call_answered_without_reasoning_needs_none(client: httpx.AsyncClient) -> None:
    (call,) = (await first_turn(client, reasoning={"effort": "none"}))["output"]
    assert (await post(client, second_turn([call], call["call_id"]))).status_code == 200


# --- store, ids and previous_response_id ----------------------------------------------------------------


async def test_stored_responses_continue_by_previous_response_id(client: httpx.AsyncClient) -> None:
    first = (await post(client, ask(tools=[WEATHER]))).json()
    call = of_type(first["output"], "function_call")[0]
    output = [{"type": "function_call_output", "call_id": call["call_id"], "output": "Rain"}]
    follow = await post(client, ask(input=output, tools=[WEATHER], previous_response_id=first["id"]))
    assert 'The get_weather tool returned: "Rain"' in text_of(follow)
    by_reference = [
        {"role": "user", "content": QUESTION},
        *({"type": "item_reference", "id": i["id"]} for i in first["output"]),
    ]
    assert (await post(client, ask(input=[*by_reference, *output], tools=[WEATHER]))).status_code == 200


async def test_unknown_ids_are_not_found(client: httpx.AsyncClient) -> None:
    missing = await post(client, ask(previous_response_id="resp_nope"))
    assert missing.status_code == 400
    assert error_of(missing) == {
        "message": "Previous response with id 'resp_nope' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }
    unstored = (await first_turn(client))["id"]
    assert (
        error_of(await post(client, ask(previous_response_id=unstored)))["code"]
        == "previous_response_not_found"
    )
    call = {
        "type": "function_call",
        "id": "fc_nope",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": "{}",
    }
    response = await post(client, ask(input=[{"role": "user", "content": "hi"}, call]))
    assert response.status_code == 404
    assert error_of(response)["message"] == "Item with id 'fc_nope' not found."


async def test_max_output_tokens_cuts_the_answer(client: httpx.AsyncClient) -> None:
    body = ask(max_output_tokens=40, reasoning={"effort": "low"})
    whole = Response.model_validate((await post(client, body)).json())
    assert whole.status == "incomplete" and whole.incomplete_details is not None
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.usage is not None and whole.usage.output_tokens <= 40
    events = read_events((await post(client, {**body, "stream": True})).content)
    assert events[-1]["type"] == "response.incomplete"


# --- routes, faults, the log ---------------------------------------------------------------------


async def test_a_provider_without_the_api_answers_its_unknown_path_404(client: httpx.AsyncClient) -> None:
    deepseek = await client.post("/deepseek/v1/responses", json=ask())
    assert deepseek.status_code == 404
    assert deepseek.json()["error_msg"] == "Not Found. Please check the configuration."
    mistral = await client.post("/mistral/responses", json=ask())
    assert (mistral.status_code, mistral.text) == (404, "Not Found")
    default = await client.post("/v1/responses", json=ask(), headers={"X-Mock-Fault": "429"})
    assert default.status_code == 404  # the route does not exist; no fault is served on it
    unknown = await client.post("/nope/v1/responses", json=ask())
    assert unknown.status_code == 404 and "deepseek" in error_of(unknown)["message"]


async def test_responses_are_logged_like_chat(client: httpx.AsyncClient) -> None:
    await client.post(
        "/openai/responses", json=ask(), headers={"Authorization": "Bearer sk-live-0123456789abcd"}
    )
    last = (await client.get("/_mock/requests/last")).json()
    assert (last["path"], last["dialect"], last["body"]) == ("/openai/responses", "openai", ask())
    assert last["headers"]["authorization"] == "Bearer sk-…abcd"


async def test_the_index_names_the_route(client: httpx.AsyncClient) -> None:
    index = (await client.get("/")).json()
    assert "POST [/{dialect}]/v1/responses" in index["routes"]
    assert set(index["responses_dialects"]) == set(NATIVE)


async def test_status_faults_apply(client: httpx.AsyncClient) -> None:
    limited = await client.post("/openai/v1/responses", json=ask(), headers={"X-Mock-Fault": "429"})
    assert limited.status_code == 429 and limited.headers["retry-after"] == "7"
    refused = await client.post("/openai/v1/responses", json=ask(), headers={"X-Mock-Fault": "400"})
    assert error_of(refused)["param"] == "reasoning.effort"


async def test_stream_faults_apply(client: httpx.AsyncClient) -> None:
    with pytest.raises(MockDisconnect):
        await client.post(
            "/openai/v1/responses", json=ask(stream=True), headers={"X-Mock-Fault": "disconnect"}
        )
    broken = await client.post(
        "/openai/v1/responses", json=ask(stream=True), headers={"X-Mock-Fault": "invalid-json"}
    )
    data = [d for _, d in SseReader().feed(broken.content)]
    assert sum(1 for d in data if not parses(d)) == 1  # one data line cut in the middle
    huge = await client.post(
        "/openai/v1/responses",
        json=ask(stream=True),
        headers={"X-Mock-Fault": "huge-line", "X-Mock-Huge-Bytes": "300000"},
    )
    lines = [line for line in huge.content.split(b"\n") if len(line) > 100_000]
    assert [len(line) for line in lines] == [300_000]
    assert orjson.loads(lines[0].removeprefix(b"data: "))["type"] == "response.output_text.delta"
    zipped = await client.post(
        "/openai/v1/responses", json=ask(stream=True), headers={"X-Mock-Fault": "gzip"}
    )
    assert read_events(zipped.content)[-1]["type"] == "response.completed"  # httpx decodes it


def parses(data: str) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True
