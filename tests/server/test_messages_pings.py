"""The Messages door's pings (proxy.server.doors.messages.with_pings): a `ping` event after each
keep-alive interval of silence, never before the first write, never inside a write, and nothing
left running once the stream ends."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Send

from proxy.core.events import AccessRecord
from proxy.core.protocols.messages.stream import PING
from proxy.server.doors.messages import with_pings

INTERVAL = 0.01


def body(data: bytes) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": True}


class Client:
    """A client's send: records what arrives, each write taking `write_s`, and fails when told."""

    def __init__(self, write_s: float = 0.0) -> None:
        self.got: list[bytes] = []
        self.write_s = write_s
        self.inside = 0
        self.overlapped = False
        self.gone = False

    async def send(self, message: Message) -> None:
        if self.gone:
            raise OSError("the client is gone")
        self.inside += 1
        self.overlapped |= self.inside > 1
        await asyncio.sleep(self.write_s)
        self.inside -= 1
        self.got.append(message["body"])


def record() -> AccessRecord:
    return AccessRecord(method="POST", path="/v1/messages")


def run(write: object, client: Client) -> AccessRecord:
    rec = record()

    async def main() -> None:
        try:
            await with_pings(write, INTERVAL, rec)(client.send)  # type: ignore[arg-type]
        finally:
            assert asyncio.all_tasks() == {asyncio.current_task()}  # (no ping left running)

    asyncio.run(main())
    return rec


def test_silence_after_the_first_write_gets_pings_and_none_before_it() -> None:
    async def write(send: Send) -> None:
        await asyncio.sleep(INTERVAL * 10)  # (silent before anything was written: no ping)
        await send(body(b"start"))
        await asyncio.sleep(INTERVAL * 10)
        await send(body(b"end"))

    client = Client()
    rec = run(write, client)
    assert client.got[0] == b"start" and client.got[-1] == b"end"
    pings = client.got[1:-1]
    assert pings and set(pings) == {PING}
    assert rec.bytes_out == len(PING) * len(pings)  # (the door's writes are counted by the writer)


def test_a_ping_never_goes_inside_a_write_and_a_write_follows_a_ping_in_flight() -> None:
    async def write(send: Send) -> None:
        await send(body(b"start"))
        for i in range(5):
            await asyncio.sleep(INTERVAL * 2)
            await send(body(b"%d" % i))

    client = Client(write_s=INTERVAL * 3)  # (each write outlasts the interval)
    run(write, client)
    assert not client.overlapped
    assert [b for b in client.got if b != PING] == [b"start", b"0", b"1", b"2", b"3", b"4"]


def test_a_brisk_stream_gets_no_ping_and_leaves_no_timer() -> None:
    async def write(send: Send) -> None:
        for i in range(50):
            await send(body(b"%d" % i))

    client = Client()
    run(write, client)
    assert PING not in client.got and len(client.got) == 50


def test_a_client_gone_during_a_ping_ends_the_stream_with_the_writers_error() -> None:
    client = Client()

    async def write(send: Send) -> None:
        await send(body(b"start"))
        client.gone = True
        await asyncio.sleep(INTERVAL * 10)  # (a ping is due, and fails)
        await send(body(b"more"))

    with pytest.raises(OSError, match="gone"):
        run(write, client)
    assert client.got == [b"start"]
