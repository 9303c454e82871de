"""What the sessions hold, whatever the traffic: requests fed through the sessions' listener (as
the app calls it at each request's end, no server) while tracemalloc counts what stays allocated.

Three phases: many short sessions (more than THINKPROXY_SESSIONS_MAX), one session flooding
(2,000 requests by default, more than THINKPROXY_SESSIONS_DETAILS_PER_SESSION), then many sessions
of long agent turns (their details pass THINKPROXY_SESSIONS_MAX_BYTES). After each phase it prints
the sessions kept, the detail bytes counted, and the memory really held, against the bound:
details ≤ max_bytes, and everything (sums, details, the stats ring, the chain map) well below
max_bytes + what the counts bound. Exit 1 when a bound is passed or another session's summary
was evicted by the flood.

  python bench/sessions_memory.py                 # defaults: the settings' defaults, ~40 s
  python bench/sessions_memory.py --max-bytes 4194304 --requests 20000
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.core.events import AccessRecord
from proxy.core.stream.trace_outcome import TraceOutcome
from proxy.core.usage import ReasoningTokens, TokenUsage
from proxy.sessions.listener import SessionsListener
from proxy.sessions.stats import Stats
from proxy.sessions.store import SessionStore

# Per kept session (its sums, a deque, the OrderedDict slot) and per stats point: measured with
# this script (tracemalloc) and rounded up; what the counts bound beside the details' bytes.
SESSION_BYTES = 4096
POINT_BYTES = 400
CHAIN_BYTES = 300


def feed(listener: SessionsListener, session: str, n: int, *, long_turn: bool = False) -> None:
    tools = tuple(f"tool_{i}" for i in range(12 if long_turn else 1))
    for i in range(n):
        record = AccessRecord(method="POST", path="/v1/messages", route="messages", status=200, stream=True)
        record.request_id = f"{session}-{i}-{'x' * 24}"
        record.model = "deepseek-v4-pro-" + "long-name-" * (8 if long_turn else 0)
        record.provider, record.level, record.level_source = "deepseek", "deep", "suffix"
        record.usage = TokenUsage(
            input=50_000, output=900, cached_input=48_000, reasoning=ReasoningTokens(400, "reported")
        )
        record.outcome = TraceOutcome(None, 310.5, 1200.0, False, "tool_calls", tools)
        record.cost_usd = 0.0021
        if long_turn:
            record.notes["changes"] = [
                {"field": f"knob_{k}", "change": "set", "to": "high"} for k in range(16)
            ]
        headers = [("x-claude-code-session-id", session), ("user-agent", "claude-cli/2.1.332")]
        listener.start(record, headers).on_end(record, 2500.0)


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-sessions", type=int, default=2000)
    p.add_argument("--max-bytes", type=int, default=32 << 20)
    p.add_argument("--per-session", type=int, default=200)
    p.add_argument("--stats-history", type=int, default=20_000)
    p.add_argument("--flood", type=int, default=2000, help="requests of the flooding session")
    p.add_argument("--requests", type=int, default=60_000, help="requests of the long-turn phase")
    args = p.parse_args()
    tracemalloc.start()
    before = held()
    store = SessionStore(
        max_sessions=args.max_sessions, max_bytes=args.max_bytes, per_session=args.per_session
    )
    listener = SessionsListener(store, Stats(args.stats_history))
    bound = args.max_bytes + args.max_sessions * SESSION_BYTES + args.stats_history * POINT_BYTES
    bound += 4 * args.max_sessions * CHAIN_BYTES
    failed = False
    started = time.perf_counter()

    def report(phase: str) -> None:
        nonlocal failed
        now = held() - before
        ok = store.detail_bytes <= args.max_bytes and now <= bound
        failed |= not ok
        print(
            f"{phase:<34} sessions {len(store):>5}  details {store.detail_bytes / 2**20:7.2f} MiB "
            f"(bound {args.max_bytes / 2**20:.0f})  held {now / 2**20:7.2f} MiB (bound {bound / 2**20:.0f})"
            f"  {'ok' if ok else 'OVER'}"
        )

    for i in range(args.max_sessions * 2):
        feed(listener, f"short-{i}", 2)
    report(f"{args.max_sessions * 2} short sessions")
    survivors = [s.id for s in list(store.newest_first())[: args.max_sessions // 2]]
    feed(listener, "flood", args.flood)
    flood = store.get("flood")
    kept = all(store.get(session) is not None for session in survivors)
    print(
        f"flood: {flood.requests if flood else 0} requests counted, {len(flood.details) if flood else 0} "
        f"details kept; the {len(survivors)} newest other sessions {'all kept' if kept else 'EVICTED'}"
    )
    failed |= not kept
    report(f"+ one session of {args.flood}")
    sessions = max(args.requests // 50, 1)
    for i in range(sessions):
        feed(listener, f"long-{i}", 50, long_turn=True)
    report(f"+ {sessions} sessions x 50 long turns")
    print(f"{time.perf_counter() - started:.1f} s, peak {tracemalloc.get_traced_memory()[1] / 2**20:.1f} MiB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
