"""Coverage-guided fuzzing of thinkproxy's pure core with atheris (libFuzzer), for a bounded time.

Not part of the test suite: tests/test_fuzz.py is the bounded, deterministic property-based run. This
script drives the same targets and checks the same contracts with libFuzzer's coverage feedback,
for as long as it is told to:

  /work/venv/bin/pip install atheris
  /work/venv/bin/python bench/fuzz_atheris.py all --seconds 60      # each target for 60 s, in turn
  /work/venv/bin/python bench/fuzz_atheris.py pipeline --seconds 300
  /work/venv/bin/python bench/fuzz_atheris.py sse -- -runs=100000   # extra args go to libFuzzer

Targets: sse, reasoning, pipeline, trace, rewrite, headers, policy. Inputs that trip a bug already
recorded in tests/test_fuzz.py (KNOWN_BUGS) are counted, not reported, so the search goes on; any
other exception or broken contract stops the target with libFuzzer's crash report, and the input
is saved under --artifacts (default /tmp/thinkproxy-fuzz/). Seeds: the recorded upstream streams
in tests/fixtures/streams plus a few hand-written ones; a dictionary of field names and tags helps
the mutator build JSON and SSE.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS = ("sse", "reasoning", "pipeline", "trace", "rewrite", "headers", "policy")

DICTIONARY = [
    *(f'"{w}"' for w in ("choices", "delta", "message", "content", "reasoning_content", "reasoning")),
    *(f'"{w}"' for w in ("reasoning_details", "tool_calls", "finish_reason", "index", "type", "text")),
    *(f'"{w}"' for w in ("thinking", "usage", "id", "function", "name", "arguments", "role", "messages")),
    *(f'"{w}"' for w in ("assistant", "tool", "system", "tool_call_id", "reasoning.text", "signature")),
    *(f'"{w}"' for w in ("<think>", "</think>", "<thinking>", "</thought>", "stop", "[DONE]")),
    *(f'"{w}"' for w in ("data: ", "event: ", "id: ", "retry: ", ": ", "\\x0a\\x0a", "\\x0d\\x0a", "\\x0d")),
    *(f'"{w}"' for w in ("http://", "https://", "127.0.0.1", "localhost", "[::1]", "169.254.169.254")),
]
SEEDS = [
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"<think>a</th"}}]}\n\n'
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"ink>b"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n",
    b'{"choices":[{"index":0,"message":{"role":"assistant","content":"<think>x</think>y",'
    b'"reasoning_details":[{"type":"reasoning.text","text":"r","signature":"s"}]}}]}',
    b'{"model":"m","messages":[{"role":"assistant","content":"<think>x</think>y","tool_calls":'
    b'[{"id":"call_1","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":'
    b'"call_1","content":"{\\"error\\": \\"boom\\"}"}],"thinking":{"type":"enabled"}}',
    b"\x00http://api.example.com/v1\x00*.example.com\x00127.0.0.1:11434",
]


def load_harness() -> dict[str, Callable[[bytes], None]]:
    """Import the code under test instrumented, then build one test function per target."""
    import atheris

    with atheris.instrument_imports(include=["proxy"]):
        import proxy.core.controls
        import proxy.core.plan.rewrite
        import proxy.core.stream.pipeline
        import proxy.core.stream.reasoning
        import proxy.core.stream.sse
        import proxy.core.stream.summaries
        import proxy.core.stream.tool_args
        import proxy.core.stream.trace
        import proxy.core.stream.trace_format
        import proxy.core.stream.trace_input
        import proxy.server.upstream.policy
    import copy

    import orjson

    from proxy.core.controls import Level, ReasoningField, TraceFormat, TraceMode
    from proxy.core.errors import BadRequest, ProxyError
    from proxy.core.plan.rewrite import rewrite_body
    from proxy.core.stream.pipeline import StreamPipeline
    from proxy.core.stream.reasoning import ReasoningOptions, StreamReasoningExtractor, normalize_completion
    from proxy.core.stream.sse import SSEDecoder
    from proxy.core.stream.trace import TraceBuilder
    from proxy.core.stream.trace_format import comment_frames
    from proxy.server.upstream.policy import UpstreamPolicy, host_is_sensitive, parse_allowed
    from tests import test_fuzz as tf

    seen: Counter[str] = Counter()

    def tolerate(exc: BaseException) -> None:
        bug = tf.known_bug(exc)
        if bug is None:
            raise exc
        if not seen[bug]:
            print(f"(known bug, not reported again: {bug})", file=sys.stderr)
        seen[bug] += 1

    def options(fdp: Any) -> ReasoningOptions:
        tags = tuple(t for t in tf.TAG_NAMES if fdp.ConsumeBool())
        return ReasoningOptions(
            tags=tags,
            implicit_open=fdp.ConsumeBool(),
            output_field=fdp.PickValueInList(list(ReasoningField)),
            hide=fdp.ConsumeBool(),
        )

    def pieces(fdp: Any, data: bytes) -> list[bytes]:
        cuts = sorted(fdp.ConsumeIntInRange(0, len(data)) for _ in range(fdp.ConsumeIntInRange(0, 6)))
        bounds = [0, *cuts, len(data)]
        return [data[a:b] for a, b in pairwise(bounds)]

    def json_of(data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            return None

    def sse(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        limit = fdp.ConsumeIntInRange(1, 64) if fdp.ConsumeBool() else 1 << 30
        body = fdp.ConsumeBytes(fdp.remaining_bytes())
        split = pieces(atheris.FuzzedDataProvider(data[:8]), body)
        events = tf.decode_all(split)
        assert b"".join(e.raw for e in events) == body
        assert events == tf.decode_all([body])
        if limit < 1 << 30:
            raised = False
            decoder = SSEDecoder(limit)
            try:
                for piece in split:
                    decoder.feed(piece)
                decoder.flush()
            except proxy.core.stream.sse.EventTooLarge:
                raised = True
            assert raised == any(len(e.raw) > limit for e in events)

    def reasoning(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        opts = options(fdp)
        parsed = json_of(fdp.ConsumeBytes(fdp.remaining_bytes()))
        chunks = parsed if isinstance(parsed, list) else [parsed]
        try:
            extractor = StreamReasoningExtractor(opts)
            for chunk in chunks:
                if not isinstance(chunk, dict):
                    continue
                before = orjson.dumps(chunk)
                if not extractor.process_chunk(chunk).changed:
                    assert orjson.dumps(chunk) == before
            extractor.flush()
            if isinstance(parsed, dict):
                body = copy.deepcopy(parsed)
                if not normalize_completion(body, opts):
                    assert orjson.dumps(body) == orjson.dumps(parsed)
        except AssertionError:
            raise
        except Exception as exc:
            tolerate(exc)

    def pipeline(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        opts = options(fdp)
        mode = fdp.PickValueInList([None, TraceMode.BRIEF, TraceMode.DETAILED])
        fmt = fdp.PickValueInList(list(TraceFormat))
        limit = fdp.ConsumeIntInRange(8, 4096)
        body = fdp.ConsumeBytes(fdp.remaining_bytes())
        trace = None if mode is None else TraceBuilder(mode=mode, zh=False, level="deep", provider="p")
        p = StreamPipeline(reasoning=opts, trace=trace, trace_format=fmt, max_event_bytes=limit)
        out = tf.run_pipeline(p, pieces(atheris.FuzzedDataProvider(data[-8:]), body))
        if out is None:
            return
        complete = SSEDecoder(1 << 30)
        events = complete.feed(body)
        if not complete.flush() and not any(e.data == b"[DONE]" for e in events):
            tf.check_single_done_at_end(out)

    def trace(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        mode = fdp.PickValueInList(list(TraceMode))
        parsed = json_of(fdp.ConsumeBytes(fdp.remaining_bytes()))
        items = parsed if isinstance(parsed, list) else [parsed]
        builder = TraceBuilder(mode=mode, zh=fdp.ConsumeBool(), level="standard", provider="p")
        events: list[dict[str, Any]] = []
        try:
            events += builder.begin(
                tf.plant_reasoning(items[0]) if items and isinstance(items[0], dict) else None, 0
            )
            for i, item in enumerate(items[1:]):
                if isinstance(item, dict):
                    events += builder.on_chunk(tf.plant_reasoning(item), bool(i % 2), float(i))
            events += builder.finish(float(len(items)))
        except Exception as exc:
            tolerate(exc)
            return
        tf.check_trace_events(events)
        comment_frames(events)

    def rewrite(data: bytes) -> None:
        body = json_of(data)
        if not isinstance(body, dict):
            return
        before = orjson.dumps(body)
        for dialect in tf.all_dialects():
            for level in Level:
                try:
                    orjson.dumps(rewrite_body(body, level, dialect).body)
                except BadRequest as exc:
                    assert exc.message
                except Exception as exc:
                    tolerate(exc)
        assert orjson.dumps(body) == before

    def headers(data: bytes) -> None:
        raw = atheris.FuzzedDataProvider(data).ConsumeUnicodeNoSurrogates(len(data))
        for header, parse, enum, _ in tf.HEADER_PARSERS:
            try:
                assert isinstance(parse(raw), enum)
            except BadRequest as exc:
                assert header in exc.message

    def policy(data: bytes) -> None:
        texts = data.decode("utf-8", "replace").split("\x00")
        patterns = []
        for text in texts[1:4]:
            with contextlib.suppress(ValueError):
                patterns.append(parse_allowed(text))
        try:
            resolved = UpstreamPolicy(None, tuple(patterns)).resolve(texts[0])
        except ProxyError:
            return
        except Exception as exc:
            tolerate(exc)
            return
        assert isinstance(resolved, str)
        named = {tf.canonical_host(".".join(p.labels)) for p in patterns if p.exact}
        for host in tf.client_hosts(resolved):
            if tf.reaches_sensitive(host) and tf.canonical_host(host) not in named:
                from urllib.parse import urlsplit

                judged = (urlsplit(resolved).hostname or "").lower()
                assert not host_is_sensitive(judged), (resolved, host)
                seen["policy: sensitive host in another spelling"] += 1

    return {
        "sse": sse,
        "reasoning": reasoning,
        "pipeline": pipeline,
        "trace": trace,
        "rewrite": rewrite,
        "headers": headers,
        "policy": policy,
    }


def fuzz_one(target: str, seconds: int, artifacts: Path, extra: list[str]) -> None:
    import atheris

    harness = load_harness()[target]
    artifacts.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"thinkproxy-{target}-"))
    corpus = work / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(SEEDS):
        (corpus / f"seed-{i}").write_bytes(seed)
    for i, path in enumerate(sorted((ROOT / "tests" / "fixtures" / "streams").glob("*"))):
        (corpus / f"fixture-{i}").write_bytes(path.read_bytes()[:4096])
    dictionary = work / "tokens.dict"
    dictionary.write_text("\n".join(DICTIONARY) + "\n")
    args = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={seconds}",
        f"-dict={dictionary}",
        f"-artifact_prefix={artifacts}/{target}-",
        "-timeout=10",
        "-rss_limit_mb=1024",
        "-max_len=4096",
        "-print_final_stats=1",
        *extra,
    ]
    atheris.Setup(args, harness)
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("target", choices=[*TARGETS, "all"])
    parser.add_argument("--seconds", type=int, default=60, help="fuzzing time per target (default 60)")
    parser.add_argument("--artifacts", type=Path, default=Path(tempfile.gettempdir()) / "thinkproxy-fuzz")
    parser.add_argument("libfuzzer_args", nargs="*", help="after --: passed to libFuzzer")
    args = parser.parse_args()
    if args.target != "all":
        fuzz_one(args.target, args.seconds, args.artifacts, args.libfuzzer_args)
        return 0
    # libFuzzer runs once per process: one child process per target, in turn.
    failed = []
    for target in TARGETS:
        print(f"== {target} ({args.seconds} s)", flush=True)
        cmd = [sys.executable, __file__, target, f"--seconds={args.seconds}", f"--artifacts={args.artifacts}"]
        code = subprocess.call([*cmd, "--", *args.libfuzzer_args] if args.libfuzzer_args else cmd)
        if code != 0:
            failed.append(target)
    print("failed targets:", ", ".join(failed) if failed else "none")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
