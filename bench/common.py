"""Shared by the bench scripts: child processes, free ports, /proc readers, request payloads.

Every server the bench starts goes through `Processes`, which puts each child in its own process
group and kills the groups on close — also when the runner is interrupted (Ctrl-C, SIGTERM) or
fails — so no server outlives a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
PAYLOADS = BENCH_DIR / "payloads"
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def payload(stream: bool, door: str = "chat") -> bytes:
    """A request body of `door` ("chat", "responses" or "messages", the same question each way)."""
    name = f"{door}_stream.json" if stream else f"{door}_nonstream.json"
    return (PAYLOADS / name).read_bytes().strip()


async def post_in_process(app: Any, scope: dict[str, Any], body: bytes, what: str) -> None:
    """One POST through an ASGI app in this process, as a server hands it over: the body in one
    message and a client that never leaves. Anything but a 200 stops the run: the count would not
    be `what`'s (a request's, a turn's)."""
    sent = False
    status = 0

    async def receive() -> dict[str, object]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    async def send(message: dict[str, object]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])  # type: ignore[call-overload]

    await app(scope, receive, send)
    if status != 200:
        raise SystemExit(f"the proxy answered {status}, not 200: the count would not be {what}")


def request_headers(scenario: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Authorization": "Bearer sk-bench-not-a-key",
        "X-Bench-Scenario": scenario,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pin_argv(core: int | None, argv: list[str]) -> list[str]:
    """Prefix argv with `taskset -c core` when pinning is possible (None = no pinning)."""
    if core is None or shutil.which("taskset") is None:
        return argv
    return ["taskset", "-c", str(core), *argv]


def can_pin() -> bool:
    return (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None


class Processes:
    """Children each in their own process group; `close()` ends them all (TERM, then KILL)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    def start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
        self.children.append((name, proc, log))
        return proc

    def returncode(self, name: str) -> int | None:
        """Exit code of the child called `name` (negative: killed by that signal), None if running."""
        for child, proc, _ in self.children:
            if child == name:
                return proc.poll()
        return None

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, pid: int) -> None:
        """End one child (TERM, then KILL after 5 s) before the others."""
        for _, proc, _ in self.children:
            if proc.pid == pid:
                _end_groups([proc])

    def close(self) -> None:
        _end_groups([proc for _, proc, _ in self.children])
        for _, _, log in self.children:
            log.close()
        self.children.clear()


def _end_groups(procs: list[subprocess.Popen[bytes]]) -> None:
    """TERM each running child's process group, then KILL those still there after 5 s."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# A throughput measurement whose target used less of its core than this was limited by something
# else (the load generator, the upstream): it is no result.
SATURATED_PCT = 90.0


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Ask a server to stop, and kill it if it has not within 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_idle(pids: list[int], limit: float) -> float:
    """Wait (at most `limit` s) until none of `pids` burns CPU any more; the seconds waited."""
    start = time.monotonic()
    before = sum(cpu_seconds(p) for p in pids)
    while time.monotonic() - start < limit:
        time.sleep(0.2)
        now = sum(cpu_seconds(p) for p in pids)
        if now - before <= 0.02:  # ≤ 2 clock ticks in 200 ms: idle
            break
        before = now
    return time.monotonic() - start


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so `finally:` blocks (which kill the children) run."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on port {port} after {timeout:.0f} s")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def post(port: int, scenario: str, stream: bool, timeout: float = 15.0) -> Reply:
    """One blocking POST (http.client decodes chunked bodies); used for the correctness checks."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        start = time.perf_counter()
        conn.request("POST", CHAT_PATH, body=payload(stream), headers=request_headers(scenario))
        resp = conn.getresponse()
        body = resp.read()
        return Reply(
            resp.status, {k.lower(): v for k, v in resp.getheaders()}, body, time.perf_counter() - start
        )
    finally:
        conn.close()


def get_json_stats(port: int) -> dict[str, int]:
    import json

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/__stats")
        data: dict[str, int] = json.loads(conn.getresponse().read())
        return data
    finally:
        conn.close()


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (a server may fork workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process tree, from /proc/<pid>/stat (all threads, live and exited)."""
    total = 0
    for p in process_tree(pid):
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), 1-based
    return total / CLK_TCK


def cpu_seconds_exact(pid: int) -> float:
    """The time the process tree's live threads have run, in nanoseconds' resolution: the sum of
    their /proc/<pid>/task/<tid>/schedstat (its first field, the scheduler's own count).

    For short blocks: cpu_seconds counts clock ticks (10 ms), so a block of ~100 ms of CPU reads
    ±10%; this does not. It leaves out threads that have exited (cpu_seconds counts them), so it
    suits a process whose threads live as long as the measurement, as a served proxy's do."""
    total = 0
    for p in process_tree(pid):
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def rss_bytes(pid: int) -> int:
    total = 0
    for p in process_tree(pid):
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE_SIZE
        except OSError:
            continue
    return total


def core_times() -> list[tuple[float, float, float]]:
    """Per core (busy, steal, total) seconds since boot, from /proc/stat.

    busy excludes steal; steal is time the hypervisor gave this core's slot to another guest.
    """
    out = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            v = [int(x) for x in line.split()[1:]]
            idle, steal = v[3] + v[4], v[7]
            total = sum(v[:8])
            out.append(((total - idle - steal) / CLK_TCK, steal / CLK_TCK, total / CLK_TCK))
    return out


def machine(
    cpuinfo: Path = Path("/proc/cpuinfo"), caches_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")
) -> str:
    """The CPU a figure was measured on, e.g. "AMD EPYC, 2 CPUs, L1d 32 KiB, L1i 32 KiB, L2 1 MiB,
    L3 32 MiB" (the caches core 0 sees; "unknown CPU" where /proc/cpuinfo names no model, as on
    most ARM kernels).

    Paired figures cancel the machine's speed, not its kind: the same two trees paired on two
    machines have differed by several points (bench/README.md, "The same pairs on another CPU"),
    so every paired table says which CPU it came from."""
    try:
        info = cpuinfo.read_text(errors="replace").splitlines()
    except OSError:
        info = []
    models = [line.partition(":")[2].strip() for line in info if line.startswith("model name")]
    caches = []
    for index in sorted(caches_dir.glob("index*"), key=lambda path: (len(path.name), path.name)):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches.append(f"{name} {cache_size(size)}")
    model = models[0] if models and models[0] else "unknown CPU"
    return ", ".join([model, f"{os.cpu_count() or '?'} CPUs", *caches])


def cache_size(sysfs: str) -> str:
    """A cache's size as sysfs writes it ("1024K") in the units a reader expects ("1 MiB")."""
    if not (sysfs.endswith("K") and sysfs[:-1].isdecimal() and sysfs[:-1].isascii()):
        return sysfs
    kib = int(sysfs[:-1])
    return f"{kib // 1024} MiB" if kib >= 1024 and kib % 1024 == 0 else f"{kib} KiB"


def python() -> str:
    return sys.executable
