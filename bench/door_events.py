"""What each bridged door costs per chunk on top of the chat path, in process (no network).

    /work/venv/bin/python bench/door_events.py                  # a burst: best of 60 rounds, ~5 s
    /work/venv/bin/python bench/door_events.py --reads event    # one SSE event per read (paced)
    PYTHONPATH=/path/to/other/checkout /work/venv/bin/python bench/door_events.py   # its proxy/

The fake upstream's burst stream (bench/fake_upstream.sse_events: 200 DeepSeek-style chunks,
reasoning then the answer, then `[DONE]`) goes through:

- chat: the response pipeline alone (brief trace as comments), as a chat completions client gets it;
- responses / messages: the same pipeline's output with its runs apart (StreamPipeline.feed_runs,
  as the edge hands it to a door without a review gate) through that door's transcoder
  (feed_pieces, then close), as the Responses and Messages doors write it.

`--reads whole` feeds the stream as one read (a burst), `--reads event` one SSE event per read (a
paced stream's reads). Each figure is the best of `--rounds` rounds of `--streams` streams (the
paths interleaved within each round, so a busy moment of a shared machine hits them alike), in µs
per upstream chunk; `ratio` is the door's path over the chat path (issue 42 item 6: the Responses
door ≤ 1.3×), and `door alone` is the transcoder's part of it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

# The checkout this script is in, unless PYTHONPATH names another (to compare two versions).
if importlib.util.find_spec("proxy") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_upstream import EVENTS_PER_STREAM, sse_events

from proxy.core.controls import ReasoningField, TraceFormat, TraceMode
from proxy.core.protocols.messages.events import ThinkingFacts
from proxy.core.protocols.messages.stream import MessagesTranscoder
from proxy.core.protocols.responses.output import ReasoningItemFacts, ResponseFrame
from proxy.core.protocols.responses.stream import ResponsesTranscoder
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder

DONE = b"data: [DONE]\n\n"


def pipeline() -> StreamPipeline:
    options = ReasoningOptions(output_field=ReasoningField.REASONING_CONTENT)
    trace = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="standard", provider="deepseek")
    return StreamPipeline(
        reasoning=options, trace=trace, trace_format=TraceFormat.COMMENT, max_event_bytes=8 * 1024 * 1024
    )


def seal_rs(facts: ReasoningItemFacts) -> str:
    return "sealed"


def seal_thinking(facts: ThinkingFacts) -> str:
    return "sealed"


def new_id(prefix: str) -> str:
    return prefix + "_bench"


def responses() -> ResponsesTranscoder:
    frame = ResponseFrame("resp_bench", "deepseek-v4-pro", 1735689600.0)
    return ResponsesTranscoder(frame, seal=seal_rs, new_id=new_id)


def messages() -> MessagesTranscoder:
    return MessagesTranscoder("msg_bench", "deepseek-v4-pro", seal=seal_thinking, new_id=new_id)


def chat_path(reads: list[bytes]) -> int:
    p = pipeline()
    size = len(p.begin({"messages": []}, 0.0))
    for read in reads:
        size += len(p.feed(read, 1.0))
    return size + len(p.finish(2.0))


def door_path(reads: list[bytes], door: Callable[[], ResponsesTranscoder | MessagesTranscoder]) -> int:
    p, t = pipeline(), door()
    size = len(t.feed(p.begin({"messages": []}, 0.0)))
    for read in reads:
        size += len(t.feed_pieces(p.feed_runs(read, 1.0)))
    return size + len(t.feed(p.finish(2.0))) + len(t.close())


def pipeline_runs(reads: list[bytes]) -> list[list[object]]:
    """What the pipeline hands a door for each read (to time the transcoder alone)."""
    p = pipeline()
    out: list[list[object]] = [[p.begin({"messages": []}, 0.0)]]
    out += [list(p.feed_runs(read, 1.0)) for read in reads]
    return [*out, [p.finish(2.0)]]


def door_alone(
    handed: list[list[object]], door: Callable[[], ResponsesTranscoder | MessagesTranscoder]
) -> int:
    t = door()
    size = 0
    for pieces in handed:
        size += len(t.feed_pieces(pieces))  # type: ignore[arg-type]
    return size + len(t.close())


def best(runs: dict[str, Callable[[], object]], rounds: int, streams: int) -> dict[str, float]:
    """µs per upstream chunk of each run, the best of `rounds` rounds of `streams` streams; the
    runs interleaved within each round, so that a busy moment of the machine hits them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    clock = time.perf_counter
    for _ in range(rounds):
        for name, run in runs.items():
            start = clock()
            for _ in range(streams):
                run()
            times[name].append(clock() - start)
    return {name: min(t) / streams / EVENTS_PER_STREAM * 1e6 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--streams", type=int, default=5, help="streams per round")
    parser.add_argument("--reads", choices=("whole", "event"), default="whole")
    args = parser.parse_args()
    events = [*sse_events("burst"), DONE]
    reads = [b"".join(events)] if args.reads == "whole" else events
    handed = pipeline_runs(reads)
    runs: dict[str, Callable[[], object]] = {
        "chat": lambda: chat_path(reads),
        "responses": lambda: door_path(reads, responses),
        "responses alone": lambda: door_alone(handed, responses),
        "messages": lambda: door_path(reads, messages),
        "messages alone": lambda: door_alone(handed, messages),
    }
    best(runs, 3, args.streams)  # (warm-up)
    us = best(runs, args.rounds, args.streams)
    rounds = f"best of {args.rounds} rounds of {args.streams} streams of {EVENTS_PER_STREAM} chunks"
    print(f"reads: {args.reads}; {rounds}")
    print(f"{'path':<10} {'µs/chunk':>9} {'ratio':>6} {'door alone':>11}")
    print(f"{'chat':<10} {us['chat']:>9.3f} {1.0:>6.2f}")
    for name in ("responses", "messages"):
        total = us[name]
        print(f"{name:<10} {total:>9.3f} {total / us['chat']:>6.2f} {us[name + ' alone']:>11.3f}")


if __name__ == "__main__":
    main()
