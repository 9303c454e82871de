"""Instructions of the replay capture's steps for one answer, each alone (valgrind's callgrind).

  nice -n 10 /work/venv/bin/python bench/capture_steps.py            # this checkout
  PYTHONPATH=/tmp/other nice -n 10 /work/venv/bin/python bench/capture_steps.py

What `ReplayService._store` does at the end of every captured answer, on the bench's non-stream
answer (bench/fake_upstream.py) with the replay policy `every_turn` (the self-hosted provider's):
collect the turn (`TurnCollector.completion`, `turns`), make its records (`capture_records`: the
store key, with the content's hash, and the record's JSON), and write them to the memory store
(`put_now`). Each step is counted cumulatively in a process of its own (collection toggled around
COUNTED calls after WARM, with bisect_instructions.py's callgrind.h helper), so each row's
difference from the row before is that step's cost. Needs valgrind and gcc.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bisect_instructions import MARKS_SO, SUMMARY, build_marks
from common import BENCH_DIR, REPO_DIR

STEPS = ("turns", "records", "store")  # each includes the ones before it
WARM, COUNTED = 50, 200


def run_child(step: str) -> None:
    import ctypes

    import orjson
    from fake_upstream import json_body

    from proxy.core.replay.policy import ReplayPolicy
    from proxy.core.replay.rules import capture_records
    from proxy.core.stream.capture import TurnCollector
    from proxy.state.memory import MemoryStore

    marks = ctypes.CDLL(str(MARKS_SO))
    answer = orjson.loads(json_body())
    policy = ReplayPolicy(mode="every_turn", field="reasoning")
    store = MemoryStore(ttl=3600)
    tenant = "0" * 32

    def once() -> None:
        capture = TurnCollector()
        capture.completion(answer)
        turns = capture.turns()
        if step == "turns":
            return
        now_ms = time.time() * 1000.0
        items = capture_records(
            turns, tenant=tenant, provider="self-hosted", model="m", policy=policy, now_ms=now_ms
        )
        if step == "records":
            return
        store.put_now(items, tenant=tenant)

    for _ in range(WARM):
        once()
    marks.marks_toggle()
    for _ in range(COUNTED):
        once()
    marks.marks_dump(step.encode())


def count(step: str) -> float:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", str(REPO_DIR)), str(BENCH_DIR)])
    with tempfile.TemporaryDirectory(prefix="capture-cg-") as out:
        argv = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}/cg.out"]
        argv += [sys.executable, str(Path(__file__).resolve()), "--child", step]
        subprocess.run(argv, env=env, cwd="/tmp", check=True, capture_output=True)
        for dump in Path(out).glob("cg.out*"):
            found = SUMMARY.search(dump.read_bytes())
            if found is not None:
                return int(found.group(1)) / COUNTED
    raise RuntimeError(f"{step}: no count")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        run_child(args.child)
        return
    build_marks()
    print("| step | instructions per answer, cumulative | the step alone |\n|---|---|---|")
    before = 0.0
    for step in STEPS:
        value = count(step)
        print(f"| {step} | {value:,.0f} | {value - before:,.0f} |")
        before = value


if __name__ == "__main__":
    main()
