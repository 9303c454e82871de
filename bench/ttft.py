"""Idle time-to-first-token probe: N sequential stream requests, time to the first `data:` byte.

One keep-alive connection, one request at a time (the target is otherwise idle). The clock
starts just before the request is written and stops when the first byte of the body's first
`data:` event arrives; the rest of the response is then read to its end so the connection can be
reused. The fake upstream's `ttft` scenario sends its first event at once and the other 199
after 10 ms, so the first event crosses the target alone. Compare a target with `direct`
(straight to the fake upstream): the difference is the time the target adds.

Run: python bench/ttft.py --target direct=9000 --target thinkproxy=8080 [-n 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from common import CHAT_PATH, MESSAGES_PATH, RESPONSES_PATH, payload, request_headers

# What marks the first token in the body: a chat stream's first `data:` event; in a Responses
# stream the first delta event (its `response.created` goes out before the upstream answers), in
# a Messages stream the first content_block_delta (message_start and a ping go out before it).
FIRST_TOKEN = {"chat": b"data:", "responses": b".delta\n", "messages": b"event: content_block_delta\n"}
PATHS = {"chat": CHAT_PATH, "responses": RESPONSES_PATH, "messages": MESSAGES_PATH}


def _request(port: int, scenario: str, door: str = "chat") -> bytes:
    body = payload(stream=True, door=door)
    head = "".join(f"{k}: {v}\r\n" for k, v in request_headers(scenario).items())
    path = PATHS[door]
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}"
        f"Content-Length: {len(body)}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode() + body


async def _one(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, marker: bytes = b"data:"
) -> tuple[float, bool]:
    """Send one request; return (seconds to the first token's `marker`, connection reusable)."""
    buf = bytearray()
    start = time.perf_counter()
    writer.write(request)
    first: float | None = None
    head_end = -1
    while True:
        data = await reader.read(65536)
        if not data:
            if first is None:
                raise ConnectionError("connection closed before the first data: event")
            return first, False
        buf += data
        if head_end < 0:
            head_end = buf.find(b"\r\n\r\n")
            if head_end >= 0:
                head = bytes(buf[:head_end]).lower()
                if not head.startswith((b"http/1.1 200", b"http/1.0 200")):
                    raise ConnectionError(f"unexpected response: {head[:60]!r}")
                chunked = b"transfer-encoding: chunked" in head
                close = b"connection: close" in head
                length = None
                at = head.find(b"content-length:")
                if at >= 0:
                    length = int(head[at + 15 :].split(b"\r\n", 1)[0])
        if head_end >= 0 and first is None and buf.find(marker, head_end) >= 0:
            first = time.perf_counter() - start
        if head_end >= 0 and first is not None:
            if chunked and buf.endswith(b"\r\n0\r\n\r\n"):
                return first, not close
            if length is not None and len(buf) >= head_end + 4 + length:
                return first, not close


async def probe(
    port: int, n: int, scenario: str = "ttft", door: str = "chat", gap_ms: float = 0.0
) -> list[float]:
    """n sequential requests to 127.0.0.1:port; time to the first token of each, in ms. `gap_ms`:
    the client waits that long after each answer's end before the next request (0: at once, the
    target's work after an answer's end then delays the next first token; an agent between two
    turns runs its tools first)."""
    request = _request(port, scenario, door)
    marker = FIRST_TOKEN[door]
    samples: list[float] = []
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in range(n):
            if gap_ms > 0 and i:
                await asyncio.sleep(gap_ms / 1000.0)
            seconds, reusable = await _one(reader, writer, request, marker)
            samples.append(seconds * 1000)
            if not reusable:
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
    finally:
        writer.close()
    return samples


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_probe(port: int, n: int, warmup: int = 3, door: str = "chat", gap_ms: float = 0.0) -> list[float]:
    """Blocking wrapper (uvloop when available); the first `warmup` requests are discarded."""
    try:
        import uvloop

        return uvloop.run(probe(port, n + warmup, door=door, gap_ms=gap_ms))[warmup:]
    except ImportError:
        return asyncio.run(probe(port, n + warmup, door=door, gap_ms=gap_ms))[warmup:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--target", action="append", required=True, help="name=port (first one is the reference)"
    )
    parser.add_argument("-n", type=int, default=50)
    args = parser.parse_args()
    reference: float | None = None
    for spec in args.target:
        name, port = spec.split("=")
        samples = run_probe(int(port), args.n)
        p50, p90 = statistics.median(samples), percentile(samples, 0.9)
        reference = p50 if reference is None else reference
        print(f"{name:<20} p50 {p50:7.3f} ms  p90 {p90:7.3f} ms  added p50 {p50 - reference:+7.3f} ms")


if __name__ == "__main__":
    main()
