"""One Responses WebSocket turn's writer (proxy.server.doors.responses_ws_turn): the door's answer
into the socket's messages, what it keeps of an answer that is not a stream, and the turn settled
at its terminal event. (The whole socket, end to end: test_responses_ws.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import cast

from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketState

from proxy.server.doors.responses_ws_state import SocketResponses
from proxy.server.doors.responses_ws_turn import Connection, TurnWriter


class FakeSocket:
    """What a turn's writer sends to (the messages kept): an accepted socket's ASGI `send`."""

    application_state = WebSocketState.CONNECTED

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, message: Message) -> None:
        assert message["type"] == "websocket.send"
        self.sent.append(message["text"])


def writer_for(stream: bool) -> tuple[TurnWriter, Connection, FakeSocket]:
    socket = FakeSocket()
    connection = Connection(cast(WebSocket, socket), cast(SocketResponses, None))
    writer = TurnWriter(connection, None, 1 << 20)
    kind = b"text/event-stream" if stream else b"application/json"
    asyncio.run(
        writer(
            {
                "type": "http.response.start",
                "status": 200 if stream else 500,
                "headers": [(b"content-type", kind)],
            }
        )
    )
    return writer, connection, socket


def test_an_answer_that_is_not_a_stream_is_kept_only_up_to_64_kib() -> None:
    writer, _, socket = writer_for(stream=False)
    for _ in range(64):  # 4 MiB of an upstream's error page
        asyncio.run(writer({"type": "http.response.body", "body": b"<p>" * 21846, "more_body": True}))
    asyncio.run(writer({"type": "http.response.body", "body": b"", "more_body": False}))
    assert sum(len(part) for part in writer.body) == 64 * 1024
    asyncio.run(writer.end())
    (event,) = [json.loads(text) for text in socket.sent]
    assert event["status"] == 500 and event["error"]["message"].startswith("<p><p>")


def test_the_terminal_event_settles_the_turn_while_the_upstream_holds_the_stream_open() -> None:
    writer, connection, socket = writer_for(stream=True)
    completed = b'event: response.completed\ndata: {"type":"response.completed","sequence_number":1}\n\n'
    asyncio.run(writer({"type": "http.response.body", "body": completed, "more_body": True}))
    assert connection.settling  # (a next create may come: the answer is whole)
    asyncio.run(writer.end())
    assert [json.loads(text)["type"] for text in socket.sent] == ["response.completed"]
