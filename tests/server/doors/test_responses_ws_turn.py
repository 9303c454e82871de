"""One Responses WebSocket turn's writer (proxy.server.doors.responses_ws_turn): the door's answer
into the socket's messages, what it keeps of an answer that is not a stream, and the turn settled
at its terminal event. (The whole socket, end to end: test_responses_ws.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketState

from proxy.core.protocols.responses.output import frames, message_frames
from proxy.core.protocols.responses.socket_events import TERMINAL_TYPES, message_type
from proxy.server.doors.responses_store import StoredResponses
from proxy.server.doors.responses_turn import ResponseSaver, SocketTurn
from proxy.server.doors.responses_ws_connection import Connection, TurnEdge
from proxy.server.doors.responses_ws_state import SocketResponses
from proxy.server.doors.responses_ws_turn import TurnWriter
from proxy.server.upstream.responses_socket import SocketTurnUpstream, framed
from proxy.server.websocket_protocol import SEND_TEXTS


class FakeSocket:
    """What a turn's writer sends to (the messages kept, and each `send` call: a write): an
    accepted socket's ASGI `send`, which takes the server's SEND_TEXTS too."""

    application_state = WebSocketState.CONNECTED

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.writes = 0
        self.messages = 0  # (the writes that came as ASGI messages)
        self.takes_writes = True  # (the synchronous `write`: whether the transport takes it now)

    def write(self, encoded: Sequence[bytes]) -> bool:
        """The server's synchronous form of a SEND_TEXTS message (its extension's `write`)."""
        if not self.takes_writes:
            return False
        self.writes += 1
        self.sent += [data.decode() for data in encoded]
        return True

    async def send(self, message: Message) -> None:
        self.writes += 1
        self.messages += 1
        if message["type"] == SEND_TEXTS:  # (texts, or their UTF-8)
            texts = message.get("texts")
            self.sent += texts if texts is not None else [data.decode() for data in message["encoded"]]
            return
        assert message["type"] == "websocket.send"
        self.sent.append(message["text"])


class FakeAnswer:
    """The door's transcoder as the writer reads it: `final` set once the terminal event is
    written (set here by the test when it writes one)."""

    def __init__(self) -> None:
        self.final: dict[str, Any] | None = None


def answered(writer: TurnWriter) -> FakeAnswer:
    return cast(FakeAnswer, writer.answer)


class FakeRelayed:
    """A native turn's upstream over the connection's upstream socket, as the writer reads it:
    its answer, whose `done` says the terminal message was read (set by the test as it writes
    each message, as SocketAnswer sets it before the relay writes the message)."""

    def __init__(self) -> None:
        self.answer = FakeAnswer()
        self.answer.done = False  # type: ignore[attr-defined]


def writer_for(
    stream: bool,
    *,
    messages: bool = False,
    stream_id: str | None = None,
    limit: int = 1 << 20,
    relayed: FakeRelayed | None = None,
    sends_texts: bool = False,
    write: bool | None = None,
) -> tuple[TurnWriter, Connection, FakeSocket]:
    """A turn's writer after the answer's start; `messages`: the door writes the socket's form;
    `relayed`: a native turn relayed over the upstream socket (its messages one a write);
    `sends_texts`: the server takes several messages in one write (its SEND_TEXTS); `write`: it
    offers the synchronous form too, which takes each write (True) or none (False)."""
    socket = FakeSocket()
    send = socket.send if sends_texts else None
    if write is not None:
        socket.takes_writes = write
    connection = Connection(
        cast(WebSocket, socket),
        cast(SocketResponses, None),
        send,
        sends_texts=sends_texts,
        write_texts=socket.write if write is not None else None,
    )
    turn = SocketTurn(cast(StoredResponses, None), cast(Callable[[bool], ResponseSaver], None))
    turn.answer = FakeAnswer() if messages else None
    turn.relayed = cast(SocketTurnUpstream, relayed)
    writer = TurnWriter(connection, stream_id, limit, turn)
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


def socket_turn_events() -> list[dict[str, Any]]:
    """A turn's events as the door numbers them: text deltas (quotes, newlines, non-ASCII), a
    terminal event."""
    deltas = ['He said "hi"', "line\nbreak", "Zürich ✓", "\u2028"]
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r"}}
    ]
    events += [
        {"type": "response.output_text.delta", "sequence_number": n, "item_id": "m", "delta": d}
        for n, d in enumerate(deltas, 1)
    ]
    events.append({"type": "response.completed", "sequence_number": 5, "response": {"id": "r"}})
    return events


def sent_by(writer: TurnWriter, socket: FakeSocket, pieces: list[bytes]) -> list[str]:
    written = b""
    for piece in pieces:
        written += piece
        if writer.answer is not None and b'"response.completed"' in written:
            answered(writer).final = {"id": "r"}  # (as the door's transcoder, writing it)
        asyncio.run(writer({"type": "http.response.body", "body": piece, "more_body": True}))
    asyncio.run(writer.end())
    return socket.sent


@pytest.mark.parametrize(("sends_texts", "write"), [(False, None), (True, None), (True, True), (True, False)])
@pytest.mark.parametrize("stream_id", [None, "lane-2"])
def test_the_socket_form_sends_what_the_sse_form_sends_at_every_split(
    stream_id: str | None, sends_texts: bool, write: bool | None
) -> None:
    """A bridged turn's door writes its events in the socket's form (message_frames); the writer
    sends exactly the messages it sends for the same events written as SSE, wherever the writes
    are cut, the stream id spliced in alike (`sends_texts`: a write's messages in one send;
    `write`: in one synchronous write where the server takes it, else in the message)."""
    events = socket_turn_events()
    sse, lines = frames(events), message_frames(events)
    writer, _, socket = writer_for(stream=True, stream_id=stream_id)
    expected = sent_by(writer, socket, [sse])
    assert [json.loads(text)["type"] for text in expected] == [e["type"] for e in events]
    assert all(json.loads(text).get("stream_id") == stream_id for text in expected)
    for cut in range(len(lines) + 1):
        writer, connection, socket = writer_for(
            stream=True, messages=True, stream_id=stream_id, sends_texts=sends_texts, write=write
        )
        assert sent_by(writer, socket, [lines[:cut], lines[cut:]]) == expected, cut
        assert connection.settling
        if sends_texts:  # (each of the two writes' whole events in one send, however many)
            assert socket.writes == (b"\n" in lines[:cut]) + (b"\n" in lines[cut:]), cut
            assert socket.messages == (0 if write else socket.writes), cut


def test_the_socket_form_settles_at_the_terminal_event_and_sends_nothing_after_it() -> None:
    events = socket_turn_events()
    writer, connection, socket = writer_for(stream=True, messages=True)
    asyncio.run(
        writer({"type": "http.response.body", "body": message_frames(events[:-1]), "more_body": True})
    )
    assert not connection.settling
    answered(writer).final = events[-1]["response"]
    asyncio.run(
        writer({"type": "http.response.body", "body": message_frames(events[-1:]), "more_body": True})
    )
    assert connection.settling
    asyncio.run(writer({"type": "http.response.body", "body": message_frames(events[:1]), "more_body": True}))
    asyncio.run(writer.end())
    assert [json.loads(text)["type"] for text in socket.sent] == [e["type"] for e in events]


def test_the_socket_form_cut_short_ends_with_an_error_event() -> None:
    events = socket_turn_events()
    writer, _, socket = writer_for(stream=True, messages=True)
    lines = message_frames(events)
    sent = sent_by(writer, socket, [lines[: lines.index(b"response.completed") + 5]])
    assert len(sent) == len(events)  # (the cut terminal event dropped, an error in its place)
    error = json.loads(sent[-1])
    assert error["type"] == "error" and error["error"]["code"] == "stream_interrupted"


def test_an_event_past_the_limit_in_the_socket_form_ends_the_turn_after_the_events_before_it() -> None:
    events = socket_turn_events()
    events[3]["delta"] = "x" * 500
    writer, _, socket = writer_for(stream=True, messages=True, limit=400)
    sent = sent_by(writer, socket, [message_frames(events)])
    assert [json.loads(text)["type"] for text in sent[:-1]] == [e["type"] for e in events[:3]]
    error = json.loads(sent[-1])
    assert error["type"] == "error" and error["error"]["code"] == "response_too_large"


@pytest.mark.parametrize("stream_id", [None, "lane-2"])
def test_a_native_answer_relayed_from_the_upstream_socket_sends_what_its_sse_split_sends(
    stream_id: str | None,
) -> None:
    """A native turn over the upstream socket: the relay writes each upstream message framed as
    SSE (`framed`), one a write; the writer takes each frame's JSON as it is (no split), and
    sends what the general splitter sends for the same bytes: an `event:`-framed message (type
    not first), a non-object, an empty object and a stream id alike; nothing after the terminal."""
    upstream = [
        b'{"type":"response.created","sequence_number":0,"response":{"id":"r"}}',
        b'{"sequence_number":1,"type":"response.output_text.delta","delta":"Z\\u00fcrich"}',
        b"[DONE]",
        b"{}",
        b'{"type":"response.output_text.delta","sequence_number":2,"delta":"line\\nbreak \xe2\x9c\x93"}',
        b'{\n  "type": "response.output_text.delta",\n  "sequence_number": 3, "delta": "pretty"\n}',
        b'{"type":"response.completed","sequence_number":4,"response":{"id":"r"}}',
        b'{"type":"response.created","sequence_number":5}',
    ]
    frames_out = [framed(data, message_type(data)) for data in upstream]
    writer, _, socket = writer_for(stream=True, stream_id=stream_id)
    expected = sent_by(writer, socket, [b"".join(frames_out)])
    assert json.loads(expected[-1])["type"] == "response.completed"
    relayed = FakeRelayed()
    writer, connection, socket = writer_for(stream=True, stream_id=stream_id, relayed=relayed)
    for data, frame in zip(upstream, frames_out, strict=True):
        relayed.answer.done = message_type(data) in TERMINAL_TYPES  # type: ignore[attr-defined]
        asyncio.run(writer({"type": "http.response.body", "body": frame, "more_body": True}))
    asyncio.run(writer({"type": "http.response.body", "body": b"", "more_body": False}))
    asyncio.run(writer.end())
    assert socket.sent == expected
    assert connection.settling and connection.last_terminal == expected[-1]


@pytest.mark.parametrize("done_early", [True, False])
def test_a_relayed_frame_ends_the_turn_by_its_own_type_not_by_how_far_the_upstream_was_read(
    done_early: bool,
) -> None:
    """The relayed hot path reads whether a frame is the terminal from the frame itself: were the
    upstream answer read ahead of the writes (`done` already set on an earlier frame) or its flag
    late, the messages sent are still every message up to the terminal, and the terminal ends the
    turn."""
    upstream = [
        b'{"type":"response.created","sequence_number":0,"response":{"id":"r"}}',
        b'{"type":"response.output_text.delta","sequence_number":1,"delta":"hi"}',
        b'{"type":"response.completed","sequence_number":2,"response":{"id":"r"}}',
        b'{"type":"response.created","sequence_number":3}',
    ]
    frames_out = [framed(data, message_type(data)) for data in upstream]
    relayed = FakeRelayed()
    relayed.answer.done = done_early  # type: ignore[attr-defined]
    writer, connection, socket = writer_for(stream=True, relayed=relayed)
    for frame in frames_out:
        asyncio.run(writer({"type": "http.response.body", "body": frame, "more_body": True}))
    asyncio.run(writer({"type": "http.response.body", "body": b"", "more_body": False}))
    asyncio.run(writer.end())
    assert [json.loads(text)["sequence_number"] for text in socket.sent] == [0, 1, 2]
    assert connection.settling and connection.last_terminal == socket.sent[-1]


def test_a_turns_edge_hands_its_body_once_and_tells_the_client_gone_to_its_watch() -> None:
    """TurnEdge: the server edge's hooks for a turn's HTTP scope (its body whole; the socket's
    client gone as the disconnect), as proxy.server.edge tells a served POST."""

    async def run() -> tuple[list[str], bytes | None, bytes | None]:
        socket = FakeSocket()
        connection = Connection(cast(WebSocket, socket), cast(SocketResponses, None))
        told: list[str] = []
        first = TurnEdge(connection, b'{"model":"m"}').hooks()
        body, again = first["take_body"](), first["take_body"]()
        first["on_disconnect"](lambda: told.append("first"))
        first["on_disconnect"](None)  # (its answer complete: watched no more)
        second = TurnEdge(connection, b"{}").hooks()
        second["on_disconnect"](lambda: told.append("second"))
        first["on_disconnect"](None)  # (the turn before, done late: the next turn's watch stays)
        connection.leave()
        assert told == []  # (told on the loop's next turn, not inside the failing write)
        await asyncio.sleep(0)
        third = TurnEdge(connection, b"{}").hooks()
        third["on_disconnect"](lambda: told.append("third"))  # (gone already: at once)
        return told, body, again

    told, body, again = asyncio.run(run())
    assert (body, again) == (b'{"model":"m"}', None)
    assert told == ["second", "third"]
