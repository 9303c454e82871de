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
answers). CPU: the proxy process's time on a core over each block of turns (the scheduler's count,
in nanoseconds: a block is ~100 ms of CPU, which clock ticks would read ±10%), per turn and per
streamed chunk (200 a turn), and each transport's block against the HTTP keep-alive block of the
same round: the median of those ratios and their range, the figure to read when the machine's
speed moves between rounds.

Counted in instructions instead (exact, where wall-clock figures on a shared machine are not):

  /work/venv/bin/python bench/responses_ws.py --instructions [--transport http,websocket]
      [--scenario burst|paced] [--turns 40] [--profile DIR]

The app in one process under valgrind's callgrind, the upstream in-process (an httpx transport:
bench/fake_upstream.py's 200-chunk stream, `paced` one event per read, `burst` the first event
then the 199 others in one read), the client driving the ASGI app directly: a POST per turn (the
HTTP door), or one WebSocket's `response.create`s (the socket door), with no network and no
server in between (what uvicorn and the kernel do for each transport is not counted). Each count
warms up first (WARM_TURNS, on the same socket), then counts 0, half and all of `--turns`: the
difference per turn is the turn's steady-state cost, start-up, warm-up and the socket's open and
close cancelled out; a count whose halves differ by more than 1% per turn says "unsteady".
`--profile DIR` also writes each transport's callgrind profile of the whole count there
(`callgrind_annotate --inclusive=yes` reads it), to see where the difference goes.

`--native` counts the native relay instead: the simulated OpenAI (`thinkproxy mock-upstream
--dialect openai`, its own process, not counted) reached over loopback, a native HTTP turn (a POST
relayed to the upstream's POST) against a socket turn relayed over the upstream's own WebSocket
(providers.yaml `responses_websocket`), the same answer both ways.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import servers
import ttft
import websockets
from common import (
    BENCH_DIR,
    REPO_DIR,
    Processes,
    cpu_seconds_exact,
    free_port,
    machine,
    payload,
    post_in_process,
    request_headers,
    wait_listening,
)

CHUNKS = 200  # upstream events per turn (the fake upstream's `ttft` scenario)
NATIVE_MODEL = "gpt-5.4"  # (a model of the simulated OpenAI: its native Responses API)
TERMINAL = (b'"type":"response.completed"', b'"type":"response.failed"', b'"type":"error"')
TRANSPORTS = ("http", "websocket")
WARM_TURNS = 20
COLLECTED = re.compile(rb"Collected : (\d+)")
STEADY_PCT = 1.0
COUNT_ENV = {
    "THINKPROXY_UPSTREAM_BASE_URL": "https://api.deepseek.com/v1",
    "THINKPROXY_DEFAULT_THINKING_LEVEL": "standard",
    "THINKPROXY_HTTP_TRANSPORT": "httpx",  # the transport that takes an in-process upstream
    "THINKPROXY_STATE": "off",  # (no turn writes to a store: the same work each way)
    "PYTHONHASHSEED": "0",
}


# -- counted in instructions: the child (the app and its turns, under callgrind) ----------------------


def run_child(transport: str, scenario: str, warm: int, counted: int) -> None:
    import gc

    import httpx
    from fake_upstream import sse_events

    from proxy.server.app import create_served_app
    from proxy.server.websocket_protocol import SEND_TEXTS

    native = scenario == "native"
    events = [*sse_events("burst"), b"data: [DONE]\n\n"]
    reads = events if scenario == "paced" else [events[0], b"".join(events[1:])]

    async def chunks() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=chunks(), headers={"content-type": "text/event-stream"})

    # (native: the simulated OpenAI over loopback, THINKPROXY_UPSTREAM_BASE_URL set by the parent)
    app = create_served_app(transport=None if native else httpx.MockTransport(upstream))
    body = payload(stream=True, door="responses")
    if native:
        body = json.dumps({**json.loads(body), "model": NATIVE_MODEL, "store": False}).encode()
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"authorization", b"Bearer sk-bench-not-a-key"),
    ]
    base = {
        "asgi": {"version": "3.0"}, "http_version": "1.1", "path": "/v1/responses",
        "raw_path": b"/v1/responses", "query_string": b"", "root_path": "",
        "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000),
    }  # fmt: skip

    async def http_turn() -> None:
        scope = {
            **base, "type": "http", "method": "POST", "scheme": "http",
            "headers": [*headers, (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
        }  # fmt: skip
        await post_in_process(app, scope, body, "a turn's")

    async def http_turns() -> None:
        for _ in range(warm):
            await http_turn()
        gc.collect()  # both counts start from the same heap
        for _ in range(counted):
            await http_turn()

    async def socket_turns() -> None:
        message = json.dumps({"type": "response.create", **{k: v for k, v in json.loads(body).items()
                                                              if k != "stream"}})  # fmt: skip
        inbox: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        ended = asyncio.Event()
        # The client's own work per message is counted with the proxy's, so it is kept to what
        # the HTTP client's is (bench/common.py post_in_process: a key and a comparison): the
        # character after `{"type":"response.` (index 18), which is `r` (reasoning_*) or `o`
        # (output_*) for every delta, the bulk of a turn; only the other events are read further
        # (a `str.startswith` with a tuple parses its arguments, ~1k instructions a message in
        # CPython 3.11: as much as the rest of the proxy's socket residue per event).
        endings = (b'{"type":"response.completed"', b'{"type":"response.failed"', b'{"type":"error"')

        def seen(last: bytes) -> None:
            """A write's last message (a turn's terminal one is its last)."""
            if last[18] in b"ro":  # (a delta)
                return
            if last.startswith(endings):
                if not last.startswith(b'{"type":"response.completed"'):
                    raise SystemExit(f"a turn ended with {last[:300]!r}: the count would not be a turn's")
                ended.set()

        def write(encoded: list[bytes]) -> bool:  # (the protocol's synchronous form, which takes all)
            seen(encoded[-1])
            return True

        # (as `thinkproxy serve`'s WebSocket protocol: a door write's messages in one send, or
        # at once through its synchronous `write`)
        extensions = {SEND_TEXTS: {"write": write}}
        scope = {
            **base, "type": "websocket", "scheme": "ws", "subprotocols": [], "headers": headers,
            "extensions": extensions,
        }  # fmt: skip

        async def receive() -> dict[str, object]:
            return await inbox.get()

        async def send(sent: dict[str, Any]) -> None:
            if sent["type"] == SEND_TEXTS:  # (a write's messages: their UTF-8, or the texts)
                encoded = sent.get("encoded")
                seen(encoded[-1] if encoded is not None else sent["texts"][-1].encode())
            elif sent.get("text") is not None:  # (None: the accept, a close)
                seen(sent["text"].encode())

        async def one() -> None:
            ended.clear()
            inbox.put_nowait({"type": "websocket.receive", "text": message})
            await ended.wait()

        inbox.put_nowait({"type": "websocket.connect"})
        served = asyncio.create_task(app(scope, receive, send))
        for _ in range(warm):
            await one()
        gc.collect()
        for _ in range(counted):
            await one()
        inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
        await served

    asyncio.run(socket_turns() if transport == "websocket" else http_turns())


# -- counted in instructions: the parent -----------------------------------------------------------------


def child_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **COUNT_ENV, "THINKPROXY_LOG_LEVEL": "info"}
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join([os.environ.get("PYTHONPATH", str(REPO_DIR)), str(BENCH_DIR)])
    return env


def child_argv(transport: str, scenario: str, counted: int) -> list[str]:
    script = str(Path(__file__).resolve())
    return [sys.executable, script, "--child", transport, scenario, str(WARM_TURNS), str(counted)]


def compile_first(transport: str, scenario: str, extra: dict[str, str] | None) -> None:
    """One child run uncounted first: every module it imports is compiled (its .pyc written)
    before the counts. Otherwise the first counted child after a change compiles them (~1.2
    billion instructions, more than 100 turns): a count of 0 turns above one of 40."""
    done = subprocess.run(
        child_argv(transport, scenario, 0), env=child_env(extra), cwd="/tmp", capture_output=True
    )
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{transport} {scenario}: the child failed: " + " | ".join(tail))


def count(
    transport: str,
    scenario: str,
    counted: int,
    profile: Path | None = None,
    extra: dict[str, str] | None = None,
) -> int:
    """Instructions the whole child process executed (`extra`: more of its environment)."""
    out = "/dev/null" if profile is None else str(profile / f"callgrind.{transport}.{scenario}.{counted}")
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        *child_argv(transport, scenario, counted),
    ]
    env = child_env(extra)
    done = subprocess.run(argv, env=env, cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{transport} {scenario}: the child failed: " + " | ".join(tail))
    return int(found.group(1))


def per_turn(
    transport: str, scenario: str, turns: int, profile: Path | None, extra: dict[str, str] | None = None
) -> tuple[float, bool]:
    """Instructions per counted turn, and whether the count's two halves agreed (STEADY_PCT)."""
    half = turns // 2
    compile_first(transport, scenario, extra)
    with ThreadPoolExecutor(2) as pool:
        none, halfway, whole = pool.map(
            lambda n: count(transport, scenario, n, profile if n == turns else None, extra), (0, half, turns)
        )
    first, second = (halfway - none) / half, (whole - halfway) / (turns - half)
    return (whole - none) / turns, abs(first / second - 1) * 100 <= STEADY_PCT


def instructions_main(transports: list[str], scenario: str, turns: int, profile: Path | None) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind: apt-get install valgrind")
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    if scenario == "native":
        with native_upstream() as extra:
            figures = {t: per_turn(t, scenario, turns, profile, extra) for t in transports}
        print(f"\n{turns} turns counted per transport after {WARM_TURNS}, native: the simulated OpenAI "
              "over loopback (HTTP: its POST; websocket: its WebSocket mode)\n")  # fmt: skip
    else:
        figures = {t: per_turn(t, scenario, turns, profile) for t in transports}
        print(f"\n{turns} turns counted per transport after {WARM_TURNS}, {CHUNKS} upstream chunks a turn "
              f"({scenario})\n")  # fmt: skip
    print("| transport | instructions per turn | per chunk | vs HTTP |")
    print("|---|---|---|---|")
    http = figures.get("http", (0.0, True))[0]
    for name, (value, steady) in figures.items():
        versus = f"{(value / http - 1) * 100:+.1f}%" if http and name != "http" else ""
        note = "" if steady else " (unsteady: run again)"
        print(f"| {name} | {value:,.0f}{note} | {value / CHUNKS:,.0f} | {versus} |")


@contextmanager
def native_upstream() -> Iterator[dict[str, str]]:
    """The simulated OpenAI in a process of its own (not counted), and the children's environment
    that reaches it: its URL, and a providers file that maps it onto the OpenAI entry (whose
    Responses API serves the WebSocket mode)."""
    from proxy.simulated import simulated_providers_text

    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO_DIR))}
    argv = [sys.executable, "-m", "proxy.cli", "mock-upstream", "--port", str(port), "--dialect", "openai"]
    procs = Processes(BENCH_DIR / "results" / "logs")
    with tempfile.TemporaryDirectory() as directory:
        try:
            wait_listening(port, procs.start("native-upstream", argv, env=env))
            providers = Path(directory) / "providers.yaml"
            providers.write_text(simulated_providers_text(port), encoding="utf-8")
            yield {
                "THINKPROXY_UPSTREAM_BASE_URL": f"http://127.0.0.1:{port}/openai/v1",
                "THINKPROXY_PROVIDERS_FILE": str(providers),
                "THINKPROXY_HTTP_TRANSPORT": "aiohttp",  # (a real upstream: the default transport)
            }
        finally:
            procs.close()


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
            samples.append(await first_delta_ms(start, lambda: ws.recv(decode=False)))
    return samples


async def first_delta_ms(start: float, next_message: Callable[[], Awaitable[bytes]]) -> float:
    """One turn's messages read to its terminal event; ms from `start` to its first delta."""
    first = None
    while True:
        got = await next_message()
        if first is None and b'.delta"' in got[:60]:
            first = time.perf_counter() - start
        if any(end in got[:40] for end in TERMINAL):
            break
    if first is None:
        raise ConnectionError(f"a turn ended without a delta: {got[:200]!r}")
    return first * 1000


async def ws_lean_probe(port: int, n: int, scenario: str = "ttft") -> list[float]:
    """`ws_probe` with a client as lean as ttft.probe's HTTP one: the upgrade written by hand and
    each frame read off an asyncio stream, so no WebSocket library's per-message work is in the
    figure (the library client above adds its parsing to every message before the first delta)."""
    body = json.loads(payload(stream=True, door="responses"))
    body.pop("stream", None)
    message = json.dumps({"type": "response.create", **body}).encode()
    headers = {k: v for k, v in request_headers(scenario).items() if k != "Content-Type"}
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    head += "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    head += f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    writer.write(head.encode())
    if b" 101 " not in await reader.readuntil(b"\r\n\r\n"):
        raise ConnectionError("the WebSocket upgrade was refused")
    # One masked text frame (a zero mask: the payload as it is), sent as it is every turn.
    length = len(message)
    sized = (
        bytes([0x80 | 126]) + length.to_bytes(2, "big")
        if length < 65536
        else bytes([0x80 | 127]) + length.to_bytes(8, "big")
    )
    frame = b"\x81" + sized + b"\0\0\0\0" + message
    samples = []

    async def next_message() -> bytes:
        while True:
            opcode, size = await reader.readexactly(2)
            size &= 0x7F
            if size >= 126:
                size = int.from_bytes(await reader.readexactly(2 if size == 126 else 8), "big")
            got = await reader.readexactly(size)
            if opcode & 0x0F != 0x9:
                return got
            writer.write(bytes([0x8A, 0x80 | size]) + b"\0\0\0\0" + got)  # a ping: its pong, masked

    try:
        for _ in range(n):
            start = time.perf_counter()
            writer.write(frame)
            samples.append(await first_delta_ms(start, next_message))
    finally:
        writer.close()
    return samples


async def http_fresh_probe(port: int, n: int, scenario: str) -> list[float]:
    """n sequential POSTs, each on a new connection."""
    samples: list[float] = []
    for _ in range(n):
        samples += await ttft.probe(port, 1, scenario=scenario, door="responses")
    return samples


# What each transport's CPU is set against, round by round.
BASE_PROBE = "HTTP, keep-alive"


def percent_range(changes: list[float]) -> str:
    """Relative changes as "median% (min…max)", e.g. "+4.1% (−1.0…+9.3)"."""

    def pct(x: float) -> str:
        return f"{100 * x:+.1f}".replace("-", "−")

    return f"{pct(statistics.median(changes))}% ({pct(min(changes))}…{pct(max(changes))})"


def timed(pid: int, run: Coroutine[Any, Any, list[float]]) -> tuple[list[float], float, float]:
    """The run's samples, the proxy's CPU seconds over it and the run's wall-clock seconds."""
    before, started = cpu_seconds_exact(pid), time.perf_counter()
    samples = asyncio.run(run)
    return samples, cpu_seconds_exact(pid) - before, time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("-n", type=int, default=40, help="sequential turns per transport per round")
    p.add_argument("--scenario", choices=("ttft", "paced", "burst"), default=None)
    p.add_argument("--instructions", action="store_true", help="count instructions (callgrind) instead")
    p.add_argument("--transport", default=",".join(TRANSPORTS), help="with --instructions: http,websocket")
    p.add_argument("--turns", type=int, default=40, help="with --instructions: turns counted")
    p.add_argument("--profile", type=Path, default=None, help="with --instructions: keep the profiles here")
    p.add_argument("--native", action="store_true", help="with --instructions: the native relay (see above)")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        run_child(args.child[0], args.child[1], int(args.child[2]), int(args.child[3]))
        return
    if args.instructions:
        transports = args.transport.split(",")
        if any(t not in TRANSPORTS for t in transports):
            sys.exit(f"--transport: choose from {', '.join(TRANSPORTS)}")
        scenario = "native" if args.native else args.scenario or "burst"
        if scenario == "ttft":
            scenario = "burst"  # (the same upstream: the first event, then the rest in one read)
        instructions_main(transports, scenario, args.turns, args.profile)
        return
    args.scenario = args.scenario or "ttft"
    if args.scenario == "burst":
        args.scenario = "ttft"
    procs = Processes(BENCH_DIR / "results" / "logs")
    try:
        upstream = servers.start_upstream(procs, 1)
        started = servers.start_targets(procs, ["thinkproxy"], upstream, 0, "standard")
        port, pid = started["thinkproxy"]
        print(f"thinkproxy: {servers.probe_build(servers.clean_env())}; machine: {machine()}")
        probes = {
            "HTTP, keep-alive": lambda: ttft.probe(port, args.n, scenario=args.scenario, door="responses"),
            "HTTP, new connection per turn": lambda: http_fresh_probe(port, args.n, args.scenario),
            "WebSocket, one socket": lambda: ws_probe(port, args.n, args.scenario),
            "WebSocket, one socket, lean client": lambda: ws_lean_probe(port, args.n, args.scenario),
        }
        for make in probes.values():  # warm-up
            asyncio.run(make())
        ttfts: dict[str, list[float]] = {name: [] for name in probes}
        cpu: dict[str, float] = dict.fromkeys(probes, 0.0)
        wall: dict[str, float] = dict.fromkeys(probes, 0.0)
        # Each round's blocks run back to back, so a round's ratio to its HTTP keep-alive block is
        # the nearest to a pair this tool has: a machine whose speed moves between rounds moves a
        # round's blocks together.
        ratios: dict[str, list[float]] = {name: [] for name in probes}
        for r in range(args.rounds):
            this_round: dict[str, float] = {}
            for name in list(probes) if r % 2 == 0 else list(reversed(probes)):
                samples, seconds, elapsed = timed(pid, probes[name]())
                ttfts[name] += samples
                cpu[name] += seconds
                wall[name] += elapsed
                this_round[name] = seconds
            for name, seconds in this_round.items():
                ratios[name].append(seconds / this_round[BASE_PROBE] - 1)
        turns = args.rounds * args.n
        print(f"\n{turns} turns each, {CHUNKS} upstream chunks a turn ({args.scenario})\n")
        # (a turn's wall time: a client's block of sequential turns, its connection set-up included,
        # over its turns — what an agent loop that sends each turn when the last one ends waits)
        print(
            "| transport | TTFT p50 ms | TTFT p90 ms | wall per turn ms | proxy CPU per turn ms"
            f" | per chunk µs | CPU against {BASE_PROBE}, per round: median (min…max) |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, got in ttfts.items():
            per_turn = cpu[name] / turns * 1000
            p50, p90 = statistics.median(got), ttft.percentile(got, 0.9)
            against = "—" if name == BASE_PROBE else percent_range(ratios[name])
            print(
                f"| {name} | {p50:.2f} | {p90:.2f} | {wall[name] / turns * 1000:.2f} | {per_turn:.2f}"
                f" | {per_turn / CHUNKS * 1000:.1f} | {against} |"
            )
    finally:
        procs.close()


if __name__ == "__main__":
    main()
