"""Idle time to first token of two checkouts (say pure and compiled), many samples, interleaved.

  /work/venv/bin/python bench/ttft_builds.py /tmp/pure /tmp/compiled [--rounds 10 -n 50]

run.py's TTFT cell is 40 sequential requests per round: its p50 moves by ±0.1–0.2 ms between runs
on this VM, as much as the goal's margin (≤ +0.5 ms over the pass-through). This takes
`rounds × n` samples per target, in rounds whose order alternates, for the pass-through and for
each checkout with its defaults and with its quiet variant (servers.THINKPROXY_VARIANTS), all
pinned to core 0 at idle (one request at a time) against the fake upstream on core 1. Trees come
from bench/compiled_tree.py.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import servers
import ttft
from common import BENCH_DIR, Processes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs="+", type=Path, help="checkouts to compare (PYTHONPATH of each target)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("-n", type=int, default=50, help="sequential requests per target per round")
    args = p.parse_args()
    quiet = servers.THINKPROXY_VARIANTS["thinkproxy-quiet"]
    variants: dict[str, dict[str, str]] = {}
    for tree in args.trees:
        path = {"PYTHONPATH": str(tree.resolve())}
        variants[tree.name] = path
        variants[f"{tree.name}-quiet"] = path | quiet
    procs = Processes(BENCH_DIR / "results" / "logs")
    try:
        upstream = servers.start_upstream(procs, 1)
        started = servers.start_targets(
            procs, ["baseline-aiohttp", *variants], upstream, 0, "standard", variants
        )
        ports = {"direct": upstream, **{name: port for name, (port, _pid) in started.items()}}
        for name, env in variants.items():
            print(f"{name}: {servers.probe_build(servers.clean_env() | env)}")
        samples: dict[str, list[float]] = {name: [] for name in ports}
        for r in range(args.rounds):
            for name in list(ports) if r % 2 == 0 else list(reversed(ports)):
                samples[name] += ttft.run_probe(ports[name], args.n)
        base = statistics.median(samples["baseline-aiohttp"])
        print("\n| target | samples | p50 ms | p90 ms | added over the pass-through, p50 |")
        print("|---|---|---|---|---|")
        for name, got in samples.items():
            p50 = statistics.median(got)
            p90 = ttft.percentile(got, 0.9)
            print(f"| {name} | {len(got)} | {p50:.2f} | {p90:.2f} | {p50 - base:+.2f} ms |")
    finally:
        procs.close()


if __name__ == "__main__":
    main()
