"""Cost of pathological and ordinary streams in the pure core (no network, one process).

    /work/venv/bin/python bench/pathological.py
    PYTHONPATH=/path/to/other/checkout /work/venv/bin/python bench/pathological.py   # its proxy/

Prints three figures:
- tool-call arguments: 20,000 fragments of 50 bytes through the stream pipeline (brief trace),
  seconds for the whole stream;
- blank lines: 20 MB of bare line ends fed to the SSE decoder in 64 KiB reads, seconds of CPU;
- per chunk: µs per ordinary content chunk through the pipeline (trace brief, reasoning shown),
  the best of several timeit repeats.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import timeit
from pathlib import Path

import orjson

# The checkout this script is in, unless PYTHONPATH names another (to compare two versions).
if importlib.util.find_spec("proxy") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.sse import SSEDecoder
from proxy.core.stream.trace import TraceBuilder

READ = 64 * 1024


def pipeline(mode: TraceMode = TraceMode.BRIEF) -> StreamPipeline:
    trace = TraceBuilder(mode=mode, zh=False, level="none", provider="openai")
    return StreamPipeline(
        reasoning=ReasoningOptions(),
        trace=trace,
        trace_format=TraceFormat.COMMENT,
        max_event_bytes=8 * 1024 * 1024,
    )


def frame(delta: dict[str, object]) -> bytes:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def tool_arguments(fragments: int = 20_000, size: int = 50, mode: TraceMode = TraceMode.BRIEF) -> float:
    """One tool call whose arguments arrive in `fragments` pieces of `size` bytes, each ending in `}`.

    Together they are `[{…},{…},…` — a valid prefix up to the last byte, the worst case for a
    check that re-parses the whole text whenever a fragment could have closed it.
    """
    head = {
        "tool_calls": [
            {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
        ]
    }
    piece = '{"k": "' + "x" * (size - 10) + '"}'
    body = [frame(head)] + [
        frame({"tool_calls": [{"index": 0, "function": {"arguments": ("[" if i == 0 else ",") + piece}}]})
        for i in range(fragments)
    ]
    p = pipeline(mode)
    start = time.perf_counter()
    p.begin(None, 0.0)
    for event in body:
        p.feed(event, 1.0)
    p.finish(2.0)
    return time.perf_counter() - start


def blank_lines(total: int = 20 * 1024 * 1024, line_end: bytes = b"\n") -> float:
    data = line_end * (total // len(line_end))
    decoder = SSEDecoder()
    start = time.process_time()
    for i in range(0, len(data), READ):
        decoder.feed(data[i : i + READ])
    decoder.flush()
    return time.process_time() - start


def per_chunk_us(n: int = 2_000, repeat: int = 7) -> float:
    chunks = [frame({"content": f"word{i} "}) for i in range(n)]

    def run() -> None:
        p = pipeline()
        p.feed(frame({"role": "assistant", "content": ""}), 0.0)
        for c in chunks:
            p.feed(c, 1.0)

    return min(timeit.repeat(run, number=5, repeat=repeat)) / (5 * n) * 1e6


def main() -> None:
    print(f"tool arguments, 20,000 x 50 B, brief:     {tool_arguments():.3f} s")
    print(f"tool arguments, 20,000 x 50 B, detailed:  {tool_arguments(mode=TraceMode.DETAILED):.3f} s")
    for name, end in (("LF", b"\n"), ("CRLF", b"\r\n"), ("CR", b"\r")):
        print(f"blank lines, 20 MB of {name:<4} in 64 KiB reads: {blank_lines(line_end=end):.3f} s CPU")
    print(f"content chunk through the pipeline:      {per_chunk_us():.2f} µs")


if __name__ == "__main__":
    main()
