"""Instructions per request of a real `thinkproxy serve` (uvicorn, the edge, the aiohttp client, sockets).

  git worktree add --detach /tmp/wt-7b5bfab 7b5bfab
  nice -n 10 /work/venv/bin/python bench/served_instructions.py 7b5bfab=/tmp/wt-7b5bfab now=.
  nice -n 10 /work/venv/bin/python bench/served_instructions.py --annotate 30 7b5bfab=/tmp/wt-7b5bfab now=.
  /work/venv/bin/python bench/served_instructions.py --calls --annotate 40 7b5bfab=/tmp/wt-7b5bfab now=.
  /work/venv/bin/python bench/served_instructions.py --loop-stats 7b5bfab=/tmp/wt-7b5bfab now=.

bench/bisect_instructions.py counts the app in one process with an in-process upstream: it leaves
out what only a served process does for a request — uvicorn's HTTP protocol and the edge
(proxy/server/edge.py), the client watch's task, the access line written to a real stream, the
aiohttp client (run.py's default transport) with its connection pool and socket reads, the loop's
wake-ups. This tool counts that too: each TREE's `serve` (`python -m proxy.cli serve` with the tree
first on PYTHONPATH, as run.py's `--before` starts a checkout) runs under valgrind's callgrind
against bench/fake_upstream.py (a separate process, not counted), and this process is the client
(not counted either): one keep-alive connection, requests one after another, so that the count
does not depend on how requests happen to overlap.

The server runs a small wrapper (`--serve-child`): it loads the 3-line callgrind.h helper of
bisect_instructions.py and turns collection on and off, and dumps the count, on SIGUSR1 and SIGUSR2
(acknowledged through a file), then runs `proxy.cli serve` in the same process. Per scenario:
WARM requests uncounted, then the garbage collector, then COUNTED requests in two halves, each
dumped. A half whose figure per request differs from the other's by more than 1% is "unsteady".
Work driven by the clock runs under valgrind's slowness too (uvicorn's 0.1 s tick and its Date
header, the watch's timers): it is in the figure, the same for every tree.

`--annotate [TOP]` keeps the callgrind files (bench/results/served-<time>/<label>/) and lists the
TOP C functions whose own instructions per request moved most against the first tree (callgrind
sees the interpreter, not Python functions: for those, `--calls`).

`--calls` serves without valgrind, under cProfile from the first counted request to the last, and
lists the Python functions whose calls per request moved most against the first tree (with
`--annotate`, each scenario's .pstats file is kept in bench/results/served-<time>/<label>/, for
its callers and callees). Calls are exact; cProfile's times are not worth reading on a shared
machine. (cProfile counts each resumption of a coroutine as a call: one that awaits once counts 2.)

`--loop-stats` serves with a counting stdlib asyncio loop (no valgrind): per request, the tasks
created, the callbacks scheduled (call_soon), the timers (call_at/call_later, and how many were
cancelled) and the loop's turns (select calls). Instructions do not show these for what they
cost: a task and a loop turn cost wall time out of proportion to their instructions.

Scenarios: `json` and `burst` (bench/fake_upstream.py's 200-chunk stream in one read), and `paced`
(the same 200 events one every 5 ms: one door write per event). `--door responses-ws` counts the
Responses door's WebSocket mode: one socket (no permessage-deflate, as openai-python connects), a
`response.create` per turn read to its terminal event; `burst` or `paced`, against `--door responses`
for the same answer over HTTP (`--syscalls` for the writes each makes).

Settings: every default plus level `standard` and the access log at info (written to the
server's stderr, a file), PYTHONHASHSEED=0, plus `--env K=V`. The upstream is on 127.0.0.1, so the
provider is `self-hosted`, as in run.py (bisect_instructions.py's upstream URL says DeepSeek: its
replay policy and capture differ). Raw data:
bench/results/served-<time>.json. Needs valgrind and gcc (`apt-get install valgrind gcc`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bisect_instructions import DOORS, MARKS_SO, SUMMARY, TRIGGER, build_marks, compile_tree
from common import BENCH_DIR, REPO_DIR, Processes, free_port, payload, python, wait_listening
from instructions import STEADY_PCT

RESULTS_DIR = BENCH_DIR / "results"
SCENARIOS = ("json", "burst", "paced")
WARM = 220  # past the console's ring (200), as the other counts
COUNTED = {"json": 400, "burst": 100, "paced": 20}
BASE_ENV = {
    "THINKPROXY_DEFAULT_THINKING_LEVEL": "standard",
    "THINKPROXY_LOG_LEVEL": "info",
    "PYTHONHASHSEED": "0",
}
ANNOTATED = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(.*)$")  # a callgrind_annotate line: Ir (share) name


# -- the server: `proxy.cli serve` with collection toggled by signals ----------------------------------


def serve_child(control: Path, mode: str) -> None:
    import runpy

    if mode == "loop":
        install_counting_loop(control)
    elif mode == "calls":
        install_profiler(control)
    elif mode == "syscalls":
        pass  # strace attaches from outside
    else:
        import ctypes

        marks = ctypes.CDLL(str(MARKS_SO))

        def toggle(signum: int, frame: object) -> None:
            marks.marks_toggle()
            (control / "ack").write_text("toggle")

        def dump(signum: int, frame: object) -> None:
            name = (control / "name").read_text()
            marks.marks_dump(name.encode())
            (control / "ack").write_text(name)

        signal.signal(signal.SIGUSR1, toggle)
        signal.signal(signal.SIGUSR2, dump)
    sys.argv = ["thinkproxy", "serve"]
    runpy.run_module("proxy.cli", run_name="__main__", alter_sys=True)


def install_counting_loop(control: Path) -> None:
    """uvicorn's uvloop factory hands out a stdlib loop that counts what it schedules; SIGUSR2
    writes the counts so far to control/stats.json (SIGUSR1 is unused here)."""
    import asyncio

    import uvloop

    counts: Counter[str] = Counter()

    class CountingLoop(asyncio.SelectorEventLoop):
        def call_soon(self, callback: Any, *args: Any, context: Any = None) -> Any:
            counts["call_soon"] += 1
            return super().call_soon(callback, *args, context=context)

        def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
            counts["timers"] += 1  # call_later goes through call_at
            handle = super().call_at(when, callback, *args, context=context)
            return handle

        def _timer_handle_cancelled(self, handle: Any) -> None:
            counts["timers_cancelled"] += 1
            super()._timer_handle_cancelled(handle)

        def _run_once(self) -> None:
            counts["loop_turns"] += 1
            super()._run_once()  # type: ignore[misc]

    def factory(task_loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        counts["tasks"] += 1
        return asyncio.Task(coro, loop=task_loop, **kwargs)

    def new_loop() -> asyncio.AbstractEventLoop:
        loop = CountingLoop()
        loop.set_task_factory(factory)
        select = loop._selector.select  # type: ignore[attr-defined]

        def counted_select(timeout: float | None = None) -> Any:
            # A turn with nothing ready waits in the kernel: the loop went idle (a wake-up later).
            counts["waits" if timeout is None or timeout > 0 else "polls"] += 1
            return select(timeout)

        loop._selector.select = counted_select  # type: ignore[attr-defined]
        return loop

    uvloop.new_event_loop = new_loop

    def dump(signum: int, frame: object) -> None:
        (control / "stats.json").write_text(json.dumps(counts))
        (control / "ack").write_text((control / "name").read_text())

    signal.signal(signal.SIGUSR2, dump)


def install_profiler(control: Path) -> None:
    """cProfile from SIGUSR1 to SIGUSR2, which writes its stats to control/calls.pstats."""
    import cProfile

    profiler = cProfile.Profile()

    def start(signum: int, frame: object) -> None:
        nonlocal profiler
        profiler = cProfile.Profile()  # each scenario's own calls
        profiler.enable()
        (control / "ack").write_text("on")

    def dump(signum: int, frame: object) -> None:
        profiler.disable()
        profiler.dump_stats(str(control / "calls.pstats"))
        (control / "ack").write_text((control / "name").read_text())

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, dump)


def call_counts(path: Path, requests: int) -> dict[str, float]:
    """Python calls per request by function (`file:function`, the file's path from its package on,
    so that a module moved between trees keeps its name where it kept its file name)."""
    import pstats

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    counts: Counter[str] = Counter()
    for (file, _line, function), (_primitive, total, *_rest) in stats.items():
        counts[f"{Path(file).name}:{function}"] += total
        counts["(every call)"] += total
    return {name: n / requests for name, n in counts.items()}


# -- the client -----------------------------------------------------------------------------------------


# The Responses door's WebSocket mode (`--door responses-ws`): a turn is a `response.create` on one
# socket, read to its terminal event; its answer is always a stream, so `burst` or `paced`.
SOCKET_DOOR = "responses-ws"
SOCKET_TERMINAL = (b'"type":"response.completed"', b'"type":"response.failed"', b'"type":"error"')


def client_for(port: int, door: str) -> Client | SocketClient:
    return SocketClient(port) if door == SOCKET_DOOR else Client(port, door)


class SocketClient:
    """One WebSocket to the proxy's Responses door (no permessage-deflate, as openai-python
    connects), opened at a scenario's first turn; each turn checked (its deltas, a `response.completed`)."""

    def __init__(self, port: int) -> None:
        self.url = f"ws://127.0.0.1:{port}/v1/responses"
        self.socket: Any = None
        self.scenario = ""
        body = json.loads(payload(True, "responses"))
        body.pop("stream", None)
        self.create = json.dumps({"type": "response.create", **body})

    def one(self, scenario: str) -> None:
        if scenario == "json":
            raise RuntimeError("a socket turn is always streamed: --door responses-ws counts burst or paced")
        if self.scenario != scenario:  # (the upstream's scenario is a header: set at the upgrade)
            from websockets.sync.client import connect

            if self.socket is not None:
                self.socket.close()
            headers = {"Authorization": "Bearer sk-bench-not-a-key", "X-Bench-Scenario": scenario}
            self.socket = connect(self.url, additional_headers=headers, compression=None, max_size=None)
            self.scenario = scenario
        self.socket.send(self.create)
        deltas = 0
        while True:
            got = self.socket.recv(timeout=600, decode=False)
            deltas += b'.delta"' in got[:60]
            if any(end in got[:40] for end in SOCKET_TERMINAL):
                break
        if b'"type":"response.completed"' not in got[:40] or not deltas:
            raise RuntimeError(f"the turn did not complete ({deltas} deltas): {got[:300]!r}")


class Client:
    """One keep-alive connection to the proxy; each request checked (200, a stream's [DONE])."""

    def __init__(self, port: int, door: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.path = DOORS[door]
        self.door = door

    def one(self, scenario: str) -> None:
        stream = scenario != "json"
        headers = {
            "Content-Type": "application/json",
            "Authorization": "Bearer sk-bench-not-a-key",
            "X-Bench-Scenario": scenario,
        }
        self.conn.request("POST", self.path, body=payload(stream, self.door), headers=headers)
        response = self.conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"the proxy answered {response.status}: {body[:300]!r}")
        if stream and self.door == "chat" and not body.rstrip().endswith(b"data: [DONE]"):
            raise RuntimeError(f"the stream did not end with [DONE]: {body[-200:]!r}")


def syscalls(pid: int, control: Path, one: Callable[[], None], n: int) -> dict[str, float]:
    """System calls per request of the server's process and threads (strace -c attached for the
    `n` requests): the kernel's work, which no instruction count sees."""
    out = control / "strace.txt"
    tracer = subprocess.Popen(
        ["strace", "-c", "-f", "-o", str(out), "-p", str(pid)], stderr=subprocess.PIPE, text=True
    )
    assert tracer.stderr is not None
    for line in tracer.stderr:  # "strace: Process N attached" (a line per thread)
        if "attached" in line:
            break
    time.sleep(1.0)  # every thread attached
    for _ in range(n):
        one()
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=60)
    found: dict[str, float] = {}
    for line in out.read_text().splitlines():
        cells = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(cells) >= 5 and cells[3].isdigit() and not line.startswith("100.00"):
            found[cells[-1]] = int(cells[3]) / n
    found["(every call)"] = sum(v for k, v in found.items() if k != "total")
    found.pop("total", None)
    return found


def signal_and_wait(pid: int, control: Path, sig: int, name: str, timeout: float = 600.0) -> None:
    (control / "ack").unlink(missing_ok=True)
    (control / "name").write_text(name)
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while not (control / "ack").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not answer signal {sig} within {timeout:g} s")
        time.sleep(0.05)


def run_tree(
    tree: Path, args: argparse.Namespace, extra: dict[str, str], keep: Path | None
) -> dict[str, Any]:
    """{"json-first": instructions, …} (or, with --loop-stats, {"json": {counter: per request}})."""
    counted = {s: args.requests or COUNTED[s] for s in args.scenarios}
    with tempfile.TemporaryDirectory(prefix="served-cg-") as tmp:
        control = Path(tmp)
        procs = Processes(control / "logs")
        try:
            upstream_port = free_port()
            argv = [python(), str(BENCH_DIR / "fake_upstream.py"), "--port", str(upstream_port)]
            wait_listening(upstream_port, procs.start("fake-upstream", argv))
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith(("THINKPROXY_", "BENCH_"))}
            env.update(BASE_ENV)
            env.update(
                PYTHONPATH=os.pathsep.join([str(tree), str(BENCH_DIR)]),
                THINKPROXY_UPSTREAM_BASE_URL=f"http://127.0.0.1:{upstream_port}/v1",
                THINKPROXY_HOST="127.0.0.1",
                THINKPROXY_PORT=str(port),
            )
            env.update(extra)
            child = [python(), str(Path(__file__).resolve()), "--serve-child", str(control), args.mode]
            if args.mode == "count":
                out = keep if keep is not None else control
                argv = ["valgrind", "--tool=callgrind", "--collect-atstart=no"]
                argv += [f"--callgrind-out-file={out}/cg.out", *child]
            else:
                argv = child
            server = procs.start("serve", argv, env=env, cwd=control)
            wait_listening(port, server, timeout=600.0)
            client = client_for(port, args.door)
            found: dict[str, Any] = {}
            for scenario in args.scenarios:
                for _ in range(args.warm):
                    client.one(scenario)
                n = counted[scenario]
                if args.mode == "syscalls":
                    found[scenario] = syscalls(server.pid, control, partial(client.one, scenario), n)
                elif args.mode == "loop":
                    signal_and_wait(server.pid, control, signal.SIGUSR2, "before")
                    before = json.loads((control / "stats.json").read_text())
                    for _ in range(n):
                        client.one(scenario)
                    signal_and_wait(server.pid, control, signal.SIGUSR2, "after")
                    after = json.loads((control / "stats.json").read_text())
                    found[scenario] = {k: (after.get(k, 0) - before.get(k, 0)) / n for k in after}
                elif args.mode == "calls":
                    signal_and_wait(server.pid, control, signal.SIGUSR1, "on")
                    for _ in range(n):
                        client.one(scenario)
                    signal_and_wait(server.pid, control, signal.SIGUSR2, "off")
                    found[scenario] = call_counts(control / "calls.pstats", n)
                    if keep is not None:  # for pstats (cumulative time, callers)
                        shutil.copy(control / "calls.pstats", keep / f"{scenario}.pstats")
                else:
                    signal_and_wait(server.pid, control, signal.SIGUSR1, "on")
                    for half, size in (("first", n // 2), ("second", n - n // 2)):
                        for _ in range(size):
                            client.one(scenario)
                        signal_and_wait(server.pid, control, signal.SIGUSR2, f"{scenario}-{half}")
                    signal_and_wait(server.pid, control, signal.SIGUSR1, "off")
            if args.mode == "count":
                found.update(read_dumps(keep if keep is not None else control))
        except Exception as exc:
            print(f"  {tree}: failed: {exc}\n    " + procs.log_tail("serve"), file=sys.stderr, flush=True)
            return {}
        finally:
            procs.close()
    print(f"  {tree}: {found}", file=sys.stderr, flush=True)
    return found


def read_dumps(directory: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    for dump in directory.glob("cg.out*"):
        text = dump.read_bytes()
        trigger, summary = TRIGGER.search(text), SUMMARY.search(text)
        if trigger is not None and summary is not None:
            found[trigger.group(1).decode()] = int(summary.group(1))
    return found


def self_costs(directory: Path, scenario: str, requests: int) -> dict[str, float]:
    """Instructions per request spent in each (C) function itself, from the first half's dump."""
    dumps = [
        d for d in directory.glob("cg.out*") if f"Client Request: {scenario}-first".encode() in d.read_bytes()
    ]
    if not dumps:
        return {}
    done = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(dumps[0])], capture_output=True, text=True, check=False
    )
    costs: Counter[str] = Counter()
    for line in done.stdout.splitlines():
        match = ANNOTATED.match(line)
        if match and "PROGRAM TOTALS" not in line:
            name = re.sub(r" \[.*\]$", "", re.sub(r"^\S*/Python-3[.\d]*/", "", match.group(2)))
            costs[name] += int(match.group(1).replace(",", ""))
    return {name: value / (requests // 2) for name, value in costs.items()}


def differences(first: dict[str, float], other: dict[str, float], top: int, unit: str) -> str:
    """The `top` names whose figure grew most from `first` to `other` (and the few that fell most)."""
    moved = sorted(
        ((other.get(k, 0.0) - first.get(k, 0.0), k) for k in first.keys() | other.keys()), reverse=True
    )
    lines = [f"{'change':>12} {'before':>12}  {unit}"]
    for delta, name in [*moved[:top], *moved[-(top // 4 or 1) :]]:
        lines.append(f"{delta:>+12,.1f} {first.get(name, 0.0):>12,.1f}  {name[:140]}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs="*", metavar="[LABEL=]DIR", help="checkouts, in history's order")
    p.add_argument("--scenarios", default="json,burst", help="among json, burst, paced (json,burst)")
    p.add_argument("--door", choices=(*DOORS, SOCKET_DOOR), default="chat")
    p.add_argument("--env", action="append", default=[], metavar="THINKPROXY_K=V", help="on every tree")
    p.add_argument("--warm", type=int, default=WARM, help=f"requests before counting ({WARM})")
    p.add_argument(
        "--requests", type=int, default=None, help="counted per tree (400 json, 100 burst, 20 paced)"
    )
    p.add_argument("--loop-stats", dest="mode", action="store_const", const="loop", default="count",
                   help="tasks, callbacks, timers and loop turns per request (no valgrind)")  # fmt: skip
    p.add_argument("--syscalls", dest="mode", action="store_const", const="syscalls",
                   help="system calls per request by call (strace -c, no valgrind)")  # fmt: skip
    p.add_argument("--calls", dest="mode", action="store_const", const="calls",
                   help="Python calls per request by function, under cProfile (no valgrind)")  # fmt: skip
    p.add_argument("--annotate", type=int, nargs="?", const=30, default=0, metavar="TOP",
                   help="keep the callgrind files; list the TOP functions whose own instructions per "
                   "request moved most against the first tree (with --calls: calls per request)")  # fmt: skip
    p.add_argument("--serve-child", nargs=2, metavar=("CONTROL_DIR", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_child:
        serve_child(Path(args.serve_child[0]), args.serve_child[1])
        return
    args.scenarios = args.scenarios.split(",")
    if not args.trees or any(s not in SCENARIOS for s in args.scenarios):
        sys.exit(f"name one or more trees; scenarios among {', '.join(SCENARIOS)}")
    if args.mode == "count":
        if shutil.which("valgrind") is None:
            sys.exit("needs valgrind: apt-get install valgrind")
        build_marks()
    extra = dict(item.partition("=")[::2] for item in args.env)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    rows: list[dict[str, Any]] = []
    by_function: dict[str, dict[str, dict[str, float]]] = {}  # label → scenario → name → per request
    for spec in args.trees:  # one at a time: a served count needs the client and the server's core
        label, eq, directory = spec.partition("=")
        tree = Path(directory if eq else label).resolve()
        label = label if eq else str(tree)
        compile_tree(tree)
        keep = RESULTS_DIR / f"served-{stamp}" / label if args.annotate and args.mode != "loop" else None
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
        found = run_tree(tree, args, extra, keep)
        row: dict[str, Any] = {"label": label, "tree": str(tree)}
        by_function[label] = {}
        for scenario in args.scenarios:
            n = args.requests or COUNTED[scenario]
            if args.mode != "count":
                row[scenario] = found.get(scenario, {"failed": True})
                by_function[label][scenario] = row[scenario]
                continue
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
            if keep is not None:
                by_function[label][scenario] = self_costs(keep, scenario, n)
        rows.append(row)
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"served-{stamp}.json"
    settings = {"door": args.door, "env": extra, "warm": args.warm, "mode": args.mode}
    kept = rows if args.mode != "calls" else []  # (calls: thousands of names; the .pstats files keep them)
    out.write_text(json.dumps({**settings, "rows": kept}, indent=2))
    if args.annotate and len(rows) > 1:
        unit = "instructions per request in the function itself" if args.mode == "count" else args.mode
        unit = "Python calls per request" if args.mode == "calls" else unit
        unit = "system calls per request" if args.mode == "syscalls" else unit
        for row in rows[1:]:
            for scenario in args.scenarios:
                base, other = (
                    by_function[rows[0]["label"]].get(scenario),
                    by_function[row["label"]].get(scenario),
                )
                if base and other and not base.get("failed") and not other.get("failed"):
                    print(f"\n{rows[0]['label']} → {row['label']}, {scenario}:")
                    print(differences(base, other, args.annotate, unit))
    if args.mode in ("count", "loop"):
        print(table(rows, args.scenarios, args.door, args.mode == "loop"))
    reads = "one keep-alive connection, one request at a time"
    print(f"\nWarm-up {args.warm} requests per scenario, {reads}. Raw data: {out.relative_to(REPO_DIR)}")


def table(rows: list[dict[str, Any]], scenarios: list[str], door: str, loop_stats: bool) -> str:
    if loop_stats:
        keys = ("tasks", "call_soon", "timers", "timers_cancelled", "loop_turns", "waits")
        head = ["tree", "scenario", *[f"{k} / request" for k in keys]]
        lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for row in rows:
            for scenario in scenarios:
                figures = row[scenario]
                cells = [row["label"], scenario] + [f"{figures.get(k, 0):.2f}" for k in keys]
                lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    head = ["tree"] + [
        f"{door} {s}: served instructions per request | delta vs previous row" for s in scenarios
    ]
    lines = ["| " + " | ".join(head) + " |", "|---" * (1 + 2 * len(scenarios)) + "|"]
    previous: dict[str, float] = {}
    for row in rows:
        cells = [str(row["label"])]
        for scenario in scenarios:
            figures = row[scenario]
            if figures.get("failed"):
                cells += ["failed (see stderr)", "—"]
                continue
            value = float(figures["per_request"])
            cells.append(f"{value:,.0f}" + ("" if figures["steady"] else " (unsteady)"))
            cells.append(f"{(value / previous[scenario] - 1) * 100:+.1f}%" if scenario in previous else "—")
            previous[scenario] = value
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
