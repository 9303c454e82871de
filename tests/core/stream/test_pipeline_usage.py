"""The stream pipeline and the token estimate (proxy.core.usage): the reasoning text it relays is
tallied, and the answer's usage gets the estimate when the upstream reported no count."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.controls import TraceFormat, TraceMode
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.completion import process_completion
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder
from proxy.core.usage import ESTIMATED_MARKER, ReasoningTally, text_tokens

REASONING = ["Let me think ", "about the weather ", "in Paris. 巴黎"]
HEAD = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def frame(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps({**HEAD, **chunk}) + b"\n\n"


def delta(**fields: Any) -> bytes:
    return frame({"choices": [{"index": 0, "delta": fields, "finish_reason": None}]})


def stream(usage: dict[str, Any] | None, *, on_finish: bool = False) -> bytes:
    """A vLLM-style answer: reasoning_content deltas, content, a finish, usage when given."""
    body = b"".join(delta(reasoning_content=text) for text in REASONING) + delta(content="Rain.")
    finish: dict[str, Any] = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    if usage is not None and on_finish:
        finish["usage"] = usage
    body += frame(finish)
    if usage is not None and not on_finish:
        body += frame({"choices": [], "usage": usage})
    return body + b"data: [DONE]\n\n"


def run(
    raw: bytes, *, capture: bool = False, hide: bool = False, cut: int | None = None
) -> tuple[bytes, ReasoningTally, TraceBuilder]:
    tally = ReasoningTally()
    trace = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="none", provider="p")
    p = StreamPipeline(
        reasoning=ReasoningOptions(hide=hide),
        trace=trace,
        trace_format=TraceFormat.COMMENT,
        max_event_bytes=1 << 20,
        capture=TurnCollector() if capture else None,
        tally=tally,
    )
    out = p.begin(None, 0.0)
    for piece in (raw,) if cut is None else (raw[:cut], raw[cut:]):
        out += p.feed(piece, 1.0)
    return out + p.finish(2.0), tally, trace


def usage_sent(out: bytes) -> dict[str, Any]:
    for event in out.split(b"\n\n"):
        if event.startswith(b"data: {"):
            chunk = orjson.loads(event[6:])
            if isinstance(chunk.get("usage"), dict):
                found: dict[str, Any] = chunk["usage"]
    return found


EXPECTED = text_tokens("".join(REASONING))
PLAIN = {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52}


@pytest.mark.parametrize("on_finish", [False, True])
@pytest.mark.parametrize("capture", [False, True])
def test_usage_without_a_reasoning_count_gets_the_estimate_beside_the_counts(
    on_finish: bool, capture: bool
) -> None:
    out, tally, trace = run(stream(dict(PLAIN), on_finish=on_finish), capture=capture)
    usage = usage_sent(out)
    assert usage == {
        **PLAIN,
        "completion_tokens_details": {"reasoning_tokens": EXPECTED, ESTIMATED_MARKER: True},
    }
    assert tally.estimate() == EXPECTED
    # The trace (and so every listener) reads the usage the client got.
    outcome = trace.outcome()
    assert outcome is not None and outcome.usage == usage


def test_the_estimate_is_the_same_wherever_the_reads_split() -> None:
    raw = stream(dict(PLAIN))
    whole = run(raw)[0]
    for cut in range(1, len(raw), 7):
        assert run(raw, cut=cut)[0] == whole, cut


def test_hidden_reasoning_is_still_counted() -> None:
    out, _, _ = run(stream(dict(PLAIN)), hide=True)
    assert b"Paris" not in out
    assert usage_sent(out)["completion_tokens_details"]["reasoning_tokens"] == EXPECTED


def test_a_reported_count_passes_as_it_came() -> None:
    reported = {**PLAIN, "completion_tokens_details": {"reasoning_tokens": 30}}
    raw = stream(reported)
    out, tally, _ = run(raw)
    assert frame({"choices": [], "usage": reported}) in out  # the upstream's bytes, unchanged
    assert tally.estimate() == EXPECTED  # (counted all the same; the record prefers the report)


def test_no_usage_is_invented_and_the_count_stays_for_the_record() -> None:
    out, tally, _ = run(stream(None))
    assert b'"usage"' not in out
    assert tally.estimate() == EXPECTED


def test_a_usage_repeated_on_every_chunk_is_filled_at_the_end_only() -> None:
    # vLLM's continuous_usage_stats: every chunk carries usage; only the last one changes.
    raw = b"".join(
        frame(
            {
                "choices": [{"index": 0, "delta": {"reasoning_content": t}, "finish_reason": None}],
                "usage": PLAIN,
            }
        )
        for t in REASONING
    )
    raw += frame({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": PLAIN})
    out, _, _ = run(raw + b"data: [DONE]\n\n")
    chunks = [orjson.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]
    estimated = {"reasoning_tokens": EXPECTED, ESTIMATED_MARKER: True}
    assert [c["usage"].get("completion_tokens_details") for c in chunks] == [None, None, None, estimated]


def completion(usage: dict[str, Any] | None) -> bytes:
    body: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "reasoning_content": "".join(REASONING), "content": "Rain."},
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


@pytest.mark.parametrize("hide", [False, True])
def test_a_completion_gets_the_estimate_in_its_usage(hide: bool) -> None:
    tally = ReasoningTally()
    out = process_completion(
        completion(dict(PLAIN)), reasoning=ReasoningOptions(hide=hide), trace=None, request_body=None,
        now_ms=1.0, tally=tally,
    )  # fmt: skip
    usage = orjson.loads(out)["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": EXPECTED, ESTIMATED_MARKER: True}
    assert usage["completion_tokens"] == PLAIN["completion_tokens"]


def test_a_completion_with_a_reported_count_or_no_usage_is_not_rewritten() -> None:
    for usage in ({**PLAIN, "completion_tokens_details": {"reasoning_tokens": 30}}, None):
        raw = completion(usage)
        tally = ReasoningTally()
        out = process_completion(
            raw, reasoning=ReasoningOptions(), trace=None, request_body=None, now_ms=1.0, tally=tally
        )
        assert out == raw
        assert tally.estimate() == EXPECTED
