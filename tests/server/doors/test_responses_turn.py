"""What the Responses door does differently for a WebSocket turn (proxy.server.doors.responses_turn):
a `generate: false` response made and kept without the upstream, the relay over the connection's
upstream WebSocket only for a native upstream that serves the mode, and the warm-up refused over
HTTP. (End to end, through a socket: test_responses_ws.py and
tests/server/upstream/test_responses_socket.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from proxy.core.config.providers import ProvidersTable
from proxy.core.events import AccessRecord
from proxy.core.protocols.responses.output import ResponseFrame
from proxy.core.protocols.responses.stream import ResponsesTranscoder
from proxy.server.doors.responses import BridgeOutput
from proxy.server.doors.responses_store import StoredResponses
from proxy.server.doors.responses_turn import (
    ResponseSaver,
    SocketTurn,
    prepared,
    socket_relay,
    turn_scope,
    warm_up_over_http,
)
from proxy.server.handlers import Proxy
from proxy.server.upstream.responses_socket import ResponsesSocketUpstream


class KeptResponses:
    """A saver that keeps what it is given (the connection's own responses, as the door sees them)."""

    def __init__(self) -> None:
        self.kept: list[dict[str, Any]] = []

    async def save(
        self,
        tenant: str,
        final: dict[str, Any],
        own: list[Any],
        previous: str | None,
        earlier_keys: list[str],
    ) -> None:
        self.kept.append(final)


def test_a_warm_up_is_a_response_without_output_made_and_kept_without_the_upstream() -> None:
    frame = ResponseFrame.for_request(
        {"model": "deepseek-v4-pro", "input": "Hi."},
        response_id="resp_1",
        model="deepseek-v4-pro",
        created_at=1,
    )
    ids = iter(range(100))
    transcoder = ResponsesTranscoder(
        frame, seal=lambda facts: None, new_id=lambda prefix: f"{prefix}_{next(ids)}", socket=True
    )
    saver = KeptResponses()
    door = BridgeOutput(transcoder)
    door.saver = saver
    finished: list[AccessRecord] = []
    proxy = cast(Proxy, SimpleNamespace(finish=lambda record, started: finished.append(record)))
    record = AccessRecord(method="WS", path="/v1/responses")
    response = asyncio.run(prepared(proxy, door, record, 0.0))
    events = [json.loads(line) for line in bytes(response.body).splitlines()]  # (the socket's form)
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    final = events[-1]["response"]
    assert final["id"] == "resp_1" and final["output"] == [] and final["status"] == "completed"
    assert saver.kept == [final] and transcoder.final == final
    assert record.status == 200 and record.bytes_out == len(response.body) and finished == [record]


def test_only_a_socket_turn_to_a_native_upstream_that_serves_the_mode_is_relayed_over_a_socket() -> None:
    table = ProvidersTable.load()
    bridged = table.match("https://api.deepseek.com/v1", "deepseek-v4-pro")
    native = table.match("https://api.openai.com/v1", "gpt-5.4")
    assert native.relays_responses_socket and not bridged.relays_responses_socket
    proxy = cast(Proxy, SimpleNamespace())
    record = AccessRecord(method="WS", path="/v1/responses")
    responses = cast(StoredResponses, None)
    saver = cast(Callable[[bool], ResponseSaver], None)
    assert socket_relay(proxy, None, native, record) is None  # (an HTTP request: the app's relay)
    no_socket = SocketTurn(responses, saver)  # (the connection has no upstream WebSocket)
    assert socket_relay(proxy, no_socket, native, record) is None and no_socket.relayed is None
    turn = SocketTurn(responses, saver, upstream=cast(ResponsesSocketUpstream, SimpleNamespace()))
    assert socket_relay(proxy, turn, bridged, record) is None and turn.relayed is None
    assert record.response_headers == []


def test_a_warm_up_to_a_native_upstream_over_http_is_refused_naming_the_field() -> None:
    error = warm_up_over_http()
    assert error.status == 400 and error.code == "unsupported_parameter" and error.param == "generate"
    assert "responses_websocket" in error.message


def test_a_turn_has_the_upgrades_headers_less_the_sockets_own_and_the_level_its_effort_overrides() -> None:
    upgrade = {
        "type": "websocket",
        "path": "/v1/responses",
        "scheme": "wss",
        "headers": [
            (b"authorization", b"Bearer sk-x"),
            (b"x-thinking-level", b"deep"),
            (b"openai-beta", b"responses_websockets=2026-02-06"),
            (b"sec-websocket-key", b"abc"),
            (b"x-request-id", b"socket-id"),
            (b"upgrade", b"websocket"),
        ],
    }
    body = b'{"model":"m"}'
    scope = turn_scope(upgrade, body, effort_set=False)
    assert scope["type"] == "http" and scope["method"] == "POST" and scope["scheme"] == "https"
    assert scope["headers"] == [
        (b"authorization", b"Bearer sk-x"),
        (b"x-thinking-level", b"deep"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    overridden = turn_scope(upgrade, body, effort_set=True)  # (the create's reasoning.effort wins)
    assert (b"x-thinking-level", b"deep") not in overridden["headers"]


def test_the_door_keeps_its_response_once_when_it_is_whole_and_not_before() -> None:
    """`settle`, awaited before every write of a stream, keeps the response once its terminal
    event is written (before the client reads it), and never again; nothing before that."""
    frame = ResponseFrame("resp_1", "m", 1)
    transcoder = ResponsesTranscoder(frame, seal=lambda facts: None, new_id=lambda prefix: f"{prefix}_1")
    saver = KeptResponses()
    door = BridgeOutput(transcoder)
    door.saver = saver
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"Hi."},"finish_reason":null}]}\n\n'
    end = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    door.feed(chunk)
    asyncio.run(door.settle())
    assert saver.kept == []
    door.feed(end)
    asyncio.run(door.settle())
    asyncio.run(door.settle())
    assert saver.kept == [transcoder.final] and transcoder.final is not None
