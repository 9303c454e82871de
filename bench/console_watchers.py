"""RSS of a `thinkproxy serve` process with the console on, watchers that never read, and fat answers.

An upstream on 127.0.0.1 answers every chat completion with `--calls` tool calls whose ids and
names, and a finish reason, are `--fat-kb` KB each (what a hostile or broken upstream can send).
`--watchers` clients open `GET /thinkproxy/events` with a small receive buffer and never read a
byte; then `--answers` such requests go through the proxy, one after the other. The proxy's RSS
(/proc/<pid>/statm) is sampled every 100 ms throughout; the run stops early, and says so, when it
passes `--rss-limit-mb` (so that the old code cannot take the machine down). Then the watchers
are closed and as many new ones open, which never read either: each is sent the listing of the
full ring first (its snapshot), then 20 more answers go through. At the end: the RSS before the
watchers, the peak during the answers and the peak with the late watchers too, the size of one
`GET /thinkproxy/requests` answer and of the snapshot a new watcher is sent first (with how many
requests each left out, when it says).

Two cases (`--case`; the other options override what a case sets):
- `fat-strings` (the default): 20 answers with 2 tool calls whose ids are 500 KB of ASCII: what
  the console cuts per string.
- `fat-events`: 250 answers (more than THINKPROXY_UI_HISTORY's 200) with 150 tool calls each, ids
  and names 1 KB of 4-byte characters (stored 4 bytes a character): every request keeps its 200
  trace events with their ids and names at the cap, near the most a request can make it keep, so
  that the ring's and the snapshot's byte bounds are what is measured.

`--history N` sets THINKPROXY_UI_HISTORY (1-10,000). `--pythonpath DIR` runs the proxy from
another checkout (`git worktree add /tmp/before HEAD`). Bounded: at most `--answers` requests,
each with a 60 s timeout (and 20 more). Linux only. Not part of the test suite.

    /work/venv/bin/python bench/console_watchers.py [--case fat-events] [--pythonpath DIR]
        [--watchers 64] [--answers N] [--calls N] [--fat-kb N] [--history 200]
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import httpx
from common import stop_process

MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


class FatUpstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(self.body)


class Case(NamedTuple):
    calls: int  # tool calls per answer
    char: str  # what the fat strings are made of
    fat_kb: int  # their size, in KB of characters (1,024 characters a KB)
    fat_names: bool  # tool names fat too (ids always are, and the finish reason)
    answers: int


CASES = {
    "fat-strings": Case(calls=2, char="x", fat_kb=500, fat_names=False, answers=20),
    "fat-events": Case(calls=150, char="\U0001d54f", fat_kb=1, fat_names=True, answers=250),
}


def fat_answer(kb: int, calls_n: int = 2, char: str = "x", fat_names: bool = False) -> bytes:
    fat = char * (kb * 1024)
    calls = [
        {
            "id": f"{i}{fat}",
            "type": "function",
            "function": {"name": f"lookup{i}{fat}" if fat_names else "lookup", "arguments": '{"q":"a"}'},
        }
        for i in range(calls_n)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    choice = {"index": 0, "message": message, "finish_reason": f"tool_calls{fat}"}
    usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    answer = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    return json.dumps({**answer, "usage": usage}).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / MB


class Sampler(threading.Thread):
    def __init__(self, pid: int, limit_mb: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.limit_mb = pid, limit_mb
        self.peak = 0.0
        self.over = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, rss_mb(self.pid))
            if self.peak > self.limit_mb:
                self.over.set()
                return
            time.sleep(0.1)


def stuck_watcher(port: int) -> socket.socket:
    """A live view that subscribes and never reads (a 4 KB receive buffer fills at once)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /thinkproxy/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    return sock


def first_frame(port: int, watchers: list[socket.socket]) -> bytes:
    """The snapshot a new watcher is sent (one of the stuck ones makes room: at most 64 watch)."""
    if watchers:
        watchers.pop().close()
        time.sleep(0.5)  # its place is given back when the proxy sees it gone
    with httpx.stream("GET", f"http://127.0.0.1:{port}/thinkproxy/events", timeout=60) as events:
        frame = b""
        for piece in events.iter_bytes():
            frame += piece
            if b"\n\n" in frame:
                return frame.split(b"\n\n", 1)[0]
    return frame


def left_out(raw: bytes) -> str:
    """`, N left out` when the listing (or a snapshot frame) says it left older requests out."""
    body = raw.split(b"data: ", 1)[1] if raw.startswith(b"event:") else raw
    try:
        omitted = json.loads(body).get("omitted") if body else None
    except ValueError:
        return ""
    return f" ({omitted} left out)" if omitted else ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pythonpath", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--case", choices=sorted(CASES), default="fat-strings")
    parser.add_argument("--watchers", type=int, default=64)
    parser.add_argument("--answers", type=int)
    parser.add_argument("--calls", type=int)
    parser.add_argument("--fat-kb", type=int)
    parser.add_argument("--history", type=int, default=200)
    parser.add_argument("--rss-limit-mb", type=float, default=3000.0)
    args = parser.parse_args()
    case = CASES[args.case]
    answers = args.answers if args.answers is not None else case.answers
    calls = args.calls if args.calls is not None else case.calls
    fat_kb = args.fat_kb if args.fat_kb is not None else case.fat_kb

    FatUpstream.body = fat_answer(fat_kb, calls, case.char, case.fat_names)
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FatUpstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("THINKPROXY_")},
        "PYTHONPATH": args.pythonpath,
        "THINKPROXY_UPSTREAM_BASE_URL": f"http://127.0.0.1:{upstream.server_address[1]}/v1",
        "THINKPROXY_HOST": "127.0.0.1",
        "THINKPROXY_PORT": str(port),
        "THINKPROXY_UI": "true",
        "THINKPROXY_UI_HISTORY": str(args.history),
        "THINKPROXY_STATE": "off",  # the replay store's memory is measured elsewhere (memory.py)
        "THINKPROXY_LOG_LEVEL": "warning",
    }
    # (cwd too: `python -m` puts the working directory first on sys.path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve"],
        env=env,
        cwd=args.pythonpath,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watchers: list[socket.socket] = []
    sampler = Sampler(proc.pid, args.rss_limit_mb)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            with contextlib.suppress(httpx.TransportError):
                httpx.get(f"{base}/healthz", timeout=0.5)
                break
            time.sleep(0.05)
        ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        httpx.post(f"{base}/v1/models/warm", timeout=10)  # (any request: imports done, pools made)
        idle = rss_mb(proc.pid)
        watchers = [stuck_watcher(port) for _ in range(args.watchers)]
        time.sleep(1.0)
        sampler.start()
        sent = 0
        for _ in range(answers):
            if sampler.over.is_set():
                break
            r = httpx.post(f"{base}/v1/chat/completions", json=ask, timeout=60)
            assert r.status_code == 200, r.text[:300]
            sent += 1
        time.sleep(2.0)  # what the watchers were sent settles in the process
        during = sampler.peak
        # Then as many new watchers that never read, each sent the listing of the full ring
        # first (a snapshot), which stays in its connection's buffer.
        if not sampler.over.is_set():
            for sock in watchers:
                sock.close()
            time.sleep(1.0)  # their places are given back as the proxy sees them gone
            watchers = [stuck_watcher(port) for _ in range(args.watchers)]
            time.sleep(1.0)
            for _ in range(20):  # and what they are sent next, behind it
                if sampler.over.is_set():
                    break
                r = httpx.post(f"{base}/v1/chat/completions", json=ask, timeout=60)
                assert r.status_code == 200, r.text[:300]
            time.sleep(2.0)
        listing, snapshot = b"", b""
        if not sampler.over.is_set():
            listing = httpx.get(f"{base}/thinkproxy/requests", timeout=60).content
            snapshot = first_frame(port, watchers)
        sampler.done.set()
        sampler.join()
        over = f"  STOPPED: RSS passed {args.rss_limit_mb:.0f} MB" if sampler.over.is_set() else ""
        print(
            f"{args.case}: {args.watchers} stuck watchers, {sent}/{answers} answers with {calls} tool calls, "
            f"{fat_kb} KB ids, history {args.history}: RSS idle {idle:.0f} MB, peak {during:.0f} MB during "
            f"the answers, {sampler.peak:.0f} MB with late watchers too; "
            f"/thinkproxy/requests {len(listing) / MB:.2f} MB{left_out(listing)}, "
            f"snapshot {len(snapshot) / MB:.2f} MB{left_out(snapshot)}{over}"
        )
    finally:
        for sock in watchers:
            sock.close()
        stop_process(proc)
        upstream.shutdown()


if __name__ == "__main__":
    main()
