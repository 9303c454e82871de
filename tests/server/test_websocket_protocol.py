"""proxy.server.websocket_protocol: several text messages in one write, on the wire as many
`websocket.send`s would have sent them; its rules as `websocket.send`'s."""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.server import ServerState
from websockets.frames import Frame, Opcode
from websockets.sync.client import connect

from proxy.server.serving import BackgroundServer
from proxy.server.websocket_protocol import SEND_TEXTS, WS_PROTOCOL, BatchingWebSocketProtocol

# A short text; one past 125 bytes (a 16-bit length); the last of the heads made once and the
# first after it; the last 16-bit length and the first 64-bit ones; non-ASCII; an empty one.
TEXTS = [
    '{"type":"response.output_text.delta"}',
    *("x" * n for n in (126, 2047, 2048, 65535, 65536, 70_000)),
    "é✓ü",
    "",
]


# Texts whose UTF-8 is exactly 125 and 126 bytes long (the last 7-bit length, the first 16-bit), at
# the head table's end (2,047 and 2,048), 65,535 and 65,536 (the last 16-bit length, the first
# 64-bit), with short ones: a batch's heads past the table are made as they are asked for.
SIZED = [b'{"x":"' + b"y" * (size - 8) + b'"}' for size in (125, 126, 2047, 2048, 65535, 65536)] + [b"{}"]


class RecordingTransport(asyncio.Transport):
    """A transport that keeps each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)


def upgrade_request() -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        "GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def frame(text: str) -> bytes:
    """`text` as one unmasked text frame, as a server sends it."""
    return Frame(Opcode.TEXT, text.encode()).serialize(mask=False)


async def served(app: Any) -> tuple[BatchingWebSocketProtocol, RecordingTransport]:
    """`app` behind the protocol on a recording transport, the upgrade received and answered."""
    config = uvicorn.Config(app, ws=WS_PROTOCOL, lifespan="off", log_level="warning")
    config.load()
    protocol = BatchingWebSocketProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(upgrade_request())
    for _ in range(20):  # the app's task runs to its end (or to its first wait)
        await asyncio.sleep(0)
    return protocol, transport


def test_the_protocol_is_the_one_serve_and_the_test_servers_run() -> None:
    assert WS_PROTOCOL == "proxy.server.websocket_protocol:BatchingWebSocketProtocol"


def test_a_batch_goes_out_in_one_write_as_the_frames_one_send_each_would_have_written() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["extensions"] = dict(scope["extensions"])
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await send({"type": SEND_TEXTS, "texts": TEXTS})
        await send({"type": "websocket.send", "text": "after"})
        await send({"type": SEND_TEXTS, "encoded": [text.encode() for text in TEXTS]})  # (their UTF-8)

    async def run() -> list[bytes]:
        _, transport = await served(app)
        return transport.writes

    handshake, batch, after, encoded = asyncio.run(run())
    assert handshake.startswith(b"HTTP/1.1 101 ")
    assert batch == encoded == b"".join(frame(text) for text in TEXTS)
    assert after == frame("after")
    assert seen["extensions"].keys() == {"websocket.http.response", SEND_TEXTS}
    assert seen["extensions"][SEND_TEXTS].keys() == {"write"}


def test_a_batch_of_every_size_goes_out_as_the_frames_one_send_each_would_have_written() -> None:
    """`encoded` (the message's and `write`): each text one frame, byte for byte the library's,
    for every length the heads differ at, alone, first, last and between short ones."""
    assert {125, 126, 2047, 2048, 65535, 65536} <= {len(text) for text in SIZED}
    writes = [[text] for text in SIZED]
    writes += [[SIZED[-1], text, SIZED[-1]] for text in SIZED]
    writes += [[text, SIZED[-1]] for text in SIZED] + [[SIZED[-1], text] for text in SIZED]
    writes.append(SIZED)
    wrote: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        write = scope["extensions"][SEND_TEXTS]["write"]
        await receive()
        await send({"type": "websocket.accept"})
        for texts in writes:
            await send({"type": SEND_TEXTS, "encoded": texts})
            wrote.append(write(texts))

    async def run() -> list[bytes]:
        _, transport = await served(app)
        return transport.writes

    _, *out = asyncio.run(run())
    assert wrote == [True] * len(writes)
    expected = [b"".join(frame(text.decode()) for text in texts) for texts in writes]
    assert out[0::2] == out[1::2] == expected


def test_the_synchronous_write_sends_what_the_message_sends() -> None:
    """The extension's `write`: the same frames as a SEND_TEXTS message, in one write, with no
    coroutine; the messages after it go out after it."""
    wrote: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        write = scope["extensions"][SEND_TEXTS]["write"]
        await receive()
        await send({"type": "websocket.accept"})
        wrote.append(write([text.encode() for text in TEXTS]))
        wrote.append(write([TEXTS[0].encode()]))  # (one: a paced stream's every event)
        await send({"type": SEND_TEXTS, "encoded": [TEXTS[0].encode()]})

    async def run() -> list[bytes]:
        _, transport = await served(app)
        return transport.writes

    _, batch, one, message = asyncio.run(run())
    assert wrote == [True, True]
    assert batch == b"".join(frame(text) for text in TEXTS)
    assert one == message == frame(TEXTS[0])


@pytest.mark.parametrize(
    "when",
    ["before the accept", "after the close", "the client gone", "the buffer full", "library data queued"],
)
def test_the_synchronous_write_writes_nothing_where_the_message_would_wait_or_fail(when: str) -> None:
    """False, and nothing written: the caller sends the message instead, which waits for room,
    refuses or raises as `websocket.send` does."""
    wrote: list[bool] = []
    ready = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        write = scope["extensions"][SEND_TEXTS]["write"]
        await receive()
        if when != "before the accept":
            await send({"type": "websocket.accept"})
        if when == "after the close":
            await send({"type": "websocket.close", "code": 1000})
        await ready.wait()
        wrote.append(write([b"late"]))

    async def run() -> list[bytes]:
        protocol, transport = await served(app)
        if when == "the client gone":
            protocol.connection_lost(None)
        elif when == "the buffer full":
            protocol.pause_writing()
        elif when == "library data queued":  # (a pong the library owes, say: it goes first)
            protocol.conn.writes.append(b"queued")
        ready.set()
        for _ in range(10):
            await asyncio.sleep(0)
        return transport.writes

    writes = asyncio.run(run())
    assert wrote == [False]
    assert not any(frame("late") in write for write in writes)


def test_a_refused_upgrade_advertises_nothing_and_runs_no_app() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app runs only for an accepted upgrade")

    async def run() -> tuple[BatchingWebSocketProtocol, RecordingTransport]:
        config = uvicorn.Config(app, ws=WS_PROTOCOL, lifespan="off", log_level="warning")
        config.load()
        protocol = BatchingWebSocketProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        transport = RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(b"GET /v1/responses HTTP/1.1\r\nHost: x\r\n\r\n")  # (no upgrade headers)
        await asyncio.sleep(0)
        return protocol, transport

    protocol, transport = asyncio.run(run())
    assert transport.writes[0].startswith(b"HTTP/1.1 4") and transport.closed
    assert not hasattr(protocol, "scope")


@pytest.mark.parametrize("when", ["before the accept", "after the close"])
def test_a_batch_outside_an_open_socket_is_refused_as_websocket_send_would_be(when: str) -> None:
    failed: list[BaseException] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        if when == "after the close":
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": 1000})
        try:
            await send({"type": SEND_TEXTS, "texts": ["late"]})
        except RuntimeError as exc:
            failed.append(exc)

    async def run() -> list[bytes]:
        _, transport = await served(app)
        return transport.writes

    writes = asyncio.run(run())
    assert len(failed) == 1 and "accepted WebSocket" in str(failed[0])
    assert not any(frame("late") in write for write in writes)


def test_a_batch_after_the_server_closed_and_the_client_left_raises_client_disconnected() -> None:
    """As `websocket.send` does then: the client gone is what the app is told, not a state error."""
    failed: list[BaseException] = []
    closed = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await closed.wait()
        for message in ({"type": SEND_TEXTS, "texts": ["late"]}, {"type": "websocket.send", "text": "late"}):
            try:
                await send(message)
            except ClientDisconnected as exc:
                failed.append(exc)

    async def run() -> None:
        protocol, _ = await served(app)
        protocol.keepalive_timeout()  # (the server closes the socket: no pong in time)
        protocol.connection_lost(None)
        closed.set()
        for _ in range(10):
            await asyncio.sleep(0)

    asyncio.run(run())
    assert len(failed) == 2


def test_a_batch_to_a_client_gone_raises_client_disconnected() -> None:
    failed: list[BaseException] = []
    gone = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await gone.wait()
        try:
            await send({"type": SEND_TEXTS, "texts": ["late"]})
        except ClientDisconnected as exc:
            failed.append(exc)

    async def run() -> None:
        protocol, _ = await served(app)
        protocol.connection_lost(None)
        gone.set()
        for _ in range(10):
            await asyncio.sleep(0)

    asyncio.run(run())
    assert len(failed) == 1


@pytest.mark.parametrize("compression", [None, "deflate"])
def test_a_served_socket_reads_the_batch_as_its_messages_in_order(compression: str | None) -> None:
    """Over a real server and a real client (the websockets library's, as openai-python uses;
    with permessage-deflate negotiated the library frames and compresses each message)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # (the server's start and stop)
            while (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": SEND_TEXTS, "texts": TEXTS})
        await send({"type": "websocket.send", "text": "after"})
        await send({"type": SEND_TEXTS, "encoded": [text.encode() for text in TEXTS]})
        await send({"type": "websocket.close", "code": 1000})

    url = "ws://127.0.0.1:{}/v1/responses"
    with BackgroundServer(app) as server, connect(url.format(server.port), compression=compression) as socket:
        got = [socket.recv(timeout=10) for _ in [*TEXTS, "after", *TEXTS]]
        negotiated = socket.response.headers.get("Sec-WebSocket-Extensions")
    assert got == [*TEXTS, "after", *TEXTS]
    assert (negotiated is not None) == (compression is not None)


def test_a_closed_socket_leaves_no_reference_cycle_through_its_synchronous_write() -> None:
    """The scope holds the extension, the extension the protocol's bound `write`: the connection's
    end lets go of it, so a closed socket is freed by its reference count, not the collector."""
    extensions: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        extensions.append(scope["extensions"][SEND_TEXTS])
        await receive()
        await send({"type": "websocket.accept"})

    async def run() -> BatchingWebSocketProtocol:
        protocol, _ = await served(app)
        protocol.connection_lost(None)
        for _ in range(10):
            await asyncio.sleep(0)
        return protocol

    asyncio.run(run())
    assert extensions and "write" not in extensions[0]


def test_an_empty_batch_writes_nothing() -> None:
    wrote: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": SEND_TEXTS, "encoded": []})
        await send({"type": SEND_TEXTS, "texts": []})
        wrote.append(scope["extensions"][SEND_TEXTS]["write"]([]))
        await send({"type": "websocket.send", "text": "after"})

    async def run() -> list[bytes]:
        _, transport = await served(app)
        return transport.writes

    writes = asyncio.run(run())
    assert wrote == [True]
    assert b"".join(writes[1:]) == frame("after")
