"""thinkproxy benchmark runner: every target side by side, alternating rounds, medians and ratios.

  /work/venv/bin/python bench/run.py            # full run (~4-5 min)
  /work/venv/bin/python bench/run.py --quick    # ~1-1.5 min

Targets: direct (wrk -> fake upstream), the pass-through baselines, and thinkproxy as users run it
(`thinkproxy`: every default) next to variants that turn one thing off (see servers.py).
The target under test runs alone on core 0 (every other target is stopped with SIGSTOP while it
is measured); the fake upstream, wrk and this runner run on core 1. A throughput measurement in
which the target's core was not saturated measures the load generator, not the target: it is
flagged and left out. See bench/README.md for what each column means and the goals.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loadgen
import servers
import ttft
from common import (
    BENCH_DIR,
    SATURATED_PCT,
    Processes,
    can_pin,
    core_times,
    cpu_seconds,
    exit_on_sigterm,
    get_json_stats,
    post,
    wait_idle,
)
from fake_upstream import EVENTS_PER_STREAM

ALL_TARGETS = ["direct", *servers.TARGET_NAMES]
DEFAULT_TARGETS = ["direct", "baseline-aiohttp", "thinkproxy", "thinkproxy-quiet"]
REFERENCE = "baseline-aiohttp"
RESULTS_DIR = BENCH_DIR / "results"


@dataclass(frozen=True)
class Scenario:
    key: str
    kind: str  # "load" (wrk throughput), "cpu" (paced CPU per chunk), "ttft" (idle probe)
    wrk_script: str
    connections: int
    title: str


SCENARIOS = [
    Scenario("json_c32", "load", "json", 32, "JSON c32 req/s"),
    Scenario("json_c128", "load", "json", 128, "JSON c128 req/s"),
    Scenario("burst_c32", "load", "burst", 32, "burst c32 chunks/s"),
    Scenario("paced_c32", "cpu", "paced", 32, "paced c32 CPU µs/chunk"),
    Scenario("ttft_idle", "ttft", "ttft", 1, "idle TTFT p50 / p90 ms"),
]


@dataclass
class Plan:
    rounds: int
    warm_s: float
    load_s: int
    paced_s: int
    ttft_n: int


@dataclass
class Target:
    name: str
    port: int
    pid: int | None  # None for direct: there is no process in between


@dataclass
class Run:
    plan: Plan
    upstream_port: int
    targets: list[Target]
    target_core: int | None
    load_core: int | None
    procs: Processes
    measurements: list[dict[str, Any]] = field(default_factory=list)
    dead: dict[str, str] = field(default_factory=dict)  # target -> how it died (left out from then on)


# ---------------------------------------------------------------- servers


def start_servers(
    procs: Processes, names: list[str], level: str | None, core: int | None
) -> tuple[int, list[Target]]:
    load_core = None if core is None else 1
    upstream_port = servers.start_upstream(procs, load_core)
    targets = [Target("direct", upstream_port, None)] if "direct" in names else []
    up = servers.start_targets(procs, [n for n in names if n != "direct"], upstream_port, core, level)
    targets += [Target(n, *up[n]) for n in names if n in up]
    return upstream_port, targets


# ---------------------------------------------------------------- correctness checks


def check_target(target: Target, scenario: str) -> tuple[str | None, dict[str, Any]]:
    """One request; (problem or None, facts about the response)."""
    stream = scenario != "json"
    try:
        reply = post(target.port, scenario, stream)
    except Exception as exc:  # the check reports any failure instead of stopping the run
        return f"{scenario}: request failed: {exc!r}", {}
    facts: dict[str, Any] = {
        "status": reply.status,
        "bytes": len(reply.body),
        "seconds": round(reply.seconds, 3),
    }
    if reply.status != 200:
        return f"{scenario}: HTTP {reply.status}: {reply.body[:300]!r}", facts
    if f"bench-{scenario}".encode() not in reply.body:
        return (
            f"{scenario}: response is not the '{scenario}' scenario (is X-Bench-Scenario forwarded?)",
            facts,
        )
    if not stream:
        try:
            message = json.loads(reply.body)["choices"][0]["message"]
        except (ValueError, KeyError, IndexError) as exc:
            return f"json: unexpected body ({exc!r}): {reply.body[:200]!r}", facts
        facts["message_keys"] = sorted(message)
        facts["has_trace"] = "trace" in json.loads(reply.body)
        return None, facts
    lines = reply.body.split(b"\n")
    facts["data_events"] = sum(1 for ln in lines if ln.startswith(b"data:"))
    facts["trace_lines"] = sum(1 for ln in lines if ln.startswith((b": trace", b"event: trace")))
    if not reply.body.rstrip().endswith(b"data: [DONE]"):
        return f"{scenario}: stream does not end with data: [DONE]: …{reply.body[-200:]!r}", facts
    if facts["data_events"] < EVENTS_PER_STREAM:
        return f"{scenario}: only {facts['data_events']} data events (expected >= {EVENTS_PER_STREAM})", facts
    return None, facts


def check_all(targets: list[Target]) -> tuple[list[Target], dict[str, Any]]:
    report: dict[str, Any] = {}
    healthy = []
    for t in targets:
        kinds = ["json", "burst", "ttft", "paced"]
        with ThreadPoolExecutor(len(kinds)) as pool:  # paced takes ~1 s: check the scenarios side by side
            results = dict(zip(kinds, pool.map(check_target, [t] * len(kinds), kinds), strict=True))
        problems = [p for p, _ in results.values() if p]
        report[t.name] = {"ok": not problems, "problems": problems, **{s: f for s, (_, f) in results.items()}}
        if problems:
            print(f"  {t.name}: FAILED check — excluded\n    " + "\n    ".join(problems))
        else:
            burst = results["burst"][1]
            print(
                f"  {t.name}: ok (burst: {burst['data_events']} data events, "
                f"{burst['trace_lines']} trace lines, {burst['bytes']} bytes)"
            )
            healthy.append(t)
    return healthy, report


# ---------------------------------------------------------------- measurements


# A measurement during which other work took more than this share of the target's core is
# "contended": the medians leave it out whenever the same target/scenario has a clean round.
CONTENDED_PCT = 20.0
Window = tuple[float, float, list[tuple[float, float, float]]]


def _window_start(t: Target) -> Window:
    return time.monotonic(), cpu_seconds(t.pid) if t.pid else 0.0, core_times()


def _window_end(t: Target, start: Window) -> dict[str, Any]:
    t0, cpu0, cores0 = start
    wall = time.monotonic() - t0
    cpu = (cpu_seconds(t.pid) if t.pid else 0.0) - cpu0
    cores1 = core_times()
    out = {"wall_s": wall, "target_cpu_s": cpu, "target_cpu_pct": 100 * cpu / wall}
    for i, ((b0, s0, tot0), (b1, s1, tot1)) in enumerate(zip(cores0, cores1, strict=False)):
        out[f"core{i}_busy_pct"] = 100 * (b1 - b0) / max(tot1 - tot0, 1e-9)
        out[f"core{i}_steal_pct"] = 100 * (s1 - s0) / max(tot1 - tot0, 1e-9)
    # what else ran on the target's core: other people's work, the noise in this measurement
    out["core0_other_pct"] = max(0.0, out.get("core0_busy_pct", 0.0) - out["target_cpu_pct"])
    out["contended"] = t.pid is not None and out["core0_other_pct"] > CONTENDED_PCT
    return out


@contextlib.contextmanager
def alone(run: Run, t: Target) -> Iterator[None]:
    """Every other target stopped (SIGSTOP) while `t` is measured: it has core 0 to itself."""
    others = [o.pid for o in run.targets if o.pid and o is not t and alive(run, o)]
    for pid in others:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in others:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)


def wait_quiet(run: Run, limit: float = 15.0) -> float:
    """Wait until no target burns CPU any more; returns the seconds waited.

    A slow target keeps working through its backlog after wrk stops (at c128 a target doing
    30 req/s still owes ~4 s of work): without this, that tail lands on the next target's core
    during the next target's measurement.
    """
    return wait_idle([t.pid for t in run.targets if t.pid], limit)


def measure(run: Run, t: Target, sc: Scenario) -> dict[str, Any]:
    settle = {"settle_s": wait_quiet(run)}
    with alone(run, t):
        out = _measure(run, t, sc)
    if sc.kind == "load" and t.pid is not None and "failed" not in out:
        out["saturated"] = out["target_cpu_pct"] >= SATURATED_PCT
    return {**out, **settle}


def _measure(run: Run, t: Target, sc: Scenario) -> dict[str, Any]:
    plan = run.plan
    if sc.kind == "ttft":
        start = _window_start(t)
        try:
            samples = ttft.run_probe(t.port, plan.ttft_n)
        except OSError as exc:  # ConnectionError included
            return {"failed": repr(exc), **_window_end(t, start)}
        return {
            "samples_ms": samples,
            "p50_ms": statistics.median(samples),
            "p90_ms": ttft.percentile(samples, 0.9),
            **_window_end(t, start),
        }
    loadgen.warm(t.port, sc.wrk_script, sc.connections, plan.warm_s, run.load_core)
    if sc.kind == "cpu":
        wait_quiet(run, 3.0)  # let the streams cut by the warm-up wind down before the CPU window opens
        events0 = get_json_stats(run.upstream_port)["events"]
    start = _window_start(t)
    try:
        r = loadgen.run(
            t.port,
            sc.wrk_script,
            sc.connections,
            plan.paced_s if sc.kind == "cpu" else plan.load_s,
            run.load_core,
        )
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"failed": str(exc)[-500:], **_window_end(t, start)}
    window = _window_end(t, start)
    out: dict[str, Any] = {
        "requests": r.requests,
        "rps": r.rps,
        "errors": r.errors,
        "error_detail": r.error_detail,
        "lat_p50_ms": r.lat_p50_ms,
        "lat_p99_ms": r.lat_p99_ms,
        **window,
    }
    if sc.kind == "load" and t.pid and window["target_cpu_s"] > 0:
        # throughput per CPU-second the target actually got: robust to other work on its core
        out["req_per_cpu_s"] = r.requests / window["target_cpu_s"]
    if sc.wrk_script == "burst":
        out["chunks_s"] = r.rps * EVENTS_PER_STREAM
        if "req_per_cpu_s" in out:
            out["chunks_per_cpu_s"] = out["req_per_cpu_s"] * EVENTS_PER_STREAM
    if sc.kind == "cpu":
        chunks = get_json_stats(run.upstream_port)["events"] - events0
        out["chunks"] = chunks
        out["us_per_chunk"] = window["target_cpu_s"] * 1e6 / chunks if chunks and t.pid else None
    return out


# the number each scenario is judged by, and its CPU-normalized companion
HEADLINE = {
    "json_c32": "rps",
    "json_c128": "rps",
    "burst_c32": "chunks_s",
    "paced_c32": "us_per_chunk",
    "ttft_idle": "p50_ms",
}
PER_CPU = {"json_c32": "req_per_cpu_s", "json_c128": "req_per_cpu_s", "burst_c32": "chunks_per_cpu_s"}


def alive(run: Run, t: Target) -> bool:
    """False (and said once, with the end of its log) when the target's process has exited."""
    if t.name in run.dead:
        return False
    code = run.procs.returncode(t.name) if t.pid else None
    if code is None:
        return True
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    run.dead[t.name] = how
    tail = run.procs.log_tail(t.name, 30).replace("\n", "\n    ")
    print(
        f"  !! {t.name} {how}; left out from now on. Its log (bench/results/logs/{t.name}.log):\n    {tail}"
    )
    return False


def run_rounds(run: Run) -> None:
    names = [t.name for t in run.targets]
    for rnd in range(run.plan.rounds):
        order = run.targets[rnd % len(names) :] + run.targets[: rnd % len(names)]  # rotate: no fixed slot
        print(f"\nround {rnd + 1}/{run.plan.rounds} (order: {', '.join(t.name for t in order)})")
        for sc in SCENARIOS:
            cells = []
            for t in order:
                if sc.kind == "cpu" and t.pid is None:
                    continue  # direct has no process in between: no CPU to measure
                if not alive(run, t):
                    continue
                m = measure(run, t, sc)
                if "failed" in m:
                    print(f"  {t.name} {sc.key}: measurement failed: {m['failed'].strip()}")
                    alive(run, t)
                run.measurements.append({"round": rnd + 1, "target": t.name, "scenario": sc.key, **m})
                value = m.get(HEADLINE[sc.key])
                flag = f" ERR{m['errors']}" if m.get("errors") else ""
                if m.get("saturated") is False:
                    flag += f" (not saturated: {m['target_cpu_pct']:.0f}% of its core)"
                cells.append(f"{t.name}={_fmt(value)}{flag}")
            print(f"  {sc.key:<10} " + "  ".join(cells), flush=True)


# ---------------------------------------------------------------- summary


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _stats(values: list[float]) -> dict[str, Any]:
    med = statistics.median(values)
    spread = 100 * (max(values) - min(values)) / med if med and len(values) > 1 else None
    return {"median": med, "rounds": values, "spread_pct": spread}


def summarize(run: Run) -> dict[str, Any]:
    """summary[target][scenario] = headline stats (+ `per_cpu` stats, ratios to the reference)."""
    summary: dict[str, Any] = {}
    for t in run.targets:
        summary[t.name] = {}
        for sc in SCENARIOS:
            every = [m for m in run.measurements if m["target"] == t.name and m["scenario"] == sc.key]
            ms = [m for m in every if not m["contended"]] or every  # clean rounds when there are any
            unsaturated = [m for m in ms if m.get("saturated") is False]
            if unsaturated and len(unsaturated) == len(ms):
                summary[t.name][sc.key] = {"not_saturated": True, "target_cpu_pct": _max_cpu(ms)}
                continue
            ms = [m for m in ms if m.get("saturated") is not False]
            values = [m[HEADLINE[sc.key]] for m in ms if m.get(HEADLINE[sc.key]) is not None]
            if not values:
                continue
            entry = _stats(values)
            entry["rounds_dropped_as_unsaturated"] = len(unsaturated)
            entry["metric"] = HEADLINE[sc.key]
            entry["rounds_dropped_as_contended"] = len(every) - len(ms)
            entry["errors"] = sum(m.get("errors", 0) for m in ms)
            entry["target_cpu_pct"] = statistics.median(m["target_cpu_pct"] for m in ms)
            entry["core0_other_pct"] = statistics.median(m["core0_other_pct"] for m in ms)
            per_cpu = [m[PER_CPU[sc.key]] for m in ms if PER_CPU.get(sc.key) in m]
            if per_cpu:
                entry["per_cpu"] = {"metric": PER_CPU[sc.key], **_stats(per_cpu)}
            if sc.kind == "ttft":
                pooled = [x for m in ms for x in m["samples_ms"]]
                entry["p50_ms"] = entry["median"] = statistics.median(pooled)
                entry["p90_ms"] = ttft.percentile(pooled, 0.9)
            summary[t.name][sc.key] = entry
    ref, direct = summary.get(REFERENCE, {}), summary.get("direct", {})
    for name in summary:
        for key, entry in summary[name].items():
            if entry.get("not_saturated"):
                continue
            base = ref.get(key, {})
            entry["ratio"] = entry["median"] / base["median"] if base.get("median") else None
            if "per_cpu" in entry and "per_cpu" in base:
                entry["per_cpu"]["ratio"] = entry["per_cpu"]["median"] / base["per_cpu"]["median"]
            if key == "ttft_idle" and "ttft_idle" in direct:
                entry["added_p50_ms"] = entry["p50_ms"] - direct["ttft_idle"]["p50_ms"]
            if key == "ttft_idle" and base.get("p50_ms") is not None:
                entry["added_over_reference_ms"] = entry["p50_ms"] - base["p50_ms"]
    return summary


def feature_costs(summary: dict[str, Any]) -> dict[str, Any]:
    """cost[feature][scenario] = % of throughput (or % more CPU per chunk) the feature takes."""
    full = summary.get("thinkproxy", {})
    out: dict[str, Any] = {}
    for feature, variant in FEATURE_VARIANTS.items():
        without = summary.get(variant)
        if not full or not without:
            continue
        out[feature] = {}
        for sc in SCENARIOS:
            a, b = full.get(sc.key, {}).get("median"), without.get(sc.key, {}).get("median")
            if a is None or b is None or sc.kind == "ttft":
                continue
            # throughput: how much lower with the feature; CPU per chunk: how much higher
            cost = 100 * (1 - a / b) if sc.kind == "load" else 100 * (a / b - 1)
            out[feature][sc.key] = {"cost_pct": cost, "ok": cost <= FEATURE_COST_LIMIT_PCT}
    return out


def _max_cpu(ms: list[dict[str, Any]]) -> float:
    return max((m.get("target_cpu_pct", 0.0) for m in ms), default=0.0)


# (title, scenario, field, comparison, limit); throughput goals are judged on the raw ratio and,
# separately, on the per-CPU-second ratio, which other work on the machine cannot skew
GOALS = [
    ("non-stream JSON c32 ≥ 0.75× baseline-aiohttp", "json_c32", "ratio", ">=", 0.75),
    ("non-stream JSON c128 ≥ 0.75× baseline-aiohttp", "json_c128", "ratio", ">=", 0.75),
    ("burst chunks/s ≥ 0.7× baseline-aiohttp", "burst_c32", "ratio", ">=", 0.7),
    ("paced CPU/chunk ≤ 1.25× baseline-aiohttp", "paced_c32", "ratio", "<=", 1.25),
    ("idle TTFT p50 ≤ baseline-aiohttp + 0.5 ms", "ttft_idle", "added_over_reference_ms", "<=", 0.5),
]
# What one feature costs: the default `thinkproxy` against the variant without it (≤ 5% each).
FEATURE_VARIANTS = {
    "access log": "thinkproxy-nolog",
    "metrics": "thinkproxy-nometrics",
    "replay store": "thinkproxy-nostate",
    "trace": "thinkproxy-notrace",
    "all four of them": "thinkproxy-quiet",
}
FEATURE_COST_LIMIT_PCT = 5.0


def goals(summary: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, entries in summary.items():
        if not name.startswith("thinkproxy"):
            continue
        out[name] = {}
        for title, key, field_, op, limit in GOALS:
            entry = entries.get(key, {})
            verdicts = {}
            for label, value in (
                ("raw", entry.get(field_)),
                ("per_cpu", entry.get("per_cpu", {}).get(field_)),
            ):
                if value is not None:
                    verdicts[label] = {"value": value, "ok": value >= limit if op == ">=" else value <= limit}
            out[name][title] = verdicts
    return out


def _cell(entry: dict[str, Any] | None, show_ratio: bool) -> str:
    if entry is None:
        return "—"
    ratio = f" ({entry['ratio']:.2f}×)" if show_ratio and entry.get("ratio") is not None else ""
    spread = f" ±{entry['spread_pct'] / 2:.0f}%" if entry.get("spread_pct") is not None else ""
    err = f" **{entry['errors']} errors**" if entry.get("errors") else ""
    return f"{_fmt(entry['median'])}{ratio}{spread}{err}"


def table(run: Run, summary: dict[str, Any], goal_report: dict[str, Any]) -> str:
    cols = [*(sc.title for sc in SCENARIOS), "TTFT added p50 ms"]
    rows = ["| target | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for t in run.targets:
        cells = []
        for sc in SCENARIOS:
            e = summary[t.name].get(sc.key)
            if e is not None and e.get("not_saturated"):
                cells.append(f"not saturated ({e['target_cpu_pct']:.0f}% of its core): no result")
            elif sc.kind == "ttft" and e is not None:
                cells.append(f"{e['p50_ms']:.2f} / {e['p90_ms']:.2f}")
            else:
                cells.append(_cell(e, t.pid is not None))
        added = summary[t.name].get("ttft_idle", {}).get("added_p50_ms")
        cells.append("—" if added is None or t.pid is None else f"{added:+.2f}")
        rows.append(f"| {t.name} | " + " | ".join(cells) + " |")
    text = "\n".join(rows)

    per_cpu_scenarios = [sc for sc in SCENARIOS if sc.key in PER_CPU]
    text += (
        "\n\nPer CPU-second of the target (throughput ÷ CPU time it got; robust to other load):\n\n"
        "| target | "
        + " | ".join(sc.title.replace("/s", "/CPU-s") for sc in per_cpu_scenarios)
        + " | target's share of core 0 (JSON c32) |\n|"
        + "---|" * (len(per_cpu_scenarios) + 2)
    )
    for t in run.targets:
        if t.pid is None:
            continue
        cells = [_cell(summary[t.name].get(sc.key, {}).get("per_cpu"), True) for sc in per_cpu_scenarios]
        cpu = summary[t.name].get("json_c32", {}).get("target_cpu_pct")
        cells.append("—" if cpu is None else f"{cpu:.0f}%")
        text += f"\n| {t.name} | " + " | ".join(cells) + " |"

    if goal_report:
        names = list(goal_report)
        text += "\n\n| goal | " + " | ".join(names) + " |\n|" + "---|" * (len(names) + 1)
        for title, _, field_, _, _ in GOALS:
            cells = []
            for n in names:
                parts = []
                for label, v in goal_report[n][title].items():
                    unit = " ms" if field_.endswith("_ms") else "×"
                    prefix = "per CPU-s " if label == "per_cpu" else ""
                    parts.append(f"{prefix}{v['value']:.2f}{unit} {'PASS' if v['ok'] else 'FAIL'}")
                cells.append(" · ".join(parts) or "n/a")
            text += f"\n| {title} | " + " | ".join(cells) + " |"
    costs = feature_costs(summary)
    if costs:
        keys = [sc for sc in SCENARIOS if sc.kind != "ttft"]
        text += (
            f"\n\nWhat each default costs (thinkproxy vs the variant without it; goal ≤ "
            f"{FEATURE_COST_LIMIT_PCT:.0f}%):\n\n| feature | "
            + " | ".join(sc.title for sc in keys)
            + " |\n|"
            + "---|" * (len(keys) + 1)
        )
        for feature, cells_by_key in costs.items():
            cells = [
                f"{c['cost_pct']:+.1f}% {'ok' if c['ok'] else 'OVER'}"
                if (c := cells_by_key.get(sc.key))
                else "—"
                for sc in keys
            ]
            text += f"\n| {feature} | " + " | ".join(cells) + " |"
    return text


def noise_note(run: Run, summary: dict[str, Any]) -> str:
    other = [m["core0_other_pct"] for m in run.measurements if m["scenario"] != "ttft_idle"]
    contended = sum(1 for m in run.measurements if m["contended"])
    dropped = sum(e.get("rounds_dropped_as_contended", 0) for t in summary.values() for e in t.values())
    spreads = [
        e["spread_pct"] for t in summary.values() for e in t.values() if e.get("spread_pct") is not None
    ]
    steal = [max(m.get("core0_steal_pct", 0.0), m.get("core1_steal_pct", 0.0)) for m in run.measurements]
    if not other:
        return ""
    return (
        f"Noise: other work on core 0 (the target's) during the measurements: median "
        f"{statistics.median(other):.0f}%, max {max(other):.0f}% of the core; hypervisor steal: median "
        f"{statistics.median(steal):.0f}%, max {max(steal):.0f}%; spread between rounds (max−min)/median: "
        f"median {statistics.median(spreads or [0]):.0f}%, max {max(spreads or [0]):.0f}%. "
        "±x% in a cell = half that spread. "
        f"{contended} of {len(run.measurements)} measurements were contended (other work > "
        f"{CONTENDED_PCT:.0f}% of core 0); {dropped} of them left out of the medians (a clean round existed)."
    )


# ---------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run (~1-1.5 min): 2 rounds, 1 s windows")
    p.add_argument("--rounds", type=int, help="alternating rounds (default 3, quick 2)")
    p.add_argument("--seconds", type=int, help="wrk duration per load measurement (default 3, quick 1)")
    p.add_argument("--paced-seconds", type=int, help="paced CPU window (default 4, quick 1)")
    p.add_argument(
        "--warmup", type=float, help="warm-up seconds before each measurement (default 1, quick 0.5)"
    )
    p.add_argument("--ttft-n", type=int, help="sequential requests per TTFT probe (default 40, quick 10)")
    p.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help="comma-separated subset of: " + ", ".join(ALL_TARGETS) + " (or 'all')",
    )
    p.add_argument("--check", action="store_true", help="only start the targets and check their answers")
    p.add_argument(
        "--tree",
        type=Path,
        help="run the thinkproxy targets (defaults and variants) from this checkout instead of the "
        "venv's install, e.g. a compiled copy from bench/compiled_tree.py (the venv's is pure)",
    )
    p.add_argument(
        "--before",
        type=Path,
        help="another checkout (e.g. `git worktree add /tmp/before <commit>`): its defaults are "
        f"measured too, as target {servers.BEFORE}, for a before/after in one run",
    )
    p.add_argument(
        "--level",
        default="standard",
        help="THINKPROXY_DEFAULT_THINKING_LEVEL for thinkproxy ('none' = unset)",
    )
    return p.parse_args()


def main() -> int:
    args = parse_args()
    q = args.quick
    plan = Plan(
        rounds=args.rounds or (2 if q else 3),
        warm_s=args.warmup if args.warmup is not None else (0.5 if q else 1.0),
        load_s=args.seconds or (1 if q else 3),
        paced_s=args.paced_seconds or (1 if q else 4),
        ttft_n=args.ttft_n or (10 if q else 40),
    )
    names = (
        ALL_TARGETS if args.targets == "all" else [n.strip() for n in args.targets.split(",") if n.strip()]
    )
    if args.tree is not None:
        servers.tree = args.tree.resolve()
    if args.before is not None:
        servers.before_tree = args.before.resolve()
        names.insert(names.index("thinkproxy") if "thinkproxy" in names else len(names), servers.BEFORE)
    unknown = set(names) - set(ALL_TARGETS) - {servers.BEFORE}
    if unknown:
        print(f"unknown targets: {', '.join(sorted(unknown))}")
        return 2
    if not loadgen.wrk_available():
        print(loadgen.INSTALL_HINT)
        return 2
    pinned = can_pin()
    if pinned:
        os.sched_setaffinity(
            0, {1}
        )  # the runner (and the TTFT client) share core 1 with wrk and the upstream
    else:
        print("warning: fewer than 2 cores or no taskset: running unpinned, numbers are less meaningful")
    exit_on_sigterm()
    level = None if args.level == "none" else args.level
    started = dt.datetime.now()
    stamp = started.strftime("%Y%m%d-%H%M%S")
    procs = Processes(RESULTS_DIR / "logs")
    try:
        print(f"starting servers (target core {0 if pinned else '-'}, load core {1 if pinned else '-'}) …")
        upstream_port, targets = start_servers(procs, names, level, 0 if pinned else None)
        print("checking each target answers every scenario correctly …")
        targets, checks = check_all(targets)
        missing = [n for n in names if n not in {t.name for t in targets}]
        if missing:
            print(f"  not measured: {', '.join(missing)}")
        if args.check:
            return 0 if not missing else 1
        builds = {t.name: b for t in targets if (b := servers.build_of(t.name)) is not None}
        print("builds: " + ", ".join(f"{n} = {b}" for n, b in builds.items()))
        run = Run(plan, upstream_port, targets, 0 if pinned else None, 1 if pinned else None, procs)
        run_rounds(run)
        summary = summarize(run)
        goal_report = goals(summary)
        text = table(run, summary, goal_report)
        note = noise_note(run, summary)
        if run.dead:
            note += "\nTargets that died during the run: " + ", ".join(
                f"{n} ({h})" for n, h in run.dead.items()
            )
        note += "\nBuilds: " + ", ".join(f"{n} = {b}" for n, b in builds.items())
        print("\n" + text + "\n\n" + note)
        RESULTS_DIR.mkdir(exist_ok=True)
        out = RESULTS_DIR / f"run-{stamp}.json"
        out.write_text(
            json.dumps(
                {
                    "started": started.isoformat(timespec="seconds"),
                    "duration_s": round((dt.datetime.now() - started).total_seconds(), 1),
                    "machine": {
                        "cpus": os.cpu_count(),
                        "pinned": pinned,
                        "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
                        "python": platform.python_version(),
                        "platform": platform.platform(),
                    },
                    "plan": plan.__dict__,
                    "thinkproxy_level": level,
                    "builds": builds,
                    "checks": checks,
                    "not_measured": missing,
                    "died": run.dead,
                    "summary": summary,
                    "goals": goal_report,
                    "feature_costs": feature_costs(summary),
                    "table_markdown": text,
                    "noise": note,
                    "measurements": run.measurements,
                },
                indent=1,
                default=str,
            )
        )
        print(f"\nresults: {out.relative_to(BENCH_DIR.parent)}  (server logs: bench/results/logs/)")
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted")
        return 130
    finally:
        procs.close()


if __name__ == "__main__":
    sys.exit(main())
