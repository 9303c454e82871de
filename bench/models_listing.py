"""What a big upstream model list does to the rest of the proxy: `/healthz` latency while the
merged `GET /v1/models` (a routes file) is asked for.

An upstream on 127.0.0.1 answers `GET /v1/models` with a list of `--list-mb` MB (and counts how
often it is asked); a routes file sends every model there. While `--calls` clients ask the proxy
for `/v1/models` one after the other, another thread asks `/healthz` every 5 ms and keeps the
slowest answer: a proxy that parses the list on its event loop answers nothing else meanwhile.
`--pythonpath DIR` runs the proxy from another checkout (`git worktree add /tmp/before HEAD`).
Bounded: `--calls` requests, each with a 60 s timeout. Linux only. Not part of the test suite.

    /work/venv/bin/python bench/models_listing.py [--pythonpath DIR] [--list-mb 31] [--calls 5]
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
import tempfile
import threading
import time
from pathlib import Path

import httpx
from common import stop_process

MB = 1024 * 1024


class BigList(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b""
    asked = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        type(self).asked += 1
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(self.body)


def big_list(mb: float) -> bytes:
    item = {"object": "model", "owned_by": "bench", "created": 1, "description": "d" * 200}
    n = int(mb * MB / (len(json.dumps(item)) + 30))
    return json.dumps(
        {"object": "list", "data": [{"id": f"model-{i:07}", **item} for i in range(n)]}
    ).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pythonpath", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--list-mb", type=float, default=31.0)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()

    BigList.body = big_list(args.list_mb)
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BigList)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    work = Path(tempfile.mkdtemp(prefix="bench-models-"))
    routes = work / "routes.yaml"
    url = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
    routes.write_text(f'routes:\n  - {{name: big, models: ["*"], upstream: "{url}"}}\n')
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("THINKPROXY_")},
        "PYTHONPATH": args.pythonpath,
        "THINKPROXY_ROUTES_FILE": str(routes),
        "THINKPROXY_HOST": "127.0.0.1",
        "THINKPROXY_PORT": str(port),
        "THINKPROXY_LOG_LEVEL": "error",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve"],
        env=env,
        cwd=args.pythonpath,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stop = threading.Event()
    slowest = [0.0]

    def probe() -> None:
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                started = time.perf_counter()
                client.get(f"http://127.0.0.1:{port}/healthz")
                slowest[0] = max(slowest[0], time.perf_counter() - started)
                time.sleep(0.005)

    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            with contextlib.suppress(httpx.TransportError):
                httpx.get(f"{base}/healthz", timeout=0.5)
                break
            time.sleep(0.05)
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        time.sleep(0.5)
        answers = []
        for _ in range(args.calls):
            r = httpx.get(f"{base}/v1/models", timeout=60)
            missing = r.headers.get("x-thinking-models-missing")
            answers.append(f"{r.status_code} missing={missing}" if missing else str(r.status_code))
        time.sleep(0.2)
        stop.set()
        prober.join()
        print(
            f"{len(BigList.body) / MB:.1f} MB list, {args.calls} calls to /v1/models: "
            f"{', '.join(sorted(set(answers)))}; upstream asked {BigList.asked}x; "
            f"slowest /healthz meanwhile {slowest[0] * 1000:.0f} ms"
        )
    finally:
        stop.set()
        stop_process(proc)
        upstream.shutdown()


if __name__ == "__main__":
    main()
