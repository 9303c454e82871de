"""What one feature costs, measured as a pair sharing one core at the same moment.

  /work/venv/bin/python bench/cost_pairs.py                     # every feature, ~10 min
  /work/venv/bin/python bench/cost_pairs.py --features metrics --rounds 9
  /work/venv/bin/python bench/cost_pairs.py --compare ' vs PYTHONPATH=/tmp/before'  # code A/B
  /work/venv/bin/python bench/cost_pairs.py --door responses --compare ' vs PYTHONPATH=/tmp/before'

Why a pair. On a shared VM the speed of a core moves by up to 2× from one minute to the next, so
two targets measured one after the other (bench/run.py) differ by ±20% for reasons that have
nothing to do with them; a 5% cost cannot be seen that way. Here the two builds of one comparison
— thinkproxy with the feature and without it — run at the same time, both pinned to core 0, each
driven by its own wrk (on core 1) at the same concurrency. Whatever the machine does to core 0, it
does to both at once. Each one's cost is its own CPU time (/proc) per request it completed in the
same window, and the feature's cost is the ratio of the two:

    cost = (CPU s per request, with the feature) / (CPU s per request, without) − 1

CPU per request, not requests per second: the scheduler shares the core by CPU time, so a build
that needs more per request completes fewer, and its CPU time per request says by how much
whether or not the two got exactly half each. The run checks that core 0 was busy (≥ 90%: the
pair was the bottleneck, not wrk or the upstream) and leaves out a round where it was not. Every
round starts both builds afresh (see run_pair), and which one starts first alternates.

The pair "nothing" (the same build twice) shows the method's own error: on this VM its median
stays within ±1% and single rounds within about ±5%, where measuring one build after the other
moved by ±20%. (Giving core 0 to one build at a time instead, in alternating one-second slices,
was tried and dropped: this VM's speed moves by ±15% from one second to the next, so neighbouring
slices disagreed as much as whole runs did. Only running at the same moment cancels it.)

Features: each is "thinkproxy with every default" against the same with one thing changed (see
PAIRS). The console is off by default, so its pair is the defaults with the console on against the
defaults. Results go to bench/results/cost_pairs-<time>.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import loadgen
import servers
from common import (
    BENCH_DIR,
    SATURATED_PCT,
    Processes,
    can_pin,
    core_times,
    cpu_seconds,
    exit_on_sigterm,
    machine,
    wait_idle,
)
from fake_upstream import EVENTS_PER_STREAM

RESULTS_DIR = BENCH_DIR / "results"
LIMIT_PCT = 5.0


# Gateway mode for the policy pair: the wrk scripts' Authorization is this client key.
GATEWAY_ENV = {
    "THINKPROXY_CLIENT_KEYS": "bench:sk-bench-not-a-key",
    "THINKPROXY_UPSTREAM_API_KEY": "sk-bench-upstream",
}


@dataclass(frozen=True)
class Pair:
    key: str  # its name on the command line
    feature: str
    with_env: dict[str, str]  # on top of every default
    without_env: dict[str, str]
    # The load the "with" build gets instead, per wrk script: the same build and question through
    # another front door (its cost is then that door's over chat completions).
    with_scripts: dict[str, str] = field(default_factory=dict)
    without_scripts: dict[str, str] = field(default_factory=dict)


PAIRS = [
    Pair("log", "access log", {}, {"THINKPROXY_LOG_LEVEL": "warning"}),
    Pair("metrics", "metrics", {}, {"THINKPROXY_METRICS": "false"}),
    Pair("state", "replay store", {}, {"THINKPROXY_STATE": "off"}),
    Pair("console", "console (on, nobody watching)", {"THINKPROXY_UI": "true"}, {}),
    Pair("trace", "brief trace", {}, {"THINKPROXY_TRACE": "off"}),
    # A/A: the same build twice. Its "cost" is the method's own bias and noise; a feature's figure
    # means something only well outside it.
    Pair("same", "nothing (the same build twice)", {}, {}),
    # Not a default: the Responses front door (bridged) against chat completions, same build.
    Pair(
        "responses",
        "the Responses door over chat completions",
        {},
        {},
        {"json": "responses_json", "burst": "responses_burst", "paced": "responses_paced"},
    ),
    # Not a default: the Anthropic Messages front door (bridged) against chat completions.
    Pair(
        "messages",
        "the Messages door over chat completions",
        {},
        {},
        {"json": "messages_json", "burst": "messages_burst", "paced": "messages_paced"},
    ),
    # Not a default: a chat request with a tool and a level to OpenAI gpt-5.4, over the upstream's
    # Responses API (decoded back to chat chunks) against over chat completions; the providers
    # files make the fake upstream the `openai` entry, one with each chat_tools_with_reasoning.
    Pair(
        "chat_over_responses",
        "chat over the Responses API (tools + level) over chat completions",
        {"THINKPROXY_PROVIDERS_FILE": str(RESULTS_DIR / "providers-responses.yaml")},
        {"THINKPROXY_PROVIDERS_FILE": str(RESULTS_DIR / "providers-chat.yaml")},
        {"burst": "tools_burst"},
        {"burst": "tools_burst"},
    ),
    # Not a default: the thinking policy (a ceiling and a budget for the bench's client key, read
    # before and written after every request) against the same gateway without a policy file.
    Pair(
        "policy",
        "thinking policy (ceiling + budget, in-process counts)",
        {**GATEWAY_ENV, "THINKPROXY_POLICY_FILE": str(RESULTS_DIR / "policy-bench.yaml")},
        GATEWAY_ENV,
    ),
]
PAIR_KEYS = {pair.key: pair for pair in PAIRS}
# Measured when named: not features one turns off.
NOT_DEFAULTS = {"responses", "messages", "chat_over_responses", "policy"}


def write_providers_files() -> None:
    """The two providers files of the chat_over_responses pair: the shipped one with the fake
    upstream (`127.0.0.1/v1`) matched as OpenAI, with chat_tools_with_reasoning responses or chat."""
    text = (BENCH_DIR.parent / "providers.yaml").read_text(encoding="utf-8")
    text = text.replace("match: [api.openai.com]", "match: [api.openai.com, 127.0.0.1/v1]")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "providers-responses.yaml").write_text(text, encoding="utf-8")
    chat = text.replace("chat_tools_with_reasoning: responses", "chat_tools_with_reasoning: chat")
    (RESULTS_DIR / "providers-chat.yaml").write_text(chat, encoding="utf-8")
    # The policy pair's file: a ceiling above what is asked (checked, never applied) and a budget
    # too large to be spent, so every request reads it and every answer adds to it.
    policy = "keys:\n  bench: {max_level: deep, reasoning_tokens: {limit: 1000000000000, per: day}}\n"
    (RESULTS_DIR / "policy-bench.yaml").write_text(policy, encoding="utf-8")


# (key, wrk script, connections per target, unit of one request)
# paced_c32 (one event every 5 ms) is off by default: one build alone uses ~60% of a core at 32
# streams, so it is the pair together that saturates core 0 (`--scenarios paced_c32`), where the
# core is slower; on a faster one a build uses ~40% there and no round saturates, and paced_c64
# (twice the streams) does for the pure build (for the compiled one, only some rounds).
SCENARIOS = [
    ("json_c32", "json", 32, "request"),
    ("burst_c32", "burst", 32, "stream"),
    ("paced_c32", "paced", 32, "stream"),
    ("paced_c64", "paced", 64, "stream"),
    # (few connections: whether a difference between two builds depends on how many requests
    # are in flight at once, their working sets interleaved on one core)
    ("json_c2", "json", 2, "request"),
    ("burst_c2", "burst", 2, "stream"),
]
DEFAULT_SCENARIOS = "json_c32,burst_c32"


def start_pair(
    procs: Processes, pair: Pair, upstream_port: int, level: str, swap: bool
) -> dict[str, tuple[int, int]]:
    """The two builds, both pinned to core 0: {"with": (port, pid), "without": (port, pid)}.
    `swap`: start the one without the feature first."""
    variants = {"pair-with": pair.with_env, "pair-without": pair.without_env}
    if swap:
        variants = dict(reversed(variants.items()))
    up = servers.start_targets(procs, list(variants), upstream_port, 0, level, variants)
    if len(up) != 2:
        raise RuntimeError(f"{pair.feature}: a build did not start (see bench/results/logs/)")
    return {"with": up["pair-with"], "without": up["pair-without"]}


def measure_together(
    builds: dict[str, tuple[int, int]],
    scripts: dict[str, str],
    connections: int,
    seconds: int,
    order: list[str],
) -> dict[str, Any]:
    """Both builds loaded at once, each by its own wrk on core 1; CPU and requests of each."""
    pids = {name: pid for name, (_, pid) in builds.items()}
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
    cores0 = core_times()
    t0 = time.monotonic()
    running = {
        name: subprocess.Popen(
            loadgen.argv(builds[name][0], scripts[name], connections, seconds, 1),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in order  # who starts first alternates between rounds
    }
    outputs = {name: proc.communicate(timeout=seconds + 30)[0] for name, proc in running.items()}
    wall = time.monotonic() - t0
    cores1 = core_times()
    busy0, _, total0 = cores0[0]
    busy1, _, total1 = cores1[0]
    out: dict[str, Any] = {
        "wall_s": wall,
        "core0_busy_pct": 100 * (busy1 - busy0) / max(total1 - total0, 1e-9),
    }
    for name, text in outputs.items():
        r = loadgen.parse(text)
        cpu = cpu_seconds(pids[name]) - cpu0[name]
        out[name] = {
            "requests": r.requests,
            "errors": r.errors,
            "cpu_s": cpu,
            "cpu_pct": 100 * cpu / wall,
            "cpu_us_per_request": 1e6 * cpu / r.requests if r.requests else None,
        }
    return out


def cost_pct(m: dict[str, Any]) -> float | None:
    a, b = m["with"]["cpu_us_per_request"], m["without"]["cpu_us_per_request"]
    if a is None or b is None or m["with"]["errors"] or m["without"]["errors"]:
        return None
    return 100 * (a / b - 1)


def custom_pair(text: str) -> Pair:
    """`K=V,K=V vs K=V` → a pair: the settings before `vs` against those after it."""
    if len(text.split(" vs ")) != 2:
        raise ValueError(f"--compare {text!r}: expected 'WITH vs WITHOUT', e.g. 'THINKPROXY_UI=true vs '")

    def env(side: str) -> dict[str, str]:
        out = {}
        for item in filter(None, side.split(",")):
            key, eq, value = item.partition("=")
            if not eq or not (key.startswith("THINKPROXY_") or key == "PYTHONPATH"):
                problem = f"{item!r} is not THINKPROXY_NAME=value or PYTHONPATH=DIR"
                raise ValueError(f"--compare {text!r}: {problem}")
            out[key] = value
        return out

    with_side, without_side = (side.strip() for side in text.split(" vs "))
    return Pair("compare", text, env(with_side), env(without_side))


def run_pair(
    pair: Pair,
    args: argparse.Namespace,
    scenarios: list[tuple[str, str, int, str]],
    upstream_port: int,
    procs: Processes,
) -> dict[str, Any]:
    """Each round starts the two builds afresh. A process's speed depends a little on where its
    code and data landed in memory; with one pair of processes for the whole run the same build
    twice differed by up to ±2.5% (JSON), always in the same direction within the run. New
    processes every round make that a random error the median over rounds takes out."""
    measured: dict[str, list[dict[str, Any]]] = {key: [] for key, *_ in scenarios}
    for i in range(args.rounds):
        builds = start_pair(procs, pair, upstream_port, args.level, swap=i % 2 == 1)
        pids = [pid for _, pid in builds.values()]
        order = ["with", "without"] if i % 2 == 0 else ["without", "with"]
        try:
            for key, script, conns, _ in scenarios:
                scripts = {
                    "with": pair.with_scripts.get(script, script),
                    "without": pair.without_scripts.get(script, script),
                }
                for name in order:  # warm both: connection pools, caches, the first GC passes
                    loadgen.warm(builds[name][0], scripts[name], conns, args.warm, 1)
                wait_idle(pids, 10.0)  # (streams cut by the warm-up wind down)
                m = measure_together(builds, scripts, conns, args.seconds, order)
                m["cost_pct"] = cost_pct(m)
                m["saturated"] = m["core0_busy_pct"] >= SATURATED_PCT
                measured[key].append(m)
        finally:
            for pid in pids:  # this round is done: its two builds leave core 0 to the next
                procs.stop(pid)
    result: dict[str, Any] = {"feature": pair.feature, "scenarios": {}}
    for key, _, _, unit in scenarios:
        rounds = measured[key]
        costs = [m["cost_pct"] for m in rounds if m["cost_pct"] is not None and m["saturated"]]
        per_req = {
            side: statistics.median(
                m[side]["cpu_us_per_request"] for m in rounds if m[side]["cpu_us_per_request"]
            )
            for side in ("with", "without")
        }
        result["scenarios"][key] = {
            "unit": unit,
            "rounds": rounds,
            "cost_pct_median": statistics.median(costs) if costs else None,
            "cost_pct_min": min(costs) if costs else None,
            "cost_pct_max": max(costs) if costs else None,
            "unsaturated_rounds": sum(not m["saturated"] for m in rounds),
            "cpu_us_per_request": per_req,
        }
    return result


def table(results: list[dict[str, Any]], scenarios: list[tuple[str, str, int, str]]) -> str:
    head = "| feature | " + " | ".join(
        f"{key}: CPU µs per {unit} without → with | cost (median, min…max)" for key, _, _, unit in scenarios
    )
    lines = [head + " |", "|---|" + "---|---|" * len(scenarios)]
    for r in results:
        cells = [r["feature"]]
        for key, _, _, _ in scenarios:
            s = r["scenarios"].get(key)
            if s is None or s["cost_pct_median"] is None:
                cells += ["—", "no saturated round"]
                continue
            per = s["cpu_us_per_request"]
            burst = ""
            if key.startswith(("burst", "paced")):
                without, with_ = per["without"] / EVENTS_PER_STREAM, per["with"] / EVENTS_PER_STREAM
                burst = f" ({without:.2f} → {with_:.2f} per chunk)"
            cells.append(f"{per['without']:,.0f} → {per['with']:,.0f}{burst}")
            mark = "ok" if s["cost_pct_median"] <= LIMIT_PCT else f"over {LIMIT_PCT:.0f}%"
            note = f", {s['unsaturated_rounds']} unsaturated left out" if s["unsaturated_rounds"] else ""
            spread = f"{s['cost_pct_min']:+.1f}…{s['cost_pct_max']:+.1f}"
            cells.append(f"{s['cost_pct_median']:+.1f}% ({spread}) {mark}{note}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--features",
        default=None,
        help="comma list of " + ", ".join(PAIR_KEYS) + " (default: all but " + ", ".join(NOT_DEFAULTS) + ")",
    )
    p.add_argument(
        "--tree",
        type=Path,
        help="run both builds of every pair from this checkout (PYTHONPATH), e.g. a compiled copy "
        "from bench/compiled_tree.py: the venv's editable install is pure Python",
    )
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="'WITH vs WITHOUT'",
        help="a pair of your own: comma lists of THINKPROXY_* settings for each side, e.g. "
        "'THINKPROXY_UI=true vs THINKPROXY_UI=false' or 'THINKPROXY_TRACE=detailed vs ' (repeatable); "
        "PYTHONPATH=<another checkout> runs that side from other code, e.g. ' vs PYTHONPATH=/tmp/before'",
    )
    p.add_argument(
        "--door",
        choices=("responses", "messages"),
        help="run the --compare pairs through this front door on both sides (its wrk scripts), "
        "e.g. a code A/B of the Responses door: --door responses --compare ' vs PYTHONPATH=/tmp/before'",
    )
    p.add_argument("--scenarios", default=DEFAULT_SCENARIOS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=int, default=4, help="length of one measured round")
    p.add_argument("--warm", type=float, default=1.5, help="warm-up per build and scenario, seconds")
    p.add_argument("--level", default="standard", help="THINKPROXY_DEFAULT_THINKING_LEVEL of both builds")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    exit_on_sigterm()
    write_providers_files()
    if not loadgen.wrk_available():
        print(loadgen.INSTALL_HINT)
        return 2
    if not can_pin():
        print("cost_pairs needs two cores and taskset: the pair shares core 0, the load runs on core 1")
        return 2
    # Every feature unless some were named, or only pairs of one's own were asked for.
    defaults = ",".join(k for k in PAIR_KEYS if k not in NOT_DEFAULTS)
    named = args.features if args.features is not None else ("" if args.compare else defaults)
    features = [k for k in named.split(",") if k]
    unknown = [k for k in features if k not in PAIR_KEYS]
    if unknown:
        print(f"unknown feature(s) {unknown}; choose from {', '.join(PAIR_KEYS)}")
        return 2
    scenarios = [sc for sc in SCENARIOS if sc[0] in args.scenarios.split(",")]
    if not scenarios:
        print(f"no scenario among {args.scenarios!r}; choose from {', '.join(sc[0] for sc in SCENARIOS)}")
        return 2
    try:
        custom = [custom_pair(text) for text in args.compare]
    except ValueError as exc:
        print(exc)
        return 2
    if args.door is not None:
        scripts = PAIR_KEYS[args.door].with_scripts
        custom = [replace(p, with_scripts=scripts, without_scripts=scripts) for p in custom]
    pairs = [PAIR_KEYS[k] for k in features] + custom
    if args.tree is not None:  # both sides from that checkout, unless a side names its own
        tree = {"PYTHONPATH": str(args.tree.resolve())}
        pairs = [replace(p, with_env=tree | p.with_env, without_env=tree | p.without_env) for p in pairs]
    procs = Processes(RESULTS_DIR / "logs")
    results = []
    try:
        upstream_port = servers.start_upstream(procs, 1)
        for pair in pairs:
            builds = {
                "with": servers.probe_build(servers.clean_env() | pair.with_env),
                "without": servers.probe_build(servers.clean_env() | pair.without_env),
            }
            print(f"{pair.feature} … (with: {builds['with']}; without: {builds['without']})", flush=True)
            results.append(run_pair(pair, args, scenarios, upstream_port, procs) | {"builds": builds})
    finally:
        procs.close()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"cost_pairs-{stamp}.json"
    cpu = machine()
    raw_data = {"args": vars(args), "machine": cpu, "results": results}
    out.write_text(json.dumps(raw_data, indent=1, default=str))
    print()
    print(table(results, scenarios))
    raw = out.relative_to(BENCH_DIR.parent)
    print(f"\nrounds: {args.rounds} × {args.seconds} s per scenario; machine: {cpu}; raw data: {raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
