"""Load-and-soak check: many paced streams through a real `thinkproxy serve` for a while, then
look for anything that went wrong, for memory that kept growing, and for upstream responses the
proxy never closed.

What runs (all on free 127.0.0.1 ports, children killed on exit, Ctrl-C and errors included):
  simulated upstream   uvicorn on the mock app (`proxy.mock`), wrapped in a counter of in-flight
                       responses (GET /_soak/inflight), paced at --pace-ms between chunks
  proxy                `python -m proxy.cli serve`, i.e. `thinkproxy serve`, THINKPROXY_TRACE=brief,
                       THINKPROXY_HTTP_TRANSPORT from --transport
  load (this process)  --streams clients, each looping: open a stream, read it to the end, repeat;
                       plus non-stream requests at --json-rps; a --disconnect-rate share of streams
                       closed by the client mid-way; a --fault-rate share asking the upstream for a
                       fault (X-Mock-Fault 400 / 429 / disconnect / invalid-json)

Every request is classified: completed, an expected (documented) error, or UNEXPECTED (a 5xx the
proxy made up, a stream without [DONE], a traceback, a connection error to the proxy, …).
The proxy's RSS is sampled every second; "flat" means the RSS at the end of the load is at most
20 % above the RSS at the end of warm-up. After the clients are gone and a short idle, the
proxy's sockets to the upstream must all be idle keep-alive connections: none holding unread
response bytes, and the upstream must have no response still in flight.

Half of the client disconnects ask the upstream for a slow pace (a ~13 s body): if the proxy did
not close the upstream response when its client left, that response would still be in flight
at the check, whatever the transport buffers. Exit status 1 on any UNEXPECTED outcome, a leaked
response or non-flat RSS. Bounded: at most --duration + 30 s of wall time.

  /work/venv/bin/python bench/soak.py                          # 500 streams, 60 s, aiohttp transport
  /work/venv/bin/python bench/soak.py --streams 50 --duration 10 --transport httpx
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import orjson

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
CHAT_PATH = "/v1/chat/completions"
INFLIGHT_PATH = "/_soak/inflight"
MODEL = "deepseek-flash"
TRACEBACK = b"Traceback (most recent call last)"

# A request silent this long is hung. Not shorter: on a saturated box a new connection can wait
# ~25 s in the proxy's accept queue (uvloop accepts one connection per loop iteration).
READ_TIMEOUT_S = 60.0
STARTUP_TIMEOUT_S = 15.0
SHUTDOWN_RESERVE_S = 4.0  # kept from the wall-time budget for stopping the children
WALL_MARGIN_S = 30.0  # the whole run ends within --duration + this
RSS_GROWTH_LIMIT = 1.20
JSON_MAX_INFLIGHT = 200  # the non-stream generator is open-loop; this bounds it on a saturated box
FAULTS = ("400", "429", "disconnect", "invalid-json")

# Outcomes. Completed and expected ones are listed; any other kind is UNEXPECTED.
COMPLETED = frozenset({"stream_done", "json_ok"})
EXPECTED = frozenset(
    {
        "client_disconnect",  # the client closed the stream mid-way, as asked
        "upstream_error_passed",  # the injected 400 / 429 came back with the upstream's body
        "stream_error_framed",  # upstream cut mid-stream: data: {"error": …} then [DONE]
        "upstream_broken_502",  # upstream cut a non-stream body: 502 with an OpenAI-shaped error
        "upstream_invalid_passed",  # upstream's truncated non-stream JSON passed back unchanged
        "upstream_invalid_withheld",  # …or, with X-Reasoning: hide, a 502: it cannot be cleaned
    }
)
STATE_NAMES = {
    1: "ESTABLISHED",
    2: "SYN_SENT",
    3: "SYN_RECV",
    4: "FIN_WAIT1",
    5: "FIN_WAIT2",
    6: "TIME_WAIT",
    7: "CLOSE",
    8: "CLOSE_WAIT",
    9: "LAST_ACK",
    10: "LISTEN",
    11: "CLOSING",
}


@dataclass(frozen=True)
class SoakConfig:
    """One run's knobs; the command-line flags map onto the first eight."""

    streams: int = 500
    duration: float = 60.0
    pace_ms: float = 20.0
    json_rps: float = 20.0
    disconnect_rate: float = 0.05
    fault_rate: float = 0.04
    transport: str = "aiohttp"
    slow_pace_ms: float = 300.0  # for half of the client disconnects: a body far longer than the run's tail
    warmup_s: float = 10.0
    drain_s: float = 20.0  # how long in-flight requests get to finish once the load stops
    idle_s: float = 3.0  # quiet time before the connections are counted
    seed: int = 1

    @property
    def effective_warmup(self) -> float:
        # A short run (the test) has no 10 s warm-up; half the run stands in for it.
        return min(self.warmup_s, self.duration / 2)


# --- classifying one response (pure) -----------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What became of one request: a kind (see COMPLETED / EXPECTED; any other is UNEXPECTED)."""

    kind: str
    detail: str = ""

    @property
    def unexpected(self) -> bool:
        return self.kind not in COMPLETED and self.kind not in EXPECTED


def data_payloads(body: bytes) -> list[bytes]:
    """The payloads of the `data:` lines of an SSE body (comments and `event:` lines skipped)."""
    out = []
    for line in body.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"data:"):
            out.append(line[5:].removeprefix(b" "))
    return out


def _is_error_object(body: bytes) -> bool:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)


def classify_stream(status: int, body: bytes, fault: str | None, trace_on: bool) -> Outcome:
    """A `stream: true` request read to its end (the client did not leave)."""
    head = body[:300].decode("utf-8", "replace")
    if TRACEBACK in body:
        return Outcome("traceback_in_body", f"status {status}: {head}")
    if fault in ("400", "429") and str(status) == fault:
        if _is_error_object(body):
            return Outcome("upstream_error_passed")
        return Outcome("upstream_error_altered", f"status {status}: {head}")
    if status != 200:
        return Outcome(f"http_{status}", f"fault {fault}: {head}")
    events = data_payloads(body)
    if not events or events[-1] != b"[DONE]":
        last = events[-1][:200].decode("utf-8", "replace") if events else "(no data line)"
        return Outcome("stream_without_done", f"fault {fault}, {len(events)} data lines, last: {last}")
    if events.count(b"[DONE]") != 1:
        return Outcome("done_not_once", f"fault {fault}: {events.count(b'[DONE]')} [DONE] lines")
    errors = [e for e in events[:-1] if e.startswith(b'{"error"')]
    if errors:
        if fault == "disconnect" and _is_error_object(errors[0]):
            return Outcome("stream_error_framed")
        return Outcome("stream_error_unprovoked", f"fault {fault}: {errors[0][:300]!r}")
    if fault == "disconnect":
        return Outcome("upstream_cut_not_reported", "the upstream cut the stream; no error event came back")
    if fault != "invalid-json":  # that fault puts a broken line in on purpose; it is passed through
        for payload in events[:-1]:
            try:
                orjson.loads(payload)
            except orjson.JSONDecodeError:
                return Outcome("invalid_chunk", payload[:300].decode("utf-8", "replace"))
    if trace_on and b'"type":"done"' not in body:
        return Outcome("trace_done_missing", f"fault {fault}")
    return Outcome("stream_done")


def classify_json(status: int, body: bytes, fault: str | None, trace_on: bool) -> Outcome:
    """A non-stream request."""
    head = body[:300].decode("utf-8", "replace")
    if TRACEBACK in body:
        return Outcome("traceback_in_body", f"status {status}: {head}")
    if fault in ("400", "429") and str(status) == fault:
        if _is_error_object(body):
            return Outcome("upstream_error_passed")
        return Outcome("upstream_error_altered", f"status {status}: {head}")
    if fault == "disconnect" and status == 502 and _is_error_object(body):
        return Outcome("upstream_broken_502")
    if fault == "invalid-json" and status == 502 and b'"reasoning_not_removable"' in body:
        return Outcome("upstream_invalid_withheld")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        if fault == "invalid-json" and status == 200:
            return Outcome("upstream_invalid_passed")
        return Outcome("invalid_json_body" if status == 200 else f"http_{status}", f"fault {fault}: {head}")
    if status != 200:
        return Outcome(f"http_{status}", f"fault {fault}: {head}")
    if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
        return Outcome("not_a_completion", f"fault {fault}: {head}")
    if trace_on and not isinstance(parsed.get("trace"), list):
        return Outcome("trace_missing", f"fault {fault}")
    return Outcome("json_ok")


# --- /proc readers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TcpSocket:
    """One row of /proc/net/tcp: ports, state, kernel queue sizes, inode."""

    local_port: int
    remote_port: int
    state: int
    tx_queue: int
    rx_queue: int
    inode: int

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.state, f"state_{self.state:02X}")

    @property
    def unread(self) -> int:
        """Received bytes the process has not read. Once the peer's FIN is in, the kernel's count
        includes it (a CLOSE_WAIT socket with nothing left to read shows 1)."""
        fin_received = self.state_name in ("CLOSE_WAIT", "LAST_ACK", "CLOSING", "TIME_WAIT")
        return max(0, self.rx_queue - fin_received)


def parse_proc_net_tcp(text: str) -> list[TcpSocket]:
    """Rows of /proc/<pid>/net/tcp or tcp6 (the whole network namespace, not just that process)."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        local, remote, state, queues, inode = fields[1], fields[2], fields[3], fields[4], fields[9]
        tx, _, rx = queues.partition(":")
        rows.append(
            TcpSocket(
                local_port=int(local.rpartition(":")[2], 16),
                remote_port=int(remote.rpartition(":")[2], 16),
                state=int(state, 16),
                tx_queue=int(tx, 16),
                rx_queue=int(rx, 16),
                inode=int(inode),
            )
        )
    return rows


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for entry in fd_dir.iterdir():
        with contextlib.suppress(OSError):  # an fd closed while we look
            target = os.readlink(entry)
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def process_sockets(pid: int) -> list[TcpSocket]:
    """The TCP sockets `pid` holds open (matched by inode against its fds)."""
    mine = socket_inodes(pid)
    rows: list[TcpSocket] = []
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            rows += parse_proc_net_tcp(Path(f"/proc/{pid}/net/{name}").read_text())
    return [r for r in rows if r.inode in mine]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


# --- connections after the load ----------------------------------------------------------------


@dataclass
class ConnectionReport:
    """The proxy's sockets to the upstream port and the upstream's view, once everything is idle."""

    proxy_to_upstream: Counter[str] = field(default_factory=Counter)  # by state
    proxy_unread: int = 0  # sockets with response bytes nobody read
    proxy_unsent: int = 0  # sockets with request bytes not yet sent (tx queue > 0)
    proxy_client_side: int = 0  # sockets from clients still open on the proxy's port
    mock_side: Counter[str] = field(default_factory=Counter)  # by state
    mock_accept_queue: int = 0  # connections the upstream has not accepted yet
    unpaired: int = 0  # proxy ESTABLISHED sockets with no accepted upstream socket at the other end
    mock_inflight: int = -1  # responses the upstream is still sending (-1: could not ask)

    @property
    def leaked(self) -> int:
        return self.proxy_unread + self.proxy_unsent + max(0, self.mock_inflight)

    @property
    def ok(self) -> bool:
        return self.leaked == 0 and self.mock_inflight == 0


def connection_report(proxy_pid: int, proxy_port: int, mock_pid: int, mock_port: int) -> ConnectionReport:
    """Count the sockets now. Idle keep-alive connections are fine; a leaked response shows as
    unread bytes on the proxy's side or as a response the upstream is still sending."""
    report = ConnectionReport()
    mock_sockets = process_sockets(mock_pid)
    proxy_sockets = process_sockets(proxy_pid)
    peers = set()
    for s in mock_sockets:
        if s.local_port != mock_port:
            continue
        if s.state_name == "LISTEN":
            report.mock_accept_queue = s.rx_queue
        else:
            report.mock_side[s.state_name] += 1
            peers.add(s.remote_port)
    for s in proxy_sockets:
        if s.remote_port == mock_port:
            report.proxy_to_upstream[s.state_name] += 1
            report.proxy_unread += s.unread > 0
            report.proxy_unsent += s.tx_queue > 0
            report.unpaired += s.state_name == "ESTABLISHED" and s.local_port not in peers
        elif s.local_port == proxy_port and s.state_name != "LISTEN":
            report.proxy_client_side += 1
    # Asked last: this request opens a connection of its own to the upstream.
    with contextlib.suppress(OSError, ValueError):
        url = f"http://127.0.0.1:{mock_port}{INFLIGHT_PATH}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            report.mock_inflight = int(orjson.loads(resp.read())["inflight"])
    return report


# --- the simulated upstream, run in a child ----------------------------------------------------


class InflightCounter:
    """ASGI wrapper: counts requests whose response is not finished; GET /_soak/inflight tells."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app
        self.inflight = 0

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == INFLIGHT_PATH:
            body = orjson.dumps({"inflight": self.inflight})
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        self.inflight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1


def serve_mock(port: int, pace_ms: float) -> None:
    import uvicorn

    from proxy.mock import MockOptions, create_mock_app

    app = InflightCounter(create_mock_app(MockOptions(pace_ms=pace_ms)))
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        backlog=4096,
    )


# --- child processes ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raise_nofile_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (children inherit it); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def child_env(**extra: str) -> dict[str, str]:
    """This environment without any THINKPROXY_* setting of the caller, the repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINKPROXY_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_DIR), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


class Children:
    """Child processes, each in its own session; all of them are ended on exit (TERM, then KILL)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("wb")
        # Own session: a Ctrl-C in the terminal reaches this script, which then stops them in order.
        # cwd = the log dir, so a stray .env in the caller's directory is not read.
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.log_dir, start_new_session=True
        )
        self.procs[name] = (proc, log)
        return proc

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def wait_listening(self, name: str, port: int, timeout: float = STARTUP_TIMEOUT_S) -> None:
        proc = self.procs[name][0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = self.log_path(name).read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited with code {proc.returncode} before listening:\n{tail}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{name}: nothing listening on port {port} after {timeout:.0f} s")

    def close(self) -> None:
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + SHUTDOWN_RESERVE_S - 1
        for proc, log in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_mock(children: Children, pace_ms: float) -> int:
    port = free_port()
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--serve-mock",
        str(port),
        "--pace-ms",
        str(pace_ms),
    ]
    children.start("mock", argv, child_env())
    return port


def start_proxy(children: Children, upstream_port: int, transport: str) -> int:
    port = free_port()
    env = child_env(
        THINKPROXY_UPSTREAM_BASE_URL=f"http://127.0.0.1:{upstream_port}/v1",
        THINKPROXY_HOST="127.0.0.1",
        THINKPROXY_PORT=str(port),
        THINKPROXY_TRACE="brief",
        THINKPROXY_HTTP_TRANSPORT=transport,
        THINKPROXY_SHUTDOWN_TIMEOUT="1",
        THINKPROXY_LOG_LEVEL="info",
    )
    children.start("proxy", [sys.executable, "-m", "proxy.cli", "serve"], env)
    return port


# --- the load ----------------------------------------------------------------------------------


@dataclass
class LoadStats:
    """Everything the load phase measured: outcome counts (with a few UNEXPECTED examples),
    latencies, samples of RSS and sockets, CPU shares."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)  # a few per UNEXPECTED kind
    stream_ttfb: list[float] = field(default_factory=list)
    stream_total: list[float] = field(default_factory=list)
    json_latency: list[float] = field(default_factory=list)
    sse_events: int = 0
    json_skipped: int = 0  # non-stream requests not sent: too many already in flight
    open_streams: int = 0
    open_samples: list[int] = field(default_factory=list)
    accept_queue_max: int = 0  # connections waiting for the proxy to accept them
    upstream_sockets_max: int = 0  # the proxy's sockets to the upstream
    client_sockets_max: int = 0  # the proxy's sockets from clients
    rss: list[tuple[float, int, bool]] = field(default_factory=list)  # (t, KiB, under load)
    cpu: dict[str, float] = field(default_factory=dict)  # share of one core during the load
    load_seconds: float = 0.0

    def record(self, outcome: Outcome, context: str) -> None:
        self.counts[outcome.kind] += 1
        if outcome.unexpected:
            seen = self.examples.setdefault(outcome.kind, [])
            if len(seen) < 5:
                seen.append(f"{context}: {outcome.detail}".strip())

    @property
    def unexpected(self) -> int:
        return sum(n for kind, n in self.counts.items() if Outcome(kind).unexpected)


@dataclass(frozen=True)
class RequestPlan:
    """One request, decided before it is sent: what to ask for and what the client will do."""

    stream: bool
    fault: str | None
    disconnect_after: int | None  # pieces to read before the client closes; None = read to the end
    headers: dict[str, str]
    trace_on: bool

    def describe(self, started: float) -> str:
        shown = (k for k in self.headers if k not in ("Content-Type", "Authorization"))
        control = ", ".join(f"{k}: {self.headers[k]}" for k in shown)
        kind = "stream" if self.stream else "non-stream"
        return f"t={started:.1f}s {kind} [{control}]"


def plan_request(rng: random.Random, cfg: SoakConfig, *, stream: bool) -> RequestPlan:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-soak-not-a-key"}
    # A spread of the proxy's control headers, all valid, so rewrite, trace and hiding run too.
    trace = rng.choice((None, None, "detailed", "off"))
    for name, value in (
        ("X-Trace", trace),
        ("X-Trace-Format", rng.choice((None, None, "event"))),
        ("X-Thinking-Level", rng.choice((None, "off", "standard", "deep"))),
        ("X-Reasoning", rng.choice((None, None, None, "hide"))),
    ):
        if value is not None:
            headers[name] = value
    fault = rng.choice(FAULTS) if rng.random() < cfg.fault_rate else None
    if fault is not None:
        headers["X-Mock-Fault"] = fault
    disconnect_after = None
    if stream and fault is None and rng.random() < cfg.disconnect_rate:
        disconnect_after = rng.randint(1, 4)
        if rng.random() < 0.5:
            headers["X-Mock-Pace-Ms"] = f"{cfg.slow_pace_ms:g}"
    return RequestPlan(stream, fault, disconnect_after, headers, trace_on=trace != "off")


@dataclass
class Progress:
    """Where one in-flight request is (times from the start of the load)."""

    plan: RequestPlan
    started: float
    status: int = 0  # 0 until the response headers came
    headers_at: float | None = None
    first_byte_at: float | None = None
    last_byte_at: float | None = None


def describe_unfinished(unfinished: list[Progress], now: float) -> list[str]:
    waiting = [p for p in unfinished if p.headers_at is None]
    reading = [p for p in unfinished if p.headers_at is not None]
    lines = []
    if waiting:
        oldest = now - min(p.started for p in waiting)
        lines.append(f"{len(waiting)} still waiting for response headers (longest for {oldest:.1f} s)")
    if reading:
        silence = max(now - (p.last_byte_at or p.headers_at or p.started) for p in reading)
        lines.append(f"{len(reading)} receiving a body (longest silence {silence:.1f} s)")
    lines += [p.plan.describe(p.started) for p in unfinished[:3]]
    return lines


def judge(plan: RequestPlan, status: int, pieces: list[bytes]) -> Outcome:
    """The outcome of a request whose response was read (to its end, or as far as the plan said)."""
    whole = b"".join(pieces)
    cut = plan.disconnect_after is not None and len(pieces) >= plan.disconnect_after
    if cut and status == 200 and b"data: [DONE]" not in whole:
        return Outcome("client_disconnect")
    # (A busy proxy may have sent a whole stream in the pieces read before leaving: judged whole.)
    if plan.stream:
        return classify_stream(status, whole, plan.fault, plan.trace_on)
    return classify_json(status, whole, plan.fault, plan.trace_on)


def request_body(stream: bool, usage: bool) -> bytes:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Why is the sky blue?"}]}
    if stream:
        body["stream"] = True
        if usage:
            body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


class LoadRunner:
    """Drives the load against one proxy and collects `LoadStats`."""

    def __init__(self, cfg: SoakConfig, ports: dict[str, int], pids: dict[str, int]) -> None:
        self.cfg = cfg
        self.url = f"http://127.0.0.1:{ports['proxy']}{CHAT_PATH}"
        self.ports = ports
        self.pids = pids
        self.rng = random.Random(cfg.seed)
        self.stats = LoadStats()
        self.stop = asyncio.Event()
        self.t0 = 0.0
        self.inflight: dict[int, Progress] = {}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    async def one_request(self, session: aiohttp.ClientSession, plan: RequestPlan) -> None:
        progress = Progress(plan, self.now())
        self.inflight[id(progress)] = progress
        self.stats.open_streams += plan.stream
        try:
            outcome = await self.exchange(session, progress)
        except TimeoutError:
            outcome = Outcome(
                "client_read_timeout", f"status {progress.status}, silent for {READ_TIMEOUT_S:g} s"
            )
        except aiohttp.ClientError as exc:
            outcome = Outcome("proxy_connection_error", f"status {progress.status}: {exc!r}")
        except Exception as exc:  # anything else is still one request's outcome, not a dead client
            outcome = Outcome("client_exception", f"status {progress.status}: {exc!r}")
        finally:
            del self.inflight[id(progress)]
            self.stats.open_streams -= plan.stream
        elapsed = self.now() - progress.started
        if outcome.kind == "stream_done":
            self.stats.stream_total.append(elapsed)
            if progress.first_byte_at is not None:
                self.stats.stream_ttfb.append(progress.first_byte_at - progress.started)
        elif outcome.kind == "json_ok":
            self.stats.json_latency.append(elapsed)
        self.stats.record(outcome, plan.describe(progress.started))

    async def exchange(self, session: aiohttp.ClientSession, progress: Progress) -> Outcome:
        plan = progress.plan
        pieces: list[bytes] = []
        body = request_body(plan.stream, usage=self.rng.random() < 0.5)
        async with session.post(self.url, data=body, headers=plan.headers) as resp:
            progress.status, progress.headers_at = resp.status, self.now()
            async for piece in resp.content.iter_any():
                progress.last_byte_at = self.now()
                progress.first_byte_at = progress.first_byte_at or progress.last_byte_at
                pieces.append(piece)
                if plan.disconnect_after is not None and len(pieces) >= plan.disconnect_after:
                    resp.close()  # drops the connection: the proxy sees its client leave
                    break
        if plan.stream:
            self.stats.sse_events += b"".join(pieces).count(b"data:")
        return judge(plan, progress.status, pieces)

    async def stream_client(self, session: aiohttp.ClientSession) -> None:
        await asyncio.sleep(self.rng.random() * min(1.0, self.cfg.duration / 4))  # ramp up, not a herd
        while not self.stop.is_set():
            await self.one_request(session, plan_request(self.rng, self.cfg, stream=True))

    async def json_generator(self, session: aiohttp.ClientSession, tasks: set[asyncio.Task[None]]) -> None:
        if self.cfg.json_rps <= 0:
            return
        interval = 1.0 / self.cfg.json_rps
        due = self.now()
        while not self.stop.is_set():
            if len(tasks) < JSON_MAX_INFLIGHT:
                task = asyncio.create_task(
                    self.one_request(session, plan_request(self.rng, self.cfg, stream=False))
                )
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            else:
                self.stats.json_skipped += 1
            due = max(due + interval, self.now() - 1.0)  # behind by more than 1 s: do not burst
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), max(0.0, due - self.now()))

    async def sample(self) -> None:
        """Every second: the proxy's RSS, how many streams are open, the proxy's sockets."""
        while True:
            with contextlib.suppress(OSError):
                self.stats.rss.append((self.now(), rss_kib(self.pids["proxy"]), not self.stop.is_set()))
                self.sample_sockets()
            self.stats.open_samples.append(self.stats.open_streams)
            await asyncio.sleep(1.0)

    def sample_sockets(self) -> None:
        upstream = clients = 0
        for s in process_sockets(self.pids["proxy"]):
            if s.remote_port == self.ports["mock"]:
                upstream += 1
            elif s.local_port == self.ports["proxy"]:
                if s.state_name == "LISTEN":  # a listening socket's rx queue is its accept queue
                    self.stats.accept_queue_max = max(self.stats.accept_queue_max, s.rx_queue)
                else:
                    clients += 1
        self.stats.upstream_sockets_max = max(self.stats.upstream_sockets_max, upstream)
        self.stats.client_sockets_max = max(self.stats.client_sockets_max, clients)

    async def run(self, drain_s: float) -> LoadStats:
        cfg = self.cfg
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=READ_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            self.t0 = time.perf_counter()
            cpu0 = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
            self_cpu0 = time.process_time()
            sampler = asyncio.create_task(self.sample())
            json_tasks: set[asyncio.Task[None]] = set()
            clients = [asyncio.create_task(self.stream_client(session)) for _ in range(cfg.streams)]
            generator = asyncio.create_task(self.json_generator(session, json_tasks))
            await asyncio.sleep(cfg.duration)
            self.stop.set()
            self.stats.load_seconds = self.now()
            for name, pid in self.pids.items():
                self.stats.cpu[name] = (cpu_seconds(pid) - cpu0[name]) / self.stats.load_seconds
            self.stats.cpu["load generator"] = (time.process_time() - self_cpu0) / self.stats.load_seconds
            await generator
            pending = [*clients, *json_tasks]
            _, late = await asyncio.wait(pending, timeout=drain_s) if pending else (set(), set())
            if self.inflight:
                unfinished = list(self.inflight.values())
                self.stats.counts["unfinished_at_deadline"] += len(unfinished)
                self.stats.examples["unfinished_at_deadline"] = [
                    f"{len(unfinished)} requests still running {drain_s:.0f} s after the load stopped:",
                    *describe_unfinished(unfinished, self.now()),
                ]
            for task in late:
                task.cancel()
            for task in late:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        return self.stats


# --- the whole run -----------------------------------------------------------------------------


def is_problem_line(line: str) -> bool:
    """A traceback or an error-level line: uvicorn's `ERROR: …`, the proxy's `<time> error <logger>: …`."""
    first_words = line.split(maxsplit=2)[:2]
    return (
        "Traceback" in line
        or line.startswith(("ERROR", "CRITICAL"))
        or any(w in ("error", "critical") for w in first_words)
    )


@dataclass
class ProxyLog:
    """What the proxy's log says: access lines, their `error=` values, and any error lines."""

    access_lines: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # access-log error= values
    problems: list[str] = field(default_factory=list)  # tracebacks and ERROR lines, first few

    @classmethod
    def scan(cls, path: Path) -> ProxyLog:
        log = cls()
        if not path.exists():
            return log
        for line in path.read_text(errors="replace").splitlines():
            if " method=" in f" {line}":
                log.access_lines += 1
                for part in line.split():
                    if part.startswith("error="):
                        log.errors[part[6:]] += 1
            elif is_problem_line(line) and len(log.problems) < 20:
                log.problems.append(line[:300])
        return log


@dataclass
class SoakResult:
    """One run's findings; `failures()` lists what makes it fail (empty = pass)."""

    config: SoakConfig
    stats: LoadStats
    connections: ConnectionReport
    proxy_log: ProxyLog
    rss_idle_kib: int
    rss_after_idle_kib: int
    log_dir: Path
    phases: dict[str, float]  # seconds spent in startup, load, drain, idle, check, stop

    @property
    def rss_warmup_kib(self) -> int:
        under_load = [(t, kib) for t, kib, loaded in self.stats.rss if loaded]
        after = [kib for t, kib in under_load if t >= self.config.effective_warmup]
        return after[0] if after else (under_load[-1][1] if under_load else 0)

    @property
    def rss_end_kib(self) -> int:
        under_load = [kib for _, kib, loaded in self.stats.rss if loaded]
        return under_load[-1] if under_load else 0

    @property
    def rss_peak_kib(self) -> int:
        return max([kib for _, kib, _ in self.stats.rss] + [self.rss_idle_kib, self.rss_after_idle_kib])

    @property
    def rss_flat(self) -> bool:
        return self.rss_warmup_kib > 0 and self.rss_end_kib <= self.rss_warmup_kib * RSS_GROWTH_LIMIT

    def failures(self) -> list[str]:
        out = []
        if self.stats.unexpected:
            out.append(f"{self.stats.unexpected} UNEXPECTED outcomes")
        if not self.rss_flat:
            out.append("proxy RSS not flat after warm-up")
        if not self.connections.ok:
            out.append("leaked in-flight upstream responses")
        return out


def run_soak(cfg: SoakConfig, *, keep_logs: bool = False) -> SoakResult:
    """Start the upstream and the proxy, drive the load, check; the children never outlive it."""
    started = time.monotonic()
    hard_deadline = started + cfg.duration + WALL_MARGIN_S - SHUTDOWN_RESERVE_S
    raise_nofile_limit()
    log_dir = Path(tempfile.mkdtemp(prefix="thinkproxy-soak-"))
    phases: dict[str, float] = {}
    ok = False

    def lap(name: str) -> None:
        phases[name] = time.monotonic() - started - sum(phases.values())

    try:
        with Children(log_dir) as children:
            mock_port = start_mock(children, cfg.pace_ms)
            proxy_port = start_proxy(children, mock_port, cfg.transport)
            children.wait_listening("mock", mock_port)
            children.wait_listening("proxy", proxy_port)
            pids = {"proxy": children.procs["proxy"][0].pid, "mock": children.procs["mock"][0].pid}
            rss_idle = rss_kib(pids["proxy"])
            lap("startup")
            # Whatever startup took, drain and idle must fit in what is left of the budget.
            left = hard_deadline - time.monotonic() - cfg.duration
            idle_s = max(0.5, min(cfg.idle_s, left / 3))
            drain_s = max(1.0, min(cfg.drain_s, left - idle_s - 1.0))
            runner = LoadRunner(cfg, {"proxy": proxy_port, "mock": mock_port}, pids)
            stats = asyncio.run(runner.run(drain_s))
            phases["load"] = stats.load_seconds
            lap("drain")
            time.sleep(idle_s)
            lap("idle")
            connections = connection_report(pids["proxy"], proxy_port, pids["mock"], mock_port)
            rss_after = rss_kib(pids["proxy"])
            lap("check")
        lap("stop")
        result = SoakResult(
            cfg,
            stats,
            connections,
            ProxyLog.scan(log_dir / "proxy.log"),
            rss_idle,
            rss_after,
            log_dir,
            phases,
        )
        ok = not result.failures()
        return result
    finally:
        if ok and not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:  # something went wrong (or keeping was asked for): the children's logs explain it
            print(f"children's logs kept in {log_dir}", file=sys.stderr)


# --- reporting ---------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.0f} ms"


def _spread(values: list[float]) -> str:
    return f"p50 {_pct(values, 0.5)}, p99 {_pct(values, 0.99)}, max {_pct(values, 1.0)}"


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def _states(counter: Counter[str]) -> str:
    inside = ", ".join(f"{state} {n}" for state, n in sorted(counter.items())) or "none"
    return f"{sum(counter.values())} ({inside})"


def outcome_class(kind: str) -> str:
    return "completed" if kind in COMPLETED else "expected" if kind in EXPECTED else "UNEXPECTED"


def outcome_table(stats: LoadStats) -> list[str]:
    order = {"completed": 0, "expected": 1, "UNEXPECTED": 2}
    rows = sorted(stats.counts.items(), key=lambda kv: (order[outcome_class(kv[0])], kv[0]))
    lines = [f"  {'outcome':<30}{'class':<12}{'count':>8}"]
    lines += [f"  {kind:<30}{outcome_class(kind):<12}{n:>8}" for kind, n in rows]
    lines.append(f"  {'total requests':<42}{sum(stats.counts.values()):>8}")
    for kind, examples in stats.examples.items():
        lines.append(f"  UNEXPECTED {kind}, e.g.:")
        lines += [f"    {e}" for e in examples]
    return lines


def load_lines(cfg: SoakConfig, stats: LoadStats) -> list[str]:
    secs = stats.load_seconds or cfg.duration
    skipped = f" ({stats.json_skipped} not sent: too many in flight)" if stats.json_skipped else ""
    mean_open = statistics.fmean(stats.open_samples) if stats.open_samples else 0.0
    cpu = ", ".join(f"{name} {share:.0%}" for name, share in stats.cpu.items())
    return [
        f"  throughput      {stats.counts['stream_done'] / secs:.0f} streams/s completed, "
        f"{stats.sse_events / secs:.0f} SSE events/s, "
        f"{stats.counts['json_ok'] / secs:.1f} non-stream/s{skipped}",
        f"  open streams    mean {mean_open:.0f}, max {max(stats.open_samples, default=0)} "
        f"(of {cfg.streams} clients)",
        f"  stream TTFB     {_spread(stats.stream_ttfb)}",
        f"  whole stream    {_spread(stats.stream_total)}",
        f"  non-stream      {_spread(stats.json_latency)}",
        f"  proxy sockets   max {stats.client_sockets_max} from clients, {stats.upstream_sockets_max} to the "
        f"upstream; accept queue max {stats.accept_queue_max} (sampled every second)",
        f"  CPU during load {cpu} (100% = one core); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
    ]


def memory_lines(result: SoakResult) -> list[str]:
    ratio = result.rss_end_kib / max(1, result.rss_warmup_kib)
    return [
        f"  proxy RSS       idle {_mib(result.rss_idle_kib)}, "
        f"warm-up ({result.config.effective_warmup:g} s) {_mib(result.rss_warmup_kib)}, "
        f"peak {_mib(result.rss_peak_kib)}, end of load {_mib(result.rss_end_kib)}, "
        f"after idle {_mib(result.rss_after_idle_kib)}",
        f"  flat after warm-up: {'yes' if result.rss_flat else 'NO'} "
        f"(end of load / warm-up = {ratio:.2f}, limit {RSS_GROWTH_LIMIT:.2f})",
    ]


def connection_lines(conns: ConnectionReport) -> list[str]:
    inflight = str(conns.mock_inflight) if conns.mock_inflight >= 0 else "unknown"
    return [
        "  connections once the clients had gone and the proxy sat idle:",
        f"    proxy -> upstream      {_states(conns.proxy_to_upstream)}; "
        f"with unread response bytes {conns.proxy_unread}, with unsent request bytes {conns.proxy_unsent}",
        f"    upstream side          {_states(conns.mock_side)}; responses still in flight {inflight}; "
        f"accept queue {conns.mock_accept_queue}",
        f"    proxy sockets the upstream has not accepted: {conns.unpaired}",
        f"    clients -> proxy       {conns.proxy_client_side}",
        f"    leaked in-flight       {conns.leaked}",
    ]


def format_summary(result: SoakResult) -> str:
    cfg = result.config
    log = result.proxy_log
    errors = ", ".join(f"{k} {v}" for k, v in log.errors.most_common()) or "none"
    phases = ", ".join(f"{name} {secs:.1f} s" for name, secs in result.phases.items())
    lines = [
        f"thinkproxy soak: {cfg.streams} streams x {cfg.duration:g} s, pace {cfg.pace_ms:g} ms, "
        f"{cfg.json_rps:g} non-stream/s, disconnects {cfg.disconnect_rate:.0%}, "
        f"faults {cfg.fault_rate:.0%}, transport {cfg.transport}",
        "",
        *outcome_table(result.stats),
        "",
        *load_lines(cfg, result.stats),
        "",
        *memory_lines(result),
        "",
        *connection_lines(result.connections),
        "",
        f"  proxy log       {log.access_lines} access lines; error= {errors}; "
        f"traceback / ERROR lines {len(log.problems)}",
        *[f"    {line}" for line in log.problems[:10]],
        f"  phases          {phases}",
    ]
    failures = result.failures()
    lines += ["", "  verdict         " + ("PASS" if not failures else "FAIL: " + "; ".join(failures))]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--streams", type=int, default=500, help="concurrent stream clients")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    p.add_argument("--pace-ms", type=float, default=20.0, help="upstream delay between chunks")
    p.add_argument("--json-rps", type=float, default=20.0, help="non-stream requests per second")
    p.add_argument("--disconnect-rate", type=float, default=0.05, help="share of streams the client cuts")
    p.add_argument("--fault-rate", type=float, default=0.04, help="share of requests with an X-Mock-Fault")
    p.add_argument("--transport", choices=("aiohttp", "httpx"), default="aiohttp")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-logs", action="store_true", help="keep the children's logs even on success")
    # Internal: how this script runs the simulated upstream in a child process.
    p.add_argument("--serve-mock", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve_mock is not None:
        serve_mock(args.serve_mock, args.pace_ms)
        return 0

    def on_sigterm(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through run_soak, which stops the children

    signal.signal(signal.SIGTERM, on_sigterm)
    cfg = SoakConfig(
        streams=args.streams,
        duration=args.duration,
        pace_ms=args.pace_ms,
        json_rps=args.json_rps,
        disconnect_rate=args.disconnect_rate,
        fault_rate=args.fault_rate,
        transport=args.transport,
        seed=args.seed,
    )
    started = time.monotonic()
    try:
        result = run_soak(cfg, keep_logs=args.keep_logs)
    except KeyboardInterrupt:
        print("interrupted; children stopped", file=sys.stderr)
        return 130
    print(format_summary(result))
    print(f"  wall time       {time.monotonic() - started:.1f} s")
    return 1 if result.failures() else 0


if __name__ == "__main__":
    raise SystemExit(main())
