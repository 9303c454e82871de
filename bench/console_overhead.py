"""What the console's live feed costs: per streamed chunk, and per request.

The per-chunk figure runs the proxy's own stream pipeline (decoder → reasoning extractor → trace
builder → encoder) over a realistic stream (400 reasoning chunks, then 1,600 answer chunks, one
upstream read each), with and without the console's feed observer, whose tap sees the detailed
trace whatever the client asked for. The per-request figure is the observer's start and its
summary at the end (ring insert; no watcher). Run: `python bench/console_overhead.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from proxy.console.feed import Feed
from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.events import AccessRecord, RequestObserver
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.taps import build_trace, trace_tap

REASONING_CHUNKS = 400
ANSWER_CHUNKS = 1600
ROUNDS = 30


def stream() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "deepseek-flash",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    reads = [chunk({"role": "assistant", "reasoning_content": "Hmm, "})]
    reads += [chunk({"reasoning_content": "let me think "}) for _ in range(REASONING_CHUNKS)]
    reads += [chunk({"content": "word "}) for _ in range(ANSWER_CHUNKS)]
    reads += [chunk({}, "stop"), b"data: [DONE]\n\n"]
    return reads


def run_once(reads: list[bytes], client_mode: TraceMode, feed: Feed | None) -> float:
    record = AccessRecord(method="POST", path="/v1/chat/completions", route="chat")
    observers = [feed.start(record, [])] if feed is not None else []
    trace = build_trace(
        client_mode, trace_tap(observers), zh=False, level="standard", provider="deepseek", method="params"
    )
    pipeline = StreamPipeline(
        reasoning=ReasoningOptions(),
        trace=trace,
        trace_format=TraceFormat.COMMENT,
        max_event_bytes=8 * 1024 * 1024,
    )
    clock = time.process_time  # CPU time of this process: less disturbed by other processes
    started = clock()
    pipeline.begin({"messages": []}, 0.0)
    for piece in reads:
        pipeline.feed(piece, (clock() - started) * 1000.0)
    pipeline.finish((clock() - started) * 1000.0)
    elapsed = clock() - started
    for observer in observers:
        observer.on_end(record, elapsed * 1000.0)
    return elapsed


def per_chunk_ns(
    reads: list[bytes], variants: list[tuple[TraceMode, Callable[[], Feed | None]]]
) -> list[float]:
    """Variants interleaved round by round (so drift on a shared machine hits all alike); the
    least disturbed run of each."""
    samples: list[list[float]] = [[] for _ in variants]
    for _ in range(ROUNDS):
        for i, (mode, make_feed) in enumerate(variants):
            samples[i].append(run_once(reads, mode, make_feed()))
    return [min(runs) / len(reads) * 1e9 for runs in samples]


class CountingFeed(Feed):
    """Counts the calls the feed's observer gets over one stream."""

    calls = 0

    def start(self, record: AccessRecord, headers: Any) -> Any:
        observer = super().start(record, headers)
        original = observer.on_trace

        def counted(events: Any) -> None:
            CountingFeed.calls += 1
            original(events)

        return _Wrapped(observer, counted)


class _Wrapped(RequestObserver):
    wants_trace = True

    def __init__(self, observer: Any, on_trace: Callable[[Any], None]) -> None:
        self.on_trace = on_trace
        self.on_end = observer.on_end


def per_request_us(rounds: int = 20000) -> float:
    feed = Feed(history=200)
    record = AccessRecord(method="POST", path="/v1/chat/completions", route="chat", status=200)
    events = [
        {"type": "status", "seq": 0, "t_ms": 1, "message": "Analyzing", "stage": "analyzing"},
        {"type": "done", "seq": 1, "t_ms": 9, "message": "Done", "ttft_ms": 2, "reasoning_ms": 0},
    ]
    started = time.perf_counter()
    for _ in range(rounds):
        observer = feed.start(record, [])
        observer.on_trace(events)
        observer.on_end(record, 9.0)
    return (time.perf_counter() - started) / rounds * 1e6


def main() -> None:
    reads = stream()
    watched = Feed(history=200)
    watcher = watched.subscribe()
    assert watcher is not None
    watcher.queue = type(watcher.queue)()  # unbounded here: this measures the push, not the drop
    print(f"stream: {len(reads)} upstream reads; fastest of {ROUNDS} runs per row\n")
    consoles: list[tuple[str, Callable[[], Feed | None]]] = [
        ("off", lambda: None),
        ("on, nobody watching", lambda: Feed(history=200)),
        ("on, one watcher", lambda: watched),
    ]
    variants = [(mode, make) for mode in TraceMode for _, make in consoles]
    figures = per_chunk_ns(reads, variants)
    print("| client trace | console | CPU ns per chunk |")
    print("|---|---|---|")
    for (mode, _), (label, _), ns in zip(variants, consoles * len(TraceMode), figures, strict=True):
        print(f"| {mode.value} | {label} | {ns:,.0f} |")
    run_once(reads, TraceMode.OFF, CountingFeed(history=200))
    print(
        f"\nfeed observer calls over the {len(reads)}-read stream: {CountingFeed.calls} (trace event batches)"
    )
    print(f"\nper request (observer start, 2 trace events, summary into the ring): {per_request_us():.1f} µs")


if __name__ == "__main__":
    main()
