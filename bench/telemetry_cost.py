"""What metrics (on by default) cost per request and per streamed chunk.

In-process and CPU-bound on purpose: the whole proxy app is driven through httpx's ASGI transport,
the upstream is an in-memory httpx transport that hands the proxy one SSE event per read, and the
figure is the process CPU time per request, metrics on vs off, in alternating rounds (median of
rounds). Per-chunk cost is the slope between streams of 200 and 2,000 events, so everything paid
once per request cancels out. Client trace `brief` (the default) and `off` are measured apart:
with `off`, metrics make the proxy run the trace builder it would otherwise skip.

    /work/venv/bin/python bench/telemetry_cost.py             # ~1–2 min
    /work/venv/bin/python bench/telemetry_cost.py --rounds 3 --requests 200

The absolute numbers include httpx on both sides (client and upstream), which a real deployment
does not pay; the differences between on and off are the point.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.app import create_app
from proxy.settings import Settings

COMPLETION = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1,
    "model": "deepseek-v4",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Tides follow the moon. " * 20,
                "reasoning_content": "hm " * 200,
            },
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 20,
        "completion_tokens": 400,
        "completion_tokens_details": {"reasoning_tokens": 200},
    },
}
BODY = {"model": "deepseek-v4", "messages": [{"role": "user", "content": "Tell me about tides."}]}


def sse_events(n: int) -> list[bytes]:
    """DeepSeek-style: 60% reasoning deltas, then content deltas, then finish with usage, [DONE]."""
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "deepseek-v4"}
    thinking = int(n * 0.6)
    events = []
    for i in range(n - 1):
        delta = {"reasoning_content": "hm "} if i < thinking else {"content": "tide "}
        events.append({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    events.append(
        {
            **head,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": COMPLETION["usage"],
        }
    )
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


class Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


def upstream(streams: dict[int, list[bytes]]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        if not body.get("stream"):
            return httpx.Response(200, json=COMPLETION)
        n = int(request.headers["x-bench-chunks"])
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Pieces(streams[n]))

    return httpx.MockTransport(answer)


async def cpu_per_request(metrics: bool, trace: str, chunks: int | None, requests: int) -> float:
    """Process CPU µs per request for one configuration (chunks None = non-stream)."""
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        upstream_base_url="https://api.deepseek.com/v1",
        metrics=metrics,
        trace=trace,
        default_thinking_level="standard",
    )
    streams = {n: sse_events(n) for n in (200, 2000)}
    app = create_app(settings, transport=upstream(streams))
    body = {**BODY, "stream": chunks is not None}
    headers = {"x-bench-chunks": str(chunks or 0), "authorization": "Bearer sk-bench"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.bench"
    ) as client:
        for _ in range(max(5, requests // 10)):  # warm-up
            (await client.post("/v1/chat/completions", json=body, headers=headers)).raise_for_status()
        start = time.process_time()
        for _ in range(requests):
            r = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert r.status_code == 200
        return (time.process_time() - start) / requests * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--requests", type=int, default=300, help="non-stream and 200-chunk requests per round"
    )
    args = parser.parse_args()
    configs = [(trace, chunks) for trace in ("brief", "off") for chunks in (None, 200, 2000)]
    results: dict[tuple[str, int | None, bool], list[float]] = {}
    for round_ in range(args.rounds):
        for trace, chunks in configs:
            # Long streams get fewer requests so every cell takes about as long.
            n = args.requests if chunks != 2000 else max(20, args.requests // 10)
            order = (True, False) if round_ % 2 == 0 else (False, True)
            for metrics in order:
                value = asyncio.run(cpu_per_request(metrics, trace, chunks, n))
                results.setdefault((trace, chunks, metrics), []).append(value)
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    med = {key: statistics.median(values) for key, values in results.items()}
    print("| client trace | request | metrics off µs | metrics on µs | metrics cost |")
    print("|---|---|---|---|---|")
    for trace, chunks in configs:
        off, on = med[(trace, chunks, False)], med[(trace, chunks, True)]
        what = "non-stream" if chunks is None else f"stream, {chunks} chunks"
        print(
            f"| {trace} | {what} | {off:,.0f} | {on:,.0f} | {on - off:+,.0f} µs ({(on - off) / off:+.1%}) |"
        )
    print()
    for trace in ("brief", "off"):
        slope = {m: (med[(trace, 2000, m)] - med[(trace, 200, m)]) / 1800 for m in (False, True)}
        print(
            f"per chunk, client trace {trace}: metrics off {slope[False]:.2f} µs, on {slope[True]:.2f} µs "
            f"({slope[True] - slope[False]:+.2f} µs)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
