"""read_body (a request body within its limits) and ClientWatch: the per-request disconnect watch and its
lazy limits (read, total, write)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import pytest
from starlette.requests import ClientDisconnect, Request

from proxy.core.errors import PayloadTooLarge
from proxy.server.asgi import ClientTooSlow, ClientWatch, DeadlineExceeded, UpstreamStalled, read_body
from proxy.server.edge import EDGE_REQUEST
from proxy.server.limits import RequestTimeout
from tests.helpers import chat_scope


async def quiet_receive() -> dict[str, object]:
    await asyncio.Event().wait()  # the client never leaves
    return {"type": "http.disconnect"}


def request_of(messages: list[dict[str, object]], headers: Sequence[tuple[bytes, bytes]] = ()) -> Request:
    """A request whose client sends `messages`, then nothing more (waits forever)."""
    pending = list(messages)

    async def receive() -> dict[str, object]:
        if pending:
            return pending.pop(0)
        return await quiet_receive()

    return Request(chat_scope(list(headers)), receive)


def piece(body: bytes, more: bool = True) -> dict[str, object]:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_a_body_is_read_whole_from_its_pieces() -> None:
    assert await read_body(request_of([piece(b"ab"), piece(b""), piece(b"cd", False)]), 4, 5.0) == b"abcd"
    assert await read_body(request_of([piece(b"", False)]), 4, 5.0) == b""
    assert await read_body(request_of([{"type": "http.request"}]), 4, 5.0) == b""


async def test_a_body_past_its_limit_is_refused_declared_or_not() -> None:
    declared = [(b"content-length", b"5")]
    with pytest.raises(PayloadTooLarge, match="5 bytes exceeds the limit of 4 bytes"):
        await read_body(request_of([piece(b"abcde", False)], declared), 4, 5.0)
    with pytest.raises(PayloadTooLarge, match="exceeds the limit of 4 bytes"):
        await read_body(request_of([piece(b"abc"), piece(b"de", False)]), 4, 5.0)


async def test_a_client_gone_mid_body_or_too_slow_is_told() -> None:
    with pytest.raises(ClientDisconnect):
        await read_body(request_of([piece(b"ab"), {"type": "http.disconnect"}]), 4, 5.0)
    with pytest.raises(RequestTimeout, match="2 bytes arrived"):
        await read_body(request_of([piece(b"ab")]), 4, 0.05)


def told_by_the_edge(request: Request, body: bytes | None) -> Request:
    """`request` under a server edge whose `take_body` gives `body` (None: not all of it arrived)."""
    request.scope["extensions"] = {EDGE_REQUEST: {"take_body": lambda: body, "on_disconnect": None}}
    return request


async def never_called() -> dict[str, object]:
    raise AssertionError("receive was read though the edge had the whole body")


async def test_a_body_the_edge_has_whole_is_taken_without_receive() -> None:
    request = told_by_the_edge(Request(chat_scope([]), never_called), b"abcd")
    assert await read_body(request, 4, 5.0) == b"abcd"
    with pytest.raises(PayloadTooLarge, match="exceeds the limit of 3 bytes"):
        await read_body(told_by_the_edge(Request(chat_scope([]), never_called), b"abcd"), 3, 5.0)


async def test_a_body_the_edge_does_not_have_whole_is_read_and_timed_as_without_it() -> None:
    request = told_by_the_edge(request_of([piece(b"ab"), piece(b"cd", False)]), None)
    assert await read_body(request, 4, 5.0) == b"abcd"
    with pytest.raises(RequestTimeout, match=r"not complete within 0\.05 s.*2 bytes arrived"):
        await read_body(told_by_the_edge(request_of([piece(b"ab")]), None), 4, 0.05)


class EdgeDisconnect:
    """A server edge's `on_disconnect` hook: it holds the callback; `leave()` is the client's
    connection lost."""

    def __init__(self, gone: bool = False) -> None:
        self.gone = gone
        self.callback: Callable[[], None] | None = None

    def __call__(self, callback: Callable[[], None] | None) -> None:
        self.callback = callback
        if self.gone:
            self.leave()

    def leave(self) -> None:
        self.gone = True
        callback, self.callback = self.callback, None
        if callback is not None:
            callback()


async def test_told_by_the_edge_the_watch_runs_no_task_and_a_client_gone_cancels_the_work() -> None:
    edge = EdgeDisconnect()
    before = asyncio.all_tasks()
    watch = ClientWatch(never_called, read_timeout=30, on_disconnect=edge)
    assert asyncio.all_tasks() == before
    asyncio.get_running_loop().call_later(0.01, edge.leave)
    assert await watch.run(asyncio.sleep(30, "done")) is None
    assert watch.gone
    watch.close()


async def test_told_by_the_edge_a_client_already_gone_runs_nothing() -> None:
    watch = ClientWatch(never_called, read_timeout=30, on_disconnect=EdgeDisconnect(gone=True))
    work = asyncio.sleep(30)
    assert await watch.run(work) is None
    assert work.cr_frame is None  # closed, never run
    watch.close()


async def test_a_closed_watch_lets_go_of_the_edges_hook() -> None:
    edge = EdgeDisconnect()
    watch = ClientWatch(never_called, read_timeout=30, on_disconnect=edge)
    assert edge.callback is not None
    watch.close()
    assert edge.callback is None
    edge.leave()
    assert not watch.gone


async def test_steady_reads_longer_than_the_read_timeout_do_not_stall() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=0.05)
    # Every "read" here counts as recent for 5 s, so however late a loaded machine runs this task,
    # the timer (firing after 0.05 s) finds recent activity and re-arms: no timing window to miss.
    watch.last_read = time.perf_counter() + 5.0

    async def steady() -> str:
        for _ in range(8):  # ≥ 0.24 s in all, well past the first firing of the stall timer
            await asyncio.sleep(0.03)
            watch.last_read = time.perf_counter() + 5.0
        return "done"

    assert await watch.run(steady()) == "done"
    assert watch.fired is None
    watch.close()


async def test_silence_longer_than_the_read_timeout_stalls() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=0.05)
    with pytest.raises(UpstreamStalled):
        await watch.run(asyncio.sleep(30))
    watch.close()


async def test_a_reader_can_take_the_stall_and_finish_its_own_way() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=0.05)

    async def reader() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            assert watch.take_cancel() is UpstreamStalled
            await asyncio.sleep(0)  # still able to await (e.g. to write an error event)
            return "ended with an error event"
        return "unreachable"

    assert await watch.run(reader()) == "ended with an error event"
    watch.close()


async def test_an_outside_cancellation_during_a_stall_is_never_swallowed() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=30)
    took: list[object] = []

    async def reader() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            took.append(watch.take_cancel())
            raise

    async def victim() -> None:
        await watch.run(reader())

    task = asyncio.create_task(victim())
    await asyncio.sleep(0.01)  # the reader is waiting on the upstream
    # The stall fires and the outside world cancels too, before the reader runs again.
    watch.last_read -= 60
    watch._check()  # (what the lazy timer calls)
    assert watch.fired is UpstreamStalled
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert took == [None]  # the reader was told the cancellation is not only the watch's
    watch.close()


async def test_an_outside_cancellation_alone_propagates_through_run() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=30)
    task = asyncio.create_task(watch.run(asyncio.sleep(30)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    watch.close()


async def test_client_leaving_cancels_the_work() -> None:
    left = asyncio.Event()

    async def receive() -> dict[str, object]:
        await left.wait()
        return {"type": "http.disconnect"}

    watch = ClientWatch(receive, read_timeout=None)
    asyncio.get_running_loop().call_later(0.05, left.set)
    assert await watch.run(asyncio.sleep(30, result="late")) is None
    assert watch.gone
    watch.close()


async def test_deadline_bounds_every_run_and_is_not_restarted() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=None, deadline=time.perf_counter() + 0.2)

    async def steady() -> None:
        while True:  # an upstream that never goes quiet: only the deadline ends it
            await asyncio.sleep(0.01)
            watch.last_read = time.perf_counter()

    assert await watch.run(asyncio.sleep(0.01, result="headers")) == "headers"
    with pytest.raises(DeadlineExceeded):
        await watch.run(steady())
    watch.close()


async def test_the_works_own_timeout_is_not_the_deadline() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=None, deadline=time.perf_counter() + 30)

    async def times_out_by_itself() -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(30)

    with pytest.raises(TimeoutError):
        await watch.run(times_out_by_itself())
    watch.close()


async def test_time_blocked_writing_is_not_upstream_silence_but_is_bounded() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=0.05, write_timeout=0.3)

    async def blocked_write() -> None:
        watch.writing = True
        await asyncio.sleep(30)  # a client that reads nothing

    started = time.perf_counter()
    with pytest.raises(ClientTooSlow):
        await watch.run(blocked_write())
    assert time.perf_counter() - started >= 0.3  # not taken for a 0.05 s read stall
    watch.close()


async def test_a_limit_that_runs_out_between_two_runs_is_told_to_the_next() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=None, deadline=time.perf_counter() + 0.01)
    await asyncio.sleep(0.05)  # the deadline passes while no work runs under the watch
    with pytest.raises(DeadlineExceeded):
        await watch.run(asyncio.sleep(30))
    watch.close()


async def test_the_client_leaving_and_a_stall_at_once_leave_no_cancellation_behind() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=30)

    async def victim() -> tuple[object, int]:
        result = await watch.run(asyncio.sleep(30, result="late"))
        task = asyncio.current_task()
        assert task is not None
        return result, task.cancelling()

    task = asyncio.create_task(victim())
    await asyncio.sleep(0.01)
    # Before the work runs again: the stall cancels it (what the lazy timer calls) …
    watch.last_read -= 60
    watch._check()
    # … and the client leaves (what the disconnect watch does on http.disconnect).
    watch.gone = True
    watch._cancel_victim()
    assert await task == (None, 0)  # one CancelledError for both, both absorbed
    watch.close()


async def test_a_relayed_body_cancelled_from_outside_propagates_and_is_logged_as_such() -> None:
    from proxy.server.asgi import RelayResponse

    closed: list[str | None] = []
    sent: list[dict[str, object]] = []

    async def produce(send: object) -> None:
        await asyncio.sleep(30)

    async def on_close(error: str | None) -> None:
        closed.append(error)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    watch = ClientWatch(quiet_receive, read_timeout=30)
    response = RelayResponse(produce, status_code=200, headers=[], watch=watch, on_close=on_close)
    task = asyncio.create_task(response({"type": "http"}, quiet_receive, send))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    task.cancel()  # the server shutting down, say
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == ["cancelled"]
    assert sent[-1]["type"] == "http.response.start"  # the body was never ended as if complete
