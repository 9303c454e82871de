"""What each bridged door costs per chunk on top of the chat path, in process (no network).

    /work/venv/bin/python bench/door_events.py                  # a burst: best of 60 rounds, ~5 s
    /work/venv/bin/python bench/door_events.py --reads event    # one SSE event per read (paced)
    PYTHONPATH=/path/to/other/checkout /work/venv/bin/python bench/door_events.py   # its proxy/
    /work/venv/bin/python bench/door_events.py --instructions   # counted instead (callgrind), ~40 s

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

`--instructions` counts instead of timing: this script again under valgrind's callgrind
(PYTHONHASHSEED=0), collecting only around `--streams` streams of each path after a warm-up (the
callgrind.h helper of bisect_instructions.py), in instructions per stream. Exact, so a change of
a fraction of a percent shows, and unmoved by a busy machine.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import subprocess
import sys
import tempfile
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
    size = len(t.feed_pieces(p.begin_runs({"messages": []}, 0.0)))
    for read in reads:
        size += len(t.feed_pieces(p.feed_runs(read, 1.0)))
    return size + len(t.feed(p.finish(2.0))) + len(t.close())


def pipeline_runs(reads: list[bytes]) -> list[list[object]]:
    """What the pipeline hands a door for each read (to time the transcoder alone)."""
    p = pipeline()
    out: list[list[object]] = [list(p.begin_runs({"messages": []}, 0.0))]
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


def counted_child(runs: dict[str, Callable[[], object]], streams: int) -> None:
    """Under callgrind: each path's `streams` streams collected and dumped by its name."""
    import ctypes

    from bisect_instructions import MARKS_SO

    marks = ctypes.CDLL(str(MARKS_SO))
    for name, run in runs.items():
        for _ in range(3):
            run()
        gc.collect()
        marks.marks_toggle()
        for _ in range(streams):
            run()
        marks.marks_dump(name.replace(" ", "_").encode())  # (a dump's name is one word)
        marks.marks_toggle()


def counted(
    argv: list[str], streams: int, script: Path | None = None, spaced: bool = True
) -> dict[str, float]:
    """Instructions per stream of each path: this script (or `script`) again, as `--count-child`, under
    callgrind; `spaced`: the dumps' names have their spaces back (counted_child writes them with `_`)."""
    from bisect_instructions import SUMMARY, TRIGGER, build_marks

    build_marks()
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory(prefix="door-events-cg-") as out:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--callgrind-out-file={out}/cg.out",
        ]
        command += [sys.executable, str((script or Path(__file__)).resolve()), *argv, "--count-child"]
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        found: dict[str, float] = {}
        for dump in Path(out).glob("cg.out.*"):
            text = dump.read_bytes()
            trigger, summary = TRIGGER.search(text), SUMMARY.search(text)
            if trigger is not None and summary is not None:
                name = trigger.group(1).decode()
                found[name.replace("_", " ") if spaced else name] = int(summary.group(1)) / streams
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--streams", type=int, help="streams per round (5), or counted (20)")
    parser.add_argument("--reads", choices=("whole", "event"), default="whole")
    parser.add_argument("--instructions", action="store_true", help="count instead of timing")
    parser.add_argument("--count-child", action="store_true", help=argparse.SUPPRESS)
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
    streams = args.streams or (20 if args.instructions or args.count_child else 5)
    if args.count_child:
        counted_child(runs, streams)
        return
    if args.instructions:
        figures = counted(["--reads", args.reads, "--streams", str(streams)], streams)
        print(
            f"reads: {args.reads}; instructions per stream of {EVENTS_PER_STREAM} chunks ({streams} counted)"
        )
        print(f"{'path':<10} {'instructions':>12} {'ratio':>6} {'door alone':>11}")
        print(f"{'chat':<10} {figures['chat']:>12,.0f} {1.0:>6.3f}")
        for name in ("responses", "messages"):
            total = figures[name]
            ratio = total / figures["chat"]
            print(f"{name:<10} {total:>12,.0f} {ratio:>6.3f} {figures[name + ' alone']:>11,.0f}")
        return
    best(runs, 3, streams)  # (warm-up)
    us = best(runs, args.rounds, streams)
    rounds = f"best of {args.rounds} rounds of {streams} streams of {EVENTS_PER_STREAM} chunks"
    print(f"reads: {args.reads}; {rounds}")
    print(f"{'path':<10} {'µs/chunk':>9} {'ratio':>6} {'door alone':>11}")
    print(f"{'chat':<10} {us['chat']:>9.3f} {1.0:>6.2f}")
    for name in ("responses", "messages"):
        total = us[name]
        print(f"{name:<10} {total:>9.3f} {total / us['chat']:>6.2f} {us[name + ' alone']:>11.3f}")


if __name__ == "__main__":
    main()
