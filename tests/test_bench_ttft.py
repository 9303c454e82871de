"""bench/ttft.py and bench/ttft_builds.py: the idle TTFT probe's wait between requests, and the
targets a build comparison probes."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import bench_module

_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"a\r\ndata: {}\n\n\r\n0\r\n\r\n"  # (one chunk of 10 bytes, then the last)
)


async def _serve_answers(arrivals: list[float]) -> asyncio.Server:
    """A loopback server answering every request on a connection with one chunked SSE event,
    noting when each request's head arrived (the probe's bodies have a Content-Length)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrivals.append(asyncio.get_running_loop().time())
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(_ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize("gap_ms", [0.0, 30.0])
def test_the_probe_waits_the_gap_between_an_answer_and_the_next_request(
    gap_ms: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    ttft = bench_module("ttft")
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def noted_sleep(seconds: float, *args: Any) -> Any:
        waits.append(seconds)
        return await real_sleep(seconds, *args)

    # (`ttft.asyncio` is the asyncio module itself: every `asyncio.sleep` in the run is noted, and the
    # probe is the only caller; monkeypatch puts it back)
    monkeypatch.setattr(ttft.asyncio, "sleep", noted_sleep)

    async def run() -> tuple[list[float], list[float]]:
        arrivals: list[float] = []
        server = await _serve_answers(arrivals)
        port = server.sockets[0].getsockname()[1]
        async with server:
            samples = await ttft.probe(port, 3, gap_ms=gap_ms)
        return samples, arrivals

    samples, arrivals = asyncio.run(run())
    assert len(samples) == 3 and all(sample > 0 for sample in samples)
    # (the first request goes at once; each later one after the gap, never before it)
    assert waits == ([gap_ms / 1000.0] * 2 if gap_ms else [])
    if gap_ms:
        assert all(
            later - earlier >= gap_ms / 1000.0 * 0.9 for earlier, later in itertools.pairwise(arrivals)
        )


def test_the_blocking_probe_hands_its_gap_and_warm_up_to_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    ttft = bench_module("ttft")
    asked: list[tuple[int, int, str, float]] = []

    async def probe(port: int, n: int, *, door: str = "chat", gap_ms: float = 0.0) -> list[float]:
        asked.append((port, n, door, gap_ms))
        return [float(i) for i in range(n)]

    monkeypatch.setattr(ttft, "probe", probe)
    assert ttft.run_probe(9, 4, warmup=2, gap_ms=5.0) == [2.0, 3.0, 4.0, 5.0]  # (the warm-up left out)
    assert asked == [(9, 6, "chat", 5.0)]


def test_a_build_comparison_probes_each_tree_with_its_defaults_then_each_variant() -> None:
    tool = bench_module("ttft_builds")
    targets = tool.target_envs([Path("/tmp/before"), Path("/tmp/now")], "nostate, notrace")
    assert list(targets) == [
        "before",
        "before-nostate",
        "before-notrace",
        "now",
        "now-nostate",
        "now-notrace",
    ]
    assert targets["now"] == {"PYTHONPATH": "/tmp/now"}
    assert targets["now-nostate"] == {"PYTHONPATH": "/tmp/now", "THINKPROXY_STATE": "off"}
    assert targets["before-notrace"] == {"PYTHONPATH": "/tmp/before", "THINKPROXY_TRACE": "off"}
    assert list(tool.target_envs([Path("/tmp/now")], "")) == ["now"]


def test_an_unknown_variant_is_refused_with_the_known_ones() -> None:
    tool = bench_module("ttft_builds")
    with pytest.raises(ValueError, match=r"unknown variant\(s\) nostat: choose among .*nostate"):
        tool.target_envs([Path("/tmp/now")], "nostate,nostat")
