"""Peak RSS of `thinkproxy serve` while clients stream endless request headers at it.

Scenarios, each bounded in time (default 4 s) against a fresh server on 127.0.0.1:
- `lines`: 4 connections each send a request line, then header lines (`X-Flood-N: 1 KB`) as
  fast as they can, never ending the head; a connection the server answers or closes is opened
  again (an attacker would);
- `one-header`: 1 connection sends a single header value of up to 64 MB, never ending it;
- `slowloris`: 1,000 connections each send a request line and then nothing (run for 12 s, past
  the default 10 s header timeout); reported: how many the server had closed by the end.

RSS of the server's process (from /proc/<pid>/statm) is sampled every 50 ms; the figures are the
idle RSS before, the peak during, and whether /healthz still answered during the flood (from a
separate connection). Run it against any source tree to compare before and after a change:

  /work/venv/bin/python bench/header_flood.py                       # this tree
  /work/venv/bin/python bench/header_flood.py --tree /path/to/other  # another checkout
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError):
        return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(tree: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "THINKPROXY_UPSTREAM_BASE_URL": "http://127.0.0.1:9/v1",
        "THINKPROXY_PORT": str(port),
        "THINKPROXY_LOG_LEVEL": "warning",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve"],
        env=env,
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return server
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit("the server did not start")


def flood_lines(port: int, stop: threading.Event, stats: dict[str, int]) -> None:
    line = b"X-Flood: " + b"v" * 1000 + b"\r\n"
    batch = line * 64
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                stats["connections"] += 1
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                while not stop.is_set():
                    sock.sendall(batch)
                    stats["bytes"] += len(batch)
        except OSError:
            stats["cut"] += 1


def flood_one_header(port: int, stop: threading.Event, stats: dict[str, int]) -> None:
    chunk = b"v" * 65536
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            stats["connections"] += 1
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
            while not stop.is_set() and stats["bytes"] < 64 * MB:
                sock.sendall(chunk)
                stats["bytes"] += len(chunk)
    except OSError:
        stats["cut"] += 1


def slowloris(port: int, stop: threading.Event, stats: dict[str, int]) -> None:
    socks = []
    for _ in range(1000):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks.append(sock)
            stats["connections"] += 1
        except OSError:
            stats["cut"] += 1
    stop.wait()
    for sock in socks:
        sock.setblocking(False)
        try:
            closed = sock.recv(65536) is not None  # an answer (408) or b"" (closed)
        except BlockingIOError:
            closed = False
        except OSError:
            closed = True
        stats["closed_by_server"] += closed
        sock.close()


def health_probe(port: int, stop: threading.Event, stats: dict[str, int]) -> None:
    while not stop.is_set():
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
            stats["healthz_ok"] += 1
        except OSError:
            stats["healthz_failed"] += 1
        time.sleep(0.2)


def run(tree: Path, scenario: str, seconds: float) -> dict[str, object]:
    port = free_port()
    server = start(tree, port)
    try:
        time.sleep(0.5)
        idle = rss(server.pid)
        stop = threading.Event()
        stats = {"connections": 0, "bytes": 0, "cut": 0, "healthz_ok": 0, "healthz_failed": 0}
        if scenario == "slowloris":
            stats["closed_by_server"] = 0
            seconds = 12.0
        target = {"lines": flood_lines, "one-header": flood_one_header, "slowloris": slowloris}[scenario]
        senders = 4 if scenario == "lines" else 1
        threads = [threading.Thread(target=target, args=(port, stop, stats)) for _ in range(senders)]
        threads.append(threading.Thread(target=health_probe, args=(port, stop, stats)))
        for t in threads:
            t.start()
        peak = idle
        end = time.monotonic() + seconds
        while time.monotonic() < end and server.poll() is None:
            peak = max(peak, rss(server.pid))
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(timeout=10)
        return {
            "scenario": scenario,
            "seconds": seconds,
            "idle_rss_mb": round(idle / MB, 1),
            "peak_rss_mb": round(peak / MB, 1),
            "sent_mb": round(stats["bytes"] / MB, 1),
            **{k: v for k, v in stats.items() if k != "bytes"},
        }
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--scenario", choices=["lines", "one-header", "slowloris", "all"], default="all")
    args = parser.parse_args()
    scenarios = ["lines", "one-header", "slowloris"] if args.scenario == "all" else [args.scenario]
    for scenario in scenarios:
        print(json.dumps(run(args.tree.resolve(), scenario, min(args.seconds, 30.0))))


if __name__ == "__main__":
    main()
