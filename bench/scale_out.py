"""Scale-out on this machine: `thinkproxy serve` with one worker against two.

One worker is pinned alone on core 0, the fake upstream and wrk on core 1 (as in run.py). Two
workers cannot have a core each *and* leave one to the load generator on a 2-core machine, so they
run unpinned, sharing both cores with wrk and the upstream: their raw throughput is bounded by
what the load generator leaves them. The comparable figure is therefore throughput **per
CPU-second of the proxy** (all its workers' utime + stime over the window): if it holds at two
workers, throughput scales with the cores given; the raw req/s show how much of a 2-core box the
load generator itself needs. Defaults a user gets (access log, brief trace, metrics in
multiprocess mode, replay store per worker), level standard.

    /work/venv/bin/python bench/scale_out.py [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen
from common import BENCH_DIR, Processes, cpu_seconds, exit_on_sigterm, free_port, pin_argv, wait_listening
from servers import clean_env, start_upstream, thinkproxy_command

SCENARIOS = {"json": ("json", 64), "burst": ("burst", 64)}


def start_proxy(
    procs: Processes, name: str, workers: int, upstream: int, core: int | None
) -> tuple[int, int]:
    command = thinkproxy_command()
    if command is None:
        raise SystemExit("thinkproxy is not installed in this venv (see bench/README.md)")
    port = free_port()
    env = clean_env()
    env.update(
        THINKPROXY_UPSTREAM_BASE_URL=f"http://127.0.0.1:{upstream}/v1",
        THINKPROXY_HOST="127.0.0.1",
        THINKPROXY_PORT=str(port),
        THINKPROXY_WORKERS=str(workers),
        THINKPROXY_DEFAULT_THINKING_LEVEL="standard",
    )
    workdir = BENCH_DIR / "results" / "cwd"
    workdir.mkdir(parents=True, exist_ok=True)
    proc = procs.start(name, pin_argv(core, command), env=env, cwd=workdir)
    wait_listening(port, proc)
    time.sleep(2.0 * workers)  # every worker up, not only the first to listen
    return port, proc.pid


def measure(
    port: int, pid: int, scenario: str, connections: int, seconds: int, core: int | None
) -> tuple[float, float]:
    """(requests per second, requests per CPU-second of the proxy's process tree)."""
    loadgen.warm(port, scenario, connections, 1.0, core)
    cpu = cpu_seconds(pid)
    result = loadgen.run(port, scenario, connections, seconds, core)
    used = cpu_seconds(pid) - cpu
    if result.errors:
        raise SystemExit(f"{scenario}: wrk saw errors {result.error_detail}")
    return result.rps, result.requests / used if used > 0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if os.cpu_count() != 2:
        print(f"note: this machine has {os.cpu_count()} cores; the figures below assume 2")
    exit_on_sigterm()
    procs = Processes(BENCH_DIR / "results" / "logs")
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    try:
        upstream = start_upstream(procs, core=1)
        one = start_proxy(procs, "scale-1-worker", 1, upstream, core=0)
        two = start_proxy(procs, "scale-2-workers", 2, upstream, core=None)
        for round_ in range(args.rounds):
            for workers, (port, pid) in ((1, one), (2, two)) if round_ % 2 == 0 else ((2, two), (1, one)):
                core = 1 if workers == 1 else None
                for label, (scenario, connections) in SCENARIOS.items():
                    rps, per_cpu = measure(port, pid, scenario, connections, args.seconds, core)
                    results.setdefault((workers, label), []).append((rps, per_cpu))
                    print(
                        f"  round {round_ + 1}: {workers} worker(s) {label}: "
                        f"{rps:,.0f} req/s, {per_cpu:,.0f} per CPU-s"
                    )
    finally:
        procs.close()
    print(
        "\n| workers | JSON c64 req/s | JSON req per CPU-s | burst c64 streams/s | burst streams per CPU-s |"
    )
    print("|---|---|---|---|---|")
    for workers in (1, 2):
        cells = []
        for label in SCENARIOS:
            runs = results[(workers, label)]
            cells += [
                f"{statistics.median(r[0] for r in runs):,.0f}",
                f"{statistics.median(r[1] for r in runs):,.0f}",
            ]
        print(f"| {workers} | " + " | ".join(cells) + " |")
    print(
        f"\n(medians of {args.rounds} rounds; one worker pinned to core 0, wrk and the upstream on core 1;"
        " two workers unpinned, sharing both cores with them)"
    )


if __name__ == "__main__":
    main()
