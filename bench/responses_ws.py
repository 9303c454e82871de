"""The Responses door over HTTP and over its WebSocket mode, the same server, paired: time to the
first token and the proxy's CPU per turn.

  /work/venv/bin/python bench/responses_ws.py [--rounds 6 -n 40] [--scenario ttft|paced]

One thinkproxy (defaults) pinned to core 0, the fake upstream on core 1: its `ttft` scenario (the
first event at once, the 199 more in one burst 10 ms later: one upstream read, which HTTP writes
in one piece and a socket as 199 messages) or `paced` (the 200 events one every 5 ms, as a model
streams tokens: one event per read either way). Each round runs `n` sequential turns three ways, in an
order that alternates between rounds: HTTP on one keep-alive connection (a POST per turn), HTTP
with a new connection per turn (what a client without keep-alive pays: the TCP setup; TLS would
add more, which a loopback run cannot show), and one WebSocket (a `response.create` per turn).
The first token is the first delta event (`response.created` goes out before the upstream
answers). CPU: the proxy process's utime + stime over each block of turns, per turn and per
streamed chunk (200 a turn).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Coroutine
from typing import Any

import servers
import ttft
import websockets
from common import BENCH_DIR, Processes, cpu_seconds, payload, request_headers

CHUNKS = 200  # upstream events per turn (the fake upstream's `ttft` scenario)
TERMINAL = (b'"type":"response.completed"', b'"type":"response.failed"', b'"type":"error"')


async def ws_probe(port: int, n: int, scenario: str = "ttft") -> list[float]:
    """n sequential turns over one socket; ms to the first delta of each."""
    body = json.loads(payload(stream=True, door="responses"))
    body.pop("stream", None)
    message = json.dumps({"type": "response.create", **body})
    headers = {k: v for k, v in request_headers(scenario).items() if k != "Content-Type"}
    samples = []
    url = f"ws://127.0.0.1:{port}/v1/responses"
    # (no permessage-deflate, as openai-python connects: compression=None)
    async with websockets.connect(url, additional_headers=headers, compression=None) as ws:
        for _ in range(n):
            start = time.perf_counter()
            await ws.send(message)
            first = None
            while True:
                got = await ws.recv(decode=False)
                if first is None and b'.delta"' in got[:60]:
                    first = time.perf_counter() - start
                if any(end in got[:40] for end in TERMINAL):
                    break
            if first is None:
                raise ConnectionError(f"a turn ended without a delta: {got[:200]!r}")
            samples.append(first * 1000)
    return samples


async def http_fresh_probe(port: int, n: int, scenario: str) -> list[float]:
    """n sequential POSTs, each on a new connection."""
    samples: list[float] = []
    for _ in range(n):
        samples += await ttft.probe(port, 1, scenario=scenario, door="responses")
    return samples


def timed(pid: int, run: Coroutine[Any, Any, list[float]]) -> tuple[list[float], float]:
    """The run's samples and the proxy's CPU seconds over it."""
    before = cpu_seconds(pid)
    samples = asyncio.run(run)
    return samples, cpu_seconds(pid) - before


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("-n", type=int, default=40, help="sequential turns per transport per round")
    p.add_argument("--scenario", choices=("ttft", "paced"), default="ttft")
    args = p.parse_args()
    procs = Processes(BENCH_DIR / "results" / "logs")
    try:
        upstream = servers.start_upstream(procs, 1)
        started = servers.start_targets(procs, ["thinkproxy"], upstream, 0, "standard")
        port, pid = started["thinkproxy"]
        print(f"thinkproxy: {servers.probe_build(servers.clean_env())}")
        probes = {
            "HTTP, keep-alive": lambda: ttft.probe(port, args.n, scenario=args.scenario, door="responses"),
            "HTTP, new connection per turn": lambda: http_fresh_probe(port, args.n, args.scenario),
            "WebSocket, one socket": lambda: ws_probe(port, args.n, args.scenario),
        }
        for make in probes.values():  # warm-up
            asyncio.run(make())
        ttfts: dict[str, list[float]] = {name: [] for name in probes}
        cpu: dict[str, float] = dict.fromkeys(probes, 0.0)
        for r in range(args.rounds):
            for name in list(probes) if r % 2 == 0 else list(reversed(probes)):
                samples, seconds = timed(pid, probes[name]())
                ttfts[name] += samples
                cpu[name] += seconds
        turns = args.rounds * args.n
        print(f"\n{turns} turns each, {CHUNKS} upstream chunks a turn ({args.scenario})\n")
        print("| transport | TTFT p50 ms | TTFT p90 ms | proxy CPU per turn ms | per chunk µs |")
        print("|---|---|---|---|---|")
        for name, got in ttfts.items():
            per_turn = cpu[name] / turns * 1000
            p50, p90 = statistics.median(got), ttft.percentile(got, 0.9)
            print(f"| {name} | {p50:.2f} | {p90:.2f} | {per_turn:.2f} | {per_turn / CHUNKS * 1000:.1f} |")
    finally:
        procs.close()


if __name__ == "__main__":
    main()
