"""The Responses API's WebSocket mode (proxy.server.doors.responses_ws): one socket per agent
session, `response.create` in, the SSE stream's events out one JSON message each. Unit-level
through Starlette's TestClient against the simulated DeepSeek, then the real client:
openai-python's `client.responses.connect()` against a real `thinkproxy serve`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import ResponsesServerEvent
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.doors.responses import ResponsesDoor
from proxy.server.doors.responses_ws import ResponsesSocket
from proxy.server.serving import BackgroundServer
from tests.clients.conftest import (
    start_proxy,
    stop_proxy,
)
from tests.helpers import Ended, coroutines_running_in, make_settings

# Every message the socket sends must be an event openai-python knows (nothing it would skip).
SERVER_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponsesServerEvent)
MODEL = "deepseek-v4-pro"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
# What differs between two responses to the same request: ids, times, sealed reasoning.
VARYING = frozenset({"id", "item_id", "created_at", "completed_at", "encrypted_content"})
# (copied at each use: the test client adds the upgrade's own headers to the dict it is given)
KEY = {"authorization": "Bearer sk-test"}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def app_for(mock: BackgroundServer, **overrides: Any) -> Starlette:
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", **overrides)
    return create_app(settings, table=simulated_table(mock.port))


def upstream_requests(mock: BackgroundServer) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = httpx.get(f"{mock.url}/_mock/requests").json()
    return found


def last_upstream(mock: BackgroundServer) -> dict[str, Any]:
    record: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()
    return record


def create(**body: Any) -> str:
    return json.dumps({"type": "response.create", "model": MODEL, **body})


def turn(ws: Any) -> list[dict[str, Any]]:
    """The messages of one turn, up to its terminal event; each one an event openai-python knows."""
    events = []
    while True:
        text = ws.receive_text()
        event = json.loads(text)
        SERVER_EVENT.validate_python(event)
        events.append(event)
        if event["type"] in TERMINAL:
            return events


def sse_types(text: str) -> list[str]:
    return [json.loads(line[6:])["type"] for line in text.splitlines() if line.startswith("data: ")]


# -- the same events as the SSE stream ----------------------------------------------------------------


def test_a_turn_is_the_sse_streams_events_one_message_each_without_the_trace(mock: BackgroundServer) -> None:
    app = app_for(mock, state="off", trace="detailed")
    ask = {"input": "Hi there", "store": False}
    with TestClient(app) as client:
        posted = client.post("/v1/responses", json={"model": MODEL, "stream": True, **ask}, headers=dict(KEY))
        assert ": trace " in posted.text  # (the HTTP stream carries the trace as comment lines)
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:
            ws.send_text(create(**ask))
            events = turn(ws)
    assert [e["type"] for e in events] == sse_types(posted.text)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert all("trace" not in e for e in events)


def test_the_next_turn_continues_a_store_false_response_from_the_connection_with_the_store_off(
    mock: BackgroundServer,
) -> None:
    with TestClient(app_for(mock, state="off")) as client:
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:
            ws.send_text(create(input="Hi there", store=False))
            first = turn(ws)[-1]["response"]
            ws.send_text(create(input="And again", store=False, previous_response_id=first["id"]))
            second = turn(ws)[-1]
        # another connection does not have it (and there is no store to ask)
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as other:
            other.send_text(create(input="More", store=False, previous_response_id=first["id"]))
            refused = turn(other)[-1]
    assert second["type"] == "response.completed"
    messages = last_upstream(mock)["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == "Hi there" and messages[2]["content"] == "And again"
    assert refused["type"] == "error" and refused["status"] == 400
    assert refused["error"]["code"] == "previous_response_not_found"


def test_an_item_reference_names_an_item_of_a_store_false_response_held_by_the_connection(
    mock: BackgroundServer,
) -> None:
    """`item_reference` reads the connection's own responses first (store: false, the state store
    off), as `previous_response_id` does; an id the connection does not hold is what it is over
    HTTP (left out, the trace says so), and another connection does not hold it."""
    app = app_for(mock, state="off")
    unknown = [{"type": "item_reference", "id": "msg_nowhere"}, {"role": "user", "content": "And again"}]
    with TestClient(app) as client:
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:
            ws.send_text(create(input="Hi there", store=False))
            first = turn(ws)[-1]["response"]
            (message,) = [item for item in first["output"] if item["type"] == "message"]
            reference = [
                {"type": "item_reference", "id": message["id"]},
                {"role": "user", "content": "And again"},
            ]
            ws.send_text(create(input=reference, store=False))
            referred = turn(ws)[-1]
            referred_upstream = last_upstream(mock)["body"]["messages"]
            ws.send_text(create(input=unknown, store=False))
            unknown_socket = turn(ws)[-1]
            unknown_upstream = last_upstream(mock)["body"]["messages"]
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as other:
            other.send_text(create(input=reference, store=False))
            turn(other)
            other_upstream = last_upstream(mock)["body"]["messages"]
        posted = client.post(
            "/v1/responses", json={"model": MODEL, "input": unknown, "store": False}, headers=dict(KEY)
        )
        posted_upstream = last_upstream(mock)["body"]["messages"]
    assert referred["type"] == "response.completed"
    assert [m["role"] for m in referred_upstream] == ["assistant", "user"]
    assert referred_upstream[0]["content"] == message["content"][0]["text"]
    assert posted.status_code == 200 and unknown_socket["type"] == "response.completed"
    assert unknown_upstream == posted_upstream == other_upstream == [{"role": "user", "content": "And again"}]


def test_a_response_append_continues_the_last_response_with_the_added_input(mock: BackgroundServer) -> None:
    """Codex's first WebSocket protocol: `response.append` after a response ended is the last
    request with items added (its fields, its input, the response's output, then the new items);
    with nothing to continue it is an `error` event and the socket goes on."""
    added = [{"role": "user", "content": "And again"}]
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ws.send_text(json.dumps({"type": "response.append", "input": added}))
        early = json.loads(ws.receive_text())
        ws.send_text(create(input="Hi there", store=False, instructions="Be brief."))
        first = turn(ws)[-1]["response"]
        ws.send_text(json.dumps({"type": "response.append", "input": added}))
        second = turn(ws)
    assert early["type"] == "error" and early["error"]["code"] == "previous_response_not_found"
    assert second[-1]["type"] == "response.completed"
    assert second[-1]["response"]["previous_response_id"] == first["id"]
    assert second[-1]["response"]["instructions"] == "Be brief."  # (the last request's fields)
    messages = last_upstream(mock)["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "Hi there" and messages[3]["content"] == "And again"


def test_a_stored_response_is_also_kept_in_the_state_store(mock: BackgroundServer) -> None:
    with TestClient(app_for(mock, state="on")) as client:
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:
            ws.send_text(create(input="Hi there", store=True))
            stored = turn(ws)[-1]["response"]
            ws.send_text(create(input="Not kept", store=False))
            unstored = turn(ws)[-1]["response"]
        assert client.get(f"/v1/responses/{stored['id']}", headers=dict(KEY)).status_code == 200
        assert client.get(f"/v1/responses/{unstored['id']}", headers=dict(KEY)).status_code == 404


# -- one response at a time, generate: false, steering -------------------------------------------------


def test_a_second_create_while_one_runs_gets_an_error_and_the_first_completes(mock: BackgroundServer) -> None:
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ws.send_text(create(input="Tell me a story."))
        ws.send_text(create(input="And another one."))
        events = turn(ws)
        refused = events[-1] if events[-1]["type"] == "error" else turn(ws)[-1]
        if events[-1]["type"] == "error":  # (the refusal came before the first's end)
            events = turn(ws)
        ws.send_text(create(input="Now the next."))
        after = turn(ws)
    assert refused["error"]["code"] == "response_in_progress" and refused["status"] == 400
    assert events[-1]["type"] == "response.completed"
    assert after[-1]["type"] == "response.completed"


def test_turns_sent_as_soon_as_the_last_one_ended_all_run(mock: BackgroundServer) -> None:
    """A client that sends the next `response.create` the moment it reads a terminal event is never
    told a response is in progress (the ended turn's bookkeeping is waited for, not refused)."""
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ends = []
        for n in range(5):
            ws.send_text(create(input=f"Turn {n}"))
            ends.append(turn(ws)[-1]["type"])
    assert ends == ["response.completed"] * 5


def test_generate_false_makes_a_response_without_the_upstream_and_it_can_be_continued(
    mock: BackgroundServer,
) -> None:
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        before = len(upstream_requests(mock))
        ws.send_text(create(input="You will be asked about Paris.", generate=False))
        warm = turn(ws)
        assert len(upstream_requests(mock)) == before  # the upstream was not asked
        ws.send_text(create(input="What is it?", previous_response_id=warm[-1]["response"]["id"]))
        answered = turn(ws)
    assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
    assert warm[-1]["response"]["output"] == []
    assert answered[-1]["type"] == "response.completed"
    contents = [m["content"] for m in last_upstream(mock)["body"]["messages"]]
    assert contents == ["You will be asked about Paris.", "What is it?"]


def test_steering_is_refused_with_steer_failed(mock: BackgroundServer) -> None:
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ws.send_text(
            json.dumps({"type": "response.steer", "input": "faster", "previous_response_id": "resp_1"})
        )
        failed = json.loads(ws.receive_text())
    SERVER_EVENT.validate_python(failed)
    assert failed["type"] == "response.steer.failed"
    assert failed["error"]["code"] == "steering_not_supported"
    assert failed["steer"] == {"input": "faster", "previous_response_id": "resp_1"}


def test_stream_id_tags_every_event_of_its_turn(mock: BackgroundServer) -> None:
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ws.send_text(create(input="Hi", stream_id="lane-1"))
        events = turn(ws)
    assert {e.get("stream_id") for e in events} == {"lane-1"}


@pytest.mark.parametrize("stream_id", [None, "lane-ü"])
def test_a_served_socket_sends_what_the_in_process_socket_sends(
    mock: BackgroundServer, stream_id: str | None
) -> None:
    """Over a real server (serve's WebSocket protocol: each door write's events in one transport
    write, framed by the proxy) and a real client, a turn's events are those the in-process socket
    sends one `websocket.send` each (its server offers no such extension), non-ASCII text and a
    stream id alike; the ids and timestamps aside."""
    ask = {"input": "Grüße, wie geht's? ✓ \u2028", **({"stream_id": stream_id} if stream_id else {})}

    def scrubbed(value: Any) -> Any:  # (what differs from one response to the next)
        if isinstance(value, dict):
            return {k: "*" if k in VARYING else scrubbed(v) for k, v in value.items()}
        return [scrubbed(v) for v in value] if isinstance(value, list) else value

    app = app_for(mock, state="off")
    with TestClient(app) as client, client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:
        ws.send_text(create(**ask))
        in_process = turn(ws)
    with (
        BackgroundServer(app_for(mock, state="off")) as server,
        connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=dict(KEY)) as socket,
    ):
        socket.send(create(**ask))
        served = []
        while not served or served[-1]["type"] not in TERMINAL:
            served.append(json.loads(socket.recv(timeout=30)))
            SERVER_EVENT.validate_python(served[-1])
    assert served[-1]["type"] == "response.completed"
    assert {e.get("stream_id") for e in served} == {stream_id}
    deltas = "".join(e["delta"] for e in served if e["type"] == "response.output_text.delta")
    assert "Grüße" in deltas and "✓" in deltas
    assert scrubbed(served) == scrubbed(in_process)


def test_a_native_upstream_without_the_websocket_mode_is_reached_over_http_per_turn(
    mock: BackgroundServer,
) -> None:
    """OpenRouter's Responses API is native but has no WebSocket mode (providers.yaml names none):
    a POST per turn. (An upstream that serves the mode: tests/server/upstream/test_responses_socket.py.)"""
    settings = make_settings(upstream_base_url=f"{mock.url}/openrouter/v1", state="off")
    app = create_app(settings, table=simulated_table(mock.port))
    headers = {**KEY, "x-thinking-level": "deep"}
    model = "deepseek/deepseek-r1"
    with (
        TestClient(app) as client,
        client.websocket_connect("/v1/responses", headers=headers) as ws,
    ):
        ws.send_text(json.dumps({"type": "response.create", "model": model, "input": "Hi."}))
        events = turn(ws)
        ws.send_text(
            json.dumps({"type": "response.create", "model": model, "input": "Hi.", "generate": False})
        )
        refused = json.loads(ws.receive_text())
    sent = last_upstream(mock)
    assert sent["path"] == "/openrouter/v1/responses" and sent["method"] == "POST"
    assert sent["body"]["stream"] is True and sent["body"]["reasoning"]["effort"] == "high"
    assert "type" not in sent["body"] and "generate" not in sent["body"]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert refused["error"]["code"] == "unsupported_parameter" and refused["error"]["param"] == "generate"


# -- headers at the upgrade ------------------------------------------------------------------------------


def test_the_upgrades_level_applies_to_every_turn_and_reasoning_effort_overrides_it(
    mock: BackgroundServer,
) -> None:
    headers = {**KEY, "x-thinking-level": "off"}
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers=headers) as ws,
    ):
        ws.send_text(create(input="Hi"))
        plain = turn(ws)[-1]
        off_body = last_upstream(mock)["body"]
        ws.send_text(create(input="Hi", reasoning={"effort": "high"}))
        turn(ws)
        high_body = last_upstream(mock)["body"]
    assert plain["type"] == "response.completed"
    assert off_body.get("thinking") == {"type": "disabled"}
    assert high_body.get("thinking") == {"type": "enabled"}


def test_a_bad_key_is_refused_at_the_upgrade_with_its_status(mock: BackgroundServer) -> None:
    app = app_for(mock, state="off", gateway_mode=True, client_keys=["sk-good"])
    bad = {"authorization": "Bearer sk-bad"}
    with (
        TestClient(app) as client,
        pytest.raises(WebSocketDenialResponse) as refused,
        client.websocket_connect("/v1/responses", headers=bad),
    ):
        pass
    assert refused.value.status_code == 401
    assert refused.value.json()["error"]["code"] == "invalid_api_key"


def test_an_upstream_error_is_an_error_event_with_its_status_and_the_socket_goes_on(
    mock: BackgroundServer,
) -> None:
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers={**KEY, "x-mock-fault": "429"}) as ws,
    ):
        ws.send_text(create(input="Hi"))
        first = turn(ws)
        ws.send_text(create(input="Hi again"))
        second = turn(ws)
    assert [e["type"] for e in first] == ["error"]
    assert first[0]["status"] == 429 and first[0]["error"]["code"] == "rate_limit_exceeded"
    assert second[-1]["status"] == 429


# -- limits ------------------------------------------------------------------------------------------------


def test_a_message_past_the_body_limit_is_an_error_then_close_1009(mock: BackgroundServer) -> None:
    with (
        TestClient(app_for(mock, state="off", max_body_bytes=2048)) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ws.send_text(create(input="x" * 4096))
        error = json.loads(ws.receive_text())
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert error["type"] == "error" and error["status"] == 413
    assert closed.value.code == 1009


def test_a_malformed_message_is_an_error_event_and_the_socket_goes_on(mock: BackgroundServer) -> None:
    with (
        TestClient(app_for(mock, state="off")) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
    ):
        ws.send_text("{not json")
        bad = json.loads(ws.receive_text())
        ws.send_text(json.dumps({"type": "response.cancel"}))
        unknown = json.loads(ws.receive_text())
        ws.send_text(create(input="Hi", background=True))
        background = json.loads(ws.receive_text())
        ws.send_text(create(input="Hi"))
        done = turn(ws)[-1]
    assert bad["error"]["code"] == "invalid_json"
    assert unknown["error"]["code"] == "unknown_event_type"
    assert background["error"]["param"] == "background"
    assert done["type"] == "response.completed"


def test_a_client_gone_mid_turn_ends_the_turn_and_its_upstream_request(mock: BackgroundServer) -> None:
    ended = Ended()
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", state="off")
    app = create_app(settings, table=simulated_table(mock.port), listeners=[ended])
    stalled = {**KEY, "x-mock-fault": "stall", "x-mock-stall-s": "600"}
    with BackgroundServer(app) as server:  # (a real server: the test client cancels the app on close)
        with connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=stalled) as ws:
            ws.send(create(input="Tell me a long story."))
            assert json.loads(ws.recv())["type"] == "response.created"
            running = coroutines_running_in(server)
        # the socket is closed while the upstream stalls: the turn ends now, not in ten minutes
        assert ended.turn_ended.wait(20)
    (turn_record,) = [r for r in ended.records if r.method == "WS"]
    assert turn_record.error == "client_disconnected"
    # (told by the socket, as the server edge tells a POST: no task of the turn's reads `receive`)
    assert "ResponsesSocket._turn" in running and "ClientWatch._watch" not in running


def test_an_idle_socket_is_closed_cleanly(mock: BackgroundServer) -> None:
    app = app_for(mock, state="off")
    door = ResponsesDoor(app.state.proxy)
    idle = Starlette(routes=[WebSocketRoute("/v1/responses", ResponsesSocket(door, idle_timeout=0.2).serve)])
    with (
        TestClient(idle) as client,
        client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,
        pytest.raises(WebSocketDisconnect) as closed,
    ):
        ws.receive_text()
    assert closed.value.code == 1000 and closed.value.reason == "idle timeout"


def test_a_socket_past_its_lifetime_says_so_then_closes(mock: BackgroundServer) -> None:
    app = app_for(mock, state="off")
    door = ResponsesDoor(app.state.proxy)
    short = Starlette(routes=[WebSocketRoute("/v1/responses", ResponsesSocket(door, max_lifetime=0.3).serve)])
    with TestClient(short) as client, client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:
        limit = json.loads(ws.receive_text())
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    SERVER_EVENT.validate_python(limit)
    assert limit["error"]["code"] == "websocket_connection_limit_reached"
    assert closed.value.code == 1000


def test_a_socket_idle_after_a_turn_closes_when_its_idle_time_is_up(mock: BackgroundServer) -> None:
    """The idle time starts at the turn's end: the reader, which waited under the turn's deadline
    (the lifetime's), is woken by the turn's end and closes the socket once idle that long."""
    app = app_for(mock, state="off")
    app.state.responses_socket.idle_timeout = 0.3  # (the app's own endpoint: served ahead of the router)
    with (
        BackgroundServer(app) as server,
        connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=dict(KEY)) as ws,
    ):
        ws.send(create(input="Hi"))
        while json.loads(ws.recv(timeout=20))["type"] != "response.completed":
            pass
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=20)  # (the lifetime is an hour: only the idle time closes it this soon)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "idle timeout")


def test_a_turn_running_past_the_lifetime_ends_then_the_socket_closes(mock: BackgroundServer) -> None:
    """Past the lifetime the running turn finishes; then, with no message from the client, the
    socket says so and closes."""
    app = app_for(mock, state="off")
    app.state.responses_socket.max_lifetime = 0.3
    slow = {**KEY, "x-mock-fault": "slow-first", "x-mock-delay-ms": "1000"}
    with (
        BackgroundServer(app) as server,
        connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=slow) as ws,
    ):
        ws.send(create(input="Hi"))
        types = [json.loads(ws.recv(timeout=20))["type"]]
        while types[-1] != "response.completed":
            types.append(json.loads(ws.recv(timeout=20))["type"])
        limit = json.loads(ws.recv(timeout=20))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=20)
    assert "response.output_text.delta" in types
    assert limit["error"]["code"] == "websocket_connection_limit_reached"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_past_its_lifetime_a_socket_still_sees_its_client_leave_mid_turn(mock: BackgroundServer) -> None:
    ended = Ended()
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", state="off")
    app = create_app(settings, table=simulated_table(mock.port), listeners=[ended])
    app.state.responses_socket.max_lifetime = 0.5  # (the app's own endpoint: served ahead of the router)
    stalled = {**KEY, "x-mock-fault": "stall", "x-mock-stall-s": "600"}
    with BackgroundServer(app) as server:
        with connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=stalled) as ws:
            ws.send(create(input="Tell me a long story."))
            assert json.loads(ws.recv(timeout=20))["type"] == "response.created"
            refused: dict[str, Any] = {}
            while refused.get("error", {}).get("code") != "websocket_connection_limit_reached":
                time.sleep(0.05)  # (until the lifetime is past: a create is refused, the socket still read)
                ws.send(create(input="Another."))
                refused = json.loads(ws.recv(timeout=20))
                while refused["type"] != "error":  # (the stalled turn's own events first)
                    refused = json.loads(ws.recv(timeout=20))
                assert refused["error"]["code"] in (
                    "websocket_connection_limit_reached",
                    "response_in_progress",
                )
        # the client left past the lifetime, its turn stalled: the turn ends now, not in ten minutes
        assert ended.turn_ended.wait(20)
    (turn_record,) = [r for r in ended.records if r.method == "WS"]
    assert turn_record.error == "client_disconnected"


# -- the real client -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(mock: BackgroundServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two `thinkproxy serve` processes: the state store on, and off."""
    on = start_proxy(mock, tmp_path_factory.mktemp("ws-state-on"), THINKPROXY_STATE="on")
    try:
        off = start_proxy(mock, tmp_path_factory.mktemp("ws-state-off"), THINKPROXY_STATE="off")
    except BaseException:
        stop_proxy(on)
        raise
    yield {"on": on.base, "off": off.base}
    stop_proxy(on)
    stop_proxy(off)


def run_turn(connection: Any, **body: Any) -> list[Any]:
    connection.response.create(model=MODEL, **body)
    events = []
    for event in connection:
        events.append(event)
        if event.type in TERMINAL:
            return events
    raise AssertionError("the socket closed before the turn ended")


@pytest.mark.parametrize(("state", "store"), [("on", True), ("on", False), ("off", False)])
def test_openai_python_runs_a_tool_loop_over_one_socket(
    served: dict[str, str], mock: BackgroundServer, state: str, store: bool
) -> None:
    client = openai.OpenAI(base_url=served[state], api_key="sk-ws", max_retries=0)
    include = [] if store else ["reasoning.encrypted_content"]
    with client.responses.connect(extra_headers={"x-thinking-level": "deep"}) as connection:
        first = run_turn(
            connection,
            input="What's the weather in Paris? Use get_weather.",
            tools=[WEATHER],
            store=store,
            include=include,
        )
        done = first[-1]
        assert done.type == "response.completed", done
        (call,) = [item for item in done.response.output if item.type == "function_call"]
        assert call.name == "get_weather"
        second = run_turn(
            connection,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 18}'}],
            previous_response_id=done.response.id,
            tools=[WEATHER],
            store=store,
            include=include,
        )
    assert second[-1].type == "response.completed", second[-1]
    assert second[-1].response.output_text
    # DeepSeek's replay rule held: the tool-call turn's reasoning went back with it
    messages = last_upstream(mock)["body"]["messages"]
    (assistant,) = [m for m in messages if m["role"] == "assistant"]
    assert assistant.get("reasoning_content")
    assert messages[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": '{"temp_c": 18}'}


# -- metrics, and the per-key connection cap ------------------------------------------------------


def requests_by_transport(metrics_text: str) -> dict[tuple[str, str], float]:
    """thinkproxy_requests_total added up by (route, transport)."""
    found: dict[tuple[str, str], float] = {}
    for line in metrics_text.splitlines():
        if line.startswith("thinkproxy_requests_total{"):
            labels = dict(
                pair.split("=", 1) for pair in line[line.index("{") + 1 : line.index("}")].split(",")
            )
            key = (labels["route"].strip('"'), labels["transport"].strip('"'))
            found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def test_a_turn_is_counted_in_the_metrics_with_transport_websocket(mock: BackgroundServer) -> None:
    ended = Ended()
    settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", state="off")
    app = create_app(settings, table=simulated_table(mock.port), listeners=[ended])
    with TestClient(app) as client:
        client.post("/v1/responses", json={"model": MODEL, "input": "Hi", "stream": True}, headers=dict(KEY))
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:
            ws.send_text(create(input="Hi there"))
            turn(ws)
            ws.send_text(create(input="Again"))
            turn(ws)
        text = client.get("/metrics").text
    assert requests_by_transport(text) == {("responses", "http"): 1, ("responses", "websocket"): 2}
    assert sorted(r.transport for r in ended.records) == ["http", "websocket", "websocket"]


def refused_upgrade(client: TestClient, headers: dict[str, str]) -> WebSocketDenialResponse:
    with (
        pytest.raises(WebSocketDenialResponse) as refused,
        client.websocket_connect("/v1/responses", headers=headers),
    ):
        pass
    return refused.value


@pytest.mark.parametrize("gateway", [False, True])
def test_a_key_past_its_socket_cap_is_refused_with_429_until_one_of_its_sockets_closes(
    mock: BackgroundServer, gateway: bool
) -> None:
    other = {"authorization": "Bearer sk-other"}
    keys: dict[str, Any] = {"gateway_mode": True, "client_keys": ["sk-test", "sk-other"]} if gateway else {}
    with TestClient(app_for(mock, state="off", max_sockets_per_key=2, **keys)) as client:
        with (
            client.websocket_connect("/v1/responses", headers=dict(KEY)),
            client.websocket_connect("/v1/responses", headers=dict(KEY)),
        ):
            refused = refused_upgrade(client, dict(KEY))
            with client.websocket_connect("/v1/responses", headers=dict(other)) as ws:  # its own count
                ws.send_text(create(input="Hi"))
                assert turn(ws)[-1]["type"] == "response.completed"
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:  # both closed: free again
            ws.send_text(create(input="Hi"))
            assert turn(ws)[-1]["type"] == "response.completed"
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "too_many_websockets" and "THINKPROXY_MAX_SOCKETS_PER_KEY" in error["message"]
    assert set(error) == {"message", "type", "code", "param"}


def test_every_close_path_gives_the_keys_socket_back(mock: BackgroundServer) -> None:
    app = app_for(mock, state="off", max_sockets_per_key=1, max_body_bytes=2048)
    door = ResponsesDoor(app.state.proxy)
    idle = Starlette(routes=[WebSocketRoute("/v1/responses", ResponsesSocket(door, idle_timeout=0.2).serve)])
    with TestClient(idle) as client:
        with (
            client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws,  # closed for being idle
            pytest.raises(WebSocketDisconnect),
        ):
            ws.receive_text()
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:  # closed for a big message
            ws.send_text(create(input="x" * 4096))
            ws.receive_text()
            with pytest.raises(WebSocketDisconnect) as too_big:
                ws.receive_text()
        with client.websocket_connect("/v1/responses", headers=dict(KEY)) as ws:  # still free
            ws.send_text(create(input="Hi"))
            assert turn(ws)[-1]["type"] == "response.completed"
    assert too_big.value.code == 1009


def test_no_cap_with_max_sockets_per_key_0(mock: BackgroundServer) -> None:
    with TestClient(app_for(mock, state="off", max_sockets_per_key=0)) as client:
        opened = [client.websocket_connect("/v1/responses", headers=dict(KEY)) for _ in range(20)]
        sockets = [one.__enter__() for one in opened]
        sockets[-1].send_text(create(input="Hi"))
        assert turn(sockets[-1])[-1]["type"] == "response.completed"
        for one in opened:
            one.__exit__(None, None, None)


# -- a turn always ends with a terminal event ----------------------------------------------------------


def served_turns(
    app: Starlette, headers: dict[str, str], *bodies: dict[str, Any]
) -> list[list[dict[str, Any]]]:
    """Turns over a real server, one after the other (a turn that never ends fails here, not
    hangs), their messages each an event openai-python knows."""
    turns: list[list[dict[str, Any]]] = []
    with (
        BackgroundServer(app) as server,
        connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=headers) as ws,
    ):
        for body in bodies:
            ws.send(json.dumps({"type": "response.create", **body}))
            events: list[dict[str, Any]] = []
            while not events or events[-1]["type"] not in TERMINAL:
                event = json.loads(ws.recv(timeout=20))
                SERVER_EVENT.validate_python(event)
                events.append(event)
            turns.append(events)
    return turns


def test_a_native_stream_cut_mid_response_ends_with_an_error_event(mock: BackgroundServer) -> None:
    settings = make_settings(upstream_base_url=f"{mock.url}/openai/v1", state="off")
    app = create_app(settings, table=simulated_table(mock.port))
    cut = {**KEY, "x-mock-fault": "disconnect"}
    (events,) = served_turns(app, cut, {"model": "gpt-5.4", "input": "Hi."})
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "stream_interrupted"
    assert events[-1]["status"] == 502


def test_an_event_past_max_response_bytes_ends_the_turn_with_an_error_event(mock: BackgroundServer) -> None:
    app = app_for(mock, state="off", max_response_bytes=600)
    story = {"model": MODEL, "input": "Tell me a long story."}
    events, after = served_turns(app, dict(KEY), story, {"model": MODEL, "input": "Hi"})
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "response_too_large"
    assert after[-1]["type"] == "error"  # (the socket goes on: the next turn runs, and ends too)
