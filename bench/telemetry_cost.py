"""What metrics (on by default) cost per request and per streamed chunk.

Two measurements, both CPU time of this process (`time.process_time`), best of several repeats so
that other work on a shared machine inflates them as little as possible:

1. Parts: the stream pipeline fed one SSE event at a time, with no trace builder, the client's
   brief builder, and the one the metrics keep when the client asked for no trace (brief, shown
   to nobody, read at the end); and the metrics listener's whole per-request work (observer, the
   start of the stream, every counter and histogram of a stream that reasoned and reported usage).
2. End to end: the whole app driven through httpx's ASGI transport, the upstream an in-memory
   httpx transport handing the proxy one SSE event per read; metrics on vs off in alternating
   order. Per-chunk cost is the slope between streams of 200 and 2,000 events. The absolute
   numbers include httpx on both sides, which a deployment does not pay; on vs off is the point.

    /work/venv/bin/python bench/telemetry_cost.py            # ~1–2 min
    /work/venv/bin/python bench/telemetry_cost.py --rounds 3 --requests 200 --no-e2e
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.events import AccessRecord
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.taps import build_trace
from proxy.core.stream.trace import TraceOutcome
from proxy.server.app import create_app
from proxy.settings import Settings
from proxy.telemetry.metrics import Metrics

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


def best_us(work: Any, repeats: int) -> float:
    """Best CPU µs of `work()` (which returns how many units it did) over `repeats` runs."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        units = work()
        best = min(best, (time.process_time() - start) / units * 1e6)
    return best


def pipeline_per_chunk(client: TraceMode, watched: bool, events: list[bytes], repeats: int) -> float:
    def run() -> int:
        trace = build_trace(
            client,
            None,
            zh=False,
            level="standard",
            provider="deepseek",
            method="params",
            detailed_tap=False,
            outcome=watched,
        )
        pipeline = StreamPipeline(
            reasoning=ReasoningOptions(),
            trace=trace,
            trace_format=TraceFormat.COMMENT,
            max_event_bytes=8 << 20,
        )
        pipeline.begin(None, 0.0)
        for i, event in enumerate(events):
            pipeline.feed(event, float(i))
        pipeline.finish(float(len(events)))
        return len(events)

    return best_us(run, repeats)


def listener_per_request(repeats: int) -> float:
    metrics = Metrics(max_models=100)
    listener = metrics.listener()
    answer = TraceOutcome(usage=COMPLETION["usage"], ttft_ms=12.5, reasoning_ms=300.0)  # type: ignore[arg-type]

    def run() -> int:
        n = 5000
        for _ in range(n):
            record = AccessRecord(method="POST", path="/v1/chat/completions", route="chat")
            observer = listener.start(record, ())
            record.stream, record.provider, record.level = True, "deepseek", "standard"
            record.thinking_method, record.model = "params", "deepseek-v4"
            record.status = record.upstream_status = 200
            observer.on_stream()
            record.outcome = answer
            observer.on_end(record, 1000.0)
        return n

    def records_only() -> int:
        n = 5000
        for _ in range(n):
            record = AccessRecord(method="POST", path="/v1/chat/completions", route="chat")
            record.stream, record.provider, record.level = True, "deepseek", "standard"
            record.thinking_method, record.model = "params", "deepseek-v4"
            record.status = record.upstream_status = 200
        return n

    return best_us(run, repeats) - best_us(records_only, repeats)


def parts(repeats: int) -> None:
    events = sse_events(2000)
    rows = [
        ("no trace builder (client trace off, nothing watching)", TraceMode.OFF, False),
        ("client trace brief, nothing watching", TraceMode.BRIEF, False),
        ("client trace brief, metrics on (the default: the same builder)", TraceMode.BRIEF, True),
        ("client trace off, metrics on (a brief builder kept for its outcome)", TraceMode.OFF, True),
    ]
    print("| stream pipeline, per SSE event | CPU µs |")
    print("|---|---|")
    for name, mode, watched in rows:
        print(f"| {name} | {pipeline_per_chunk(mode, watched, events, repeats):.2f} |")
    print()
    print(f"metrics listener, whole per-request work of a stream: {listener_per_request(repeats):.1f} µs")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=9, help="repeats of each part (best is kept)")
    parser.add_argument("--no-e2e", action="store_true", help="only the parts")
    parser.add_argument(
        "--requests", type=int, default=300, help="non-stream and 200-chunk requests per round"
    )
    args = parser.parse_args()
    parts(args.repeats)
    if args.no_e2e:
        return 0
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
    # The best round: contention only ever adds CPU time.
    med = {key: min(values) for key, values in results.items()}
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
