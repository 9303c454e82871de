"""What the Responses door does once per response, piece by piece, in process (no network).

    /work/venv/bin/python bench/door_pieces.py                  # µs per call, hot (best of 7)
    /work/venv/bin/python bench/door_pieces.py --instructions   # counted instead (callgrind), ~1 min
    PYTHONPATH=/path/to/other/checkout /work/venv/bin/python bench/door_pieces.py   # its proxy/

bench/door_events.py times and counts a stream's chunks through the door's transcoder with stub
ids and a stub sealer; a burst stream's ~200 chunks reach the door in ~3 reads, so what it does
once per response weighs as much there as what it does per chunk. These are those pieces, each
alone, with the served benchmark's request (bench/payloads/responses_stream.json) and the fake
upstream's burst stream (bench/fake_upstream.sse_events):

- `bridge_request`: the Responses request mapped to the internal chat request;
- `frame`: the `ResponseFrame` (the fields a `Response` echoes of its request);
- `response_object`: one `Response` object (a stream builds the opening one; the terminal one is
  it copied with the fields that changed);
- `seal`: the reasoning item's `encrypted_content` (the stream's reasoning, ChaCha20-Poly1305
  after deflate), as the door's sealer makes it;
- `ids`: three ids (`resp_`, `rs_`, `msg_`) as the door makes them;
- `entries` and `store_put`: the finished response as the state store keeps it, and those entries
  written to the memory store (new keys each time);
- `door_real` and `door_stub`: the transcoder alone on the burst stream (what door_events.py calls
  `responses alone`) with the real sealer and ids, and with the stubs;
- `pipeline_feed` and `pipeline_feed_runs`: the stream read one event at a time (a paced stream)
  through the response pipeline as the chat path feeds it, and as a front door's path does (its
  runs handed over).

`--instructions` counts each piece's calls after three warm ones under valgrind's callgrind, as
door_events.py does (PYTHONHASHSEED=0). Deflate's count overstates its time: valgrind's `calloc`
zeroes the compressor's state in counted code, where glibc's hands out pages the kernel zeroed.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The checkout this script is in, unless PYTHONPATH names another (to compare two versions).
if importlib.util.find_spec("proxy") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson
from door_events import DONE, counted, counted_child, door_alone, pipeline, pipeline_runs
from fake_upstream import sse_events

from proxy.core import seal
from proxy.core.protocols.responses.output import ReasoningItemFacts, ResponseFrame, response_object
from proxy.core.protocols.responses.request import bridge_request
from proxy.core.protocols.responses.state import reasoning_sealer
from proxy.core.protocols.responses.stream import ResponsesTranscoder
from proxy.core.protocols.sealing import SealContext
from proxy.server.doors.common import new_id
from proxy.server.doors.responses_store import response_entries
from proxy.state.memory import MemoryStore

BENCH = Path(__file__).resolve().parent
TENANT = "t" * 32
COUNTED = 20


def pieces() -> dict[str, Callable[[], object]]:
    payload = orjson.loads((BENCH / "payloads" / "responses_stream.json").read_bytes())
    own = [{"type": "message", "role": "user", "content": payload["input"]}]
    ctx = SealContext(seal.SealKeys(b"x" * 32), TENANT, "self-hosted", "http://127.0.0.1:9", 1, "m")
    events = [*sse_events("burst"), DONE]
    handed = pipeline_runs([b"".join(events)])

    def frame() -> ResponseFrame:
        return ResponseFrame.for_request(
            payload, response_id="resp_bench", model="deepseek-v4-pro", created_at=1.0, clock=time.time
        )

    def real() -> ResponsesTranscoder:
        return ResponsesTranscoder(frame(), seal=reasoning_sealer(ctx, []), new_id=new_id)

    def stub() -> ResponsesTranscoder:
        return ResponsesTranscoder(
            frame(), seal=lambda facts: "sealed", new_id=lambda prefix: prefix + "_bench"
        )

    done = real()
    for piece in handed:
        done.feed_pieces(piece)  # type: ignore[arg-type]
    done.close()
    final = done.final
    assert final is not None
    reasoning = "".join(part["text"] for part in final["output"][0]["content"])
    facts = ReasoningItemFacts("rs_bench", "resp_bench", "m", reasoning)
    sealer = reasoning_sealer(ctx, [])
    entries = response_entries(TENANT, final, own, None)
    store = MemoryStore(ttl=3600)
    fresh = itertools.count()
    opening = frame()

    def store_put() -> None:
        n = str(next(fresh))  # (new keys: a response is stored once)
        items = [(entries.key + n, entries.record), *((k + n, v) for k, v in entries.items.items())]
        store.put_now(items, tenant=TENANT)

    def paced(method: str) -> Callable[[], None]:
        def run() -> None:
            p = pipeline()
            if method == "feed":
                p.begin({"messages": []}, 0.0)
                for event in events:
                    p.feed(event, 1.0)
            else:
                p.begin_runs({"messages": []}, 0.0)
                for event in events:
                    p.feed_runs(event, 1.0)
            p.finish(2.0)

        return run

    return {
        "bridge_request": lambda: bridge_request(dict(payload, input=own)),
        "frame": frame,
        "response_object": lambda: response_object(opening, status="in_progress", output=[]),
        "seal": lambda: sealer(facts),
        "ids": lambda: (new_id("resp"), new_id("rs"), new_id("msg")),
        "entries": lambda: response_entries(TENANT, final, own, None),
        "store_put": store_put,
        "door_real": lambda: door_alone(handed, real),
        "door_stub": lambda: door_alone(handed, stub),
        "pipeline_feed": paced("feed"),
        "pipeline_feed_runs": paced("feed_runs"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instructions", action="store_true", help="count instead of timing")
    parser.add_argument("--count-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    runs = pieces()
    if args.count_child:
        counted_child(runs, COUNTED)  # (door_events': each piece's COUNTED calls, dumped by its name)
        return
    figures: dict[str, Any]
    if args.instructions:
        # (door_events': this script under callgrind, each piece's COUNTED calls dumped by its name)
        figures = counted([], COUNTED, script=Path(__file__), spaced=False)
        print(f"{'piece':<20} {'instructions per call':>22}")
        for name in runs:
            print(f"{name:<20} {figures[name]:>22,.0f}")
        return
    print(f"{'piece':<20} {'µs per call (hot, best of 7)':>29}")
    for name, run in runs.items():
        number = 20 if name.startswith(("door", "pipeline")) else 500
        best = min(timeit.repeat(run, number=number, repeat=7)) / number
        print(f"{name:<20} {best * 1e6:>29.1f}")


if __name__ == "__main__":
    main()
