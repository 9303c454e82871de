"""ClientWatch: the per-request disconnect watch and the lazy upstream read timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from proxy.asgi import ClientWatch, DeadlineExceeded, UpstreamStalled


async def quiet_receive() -> dict[str, object]:
    await asyncio.Event().wait()  # the client never leaves
    return {"type": "http.disconnect"}


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
    assert not watch.stalled
    watch.close()


async def test_silence_longer_than_the_read_timeout_stalls() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=0.1)
    with pytest.raises(UpstreamStalled):
        await watch.run(asyncio.sleep(5))
    assert watch.stalled
    watch.close()


async def test_a_reader_can_absorb_the_stall_and_finish_its_own_way() -> None:
    watch = ClientWatch(quiet_receive, read_timeout=0.05)

    async def reader() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            assert watch.stalled
            watch.absorb_stall()
            await asyncio.sleep(0)  # still able to await (e.g. to write an error event)
            return "ended with an error event"
        return "unreachable"

    assert await watch.run(reader()) == "ended with an error event"
    watch.close()


async def test_client_leaving_cancels_the_work() -> None:
    left = asyncio.Event()

    async def receive() -> dict[str, object]:
        await left.wait()
        return {"type": "http.disconnect"}

    watch = ClientWatch(receive, read_timeout=None)
    asyncio.get_running_loop().call_later(0.05, left.set)
    assert await watch.run(asyncio.sleep(5, result="late")) is None
    assert watch.gone
    watch.close()


async def test_own_deadline_is_told_apart_from_the_work_timing_out() -> None:
    watch = ClientWatch(quiet_receive)
    with pytest.raises(DeadlineExceeded):
        await watch.run(asyncio.sleep(5), timeout=0.05)

    async def times_out_by_itself() -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)

    with pytest.raises(TimeoutError):
        await watch.run(times_out_by_itself(), timeout=5)
    watch.close()
