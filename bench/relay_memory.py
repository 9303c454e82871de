"""Peak RSS of a `thinkproxy serve` process facing a hostile upstream's non-stream answers.

Two scenarios, each in a fresh proxy process (VmHWM is the peak since the process started):

- `gzip-bomb`: a chat completion sent gzip-encoded, ~0.5 MB on the wire, 500 MB once inflated;
- `huge-body`: a chat completion of 200 MB, uncompressed, with a content-length.

For each: the proxy's VmHWM after one ordinary request (the baseline), then after the hostile
one, and what the client got. `--pythonpath DIR` runs the proxy from another checkout (to measure
a version before a change). Linux only (/proc). Not part of the test suite.

    /work/venv/bin/python bench/relay_memory.py [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import httpx

MB = 1024 * 1024
PREFIX = (
    b'{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"'
)
SUFFIX = b'"},"finish_reason":"stop"}]}'
SMALL = PREFIX + b"hello" + SUFFIX


def gzip_bomb(inflated: int) -> bytes:
    """A gzip member of `inflated` bytes of JSON, built without holding them in memory."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [z.compress(PREFIX)]
    block = b"a" * MB
    for _ in range((inflated - len(PREFIX) - len(SUFFIX)) // MB):
        parts.append(z.compress(block))
    parts.append(z.compress(SUFFIX))
    parts.append(z.flush())
    return b"".join(parts)


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    bomb = b""

    def log_message(self, *args: object) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(OSError):  # the proxy hung up on a body it refused
            super().handle()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        scenario = self.headers.get("x-scenario", "small")
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if scenario == "gzip-bomb":
            self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(self.bomb)))
            self.end_headers()
            self.wfile.write(self.bomb)
        elif scenario == "huge-body":
            size = 200 * MB
            self.send_header("content-length", str(len(PREFIX) + size + len(SUFFIX)))
            self.end_headers()
            try:
                self.wfile.write(PREFIX)
                block = b"a" * MB
                for _ in range(size // MB):
                    self.wfile.write(block)
                self.wfile.write(SUFFIX)
            except OSError:
                pass  # the proxy hung up (it refused the body): fine
        else:
            self.send_header("content-length", str(len(SMALL)))
            self.end_headers()
            self.wfile.write(SMALL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def run(scenario: str, upstream_url: str, pythonpath: str, limit: int | None) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "THINKPROXY_UPSTREAM_BASE_URL": upstream_url,
        "THINKPROXY_PORT": str(port),
        "THINKPROXY_TRACE": "off",
        "THINKPROXY_LOG_LEVEL": "warning",
    }
    if limit is not None:
        env["THINKPROXY_MAX_RESPONSE_BYTES"] = str(limit)
    # (cwd too: `python -m` puts the working directory first on sys.path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve"],
        env=env,
        cwd=pythonpath,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                httpx.get(f"{base}/healthz", timeout=0.5)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{base}/v1/chat/completions", json=ask, timeout=30).status_code == 200
        before = vm_hwm_mb(proc.pid)
        started = time.perf_counter()
        r = httpx.post(f"{base}/v1/chat/completions", json=ask, headers={"x-scenario": scenario}, timeout=120)
        took = time.perf_counter() - started
        after = vm_hwm_mb(proc.pid)
        detail = (
            r.json()["error"]["message"][:90]
            if r.status_code != 200
            else f"{len(r.content) / MB:.0f} MB body"
        )
        print(
            f"{scenario:10} baseline {before:7.1f} MB  peak {after:7.1f} MB  "
            f"status {r.status_code}  {took:5.2f} s  {detail}"
        )
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pythonpath", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--max-response-bytes", type=int, help="THINKPROXY_MAX_RESPONSE_BYTES for the proxy")
    args = parser.parse_args()
    Upstream.bomb = gzip_bomb(500 * MB)
    print(f"gzip bomb: {len(Upstream.bomb) / 1024:.0f} KB on the wire, 500 MB inflated")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    for scenario in ("gzip-bomb", "huge-body"):
        run(scenario, url, args.pythonpath, args.max_response_bytes)
    server.shutdown()


if __name__ == "__main__":
    main()
