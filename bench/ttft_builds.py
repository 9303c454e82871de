"""Idle time to first token of two checkouts (say pure and compiled), many samples, interleaved.

  /work/venv/bin/python bench/ttft_builds.py /tmp/pure /tmp/compiled [--rounds 10 -n 50]
  /work/venv/bin/python bench/ttft_builds.py /tmp/before . --variants nostate,notrace --gap-ms 5

run.py's TTFT cell is 40 sequential requests per round: its p50 moves by ±0.1–0.2 ms between runs
on this VM, as much as the goal's margin (≤ +0.5 ms over the pass-through). This takes
`rounds × n` samples per target, in rounds whose order alternates, for the pass-through and for
each checkout with its defaults and with its quiet variant (servers.THINKPROXY_VARIANTS;
`--variants` names others instead), all pinned to core 0 at idle (one request at a time) against
the fake upstream on core 1. Trees come from bench/compiled_tree.py.

The probe sends each request the moment the answer before ended, so a target's work after an
answer (its access line, its observers: metrics, the replay capture) delays the next first token
as much as its work before the upstream is asked; `--gap-ms` waits between them, as an agent that
runs its tools between two turns does, and leaves only the latter (bench/README.md, "Round two's
figures on this machine").
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import servers
import ttft
from common import BENCH_DIR, Processes


def known_variants() -> list[str]:
    """The variants a comparison may name: servers.THINKPROXY_VARIANTS without `thinkproxy-`."""
    return [name.removeprefix("thinkproxy-") for name in servers.THINKPROXY_VARIANTS if name != "thinkproxy"]


def target_envs(trees: list[Path], variant_names: str) -> dict[str, dict[str, str]]:
    """The targets to probe, by name: each tree with its defaults (its PYTHONPATH alone), then with
    each named variant of servers.THINKPROXY_VARIANTS (`quiet,nostate`: their names without
    `thinkproxy-`) as `<tree>-<variant>`. An unknown name is a ValueError that lists the known ones."""
    known = known_variants()
    chosen = [name.strip() for name in variant_names.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}: choose among {', '.join(known)}")
    targets: dict[str, dict[str, str]] = {}
    for tree in trees:
        path = {"PYTHONPATH": str(tree.resolve())}
        targets[tree.name] = path
        for name in chosen:
            targets[f"{tree.name}-{name}"] = path | servers.THINKPROXY_VARIANTS[f"thinkproxy-{name}"]
    return targets


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs="+", type=Path, help="checkouts to compare (PYTHONPATH of each target)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("-n", type=int, default=50, help="sequential requests per target per round")
    p.add_argument(
        "--variants",
        default="quiet",
        help="besides each tree's defaults, these variants of servers.THINKPROXY_VARIANTS instead of "
        "quiet (their names without `thinkproxy-`, comma-separated: "
        + ", ".join(known_variants())
        + "; empty for none), to find which default a difference in TTFT comes with",
    )
    p.add_argument(
        "--gap-ms",
        type=float,
        default=0.0,
        help="the probe waits this long after each answer before the next request (default 0: at "
        "once; then a target's work after an answer, its access line and observers, delays the next "
        "first token)",
    )
    args = p.parse_args()
    try:
        variants = target_envs(args.trees, args.variants)
    except ValueError as exc:
        p.error(str(exc))
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
                samples[name] += ttft.run_probe(ports[name], args.n, gap_ms=args.gap_ms)
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
