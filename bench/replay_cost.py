"""What the replay store adds to one chat request: the restore before it goes upstream (tenant hash,
key plan, one batched lookup, restore) and the capture after it ended (records built, written).

Measured in-process on the proxy's own code path (`ReplayService.prepare` and `.capture`), so the
figure is the store's cost alone, without HTTP noise around it. Two histories: a short tool loop
(3 tool-call turns, each needing its reasoning back) and a long one (300 tool-call turns: one
batched lookup of 300 keys). Memory backend, then a real redis-server on a free loopback port
(skipped, with a note, when the binary is missing).

    /work/venv/bin/python bench/replay_cost.py [--n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from proxy.core.config.providers import ProvidersTable
from proxy.core.controls import TraceFormat
from proxy.core.events import AccessRecord
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.server.replay_service import ReplayService
from proxy.state import MemoryStore, RedisStore, StateStore

HEADERS = [("authorization", "Bearer sk-bench-tenant-0123456789")]
# A tool loop offers its tools on every turn (without them no answer could be a tool call, and
# nothing would be captured).
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
REASONING = "The user wants the weather in Paris; I have a tool for this and will call it now. " * 4


def history(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan my trip."}]
    for i in range(turns):
        call_id = f"call_{i:04d}_0123456789abcdef"
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "rain, 12 °C"})
    return {"model": "deepseek-flash", "messages": messages, "tools": TOOLS}


def turn_chunks(call_id: str) -> list[dict[str, Any]]:
    delta_r = {"reasoning_content": REASONING}
    delta_t = {
        "tool_calls": [
            {"index": 0, "id": call_id, "type": "function", "function": {"name": "w", "arguments": "{}"}}
        ]
    }
    return [{"choices": [{"index": 0, "delta": d}]} for d in (delta_r, delta_t)]


async def seed(service: ReplayService, dialect: Any, turns: int) -> None:
    """Remember every turn of the history, as if the proxy had served them."""
    for i in range(turns):
        record = AccessRecord("POST", "/v1/chat/completions", status=200)
        prepared = await service.prepare(
            {"messages": [], "tools": TOOLS}, dialect, "deepseek-flash", HEADERS, record
        )
        for chunk in turn_chunks(f"call_{i:04d}_0123456789abcdef"):
            assert prepared.capture is not None
            prepared.capture.chunk(chunk)
            prepared.capture.reasoning(0, REASONING)
        service.capture(record)
        await service.drain()  # seeding is not what is measured


async def measure(store: StateStore, n: int) -> dict[str, dict[str, float]]:
    table = ProvidersTable.load()
    dialect = table.match("https://api.deepseek.com/v1", "deepseek-flash")
    service = ReplayService(store, b"bench-secret")
    out: dict[str, dict[str, float]] = {}
    for turns in (3, 300):
        await seed(service, dialect, turns)
        body = history(turns)
        samples: list[float] = []
        rounds = n if turns == 3 else max(50, n // 10)
        for i in range(rounds + 50):
            record = AccessRecord("POST", "/v1/chat/completions", status=200)
            start = time.perf_counter()
            prepared = await service.prepare(body, dialect, "deepseek-flash", HEADERS, record)
            # the capture of the answer (one tool-call turn), as at the end of a response
            capture = prepared.capture
            assert capture is not None
            for chunk in turn_chunks(f"call_new_{i}"):
                capture.chunk(chunk)
            capture.reasoning(0, REASONING)
            service.capture(record)
            elapsed = time.perf_counter() - start
            await service.drain()  # the write is in the background; not let to pile up either
            counts = prepared.result.counts if prepared.result is not None else None
            assert counts is not None and counts.restored == turns, f"{store.name}: {counts}"
            if i >= 50:
                samples.append(elapsed * 1e6)
        await service.drain()
        samples.sort()
        out[f"{turns} turns"] = {
            "p50_us": statistics.median(samples),
            "p90_us": samples[int(len(samples) * 0.9)],
            "n": len(samples),
        }
    await service.aclose()
    return out


def per_chunk_ns(capture: bool, chunks: int = 4000, rounds: int = 7) -> float:
    """Median cost per streamed chunk of the whole pipeline, with or without the capture."""
    frames = []
    for i in range(chunks):
        delta = {"reasoning_content": "word "} if i < chunks // 2 else {"content": "word "}
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        frames.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    data = b"".join(frames)
    pieces = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    times = []
    for _ in range(rounds):
        pipeline = StreamPipeline(
            reasoning=ReasoningOptions(),
            trace=None,
            trace_format=TraceFormat.COMMENT,
            max_event_bytes=1 << 20,
            capture=TurnCollector() if capture else None,
        )
        start = time.perf_counter()
        for piece in pieces:
            pipeline.feed(piece, 0.0)
        pipeline.finish(0.0)
        times.append((time.perf_counter() - start) / chunks * 1e9)
    return statistics.median(times)


def machine_reference_us() -> float:
    """How fast this machine runs plain Python right now (to compare figures across runs)."""
    start = time.perf_counter()
    for _ in range(2000):
        sum(range(1000))
    return (time.perf_counter() - start) / 2000 * 1e6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis() -> tuple[subprocess.Popen[bytes], str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tempfile.mkdtemp(prefix="thinkproxy-bench-redis-"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.02)
    proc.kill()
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=2000, help="requests measured per case (short history)")
    args = parser.parse_args()
    rows = [("memory", asyncio.run(measure(MemoryStore(ttl=3600), args.n)))]
    started = start_redis()
    if started is None:
        print("redis-server not installed: Redis rows skipped", file=sys.stderr)
    else:
        proc, url = started
        try:
            rows.append(("redis (loopback)", asyncio.run(measure(RedisStore(url, ttl=3600), args.n))))
        finally:
            proc.terminate()
            proc.wait(timeout=5)
    off, on = per_chunk_ns(False), per_chunk_ns(True)
    print(
        f"machine reference: sum(range(1000)) = {machine_reference_us():.1f} µs; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"stream pipeline per chunk: {off:.0f} ns without capture, {on:.0f} ns with (store off / on)")
    print()
    print("| backend | history | p50 | p90 | n |")
    print("|---|---|---|---|---|")
    for backend, cases in rows:
        for case, figures in cases.items():
            p50, p90 = figures["p50_us"], figures["p90_us"]
            print(f"| {backend} | {case} | {p50:.0f} µs | {p90:.0f} µs | {figures['n']:.0f} |")


if __name__ == "__main__":
    main()
