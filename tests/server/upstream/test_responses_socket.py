"""A Responses WebSocket's native turns relayed over one upstream WebSocket
(proxy.server.upstream.responses_socket), against the simulated OpenAI's WebSocket mode
(proxy.mock.responses.socket): what the upstream saw (one upgrade, `response.create` messages,
no POSTs, the level in each), openai-python's `responses.connect()` through the proxy, the
fallback to HTTP for an upstream that refuses the upgrade, and a client gone mid-turn."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import ResponsesServerEvent
from starlette.applications import Starlette
from starlette.testclient import TestClient
from websockets.sync.client import connect

from proxy.core.config.providers import ProvidersTable
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.server.upstream.responses_socket import (
    UPSTREAM_TRANSPORT_HEADER,
    create_message,
    upgrade_headers,
    ws_url,
)
from proxy.simulated import simulated_providers_text
from tests.helpers import Ended, make_settings

SERVER_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponsesServerEvent)
MODEL = "gpt-5.4"
KEY = {"authorization": "Bearer sk-socket-test"}
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def mock() -> Iterator[BackgroundServer]:
    """A fresh simulated upstream per test: its request log is the test's alone."""
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="openai"))) as server:
        yield server


def app_for(mock: BackgroundServer, prefix: str = "openai", table: ProvidersTable | None = None) -> Starlette:
    settings = make_settings(upstream_base_url=f"{mock.url}/{prefix}/v1", state="off")
    return create_app(settings, table=table or simulated_table(mock.port), listeners=[ENDED])


ENDED = Ended()


def seen(mock: BackgroundServer) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = httpx.get(f"{mock.url}/_mock/requests").json()
    return found


def creates(mock: BackgroundServer) -> list[dict[str, Any]]:
    return [r["body"] for r in seen(mock) if r["method"] == "WS" and r["body"]["type"] == "response.create"]


def create(**body: Any) -> str:
    return json.dumps({"type": "response.create", "model": MODEL, **body})


def turn(ws: Any) -> list[dict[str, Any]]:
    events = []
    while True:
        event = json.loads(ws.receive_text())
        SERVER_EVENT.validate_python(event)
        events.append(event)
        if event["type"] in TERMINAL:
            return events


# -- the pure parts --------------------------------------------------------------------------------


def test_the_post_becomes_a_response_create_and_its_url_and_headers_the_upgrades() -> None:
    body = json.dumps({"model": MODEL, "input": "Hi", "stream": True, "reasoning": {"effort": "high"}})
    message = json.loads(create_message(body.encode(), generate=True))
    assert message == {
        "type": "response.create",
        "model": MODEL,
        "input": "Hi",
        "reasoning": {"effort": "high"},
    }
    assert json.loads(create_message(body.encode(), generate=False))["generate"] is False
    assert ws_url("https://api.openai.com/v1/responses") == "wss://api.openai.com/v1/responses"
    assert ws_url("http://127.0.0.1:9/openai/v1/responses") == "ws://127.0.0.1:9/openai/v1/responses"
    headers = [
        ("authorization", "Bearer sk-x"),
        ("content-type", "application/json"),
        ("content-length", "12"),
        ("accept-encoding", "identity"),
        ("OpenAI-Organization", "org-1"),
        ("sec-websocket-key", "abc"),
    ]
    assert upgrade_headers(headers) == [("authorization", "Bearer sk-x"), ("OpenAI-Organization", "org-1")]


# -- one upstream socket, the level in each create ------------------------------------------------------


def test_native_turns_go_over_one_upstream_websocket_with_the_level_in_each_create(
    mock: BackgroundServer,
) -> None:
    headers = {**KEY, "x-thinking-level": "deep"}
    with (
        TestClient(app_for(mock)) as client,
        client.websocket_connect("/v1/responses", headers=headers) as ws,
    ):
        ws.send_text(create(input="Hi there", store=False))
        first = turn(ws)
        # store false: continued from the upstream socket's own state (the mock keeps it per socket)
        ws.send_text(create(input="And again", store=False, previous_response_id=first[-1]["response"]["id"]))
        second = turn(ws)
        ws.send_text(create(input="Think less", reasoning={"effort": "low"}))  # (overrides the level)
        third = turn(ws)
    assert [t[-1]["type"] for t in (first, second, third)] == ["response.completed"] * 3
    log = seen(mock)
    upgrades = [r for r in log if r["method"] == "GET"]
    assert len(upgrades) == 1 and upgrades[0]["path"] == "/openai/v1/responses"
    assert upgrades[0]["headers"]["authorization"] == "Bearer sk-…test"  # (the key, as the POST sends it)
    assert "x-thinking-level" not in upgrades[0]["headers"]
    assert not [r for r in log if r["method"] == "POST"]
    sent = creates(mock)
    assert [m["reasoning"]["effort"] for m in sent] == ["high", "high", "low"]
    assert all("stream" not in m and "generate" not in m for m in sent)
    assert sent[1]["previous_response_id"] == first[-1]["response"]["id"]
    assert log[-1]["body"] == {"type": "websocket.close", "mid_response": False}  # closed with the client's
    turns = [r for r in ENDED.records if r.method == "WS"][-3:]
    assert [dict(r.response_headers).get(UPSTREAM_TRANSPORT_HEADER) for r in turns] == ["websocket"] * 3
    assert [r.level for r in turns][:2] == ["deep", "deep"]


def test_a_response_append_reaches_the_upstream_socket_as_a_create_continuing_the_last_response(
    mock: BackgroundServer,
) -> None:
    added = [{"role": "user", "content": "And again"}]
    with (
        TestClient(app_for(mock)) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ws.send_text(create(input="Hi there", store=False))
        first = turn(ws)[-1]["response"]
        ws.send_text(json.dumps({"type": "response.append", "input": added}))
        second = turn(ws)[-1]
    assert second["type"] == "response.completed"
    sent = creates(mock)[-2:]
    assert sent[1]["previous_response_id"] == first["id"] and sent[1]["input"] == added
    assert sent[1]["store"] is False and sent[1]["model"] == sent[0]["model"]
    assert not [r for r in seen(mock) if r["method"] == "WS" and r["body"]["type"] == "response.append"]


def test_in_gateway_mode_a_store_false_response_is_continued_on_its_socket_by_its_client_only(
    mock: BackgroundServer,
) -> None:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/openai/v1", state="on", gateway_mode=True, client_keys=["sk-a", "sk-b"]
    )
    app = create_app(settings, table=simulated_table(mock.port))
    with TestClient(app) as client:
        with client.websocket_connect("/v1/responses", headers={"authorization": "Bearer sk-a"}) as ws:
            ws.send_text(create(input="Hi", store=False))
            first = turn(ws)[-1]["response"]["id"]
            ws.send_text(create(input="Again", store=False, previous_response_id=first))
            again = turn(ws)[-1]
        with client.websocket_connect("/v1/responses", headers={"authorization": "Bearer sk-b"}) as ws:
            ws.send_text(create(input="Mine now", store=False, previous_response_id=first))
            other = turn(ws)[-1]
    assert again["type"] == "response.completed"
    assert other["type"] == "error" and other["status"] in (400, 404)
    assert len(creates(mock)) == 2  # (the other client's turn never reached the upstream)


def test_a_warm_up_goes_to_the_upstream_socket_and_is_continued(mock: BackgroundServer) -> None:
    with (
        TestClient(app_for(mock)) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ws.send_text(create(input="You will be asked about Paris.", generate=False, store=False))
        warm = turn(ws)
        ws.send_text(
            create(input="What is it?", store=False, previous_response_id=warm[-1]["response"]["id"])
        )
        answered = turn(ws)
    assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
    assert warm[-1]["response"]["output"] == []
    assert answered[-1]["type"] == "response.completed"
    assert [m.get("generate") for m in creates(mock)] == [False, None]


def test_an_upstream_error_event_is_the_turns_error_with_its_status(mock: BackgroundServer) -> None:
    headers = {**KEY, "x-mock-fault": "429"}
    with (
        TestClient(app_for(mock)) as client,
        client.websocket_connect("/v1/responses", headers=headers) as ws,
    ):
        ws.send_text(create(input="Hi"))
        first = turn(ws)
        ws.send_text(create(input="Hi again"))
        second = turn(ws)
    assert [e["type"] for e in first] == ["error"]
    assert first[0]["status"] == 429 and first[0]["error"]["code"] == "rate_limit_exceeded"
    assert second[-1]["status"] == 429
    assert len([r for r in seen(mock) if r["method"] == "GET"]) == 1  # (the socket stayed open)
    assert ENDED.records[-1].upstream_status == 429


def test_an_upstream_socket_closed_mid_turn_ends_it_with_an_error_event_and_the_next_opens_another(
    mock: BackgroundServer,
) -> None:
    cut = {**KEY, "x-mock-fault": "disconnect"}
    with (
        BackgroundServer(app_for(mock)) as server,
        connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=cut) as ws,
    ):
        ends = []
        for _ in range(2):
            ws.send(create(input="Hi."))
            events: list[dict[str, Any]] = []
            while not events or events[-1]["type"] not in TERMINAL:
                events.append(json.loads(ws.recv(timeout=20)))
            ends.append(events)
    for events in ends:
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "stream_interrupted"
    assert len([r for r in seen(mock) if r["method"] == "GET"]) == 2


def test_an_upstream_socket_that_ended_its_life_between_turns_is_replaced_and_the_turn_sent_again(
    mock: BackgroundServer,
) -> None:
    """OpenAI ends a socket at 60 minutes (an `error` event, then close 1000), unread until the next
    turn: that turn never reached a model, and goes on a new upstream socket, not to the client as
    an error."""
    short = {**KEY, "x-mock-ws-responses": "1"}  # (the simulated socket lives one response)
    with TestClient(app_for(mock)) as client, client.websocket_connect("/v1/responses", headers=short) as ws:
        ends = []
        for n in range(3):
            ws.send_text(create(input=f"Turn {n}"))
            ends.append(turn(ws)[-1]["type"])
    assert ends == ["response.completed"] * 3
    assert len([r for r in seen(mock) if r["method"] == "GET"]) == 3
    assert len(creates(mock)) == 3  # (each sent once: the ended socket had no turn of its own)


# -- openai-python through the proxy ---------------------------------------------------------------------


@pytest.mark.parametrize("store", [True, False])
def test_openai_python_runs_a_tool_loop_over_one_socket_to_a_native_entry(
    mock: BackgroundServer, store: bool
) -> None:
    with BackgroundServer(app_for(mock)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-socket-test", max_retries=0)
        with client.responses.connect(extra_headers={"x-thinking-level": "deep"}) as connection:

            def run(**body: Any) -> Any:
                connection.response.create(model=MODEL, tools=[WEATHER], store=store, **body)
                for event in connection:
                    if event.type in TERMINAL:
                        return event
                raise AssertionError("the socket closed before the turn ended")

            done = run(input="What's the weather in Paris? Use get_weather.")
            assert done.type == "response.completed", done
            (call,) = [item for item in done.response.output if item.type == "function_call"]
            output = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 18}'}
            answered = run(input=[output], previous_response_id=done.response.id)
    assert answered.type == "response.completed", answered
    assert answered.response.output_text
    log = seen(mock)
    assert [r["method"] for r in log if r["path"] == "/openai/v1/responses"][:1] == ["GET"]
    assert not [r for r in log if r["method"] == "POST"]
    sent = creates(mock)
    assert len(sent) == 2 and all(m["reasoning"]["effort"] == "high" for m in sent)
    assert [m["store"] for m in sent] == [store, store]


# -- the fallback ------------------------------------------------------------------------------------------


def table_claiming_websocket_for(mock: BackgroundServer, entry: str, tmp_path: Path) -> ProvidersTable:
    data = json.loads(simulated_providers_text(mock.port))
    data["providers"][entry]["responses_websocket"] = "https://example.com/docs/websocket-mode"
    path = tmp_path / "providers.yaml"
    path.write_text(json.dumps(data), encoding="utf-8")
    return ProvidersTable.load(path)


def test_an_upstream_that_refuses_the_upgrade_gets_http_per_turn_and_says_so(
    mock: BackgroundServer, tmp_path: Path
) -> None:
    table = table_claiming_websocket_for(mock, "openrouter", tmp_path)  # (the mock's has no socket)
    model = "deepseek/deepseek-r1"
    app = app_for(mock, "openrouter", table)
    with TestClient(app) as client, client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:
        ends = []
        for n in range(2):
            ws.send_text(json.dumps({"type": "response.create", "model": model, "input": f"Hi {n}"}))
            ends.append(turn(ws)[-1]["type"])
        ws.send_text(
            json.dumps({"type": "response.create", "model": model, "input": "Warm", "generate": False})
        )
        warm_up = json.loads(ws.receive_text())
    assert ends == ["response.completed"] * 2
    log = seen(mock)
    assert [r["method"] for r in log] == ["GET", "POST", "POST"]  # one refused upgrade, then a POST a turn
    assert all(r["body"]["stream"] is True for r in log[1:])
    turns = [r for r in ENDED.records if r.method == "WS"][-3:]
    notes = [dict(r.response_headers).get(UPSTREAM_TRANSPORT_HEADER) for r in turns]
    assert notes[:2] == ["http; the upstream refused the WebSocket upgrade (404)"] * 2
    assert warm_up["type"] == "error" and warm_up["error"]["param"] == "generate"


# -- a client gone mid-turn -------------------------------------------------------------------------------


def test_a_client_gone_mid_turn_closes_the_upstream_socket_and_so_cancels_its_turn(
    mock: BackgroundServer,
) -> None:
    slow = {**KEY, "x-mock-pace-ms": "200"}
    with BackgroundServer(app_for(mock)) as server:
        with connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=slow) as ws:
            ws.send(create(input="Tell me a long story."))
            assert json.loads(ws.recv(timeout=20))["type"] == "response.created"
        deadline = time.monotonic() + 20
        closes: list[dict[str, Any]] = []
        while not closes and time.monotonic() < deadline:
            closes = [
                r["body"]
                for r in seen(mock)
                if r["method"] == "WS" and r["body"]["type"] == "websocket.close"
            ]
            time.sleep(0.05)
    assert closes == [{"type": "websocket.close", "mid_response": True}]
