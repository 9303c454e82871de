"""`GET /v1/responses/{id}/input_items` (proxy.server.doors.responses_input_items) through a real
door bridged onto the simulated DeepSeek, read with openai-python's own `input_items.list` (which
sends `include[]`, `limit`, `order` and follows `after` itself), checked against its types and
the Open Responses item schema; per tenant; native upstreams' ids still forwarded."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import ResponseItem
from openai.types.responses.response_item_list import ResponseItemList

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import OpenResponsesSchema, Recorder, make_settings

MODEL = "deepseek-v4-pro"
ITEM = pydantic.TypeAdapter(ResponseItem)
SCHEMA = OpenResponsesSchema()
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1")
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
        yield server


def sdk(proxy: BackgroundServer, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0, timeout=20)


def conversation(proxy: BackgroundServer) -> tuple[Any, Any, Any]:
    """A tool loop continued by id: the call, its result sent back, then one more question."""
    client = sdk(proxy)
    first = client.responses.create(
        model=MODEL,
        instructions="Be brief.",
        input=[{"role": "user", "content": "What's the weather in Paris? Use get_weather."}],
        tools=[WEATHER],
        reasoning={"effort": "high"},
    )
    call = next(o for o in first.output if o.type == "function_call")
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}],
        tools=[WEATHER],
        reasoning={"effort": "high"},
    )
    third = client.responses.create(
        model=MODEL, previous_response_id=second.id, input="And tomorrow?", reasoning={"effort": "high"}
    )
    return first, second, third


def conforms(item: dict[str, Any]) -> None:
    ITEM.validate_python(item)
    if item["type"] in ("message", "function_call", "function_call_output", "reasoning"):
        assert SCHEMA.errors(item, "ItemField") == [], item


def test_the_items_a_response_was_made_from_in_the_clients_own_list(proxy: BackgroundServer) -> None:
    first, second, third = conversation(proxy)
    client = sdk(proxy)
    # Default order desc, as OpenAI: the latest input first.
    listed = client.responses.input_items.list(third.id)
    items = [item.model_dump(exclude_none=True) for item in listed.data]
    expected = [
        "message",
        *(o.type for o in first.output),
        "function_call_output",
        *(o.type for o in second.output),
    ]
    assert [i["type"] for i in reversed(items)] == [*expected, "message"]
    assert items[0]["role"] == "user" and items[0]["content"] == [
        {"type": "input_text", "text": "And tomorrow?"}
    ]
    assert items[-1]["content"][0]["text"].startswith("What's the weather")
    assert listed.has_more is False
    for item in items:
        conforms(item)
    # The model's own output items keep their ids; the client's get stable ones.
    ids = [i["id"] for i in items]
    assert len(set(ids)) == len(ids)
    assert {o.id for o in first.output} <= set(ids)
    again = [i.id for i in client.responses.input_items.list(third.id).data]
    assert again == ids
    # Only the response's own turn and its chain: the first response lists its question alone.
    (only,) = client.responses.input_items.list(first.id).data
    assert only.type == "message" and only.id == ids[-1]


def test_pages_follow_after_in_either_order_with_the_clients_paginator(proxy: BackgroundServer) -> None:
    _, _, third = conversation(proxy)
    client = sdk(proxy)
    whole = [i.id for i in client.responses.input_items.list(third.id, order="asc", limit=100).data]
    page = client.responses.input_items.list(third.id, order="asc", limit=2)
    assert [i.id for i in page.data] == whole[:2] and page.has_more is True
    assert [i.id for i in page] == whole  # (iterating asks for the next pages with `after`)
    assert [i.id for i in client.responses.input_items.list(third.id, limit=3)] == whole[::-1]
    raw = httpx.get(
        f"{proxy.url}/v1/responses/{third.id}/input_items",
        params={"order": "asc", "before": whole[3], "limit": 2},
        headers={"authorization": "Bearer sk-test"},
    ).json()
    listed = ResponseItemList.model_validate(raw)
    assert [i.id for i in listed.data] == whole[1:3] and listed.has_more is True
    assert (listed.first_id, listed.last_id, listed.object) == (whole[1], whole[2], "list")
    included = client.responses.input_items.list(
        third.id, include=["reasoning.encrypted_content"], order="asc"
    )
    assert [i.id for i in included.data] == whole[:20]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"order": "newest"}, "order"),
        ({"include[]": "reasoning.everything"}, "include"),
        ({"after": "msg_nowhere"}, "after"),
    ],
)
def test_a_bad_query_is_a_400_naming_its_parameter(
    proxy: BackgroundServer, query: dict[str, str], param: str
) -> None:
    response = sdk(proxy).responses.create(model=MODEL, input="Hi")
    r = httpx.get(
        f"{proxy.url}/v1/responses/{response.id}/input_items",
        params=query,
        headers={"authorization": "Bearer sk-test"},
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert next(iter(query.values())) in error["message"]


def test_another_tenants_response_and_an_unknown_id_are_404s(proxy: BackgroundServer) -> None:
    response = sdk(proxy).responses.create(model=MODEL, input="My name is Ada.")
    with pytest.raises(openai.NotFoundError, match="not found"):
        sdk(proxy, key="sk-other").responses.input_items.list(response.id)
    with pytest.raises(openai.NotFoundError, match="not found"):
        sdk(proxy).responses.input_items.list("resp_unknown")


def test_a_deleted_earlier_turn_is_a_404_that_names_it(proxy: BackgroundServer) -> None:
    first, _, third = conversation(proxy)
    client = sdk(proxy)
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError, match=f"continues response '{first.id}'"):
        client.responses.input_items.list(third.id)


async def test_a_native_upstreams_id_is_still_forwarded() -> None:
    """OpenAI's own stored responses: the list comes from the upstream, query and all."""
    answer = {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    rec = Recorder(lambda request: httpx.Response(200, json=answer))
    settings = make_settings(upstream_base_url="https://api.openai.com/v1")
    app = create_app(settings, transport=httpx.MockTransport(rec))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        r = await client.get(
            "/v1/responses/resp_upstreams/input_items",
            params={"limit": 5},
            headers={"authorization": "Bearer k"},
        )
    assert r.status_code == 200 and r.json() == answer
    (sent,) = rec.requests
    assert str(sent.url) == "https://api.openai.com/v1/responses/resp_upstreams/input_items?limit=5"


def test_gateway_mode_another_tenants_response_is_a_404(mock: BackgroundServer) -> None:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        client_keys=["ck-alice", "ck-bob"],
        upstream_api_key="sk-operator",
    )
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as gateway:
        alice, bob = sdk(gateway, key="ck-alice"), sdk(gateway, key="ck-bob")
        response = alice.responses.create(model=MODEL, input="My name is Ada.")
        (item,) = alice.responses.input_items.list(response.id).data
        assert item.type == "message" and item.role == "user"
        with pytest.raises(openai.NotFoundError, match=f"Response with id '{response.id}' not found"):
            bob.responses.input_items.list(response.id)


def test_a_continuation_that_echoes_its_previous_output_pages_to_an_end(proxy: BackgroundServer) -> None:
    """Its input repeats the previous turn's output items, ids and all (and refers to one of them by
    `item_reference`): every id is listed once, so openai-python's paginator, following `after`,
    reads each item once and stops."""
    client = sdk(proxy)
    first = client.responses.create(model=MODEL, input="Hi", reasoning={"effort": "high"})
    echoed = [o.model_dump(exclude_none=True) for o in first.output]
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[
            *echoed,
            {"type": "item_reference", "id": first.output[-1].id},
            {"role": "user", "content": "More"},
        ],
    )
    whole = [i.id for i in client.responses.input_items.list(second.id, order="asc", limit=100).data]
    assert len(set(whole)) == len(whole) == 2 + len(first.output)
    for order in ("asc", "desc"):
        paged = list(itertools.islice(client.responses.input_items.list(second.id, order=order, limit=1), 20))
        assert [i.id for i in paged] == (whole if order == "asc" else whole[::-1])
