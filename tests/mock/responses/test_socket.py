"""The simulated upstream's Responses WebSocket mode (proxy.mock.responses.socket): the rules the
proxy's upstream socket is held to (one response at a time, connection-local state, OpenAI's event
names and error events), and the refusal of a provider that does not serve the mode."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponsesServerEvent
from starlette.testclient import TestClient, WebSocketDenialResponse

from proxy.mock import MockOptions, create_mock_app

SERVER_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponsesServerEvent)
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
PATH = "/openai/v1/responses"


@pytest.fixture
def client() -> Any:
    with TestClient(create_mock_app(MockOptions(default_dialect="openai"))) as c:
        yield c


def create(**body: Any) -> str:
    return json.dumps({"type": "response.create", "model": "gpt-5.4", **body})


def turn(ws: Any) -> list[dict[str, Any]]:
    events = []
    while not events or events[-1]["type"] not in TERMINAL:
        event = json.loads(ws.receive_text())
        SERVER_EVENT.validate_python(event)
        events.append(event)
    return events


def test_a_turn_is_the_http_streams_events_one_message_each(client: TestClient) -> None:
    with client.websocket_connect(PATH) as ws:
        ws.send_text(create(input="Hi", reasoning={"effort": "high", "summary": "auto"}, stream_id="s1"))
        events = turn(ws)
    posted = client.post(
        PATH,
        json={
            "model": "gpt-5.4",
            "input": "Hi",
            "stream": True,
            "reasoning": {"effort": "high", "summary": "auto"},
        },
    )
    sse = [json.loads(line[6:])["type"] for line in posted.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == sse
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert {e["stream_id"] for e in events} == {"s1"}


def test_one_response_at_a_time_a_second_create_gets_the_error_event(client: TestClient) -> None:
    with client.websocket_connect(PATH, headers={"x-mock-pace-ms": "20"}) as ws:
        ws.send_text(create(input="Tell me a story."))
        ws.send_text(create(input="And another."))
        events = turn(ws)
        refused = events[-1] if events[-1]["type"] == "error" else None
        if refused is not None:  # (the refusal came first: the running one goes on)
            events = turn(ws)
        else:
            refused = turn(ws)[-1]
    assert refused["status"] == 400 and refused["error"]["code"] == "response_in_progress"
    assert events[-1]["type"] == "response.completed"


def test_previous_response_id_with_store_false_continues_only_on_its_own_connection(
    client: TestClient,
) -> None:
    with client.websocket_connect(PATH) as ws:
        ws.send_text(create(input="Hi", store=False))
        first = turn(ws)[-1]["response"]["id"]
        ws.send_text(create(input="Again", store=False, previous_response_id=first))
        again = turn(ws)[-1]
    with client.websocket_connect(PATH) as other:
        other.send_text(create(input="More", store=False, previous_response_id=first))
        refused = turn(other)[-1]
    assert again["type"] == "response.completed"
    assert refused["type"] == "error" and refused["status"] == 400
    assert refused["error"]["code"] == "previous_response_not_found"
    assert refused["error"]["param"] == "previous_response_id"
    over_http = client.post(PATH, json={"model": "gpt-5.4", "input": "x", "previous_response_id": first})
    assert over_http.status_code == 400


def test_a_warm_up_makes_a_response_without_output(client: TestClient) -> None:
    with client.websocket_connect(PATH) as ws:
        ws.send_text(create(input="Context.", generate=False, store=False))
        warm = turn(ws)
        ws.send_text(create(input="Go.", store=False, previous_response_id=warm[-1]["response"]["id"]))
        answered = turn(ws)[-1]
    assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
    assert warm[-1]["response"]["output"] == []
    assert answered["type"] == "response.completed"


def test_messages_the_mode_does_not_take_are_error_events(client: TestClient) -> None:
    with client.websocket_connect(PATH) as ws:
        ws.send_text(create(input="Hi", background=True))
        background = json.loads(ws.receive_text())
        ws.send_text(json.dumps({"type": "response.append", "input": []}))
        unknown = json.loads(ws.receive_text())
        ws.send_bytes(create(input="Hi").encode())
        binary = json.loads(ws.receive_text())
        ws.send_text(create(input="Hi"))
        done = turn(ws)[-1]
    assert background["error"]["param"] == "background"
    assert unknown["error"]["code"] == "unknown_event_type"
    assert binary["type"] == "error" and "text" in binary["error"]["message"]
    assert done["type"] == "response.completed"


@pytest.mark.parametrize("prefix", ["openrouter", "deepseek"])
def test_a_provider_without_the_mode_refuses_the_upgrade(client: TestClient, prefix: str) -> None:
    with (
        pytest.raises(WebSocketDenialResponse) as refused,
        client.websocket_connect(f"/{prefix}/v1/responses"),
    ):
        pass
    assert refused.value.status_code == 404


def test_the_log_has_the_upgrade_each_message_and_the_close(client: TestClient) -> None:
    client.delete("/_mock/requests")
    with client.websocket_connect(PATH, headers={"authorization": "Bearer sk-abcdefghij"}) as ws:
        ws.send_text(create(input="Hi"))
        turn(ws)
    log = client.get("/_mock/requests").json()
    assert [r["method"] for r in log] == ["GET", "WS", "WS"]
    assert log[0]["headers"]["authorization"] == "Bearer sk-…ghij"
    assert log[1]["body"]["type"] == "response.create"
    assert log[2]["body"] == {"type": "websocket.close", "mid_response": False}
