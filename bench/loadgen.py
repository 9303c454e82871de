"""wrk wrapper: run one load against one URL and parse the result.

The Lua scripts in bench/wrk/ build the POST (method, body, headers) and print one
`BENCH_RESULT {json}` line in wrk's `done()` hook; wrk's own `Requests/sec:` line is the
fallback. wrk counts a request only once it has read the whole response (Content-Length, or
the last chunk of a chunked stream), so a stream that never ends shows up as a timeout error.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from common import BENCH_DIR, pin_argv

WRK_DIR = BENCH_DIR / "wrk"
INSTALL_HINT = (
    "wrk is not installed: run `apt-get install -y wrk` as root (Debian package `wrk`), then retry."
)


@dataclass
class WrkResult:
    requests: int
    seconds: float
    rps: float
    errors: int
    error_detail: dict[str, int]
    lat_p50_ms: float
    lat_p99_ms: float


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def argv(port: int, scenario: str, connections: int, seconds: int, core: int | None) -> list[str]:
    return pin_argv(
        core,
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--timeout",
            "10s",
            "-s",
            str(WRK_DIR / f"{scenario}.lua"),
            f"http://127.0.0.1:{port}/v1/chat/completions",
        ],
    )


def run(port: int, scenario: str, connections: int, seconds: int, core: int | None) -> WrkResult:
    out = subprocess.run(
        argv(port, scenario, connections, seconds, core),
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=False,
    )
    return parse(out.stdout + out.stderr)


def warm(port: int, scenario: str, connections: int, seconds: float, core: int | None) -> None:
    """Load for `seconds` (fractions allowed: wrk is stopped with SIGINT); output discarded."""
    proc = subprocess.Popen(
        argv(port, scenario, connections, int(seconds) + 5, core),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(seconds)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def parse(output: str) -> WrkResult:
    match = re.search(r"^BENCH_RESULT (\{.*\})$", output, re.MULTILINE)
    if match is None:
        rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
        if rps is None:
            raise RuntimeError(f"could not parse wrk output:\n{output[-2000:]}")
        return WrkResult(0, 0.0, float(rps.group(1)), 0, {}, float("nan"), float("nan"))
    r = json.loads(match.group(1))
    detail = {k[4:]: int(v) for k, v in r.items() if k.startswith("err_")}
    seconds = r["duration_us"] / 1e6
    return WrkResult(
        requests=r["requests"],
        seconds=seconds,
        rps=r["requests"] / seconds if seconds else 0.0,
        errors=sum(detail.values()),
        error_detail=detail,
        lat_p50_ms=r["lat_p50_us"] / 1000,
        lat_p99_ms=r["lat_p99_us"] / 1000,
    )
