"""What one feature costs, counted in instructions: exact, where timing on this VM is not.

  /work/venv/bin/python bench/instructions.py                       # every feature, ~1 hour
  /work/venv/bin/python bench/instructions.py --features console --scenarios json
  /work/venv/bin/python bench/instructions.py --compare ' vs PYTHONPATH=/tmp/before'  # code A/B

Each configuration runs the proxy's app in one process, under valgrind's callgrind (which counts
every instruction the process executes), for a number of chat requests: the fake upstream's
answer (bench/fake_upstream.py: the non-stream JSON, or the 200-chunk burst stream) comes from an
in-process httpx transport, and the request goes straight to the ASGI app. Each run warms up
(WARM requests: the console's ring full, lazy imports done), collects garbage, then counts: with
no requests, with half of COUNTED and with COUNTED; the difference divided by COUNTED is the
instructions one request takes in the steady state, with start-up and warm-up cancelled out.
PYTHONHASHSEED is fixed, so on an otherwise idle machine a configuration counted again usually
gives the same figure per request to within ~0.3% (the defaults, JSON, five counts: 1,436k to
1,444k), but not always (a sixth: 1,500k; with the count at 200 requests, its halves were 9%
apart). Count on an idle machine: work driven by the clock (timers, timeouts, anything done once
per second) follows wall time, which valgrind's slowness and other load stretch. Two runs
made while the test suite ran alongside were far off: an older build's console counted +58%,
where counts made alone at 0, 100, 200 and 400 requests lie on a straight line at +6.8%; and a
compiled build −82%, where alone it counted −5.6%. So each configuration is also counted at half
the requests, and a figure whose two halves differ per request by more than 1% says "unsteady"
(the second of those runs did; the first came before this check).

What it counts: the proxy's own work for a request — routing, body parse, rewrite, forwarding
through the upstream client, the answer's normalization, trace, access log and every listener —
but not the HTTP server's parsing or the sockets (uvicorn, the kernel), which a feature does not
change. So a feature's share here is of less than the whole request: it overstates the cost a real
server sees by the server's share. Its use is the *difference* a change makes, exactly, in a
few minutes: on 2026-12-01 the console counted +7.8% here before that day's changes and
measured +6.0…+9.7% with bench/cost_pairs.py, which times real servers (and remains the figure of
record).

Needs valgrind (`apt-get install valgrind`). Results: bench/results/instructions-<time>.json
and a table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import BENCH_DIR, CHAT_PATH, REPO_DIR, payload, post_in_process
from cost_pairs import PAIR_KEYS, PAIRS, Pair, custom_pair

RESULTS_DIR = BENCH_DIR / "results"
SCENARIOS = ("json", "burst")
# Past the console's ring (THINKPROXY_UI_HISTORY, 200), so that the counted requests see it full.
WARM = 220
COUNTED = {"json": 400, "burst": 100}
STEADY_PCT = 1.0  # how far the two halves of a count may differ per request
BASE_ENV = {
    "THINKPROXY_UPSTREAM_BASE_URL": "https://api.deepseek.com/v1",
    "THINKPROXY_DEFAULT_THINKING_LEVEL": "standard",
    "THINKPROXY_HTTP_TRANSPORT": "httpx",  # the transport that takes an in-process upstream
    "PYTHONHASHSEED": "0",
}
COLLECTED = re.compile(rb"Collected : (\d+)")


# -- the child: the app and N requests, under callgrind ------------------------------------------------


def run_child(scenario: str, warm: int, counted: int) -> None:
    import gc

    import httpx
    from fake_upstream import json_body, sse_events

    from proxy.server.app import create_served_app

    stream = scenario == "burst"
    answer = json_body()
    events = [*sse_events("burst"), b"data: [DONE]\n\n"]

    async def chunks() -> AsyncIterator[bytes]:
        for event in events:  # one read per event, as the fake upstream writes them
            yield event

    def upstream(request: httpx.Request) -> httpx.Response:
        if stream:
            return httpx.Response(200, content=chunks(), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, content=answer, headers={"content-type": "application/json"})

    # The app `thinkproxy serve` runs (logging, the frozen start-up heap, the GC threshold), with
    # the upstream in-process.
    app = create_served_app(transport=httpx.MockTransport(upstream))
    body = payload(stream)
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"authorization", b"Bearer sk-bench-not-a-key"),
        (b"content-length", str(len(body)).encode()),
    ]

    async def one() -> None:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": CHAT_PATH, "raw_path": CHAT_PATH.encode(), "query_string": b"",
            "root_path": "", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000),
            "headers": headers,
        }  # fmt: skip
        await post_in_process(app, scope, body, "a request's")

    async def main() -> None:
        for _ in range(warm):
            await one()
        gc.collect()  # both runs start counting from the same heap
        for _ in range(counted):
            await one()

    asyncio.run(main())


# -- the parent: configurations, counts, the table ------------------------------------------------------


def count(settings: dict[str, str], scenario: str, counted: int) -> int:
    """Instructions the whole child process executed."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **BASE_ENV, "THINKPROXY_LOG_LEVEL": "info"}
    env.update(settings)
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", str(REPO_DIR)), str(BENCH_DIR)])
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
    argv += [str(Path(__file__).resolve()), "--child", scenario, str(WARM), str(counted)]
    done = subprocess.run(argv, env=env, cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{scenario} with {settings}: the child failed: " + " | ".join(tail))
    return int(found.group(1))


def per_request(settings: dict[str, str], scenario: str, counted: int) -> tuple[float, bool]:
    """Instructions per counted request, and whether the two halves of the count agreed (within
    STEADY_PCT): a run can hold a one-off (a collection, a timer firing under valgrind's slowness)
    that a straight difference would spread over every request."""
    half = counted // 2
    with ThreadPoolExecutor(2) as pool:  # the runs on the two cores
        none, halfway, whole = pool.map(lambda n: count(settings, scenario, n), (0, half, counted))
    first, second = (halfway - none) / half, (whole - halfway) / (counted - half)
    return (whole - none) / counted, abs(first / second - 1) * 100 <= STEADY_PCT


def measure(pairs: Iterable[Pair], scenarios: list[str], counted: dict[str, int]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for pair in pairs:
        row: dict[str, object] = {"feature": pair.feature, "with": pair.with_env, "without": pair.without_env}
        for scenario in scenarios:
            print(f"{pair.feature}: {scenario} …", file=sys.stderr, flush=True)
            with_, steady_with = per_request(pair.with_env, scenario, counted[scenario])
            without, steady_without = per_request(pair.without_env, scenario, counted[scenario])
            row[scenario] = {
                "with": with_,
                "without": without,
                "cost_pct": (with_ / without - 1) * 100,
                "steady": steady_with and steady_without,
            }
        rows.append(row)
    return rows


def table(rows: list[dict[str, object]], scenarios: list[str]) -> str:
    head = "| feature | " + " | ".join(
        f"{s}: instructions per request without → with | cost" for s in scenarios
    )
    lines = [head + " |", "|---" * (1 + 2 * len(scenarios)) + "|"]
    for row in rows:
        cells = [str(row["feature"])]
        for scenario in scenarios:
            figures = row[scenario]
            assert isinstance(figures, dict)
            cells.append(f"{figures['without']:,.0f} → {figures['with']:,.0f}")
            steady = "" if figures["steady"] else " (unsteady: run again)"
            cells.append(f"{figures['cost_pct']:+.1f}%{steady}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--features", default=None, help="comma list of " + ", ".join(PAIR_KEYS) + " (default: all)"
    )
    p.add_argument(
        "--compare", action="append", default=[], metavar="'WITH vs WITHOUT'", help="as cost_pairs.py"
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument(
        "--requests", type=int, default=None, help="counted per configuration (400 json, 100 burst)"
    )
    p.add_argument("--child", nargs=3, metavar=("SCENARIO", "WARM", "COUNTED"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        run_child(args.child[0], int(args.child[1]), int(args.child[2]))
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench/instructions.py needs valgrind: apt-get install valgrind")
    scenarios = args.scenarios.split(",")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        sys.exit(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    if args.features is None and args.compare:
        pairs: list[Pair] = []
    elif args.features is None:
        pairs = [pair for pair in PAIRS if pair.key != "same"]  # counts do not need an A/A pair
    else:
        keys = args.features.split(",")
        if any(key not in PAIR_KEYS for key in keys):
            sys.exit(f"unknown feature(s); choose from {', '.join(PAIR_KEYS)}")
        pairs = [PAIR_KEYS[key] for key in keys]
    try:
        pairs += [custom_pair(text) for text in args.compare]
    except ValueError as exc:
        sys.exit(str(exc))
    counted = {scenario: args.requests or COUNTED[scenario] for scenario in scenarios}
    rows = measure(pairs, scenarios, counted)
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS_DIR / f"instructions-{stamp}.json"
    out.write_text(json.dumps({"warm": WARM, "counted": counted, "rows": rows}, indent=2))
    print(table(rows, scenarios))
    each = ", ".join(f"{n} {scenario}" for scenario, n in counted.items())
    print(
        f"\nCounted per configuration: {each} requests, after {WARM}. Raw data: {out.relative_to(REPO_DIR)}"
    )


if __name__ == "__main__":
    main()
