"""Instructions per request of several checkouts, side by side: where a figure moved between commits.

  git worktree add --detach /tmp/wt-7b5bfab 7b5bfab      # one checkout per commit (then remove them)
  nice -n 10 /work/venv/bin/python bench/bisect_instructions.py 7b5bfab=/tmp/wt-7b5bfab head=/tmp/wt-head
  nice -n 10 /work/venv/bin/python bench/bisect_instructions.py --door responses --scenarios burst \
      with=/tmp/wt-head plain=/tmp/wt-head-plain

What bench/instructions.py counts (valgrind's callgrind over the app in one process, the upstream
in-process, the same requests and settings), with what that tool cannot do across history:

- each TREE (a checkout; `LABEL=DIR` names it in the table) runs its own `proxy/` (PYTHONPATH)
  against this checkout's bench/payloads and bench/fake_upstream.py, so old and new code face the
  same bytes; the app is taken where that tree has it (`proxy.server.app` since the house,
  `proxy.app` before it);
- `--door responses|messages` sends the same question through that front door (its payload and
  path, as cost_pairs.py's wrk scripts do) instead of chat completions;
- a burst stream reaches the app in 64 KiB reads (`--read-size`), as run.py's burst upstream writes
  its 62 KB at once and httpcore reads a socket: the runs of same-shaped chunks the pipeline and
  the doors take in one go exist only then. instructions.py hands the app one event per read
  (`--read-size 0`), where a front door's `jsonio.string_insides` is called with one text at a time.

Counted in one process per tree: only the counted requests are collected (a small C helper, built
on first use with gcc from valgrind's callgrind.h, toggles collection and dumps the count), so
start-up and warm-up are not subtracted from a second run but never counted, and each scenario's
two halves come out of the same run ("unsteady" when they differ per request by more than 1%).
Every scenario runs WARM requests first, then the garbage collector, then COUNTED.

Settings are bench/instructions.py's (level standard, access log at info, the httpx transport,
PYTHONHASHSEED=0) plus `--env K=V`. A tree's build is what its directory holds: a git worktree is
pure Python; a copy from compiled_tree.py is compiled. Each row's delta is against the row before
it, so list the trees in history's order. Raw data: bench/results/bisect-<time>.json.
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
import tempfile
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import BENCH_DIR, CHAT_PATH, MESSAGES_PATH, REPO_DIR, RESPONSES_PATH, payload, post_in_process
from instructions import BASE_ENV, COUNTED, STEADY_PCT, WARM

RESULTS_DIR = BENCH_DIR / "results"
SCENARIOS = ("json", "burst")
DOORS = {"chat": CHAT_PATH, "responses": RESPONSES_PATH, "messages": MESSAGES_PATH}
# httpcore reads a socket 64 KiB at a time; run.py's burst upstream writes its 62 KB stream at once.
READ_SIZE = 65536
MARKS_C = """#include <valgrind/callgrind.h>
void marks_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void marks_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""
MARKS_SO = RESULTS_DIR / "callgrind_marks.so"
TRIGGER = re.compile(rb"^desc: Trigger: Client Request: (\S+)$", re.MULTILINE)
SUMMARY = re.compile(rb"^summary: (\d+)$", re.MULTILINE)


# -- the child: one tree's app, under callgrind, collecting only the counted requests ------------------


def served_app(transport: object) -> Any:
    """The app `thinkproxy serve` runs, wherever this tree keeps it: proxy/server/app.py since the
    house (e345a3c), proxy/app.py before it."""
    import importlib
    import importlib.util

    where = "proxy.server.app" if importlib.util.find_spec("proxy.server") is not None else "proxy.app"
    return importlib.import_module(where).create_served_app(transport=transport)


def run_child(scenarios: list[str], door: str, read_size: int, warm: int, counted: list[int]) -> None:
    import ctypes
    import gc

    import httpx
    from fake_upstream import json_body, sse_events

    marks = ctypes.CDLL(str(MARKS_SO))
    answer = json_body()
    events = [*sse_events("burst"), b"data: [DONE]\n\n"]
    if read_size:  # the stream as a client's reads take it from a socket the upstream filled
        whole = b"".join(events)
        events = [whole[i : i + read_size] for i in range(0, len(whole), read_size)]
    stream = False

    async def chunks() -> AsyncIterator[bytes]:
        for event in events:
            yield event

    def upstream(request: httpx.Request) -> httpx.Response:
        if stream:
            return httpx.Response(200, content=chunks(), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, content=answer, headers={"content-type": "application/json"})

    app = served_app(httpx.MockTransport(upstream))
    path = DOORS[door]

    async def one(body: bytes) -> None:
        headers = [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"authorization", b"Bearer sk-bench-not-a-key"),
            (b"content-length", str(len(body)).encode()),
        ]
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000),
            "headers": headers,
        }  # fmt: skip
        await post_in_process(app, scope, body, "a request's")

    async def main() -> None:
        nonlocal stream
        for scenario, n in zip(scenarios, counted, strict=True):
            stream = scenario == "burst"
            body = payload(stream, door)
            for _ in range(warm):
                await one(body)
            gc.collect()  # every count starts from a collected heap
            marks.marks_toggle()  # collecting from here
            for _ in range(n // 2):
                await one(body)
            marks.marks_dump(f"{scenario}-first".encode())  # (a dump zeroes the count)
            for _ in range(n - n // 2):
                await one(body)
            marks.marks_dump(f"{scenario}-second".encode())
            marks.marks_toggle()

    asyncio.run(main())


# -- the parent: trees, counts, the table ---------------------------------------------------------------


def build_marks() -> None:
    if MARKS_SO.exists():
        return
    if shutil.which("gcc") is None or not Path("/usr/include/valgrind/callgrind.h").exists():
        sys.exit("needs gcc and valgrind's headers: apt-get install gcc valgrind")
    RESULTS_DIR.mkdir(exist_ok=True)
    source = RESULTS_DIR / "callgrind_marks.c"
    source.write_text(MARKS_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(MARKS_SO), str(source)], check=True)


def compile_tree(tree: Path) -> None:
    """Byte-compile the tree (and bench/) first: a fresh worktree has no .pyc files, and the first
    run would compile modules the others load (tens of millions of instructions)."""
    for directory in (tree / "proxy", BENCH_DIR):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(directory)], check=True)


def count(tree: Path, args: argparse.Namespace, extra: dict[str, str]) -> dict[str, int]:
    """{"json-first": instructions, "json-second": …}: each half's count of each scenario."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **BASE_ENV, "THINKPROXY_LOG_LEVEL": "info"}
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(BENCH_DIR)])
    counted = [args.requests or COUNTED[s] for s in args.scenarios]
    with tempfile.TemporaryDirectory(prefix="bisect-cg-") as out:
        argv = ["valgrind", "--tool=callgrind", "--collect-atstart=no"]
        argv += [f"--callgrind-out-file={out}/cg.out", sys.executable, str(Path(__file__).resolve())]
        argv += ["--child", ",".join(args.scenarios), args.door, str(args.read_size), str(args.warm)]
        argv += [",".join(map(str, counted))]
        done = subprocess.run(argv, env=env, cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            tail = [line for line in lines if not line.startswith("==")][-5:] or lines[-5:]
            raise RuntimeError(f"{tree}: the child failed ({done.returncode}): " + " | ".join(tail))
        found: dict[str, int] = {}
        for dump in Path(out).glob("cg.out.*"):
            text = dump.read_bytes()
            trigger, summary = TRIGGER.search(text), SUMMARY.search(text)
            if trigger is not None and summary is not None:
                found[trigger.group(1).decode()] = int(summary.group(1))
    print(f"  {tree}: {found}", file=sys.stderr, flush=True)
    return found


def table(rows: list[dict[str, object]], scenarios: list[str], door: str) -> str:
    head = ["tree"] + [f"{door} {s}: instructions per request | delta vs previous row" for s in scenarios]
    lines = ["| " + " | ".join(head) + " |", "|---" * (1 + 2 * len(scenarios)) + "|"]
    previous: dict[str, float] = {}
    for row in rows:
        cells = [str(row["label"])]
        for scenario in scenarios:
            figures = row[scenario]
            assert isinstance(figures, dict)
            if figures.get("failed"):
                cells += ["failed (see stderr)", "—"]
                continue
            value = float(figures["per_request"])
            cells.append(f"{value:,.0f}" + ("" if figures["steady"] else " (unsteady)"))
            cells.append(f"{(value / previous[scenario] - 1) * 100:+.1f}%" if scenario in previous else "—")
            previous[scenario] = value
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs="*", metavar="[LABEL=]DIR", help="checkouts, in history's order")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--door", choices=tuple(DOORS), default="chat")
    p.add_argument("--env", action="append", default=[], metavar="THINKPROXY_K=V", help="on every tree")
    p.add_argument("--warm", type=int, default=WARM, help=f"requests before counting ({WARM})")
    p.add_argument("--requests", type=int, default=None, help="counted per tree (400 json, 100 burst)")
    p.add_argument(
        "--read-size",
        type=int,
        default=READ_SIZE,
        help=f"bytes per read of a burst stream ({READ_SIZE}); 0: one read per event, as instructions.py",
    )
    p.add_argument("--jobs", type=int, default=2, help="trees counted at once (2: one per core)")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        scenarios, door, read_size, warm, counted = args.child
        run_child(scenarios.split(","), door, int(read_size), int(warm), [int(n) for n in counted.split(",")])
        return
    args.scenarios = args.scenarios.split(",")
    if not args.trees or any(s not in SCENARIOS for s in args.scenarios):
        sys.exit(f"name one or more trees; scenarios among {', '.join(SCENARIOS)}")
    if shutil.which("valgrind") is None:
        sys.exit("needs valgrind: apt-get install valgrind")
    build_marks()
    extra = dict(item.partition("=")[::2] for item in args.env)
    trees: list[tuple[str, Path]] = []
    for spec in args.trees:
        label, eq, directory = spec.partition("=")
        tree = Path(directory if eq else label).resolve()
        trees.append((label if eq else str(tree), tree))
        compile_tree(tree)

    def one_tree(tree: Path) -> dict[str, int]:
        try:
            return count(tree, args, extra)
        except RuntimeError as exc:  # (one tree's failure leaves the others' counts standing)
            print(exc, file=sys.stderr, flush=True)
            return {}

    with ThreadPoolExecutor(args.jobs) as pool:
        counts = list(pool.map(one_tree, [tree for _, tree in trees]))
    rows: list[dict[str, object]] = []
    for (label, tree), found in zip(trees, counts, strict=True):
        row: dict[str, object] = {"label": label, "tree": str(tree)}
        for scenario in args.scenarios:
            n = args.requests or COUNTED[scenario]
            if f"{scenario}-second" not in found:
                row[scenario] = {"failed": True}
                continue
            first, second = found[f"{scenario}-first"] / (n // 2), found[f"{scenario}-second"] / (n - n // 2)
            row[scenario] = {
                "per_request": (found[f"{scenario}-first"] + found[f"{scenario}-second"]) / n,
                "requests": n,
                "halves": [first, second],
                "steady": abs(first / second - 1) * 100 <= STEADY_PCT,
            }
        rows.append(row)
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS_DIR / f"bisect-{stamp}.json"
    settings = {"door": args.door, "env": extra, "warm": args.warm, "read_size": args.read_size}
    out.write_text(json.dumps({**settings, "rows": rows}, indent=2))
    print(table(rows, args.scenarios, args.door))
    reads = f"{args.read_size}-byte reads" if args.read_size else "one read per event"
    raw = out.relative_to(REPO_DIR)
    print(f"\nWarm-up {args.warm} requests per scenario; burst streams in {reads}. Raw data: {raw}")


if __name__ == "__main__":
    main()
