"""Memory under many open streams: peak RSS of a target holding 1,000 slow streams at once.

The fake upstream's `slow` scenario sends one event every 150 ms (200 events: ~30 s per stream,
longer than the test), the clients read 512 bytes every 250 ms through a small receive buffer,
so every stream stays open — with data in flight — for the whole measurement. RSS (of the
target's process tree, from /proc/<pid>/statm) is sampled every 200 ms; the peak is reported
with the idle RSS before and the RSS once all clients have gone. Bounded: ~30 s in all.

  /work/venv/bin/python bench/memory.py                     # thinkproxy (defaults), 1,000 streams
  /work/venv/bin/python bench/memory.py --target baseline-aiohttp   # the same for a baseline

Needs about 2 file descriptors per stream in the target and 1 here: the soft RLIMIT_NOFILE is
raised to the hard limit in this process, and the servers started from it inherit it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import resource
import socket
import sys
import time
from dataclasses import dataclass, field

import servers
from common import (
    BENCH_DIR,
    CHAT_PATH,
    Processes,
    can_pin,
    exit_on_sigterm,
    payload,
    request_headers,
    rss_bytes,
)

GOAL_MB = 200.0
MB = 1024 * 1024


@dataclass
class Counts:
    connected: int = 0
    streaming: int = 0  # received the first data: event and not yet ended
    ended: int = 0
    errors: int = 0
    first_error: str = ""
    peak_streaming: int = 0
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (t, rss MB, streaming)


def raise_fd_limit(needed: int) -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = hard if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft, hard


def build_request(port: int) -> bytes:
    body = payload(stream=True)
    head = "".join(f"{k}: {v}\r\n" for k, v in request_headers("slow").items())
    return (
        f"POST {CHAT_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def slow_client(port: int, request: bytes, counts: Counts, read_bytes: int, pause: float) -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # small: the client really is slow
    sock.setblocking(False)
    streaming = False
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        counts.connected += 1
        await loop.sock_sendall(sock, request)
        seen = bytearray()
        while True:
            data = await loop.sock_recv(sock, read_bytes)
            if not data:
                counts.ended += 1
                return
            if not streaming:
                seen += data
                if not seen.startswith(b"HTTP/1.1 200"[: len(seen)]):
                    raise ConnectionError(f"unexpected response {bytes(seen[:80])!r}")
                if b"data:" in seen:
                    streaming = True
                    counts.streaming += 1
                    counts.peak_streaming = max(counts.peak_streaming, counts.streaming)
            await asyncio.sleep(pause)
    except (OSError, ConnectionError) as exc:
        counts.errors += 1
        counts.first_error = counts.first_error or repr(exc)
    finally:
        if streaming:
            counts.streaming -= 1
        sock.close()


async def drive(port: int, pid: int, streams: int, hold: float, read_bytes: int, pause: float) -> Counts:
    counts = Counts()
    request = build_request(port)
    start = time.monotonic()
    tasks: list[asyncio.Task[None]] = []
    deadline = start + hold
    for i in range(streams):  # ramp: 100 new connections every 50 ms
        tasks.append(asyncio.create_task(slow_client(port, request, counts, read_bytes, pause)))
        if i % 100 == 99:
            await asyncio.sleep(0.05)
    while time.monotonic() < deadline:
        counts.samples.append((time.monotonic() - start, rss_bytes(pid) / MB, counts.streaming))
        await asyncio.sleep(0.2)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="thinkproxy", choices=servers.TARGET_NAMES)
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=22.0, help="how long the streams are held open")
    p.add_argument("--interval-ms", type=float, default=150.0, help="upstream: one event every …")
    p.add_argument("--read-bytes", type=int, default=512)
    p.add_argument("--read-pause", type=float, default=0.25)
    p.add_argument("--level", default="standard", help="THINKPROXY_DEFAULT_THINKING_LEVEL ('none' = unset)")
    args = p.parse_args()

    soft, hard = raise_fd_limit(2 * args.streams + 200)
    print(f"fd limit (ulimit -n): soft {soft}, hard {hard}; this test needs ~{2 * args.streams + 200}")
    if soft < 2 * args.streams + 200:
        print("fd limit too low: raise the hard limit (ulimit -Hn) or lower --streams")
        return 2
    pinned = can_pin()
    if pinned:
        os.sched_setaffinity(0, {1})
    exit_on_sigterm()
    procs = Processes(BENCH_DIR / "results" / "logs")
    try:
        upstream = servers.start_upstream(procs, 1 if pinned else None, args.interval_ms)
        up = servers.start_targets(
            procs,
            [args.target],
            upstream,
            0 if pinned else None,
            None if args.level == "none" else args.level,
        )
        if args.target not in up:
            print(f"{args.target} did not start")
            return 1
        port, pid = up[args.target]
        time.sleep(1.0)
        idle = rss_bytes(pid) / MB
        print(
            f"{args.target}: idle RSS {idle:.1f} MB; "
            f"opening {args.streams} slow streams for {args.seconds:.0f} s …"
        )
        try:
            import uvloop

            counts = uvloop.run(
                drive(port, pid, args.streams, args.seconds, args.read_bytes, args.read_pause)
            )
        except ImportError:
            counts = asyncio.run(
                drive(port, pid, args.streams, args.seconds, args.read_bytes, args.read_pause)
            )
        time.sleep(2.0)
        after = rss_bytes(pid) / MB
        peak = max(s[1] for s in counts.samples)
        verdict = "PASS" if peak <= GOAL_MB and counts.peak_streaming == args.streams else "FAIL"
        print(
            f"peak RSS {peak:.1f} MB with {counts.peak_streaming}/{args.streams} streams open at once "
            f"(idle {idle:.1f} MB, 2 s after the clients left {after:.1f} MB); "
            f"errors {counts.errors}{' ' + counts.first_error if counts.first_error else ''}; "
            f"goal <= {GOAL_MB:.0f} MB with {args.streams} streams: {verdict}"
        )
        out = BENCH_DIR / "results" / f"memory-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "target": args.target,
                    "args": vars(args),
                    "fd_limit": [soft, hard],
                    "idle_mb": idle,
                    "peak_mb": peak,
                    "after_mb": after,
                    "peak_streaming": counts.peak_streaming,
                    "connected": counts.connected,
                    "errors": counts.errors,
                    "first_error": counts.first_error,
                    "verdict": verdict,
                    "samples": counts.samples,
                },
                indent=1,
            )
        )
        print(f"results: {out.relative_to(BENCH_DIR.parent)}")
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted")
        return 130
    finally:
        procs.close()


if __name__ == "__main__":
    sys.exit(main())
