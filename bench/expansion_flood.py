"""Peak RSS of a `thinkproxy serve` process flooded with requests that name a lot (issue 41, item 1).

A small request can name large things: an `item_reference` to a stored reasoning item, a sealed
blob (`encrypted_content`, a thinking block's `signature`) that inflates to ~1 MB, a reference blob
whose payload sits in the state store. Before each was put back once per request, 150 references
in a 13.6 KB request made a 150 MB upstream body (RSS 657 MB), one 1.5 KB blob x300 took RSS to
1.25 GB, a 120-character reference blob x100 made 200 MB.

Here every blob and item comes from the proxy itself (a first turn whose upstream answers with
~900 KB of reasoning: compressible, sealed inline; or random, spilled to the state store), then
each shape is sent many times in one request, through the Responses and the Messages doors:

- `item_reference`: 150 references to the stored 900 KB reasoning item;
- `blob`: the same ~1 KB `encrypted_content` (900 KB inflated) x300;
- `reference_blob`: the same ~120-character reference blob (a 900 KB spilled payload) x100;
- `signature`: the same thinking `signature` (900 KB inflated) on 300 assistant turns.

Printed per flood: the proxy's peak RSS (VmHWM, since its start), the largest body the upstream
received, the answer's status, and the longest `/healthz` answer while the floods ran (the event
loop is never held for long). The peak must stay under 200 MB. `--pythonpath DIR` runs the proxy
from another checkout (to measure a version before a change). Linux only (/proc). Not part of the
test suite.

    /work/venv/bin/python bench/expansion_flood.py [--pythonpath DIR] [--requests N]
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

MB = 1024 * 1024
LIMIT_MB = 200
REASONING = 900_000  # characters of reasoning in the first turn's answer
KEY = "sk-flood"


class Upstream(http.server.BaseHTTPRequestHandler):
    """A chat-completions upstream: the first turns get ~900 KB of reasoning (compressible when the
    user says `compressible`, random when `random`), every other request a short answer. It
    remembers the largest body it received."""

    protocol_version = "HTTP/1.1"
    largest = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with Upstream.lock:
            Upstream.largest = max(Upstream.largest, len(body))
        messages = json.loads(body).get("messages") or [{}]
        last = str(messages[-1].get("content") or "")
        if last == "compressible":
            reasoning = "a" * REASONING
        elif last == "random":
            reasoning = base64.b64encode(os.urandom(REASONING * 3 // 4)).decode()
        else:
            reasoning = "short"
        answer = {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "flood-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok", "reasoning_content": reasoning},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        out = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


class Health(threading.Thread):
    """Asks /healthz every 50 ms; remembers the longest answer."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base, self.longest, self.done = base, 0.0, threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.done.is_set():
                started = time.perf_counter()
                client.get(f"{self.base}/healthz")
                self.longest = max(self.longest, time.perf_counter() - started)
                self.done.wait(0.05)


def responses(base: str, input_: Any, store: bool = True) -> httpx.Response:
    body = {"model": "flood-model", "input": input_, "store": store}
    return httpx.post(
        f"{base}/v1/responses", json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=120
    )


def messages(base: str, history: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "flood-model", "max_tokens": 64, "messages": history}
    return httpx.post(f"{base}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=120)


def reasoning_item(base: str, say: str) -> dict[str, Any]:
    r = responses(base, say)
    r.raise_for_status()
    item: dict[str, Any] = next(o for o in r.json()["output"] if o["type"] == "reasoning")
    return item


def turn(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "go"},
        *items,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again"},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pythonpath", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--requests", type=int, default=3, help="requests per flood (default 3)")
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": args.pythonpath,
        "THINKPROXY_UPSTREAM_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}/v1",
        "THINKPROXY_PORT": str(port),
        "THINKPROXY_TRACE": "off",
        "THINKPROXY_LOG_LEVEL": "warning",
        "THINKPROXY_STATE_SECRET": "expansion flood bench",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve"],
        env=env,
        cwd=args.pythonpath,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    health = Health(base)
    worst = 0.0
    try:
        for _ in range(200):
            try:
                httpx.get(f"{base}/healthz", timeout=0.5)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        inline = reasoning_item(base, "compressible")
        spilled = reasoning_item(base, "random")
        first = messages(base, [{"role": "user", "content": "compressible"}]).json()
        signature = next(b["signature"] for b in first["content"] if b["type"] == "thinking")
        print(
            f"from the proxy: a blob of {len(inline['encrypted_content'])} characters "
            f"({REASONING // 1000} KB inflated), a reference blob of {len(spilled['encrypted_content'])}, "
            "a signature of "
            f"{len(signature)}; baseline peak RSS {vm_hwm_mb(proc.pid):.1f} MB"
        )
        sealed = {"type": "reasoning", "summary": [], "encrypted_content": inline["encrypted_content"]}
        reference = {"type": "reasoning", "summary": [], "encrypted_content": spilled["encrypted_content"]}
        thinking = {"type": "thinking", "thinking": "(shown)", "signature": signature}
        signed_turns: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for _ in range(300):
            signed_turns.append({"role": "assistant", "content": [thinking, {"type": "text", "text": "ok"}]})
            signed_turns.append({"role": "user", "content": "again"})
        floods: dict[str, Callable[[], httpx.Response]] = {
            "item_reference x150": lambda: responses(
                base, turn([{"type": "item_reference", "id": inline["id"]}] * 150), store=False
            ),
            "blob x300": lambda: responses(base, turn([sealed] * 300), store=False),
            "reference_blob x100": lambda: responses(base, turn([reference] * 100), store=False),
            "signature x300": lambda: messages(base, signed_turns),
        }
        health.start()
        for name, send in floods.items():
            Upstream.largest = 0
            statuses = set()
            size = 0
            for _ in range(args.requests):
                r = send()
                statuses.add(r.status_code)
                size = len(r.request.content)
            peak = vm_hwm_mb(proc.pid)
            worst = max(worst, peak)
            print(
                f"{name:20} request {size / 1024:7.1f} KB  upstream body {Upstream.largest / MB:6.2f} MB  "
                f"status {sorted(statuses)}  peak RSS {peak:6.1f} MB"
            )
        health.done.set()
        health.join(5)
        print(f"longest /healthz answer during the floods: {health.longest * 1000:.0f} ms")
        verdict = "under" if worst < LIMIT_MB else "OVER"
        print(f"peak RSS {worst:.1f} MB: {verdict} the {LIMIT_MB} MB bound")
    finally:
        health.done.set()
        proc.terminate()
        proc.wait(10)
        server.shutdown()
    if worst >= LIMIT_MB:
        sys.exit(1)


if __name__ == "__main__":
    main()
