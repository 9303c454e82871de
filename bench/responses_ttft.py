"""Idle time to first token through the front doors (Responses, Messages) against chat completions,
the same server.

  /work/venv/bin/python bench/responses_ttft.py [--tree DIR] [--rounds 10 -n 50]

One thinkproxy (defaults; `--tree`: a checkout, e.g. a compiled copy from compiled_tree.py) pinned
to core 0, the fake upstream on core 1, and the pass-through for reference. Each round probes the
chat door and the front doors (bridged) with `n` sequential stream requests each, in an order that
alternates between rounds. The first token is the first `data:` event of a chat stream and the
first delta event of a Responses or Messages stream (ttft.FIRST_TOKEN): the fake upstream's first
event carries the first reasoning token, and the next comes 10 ms later, so it crosses the proxy
alone.
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
    p.add_argument("--tree", type=Path, default=None, help="run thinkproxy from this checkout")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("-n", type=int, default=50, help="sequential requests per door per round")
    args = p.parse_args()
    env = {} if args.tree is None else {"PYTHONPATH": str(args.tree.resolve())}
    procs = Processes(BENCH_DIR / "results" / "logs")
    try:
        upstream = servers.start_upstream(procs, 1)
        started = servers.start_targets(
            procs, ["baseline-aiohttp", "thinkproxy"], upstream, 0, "standard", {"thinkproxy": env}
        )
        print(f"thinkproxy: {servers.probe_build(servers.clean_env() | env)}")
        probes = {
            "pass-through (chat)": (started["baseline-aiohttp"][0], "chat"),
            "thinkproxy chat": (started["thinkproxy"][0], "chat"),
            "thinkproxy responses": (started["thinkproxy"][0], "responses"),
            "thinkproxy messages": (started["thinkproxy"][0], "messages"),
        }
        samples: dict[str, list[float]] = {name: [] for name in probes}
        for r in range(args.rounds):
            for name in list(probes) if r % 2 == 0 else list(reversed(probes)):
                port, door = probes[name]
                samples[name] += ttft.run_probe(port, args.n, door=door)
        chat = statistics.median(samples["thinkproxy chat"])
        print("\n| door | samples | p50 ms | p90 ms | over thinkproxy chat, p50 |")
        print("|---|---|---|---|---|")
        for name, got in samples.items():
            p50, p90 = statistics.median(got), ttft.percentile(got, 0.9)
            print(f"| {name} | {len(got)} | {p50:.2f} | {p90:.2f} | {p50 - chat:+.2f} ms |")
    finally:
        procs.close()


if __name__ == "__main__":
    main()
