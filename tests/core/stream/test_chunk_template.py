"""Chunks of more of the same, recognized without parsing (proxy.core.stream.chunk_template).

The fast path must be invisible: for every stream, every way of reading it and every consumer
(client bytes, trace events given to observers, the replay capture, the answer kept for
OpenTelemetry), the pipeline with templates gives exactly what it gives without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.build_info import is_compiled
from proxy.core.controls import ReasoningField, TraceFormat, TraceMode
from proxy.core.stream import chunk_template
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.chunk_template import ChunkTemplate, KnownEvent, KnownRun, joined, learn
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.sse import SSEDecoder, SSEEvent
from proxy.core.stream.taps import AnswerKeepingTraceBuilder, TappedTraceBuilder
from proxy.core.stream.trace import TraceBuilder
from tests.helpers import assert_run_tells_its_texts, known_pieces

# These tests watch the pipeline from inside: a subclass of SSEDecoder records what it is fed, or
# ChunkTemplate's methods are patched to count the fast path's hits. A compiled class allows
# neither (compiled code calls it directly), so they run on the pure build only; CI runs the
# suite on both builds, and the compiled one runs the same code.
watches_from_inside = pytest.mark.skipif(
    is_compiled("proxy.core.stream.chunk_template") or is_compiled("proxy.core.stream.sse"),
    reason="patches or subclasses classes compiled in this build; the pure build's run covers it",
)

STREAMS = Path(__file__).parents[2] / "fixtures" / "streams"
FIXTURES = sorted(p.name for p in STREAMS.glob("*.sse"))

OPTIONS = {
    "show": ReasoningOptions(),
    "tags": ReasoningOptions(tags=("think",)),
    "implicit": ReasoningOptions(implicit_open=True),
    "both": ReasoningOptions(output_field=ReasoningField.BOTH),
    "reasoning-field": ReasoningOptions(output_field=ReasoningField.REASONING),
    "hide": ReasoningOptions(tags=("think",), hide=True),
}
TRACES = ["none", "brief", "detailed", "tapped-off", "answer"]


def chunk(delta: dict[str, Any], *, finish: str | None = None, extra: str = "") -> bytes:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    raw = orjson.dumps(body)
    if extra:
        raw = raw[:-1] + b"," + extra.encode() + b"}"
    return b"data: " + raw + b"\n\n"


def synthetic() -> bytes:
    """Templates learned and broken in every way a stream can: escapes, tags arriving mid-stream,
    fields switching, empty text, whitespace, a per-chunk random field, a tool call, usage."""
    events = [chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
    events += [chunk({"content": None, "reasoning_content": t}) for t in ("Let ", "me ", 'say "hi" ', "\\ ")]
    events += [chunk({"content": None, "reasoning_content": t}) for t in ("é\u2028", "\n", "<b> ", "x")]
    events.append(chunk({"content": None, "reasoning_content": ""}))
    events.append(chunk({"content": "", "reasoning_content": None}))
    events += [chunk({"content": t, "reasoning_content": None}) for t in ("The ", "answer ", "<think>", "a")]
    events += [chunk({"content": t, "reasoning_content": None}) for t in ("</think>", "is ", " ", "42")]
    # Same keys written with blanks: another template.
    events += [
        b'data: {"id":"c1","choices":[{"index":0,"delta":{"content" : "'
        + t
        + b'"},"finish_reason":null}]}\n\n'
        for t in (b"one ", b"two ", b"thr\\u00e9e ")
    ]
    # A forged middle: the bytes between the template's prefix and suffix are not one string.
    events.append(
        b'data: {"id":"c1","choices":[{"index":0,"delta":{"content" : "x","tool_calls":[{"index":0,'
        b'"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}],"content":"y"},'
        b'"finish_reason":null}]}\n\n'
    )
    events += [chunk({"content": t}, extra=f'"obfuscation":"{t * 3}"') for t in ("r", "s", "t", "u")]
    events += [chunk({"content": t}) for t in ("more ", "text ")]
    events.append(
        chunk({"tool_calls": [{"index": 0, "id": "call_2", "function": {"name": "g", "arguments": "{}"}}]})
    )
    events += [chunk({"content": t}) for t in ("after ", "call ")]
    events.append(chunk({"content": ""}, finish="stop", extra='"usage":{"prompt_tokens":1}'))
    return b"".join(events) + b"data: [DONE]\n\n"


def hostile() -> bytes:
    """Streams that look like more of the same but are not (found in review): blanks and line
    ends around the string, a key spelled again with escapes, a malformed choice index, and a
    stream whose end flushes held text after chunks of another id."""
    head = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":'
    tail = b'},"finish_reason":null}]}\n\n'
    blanks = [head + b'"a"' + tail, head + b'"b"\n\n' + tail, head + b'"c"\r' + tail, head + b' "d" ' + tail]
    twice = (
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"%s","cont\\u0065nt":"%s"},'
        b'"finish_reason":null}]}\n\n'
    )
    escaped = [twice % (b"a", b"a"), twice % (b"x", b"<think>y</think>"), twice % (b"z", b"a")]
    odd = b'data: {"id":"c","choices":[{"index":%s,"delta":{"content":"%s"},"finish_reason":null}]}\n\n'
    odd_index = [odd % (b"0", b"a")] + [odd % (i, b"b") for i in (b"null", b'"0"', b"1.0", b"null")]
    same = (
        b'data: {"id":"A","model":"m1","choices":[{"index":0,"delta":{"content":"%s"},'
        b'"finish_reason":null}]}\n\n'
    )
    other = (
        b'data: {"id":"B","model":"m2","choices":[{"index":0,"delta":{"content":"x",'
        b'"reasoning_content":"y"},"finish_reason":null}]}\n\n'
    )
    no_id = b'data: {"choices":[{"index":0,"delta":{"content":"<thi"},"finish_reason":null}]}\n\n'
    flushed = [same % b"a", other, same % b"b", no_id]
    return b"".join(blanks + escaped + odd_index + flushed)


def run(
    raw: bytes,
    pieces: list[int],
    options: str,
    trace_kind: str,
    capture: bool,
    max_event: int = 1 << 20,
    templates: bool = True,
    known: bool = False,
    runs: bool = False,
) -> dict[str, Any]:
    """Everything the pipeline produces for `raw` cut at `pieces`: bytes, tapped events, capture,
    kept answer; and whether a template was in use at the end. `runs`: the output as a front door
    gets it (StreamPipeline.feed_runs), each KnownRun in it checked to be what it says."""
    tapped: list[dict[str, Any]] = []
    outputs: list[Any] = []
    kwargs: dict[str, Any] = {"zh": False, "level": "standard", "provider": "p"}
    trace: TraceBuilder | None
    if trace_kind == "none":
        trace = None
    elif trace_kind == "brief":
        trace = TraceBuilder(mode=TraceMode.BRIEF, **kwargs)
    elif trace_kind == "detailed":
        trace = TraceBuilder(mode=TraceMode.DETAILED, **kwargs)
    elif trace_kind == "tapped-off":
        trace = TappedTraceBuilder(client_mode=TraceMode.OFF, tap=tapped.extend, **kwargs)
    else:
        trace = AnswerKeepingTraceBuilder(
            output=outputs.append, client_mode=TraceMode.BRIEF, tap=tapped.extend, **kwargs
        )
    collector = TurnCollector() if capture else None
    pipeline = StreamPipeline(
        reasoning=OPTIONS[options],
        trace=trace,
        trace_format=TraceFormat.COMMENT,
        max_event_bytes=max_event,
        capture=collector,
        templates=templates,
    )
    out = pipeline.begin({"messages": []}, 0.0)
    start = 0
    handed = 0
    for cut in [*pieces, len(raw)]:
        if runs:
            given = pipeline.feed_runs(known_pieces(raw[start:cut]) if known else raw[start:cut], 1.0)
            for piece in given:
                if isinstance(piece, KnownRun):
                    assert_run_tells_its_texts(piece)
                    handed += len(piece.texts)
            out += joined(given)
        elif known:  # as another decoder hands its output over: runs apart, their texts known
            out += pipeline.feed_pieces(known_pieces(raw[start:cut]), 1.0)
        else:
            out += pipeline.feed(raw[start:cut], 1.0)
        start = cut
    out += pipeline.finish(2.0)
    return {
        "bytes": out,
        "tapped": tapped,
        "answer": outputs,
        "turns": collector.turns() if collector is not None else None,
        "template": pipeline._template is not None,
        "handed": handed,
    }


def test_known_pieces_are_what_they_say() -> None:
    pieces = known_pieces(synthetic())
    runs = [p for p in pieces if isinstance(p, KnownRun)]
    assert len(runs) >= 4 and any(len(run.texts) > 2 for run in runs)
    assert b"".join(p.data if isinstance(p, KnownRun) else p for p in pieces) == synthetic()
    for run in runs:
        assert_run_tells_its_texts(run)


@watches_from_inside
def test_a_known_run_of_the_pipelines_template_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fed: list[bytes] = []
    real_feed = StreamPipeline._feed

    def counting_feed(self: StreamPipeline, data: bytes, now_ms: float, runs: Any) -> bytes:
        fed.append(data)
        return real_feed(self, data, now_ms, runs)

    monkeypatch.setattr(StreamPipeline, "_feed", counting_feed)
    pipeline = StreamPipeline(
        reasoning=OPTIONS["show"], trace=None, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
    )
    words = [chunk({"content": f" word{i}"}) for i in range(50)]
    [known] = known_pieces(b"".join(words[1:]))
    pieces: list[bytes | KnownRun] = [words[0], known]  # (the first chunk teaches the template)
    assert pipeline.feed_pieces(pieces, 1.0) == b"".join(words)
    assert fed == [words[0]]  # the run of 49 went out from its texts


@pytest.mark.parametrize("name", [*FIXTURES, "synthetic", "hostile"])
@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("trace", TRACES)
def test_known_runs_change_nothing_for_any_consumer(name: str, options: str, trace: str) -> None:
    # A run handed over with its texts (StreamPipeline.feed_known) gives what its bytes give.
    raw = stream_named(name)
    for capture in (False, True):
        same_with_and_without(raw, [], options, trace, capture, known=True)


@pytest.mark.parametrize("name", ["synthetic", "deepseek-reasoner.sse"])
def test_known_runs_change_nothing_at_every_split_and_size_limit(name: str) -> None:
    raw = stream_named(name)
    for i in range(1, len(raw), 7):
        same_with_and_without(raw, [i], "tags", "answer", True, known=True)
    sizes = sorted({len(e) + 2 for e in raw.split(b"\n\n") if e})
    for limit in [*sizes[len(sizes) // 2 :: 3], 2 * sizes[-1]]:
        same_with_and_without(raw, [], "show", "brief", True, max_event=limit, known=True)


def same_with_and_without(
    raw: bytes,
    pieces: list[int],
    options: str,
    trace: str,
    capture: bool,
    max_event: int = 1 << 20,
    known: bool = False,
    runs: bool = False,
) -> int:
    """The pipeline with templates (`known`: fed as another decoder hands its reads over; `runs`:
    its output as a front door gets it) gives what it gives without; how many chunks went out in
    KnownRuns."""
    expected = run(raw, pieces, options, trace, capture, max_event, templates=False)
    got = run(raw, pieces, options, trace, capture, max_event, known=known, runs=runs)
    assert not expected.pop("template")
    got.pop("template")
    assert expected.pop("handed") == 0
    handed: int = got.pop("handed")
    assert got == expected
    return handed


@pytest.mark.parametrize("options", ["show", "tags"])
def test_a_stream_of_more_of_the_same_learns_a_template_unless_told_not_to(options: str) -> None:
    # (On both builds: otherwise the equivalence tests could compare the ordinary path with itself.)
    raw = (STREAMS / "deepseek-reasoner.sse").read_bytes()
    assert run(raw, [], options, "brief", False)["template"]
    assert not run(raw, [], options, "brief", False, templates=False)["template"]


@pytest.mark.parametrize("name", [*FIXTURES, "synthetic", "hostile"])
@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("trace", TRACES)
def test_runs_handed_to_a_front_door_change_nothing_for_any_consumer(
    name: str, options: str, trace: str
) -> None:
    # The output as a front door gets it (StreamPipeline.feed_runs): the same bytes, the same
    # consumers' view, each KnownRun what it says; from plain reads and from a decoder's pieces.
    raw = stream_named(name)
    for capture in (False, True):
        same_with_and_without(raw, [], options, trace, capture, runs=True)
        same_with_and_without(raw, [], options, trace, capture, known=True, runs=True)


@pytest.mark.parametrize("name", ["synthetic", "deepseek-reasoner.sse"])
def test_runs_handed_to_a_front_door_change_nothing_at_every_split_and_size_limit(name: str) -> None:
    raw = stream_named(name)
    for i in range(1, len(raw), 7):
        same_with_and_without(raw, [i], "tags", "answer", True, runs=True)
        same_with_and_without(raw, [i], "show", "brief", False, known=True, runs=True)
    sizes = sorted({len(e) + 2 for e in raw.split(b"\n\n") if e})
    for limit in [*sizes[len(sizes) // 2 :: 3], 2 * sizes[-1]]:
        same_with_and_without(raw, [], "show", "brief", True, max_event=limit, runs=True)


def test_a_front_door_gets_most_of_a_stream_as_runs_with_their_texts() -> None:
    # (Otherwise the tests above would pass with nothing ever handed over.) One read of a real
    # stream: nearly every chunk of more of the same goes in a KnownRun; so do paced reads.
    raw = (STREAMS / "deepseek-reasoner.sse").read_bytes()
    chunks = raw.count(b"\n\ndata: {")
    assert same_with_and_without(raw, [], "show", "none", False, runs=True) > chunks * 3 // 4
    events = [i + 2 for i in range(len(raw)) if raw.startswith(b"\n\n", i)]
    assert same_with_and_without(raw, events[:-1], "show", "brief", True, runs=True) > chunks * 3 // 4


def test_the_chunk_that_teaches_the_template_goes_to_a_front_door_as_a_run_of_one() -> None:
    # The pipeline decodes the first chunk of each shape (it learns the template from it); a front
    # door gets that chunk too as a run of one, after the trace comment it caused, so that every
    # text chunk of choice 0 reaches the door with its text and none is decoded twice.
    words = [chunk({"content": f" word{i}"}) for i in range(50)]
    first = chunk({"role": "assistant", "content": "Hi"})
    end = chunk({}, finish="stop") + b"data: [DONE]\n\n"

    def traced() -> StreamPipeline:
        trace = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="standard", provider="p")
        pipeline = StreamPipeline(
            reasoning=ReasoningOptions(),
            trace=trace,
            trace_format=TraceFormat.COMMENT,
            max_event_bytes=1 << 20,
        )
        pipeline.begin({"messages": []}, 0.0)
        return pipeline

    read = first + b"".join(words) + end
    given = traced().feed_runs(read, 1.0)
    runs = [piece for piece in given if isinstance(piece, KnownRun)]
    assert [len(run.texts) for run in runs] == [1, 1, 49]
    assert [run.data for run in runs[:2]] == [first, words[0]]
    comment = given[0]  # (handed with its line: the door does not decode it)
    assert isinstance(comment, KnownEvent) and comment.data.startswith(b": trace ")
    assert comment.comments == [comment.data.removesuffix(b"\n\n")]
    for run in runs:
        assert_run_tells_its_texts(run)
    assert joined(given) == traced().feed(read, 1.0)


def test_a_chunk_of_another_choice_is_not_handed_to_a_front_door() -> None:
    # The doors read choice 0 only: a chunk of another choice that teaches the template is no run
    # (it goes with its value, as parsed), where one of choice 0 goes as a run of one.
    other = chunk({"content": "x"}).replace(b'"index":0', b'"index":1')
    pipeline = StreamPipeline(
        reasoning=ReasoningOptions(), trace=None, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
    )
    given = pipeline.feed_runs(chunk({"content": "Hi"}) + other, 1.0)
    assert [type(piece) for piece in given] == [KnownRun, KnownEvent]
    assert given[1] == KnownEvent(other, orjson.loads(other[6:-2]))


@watches_from_inside
def test_a_read_of_many_chunks_of_more_of_the_same_is_taken_in_one_run() -> None:
    # A fast upstream's read holds hundreds of events: once a chunk taught the template, the run
    # of matching ones goes out as one slice of the read, and the decoder sees only the rest.
    words = [chunk({"content": f" word{i}"}) for i in range(200)]
    end = chunk({}, finish="stop") + b"data: [DONE]\n\n"
    pipeline = StreamPipeline(
        reasoning=ReasoningOptions(), trace=None, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
    )
    decoded: list[bytes] = []

    class Recording(SSEDecoder):
        def feed(self, chunk: bytes) -> list[SSEEvent]:
            decoded.append(chunk)
            return super().feed(chunk)

    pipeline._decoder = Recording(1 << 20)
    first = chunk({"role": "assistant", "content": "Hi"})
    out = pipeline.feed(first + words[0], 1.0)
    out += pipeline.feed(b"".join(words[1:]) + end, 2.0)
    out += pipeline.finish(3.0)
    # (One event at a time: `first` teaches a template that `words[0]` (no role) does not
    # match, so that one is decoded too and teaches the one the rest match.)
    assert decoded == [first, words[0], chunk({}, finish="stop"), b"data: [DONE]\n\n"]
    assert out.startswith(
        chunk({"role": "assistant", "content": "Hi"}) + b"".join(words) + chunk({}, finish="stop")
    )


@watches_from_inside
@pytest.mark.parametrize("options", ["reasoning-field", "both", "hide"])
def test_a_read_whose_chunks_all_need_parsing_is_decoded_at_once_after_a_few_events(options: str) -> None:
    # Chunks the pipeline must rewrite (a reasoning field renamed, reasoning hidden) never form
    # runs: after MAX_STEPS events decoded one at a time, the rest of the read goes at once.
    from proxy.core.stream.pipeline import MAX_STEPS

    events = [chunk({"role": "assistant", "reasoning_content": "Hmm"})]
    events += [chunk({"reasoning_content": f" step {i}"}) for i in range(300)]
    calls: list[bytes] = []

    class Recording(SSEDecoder):
        def feed(self, chunk: bytes) -> list[SSEEvent]:
            calls.append(chunk)
            return super().feed(chunk)

    pipeline = StreamPipeline(
        reasoning=OPTIONS[options], trace=None, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
    )
    pipeline._decoder = Recording(1 << 20)
    for read in (b"".join(events[:150]), b"".join(events[150:])):
        calls.clear()
        pipeline.feed(read, 1.0)
        assert len(calls) <= MAX_STEPS + 1
        assert b"".join(calls) == read


@pytest.mark.parametrize("name", ["synthetic", "hostile", "deepseek-reasoner.sse"])
def test_templates_change_nothing_when_events_exceed_the_size_limit(name: str) -> None:
    # Events larger than THINKPROXY_MAX_SSE_EVENT_BYTES end the stream the same way either way.
    raw = stream_named(name)
    sizes = sorted({len(e) + 2 for e in raw.split(b"\n\n") if e})
    for limit in sizes[len(sizes) // 2 :: 3]:
        same_with_and_without(raw, [], "tags", "answer", True, max_event=limit)
        same_with_and_without(raw, [len(raw) // 2], "show", "brief", True, max_event=limit - 1)


@pytest.mark.parametrize("name", [*FIXTURES, "synthetic", "hostile"])
@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("trace", TRACES)
def test_templates_change_nothing_for_any_consumer(name: str, options: str, trace: str) -> None:
    raw = stream_named(name)
    for capture in (False, True):
        same_with_and_without(raw, [], options, trace, capture)


@pytest.mark.parametrize("name", ["deepseek-reasoner.sse", "synthetic", "hostile", "vllm-reasoning-n2.sse"])
def test_templates_change_nothing_at_every_split(name: str) -> None:
    raw = stream_named(name)
    for i in range(1, len(raw)):
        same_with_and_without(raw, [i], "tags", "answer", True)


@pytest.mark.parametrize("name", [*FIXTURES, "synthetic", "hostile"])
@pytest.mark.parametrize("trace", TRACES)
def test_templates_change_nothing_when_every_event_is_its_own_read(name: str, trace: str) -> None:
    # A paced stream: each read is one whole event, which the pipeline takes without decoding.
    raw = stream_named(name)
    ends = [i + 1 for i in range(len(raw) - 1) if raw[i : i + 2] == b"\n\n" and raw[i + 2 : i + 3] != b"\n"]
    for options in ("show", "tags", "hide"):
        same_with_and_without(raw, ends, options, trace, True)


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=20_000), max_size=8), trace=st.sampled_from(TRACES))
def test_templates_change_nothing_however_reads_split_the_stream(cuts: list[int], trace: str) -> None:
    raw = synthetic() + b"\n\n\n" + synthetic()  # (and a blank-line run between events)
    pieces = sorted({c % len(raw) for c in cuts} - {0})
    same_with_and_without(raw, pieces, "tags", trace, True)


def stream_named(name: str) -> bytes:
    if name == "synthetic":
        return synthetic()
    if name == "hostile":
        return hostile()
    return (STREAMS / name).read_bytes()


@watches_from_inside
def test_the_fast_path_is_taken_for_more_of_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    # (Otherwise the equivalence tests above would pass with templates never used.)
    hits: list[str] = []
    real_of, real_run = ChunkTemplate.text_of, ChunkTemplate.take_texts

    def counting(self: ChunkTemplate, data: bytes) -> str | None:
        text = real_of(self, data)
        hits.extend([text] if text is not None else [])
        return text

    def counting_runs(self: ChunkTemplate, data: bytes, start: int, *args: Any) -> tuple[int, list[str]]:
        end, texts = real_run(self, data, start, *args)
        hits.extend(["run"] * data.count(b"\n\n", start, end))
        return end, texts

    monkeypatch.setattr(ChunkTemplate, "text_of", counting)
    monkeypatch.setattr(ChunkTemplate, "take_texts", counting_runs)
    raw = (STREAMS / "deepseek-reasoner.sse").read_bytes()
    run(raw, [], "show", "brief", False)  # one read: runs within it
    assert len(hits) > 10
    hits.clear()
    run(raw.replace(b"\n", b"\r\n"), [], "show", "brief", False)  # CRLF: the decoder, then text_of
    assert len(hits) > 10


def template_of(raw_event: bytes) -> ChunkTemplate | None:
    data = raw_event[6:-2]
    return learn(data, orjson.loads(data))


def test_learns_the_bytes_around_the_one_text_field() -> None:
    template = template_of(chunk({"content": None, "reasoning_content": 'say "hi" \\'}))
    assert template is not None
    assert template.field == "reasoning_content" and template.reasoning and template.index == 0
    assert template.prefix.endswith(b'"reasoning_content":')
    assert template.suffix.startswith(b'},"finish_reason":null')


def test_a_read_of_two_events_is_not_decoded_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # A busy proxy finds two paced events in one read: the first's prefix and the second's suffix
    # frame them like one event. Decoding what lies between would fail with an exception (~3 µs);
    # a line end inside says at once that it is not one event.
    template = template_of(chunk({"content": "a"}))
    assert template is not None and template.event_prefix is not None
    one = template.event_prefix + b'"Hello"' + template.event_suffix
    assert template.text_of_event(one) == "Hello"
    decoded: list[bytes] = []
    real_loads = orjson.loads
    monkeypatch.setattr(chunk_template.orjson, "loads", lambda b: decoded.append(bytes(b)) or real_loads(b))
    two = one + template.event_prefix + b'"world"' + template.event_suffix
    assert template.text_of_event(two) is None
    assert decoded == []


@pytest.mark.parametrize(
    "delta",
    [
        {"content": ""},
        {"content": "a", "reasoning_content": "b"},
        {"content": ["part"]},
        {"tool_calls": [{"index": 0}], "content": "a"},
        {"reasoning_details": [{"type": "reasoning.text"}], "reasoning": "a"},
        {"role": "assistant"},
    ],
)
def test_no_template_from_a_chunk_that_is_not_plain_text(delta: dict[str, Any]) -> None:
    assert template_of(chunk(delta)) is None


def test_no_template_from_a_finishing_chunk_or_one_with_usage_or_two_choices() -> None:
    assert template_of(chunk({"content": "a"}, finish="stop")) is None
    assert template_of(chunk({"content": "a"}, extra='"usage":{"total_tokens":1}')) is None
    two = orjson.dumps({"choices": [{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {}}]})
    assert learn(two, orjson.loads(two)) is None


def test_no_template_when_the_key_occurs_twice() -> None:
    data = b'{"choices":[{"index":0,"delta":{"content":"a"}}],"x":{"content":"b"}}'
    assert learn(data, orjson.loads(data)) is None


@pytest.mark.parametrize(
    ("middle", "text"),
    [
        (b'"plain"', "plain"),
        (b'"esc\\"aped\\\\"', 'esc"aped\\'),
        (b'"\\u00e9\\n"', "é\n"),
        (b'""', None),  # empty: not more of the same
        (b'"a","content":"b"', None),  # a forged middle is not one string
        (b'"a"},"x":{"y":"b"', None),
        (b"null", None),
        (b"42", None),
        (b'"unterminated', None),
    ],
)
def test_text_of_accepts_exactly_one_non_empty_string(middle: bytes, text: str | None) -> None:
    template = template_of(chunk({"content": "seed"}))
    assert template is not None
    assert template.text_of(template.prefix + middle + template.suffix) == text


@settings(max_examples=300, deadline=None)
@given(text=st.text(min_size=1, max_size=20), tail=st.sampled_from([b"", b"\n", b"\r", b"\r\ndata: x", b" "]))
def test_a_run_is_what_the_decoder_would_make_of_the_events(text: str, tail: bytes) -> None:
    template = template_of(chunk({"content": "seed"}))
    assert template is not None
    event = chunk({"content": text})[:-2] + tail + b"\n\n"
    read = event * 2 + b"data: [DONE]\n\n"
    heard: list[str] = []
    taken = template.take_run(b"xx" + read, 2, 1 << 20, False, (heard.append,)) - 2
    # What was taken is whole events of the template, as the decoder sees them, and it leaves the
    # decoder where the rest of the read finds it.
    decoder = SSEDecoder()
    events = decoder.feed(read[:taken])
    assert decoder.idle
    assert [orjson.loads(e.data or b"")["choices"][0]["delta"]["content"] for e in events] == heard
    assert events + decoder.feed(read[taken:]) == SSEDecoder().feed(read)
    assert heard == [text] * len(heard)
    if not tail:
        assert heard == [text, text]


def test_a_run_stops_at_an_event_over_the_size_limit_or_a_text_with_a_tag_when_asked() -> None:
    template = template_of(chunk({"content": "seed"}))
    assert template is not None
    short, tagged = chunk({"content": "ok"}), chunk({"content": "a<think>"})
    data = short + tagged + short
    assert template.take_run(data, 0, len(short), False, ()) == len(short)
    assert template.take_run(data, 0, len(short) - 1, False, ()) == 0
    assert template.take_run(data, 0, 1 << 20, False, ()) == len(data)
    heard: list[str] = []
    assert template.take_run(data, 0, 1 << 20, True, (heard.append,)) == len(short)
    assert heard == ["ok"]


def test_a_chunk_written_on_several_lines_gets_no_event_template() -> None:
    data = b'{"choices":[{"index":0,\n"delta":{"content":"a"}}]}'
    template = learn(data, orjson.loads(data))
    assert template is not None and template.event_prefix is None
    assert template.take_run(b"data: " + data + b"\n\n", 0, 1 << 20, False, ()) == 0


def test_text_of_needs_the_exact_bytes_around() -> None:
    template = template_of(chunk({"content": "seed"}))
    assert template is not None
    other = chunk({"content": "seed"}, extra='"obfuscation":"abc"')[6:-2]
    assert template.text_of(other) is None
    assert template.text_of(template.prefix + b'"x"') is None
