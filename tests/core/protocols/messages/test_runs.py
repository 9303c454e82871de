"""The Messages transcoder's runs: chunks of more of the same, read by their ChunkTemplate without
decoding, give byte for byte what decoding every event gives, for real streams (each recorded
fixture through the response pipeline, as the door gets it) at every split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.core.controls import ReasoningField, TraceFormat, TraceMode
from proxy.core.protocols.messages.events import ThinkingFacts
from proxy.core.protocols.messages.stream import MessagesTranscoder
from proxy.core.stream.chunk_template import KnownRun, joined
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder
from tests.helpers import known_pieces, pipeline_pieces, split_points

STREAMS = Path(__file__).resolve().parents[3] / "fixtures" / "streams"
FIXTURES = sorted(p.name for p in STREAMS.glob("*.sse"))
KEEPALIVE = b": keep-alive\n\n"


def sign(facts: ThinkingFacts) -> str:
    return f"sig:{facts.next_call_id}:{len(facts.text)}:{facts.text[-3:]}"


def ids(prefix: str) -> str:
    return f"{prefix}_1"


def feed(pieces: list[bytes], *, runs: bool = True, **kwargs: Any) -> tuple[bytes, MessagesTranscoder]:
    # runs=False: the reference, every event decoded (no template is ever learned)
    t = MessagesTranscoder("msg_1", "m", seal=sign, new_id=ids, templates=runs, **kwargs)
    out = b"".join(t.feed(piece) for piece in pieces) + t.close()
    return out, t


def piped(raw: bytes) -> bytes:
    """What the response pipeline writes for an upstream stream (brief trace as comments), with a
    keep-alive after every tenth event (as the review gate writes them while a reviewer decides)."""
    options = ReasoningOptions(tags=("think",), output_field=ReasoningField.REASONING_CONTENT)
    trace = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="deep", provider="p", method="params")
    pipeline = StreamPipeline(
        reasoning=options, trace=trace, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
    )
    out = pipeline.begin({"messages": []}, 0.0) + pipeline.feed(raw, 1.0) + pipeline.finish(2.0)
    events = out.split(b"\n\n")
    with_keepalives = [e + b"\n\n" + (KEEPALIVE if i % 10 == 9 else b"") for i, e in enumerate(events[:-1])]
    return b"".join(with_keepalives) + events[-1]


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", **extra}
    body["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


TEXTS = ["word ", "Zürich ", '"q" ', 'a",', "\\ ", "<tag> ", "✓ ", "tab\t", "\u2028 "] * 3


def synthetic(*, escaped: bool = False) -> bytes:
    """Long runs of reasoning and text (an upstream's usual shape), split by a trace comment, a
    keep-alive and an empty piece; `escaped`: non-ASCII and `/` written as escapes (as Python's json
    module and some servers write them), which the door does not copy as they came."""

    def piece(field: str, text: str) -> bytes:
        other = "content" if field == "reasoning_content" else "reasoning_content"
        out = chunk({field: text, other: None})
        if escaped:
            body = json.loads(out[6:])
            out = b"data: " + json.dumps(body).replace("/", "\\/").encode() + b"\n\n"
        return out

    return b"".join(
        [
            chunk({"role": "assistant", "reasoning_content": ""}),
            *(piece("reasoning_content", t) for t in TEXTS),
            b': trace {"type":"status","stage":"answering"}\n\n',
            piece("content", "a/b "),
            KEEPALIVE,
            *(piece("content", t) for t in TEXTS),
            piece("content", ""),
            *(piece("content", t) for t in TEXTS[:5]),
            chunk({}, "stop", usage={"prompt_tokens": 9, "completion_tokens": 99}),
            b"data: [DONE]\n\n",
        ]
    )


def hostile() -> bytes:
    """A run's shape with other things where its text goes: strings that end in escaped quotes and
    backslashes, blanks around the string, a number, a second key, a raw control character, a lone
    surrogate, an empty string, escapes orjson writes otherwise, and a line end inside."""
    template = chunk({"content": "@@", "reasoning_content": None})
    prefix, suffix = template.split(b'"@@"')
    holes = [
        b'"a\\\\"',
        b'"\\"q\\""',
        b'"ok "',
        b' "blank"',
        b"1",
        b'"x","reasoning":"y"',
        b'"ok "',
        b'"raw\ttab"',
        b'"\\ud800"',
        b'""',
        b'"\\u00e9\\/"',
        b'"ok "',
        b'"split\n\n: line"',
        b'"ok"',
    ]
    return b"".join(
        [
            chunk({"role": "assistant", "content": "", "reasoning_content": None}),
            chunk({"content": "first ", "reasoning_content": None}),
            *(prefix + hole + suffix for hole in holes),
            chunk({}, "stop"),
            b"data: [DONE]\n\n",
        ]
    )


STREAMS_UNDER_TEST = {
    **{name: lambda name=name: piped((STREAMS / name).read_bytes()) for name in FIXTURES},
    "synthetic": synthetic,
    "escaped": lambda: synthetic(escaped=True),
    "hostile": hostile,
}
# The streams built for the hard cases inside an event (texts with escapes, holes, a run broken by
# comments): the split tests cut these at every byte.
BUILT = ("synthetic", "escaped", "hostile")


def cuts_of(name: str, stream: bytes, show: bool) -> list[int] | range:
    """Where the split tests cut `stream`: the built streams at every byte when thinking is shown
    (every byte of an escape or a hole, wherever it falls in a run); the recorded ones, and the
    built ones with thinking hidden (the same reading of the bytes, only not written), at every
    line end, the bytes around it and every 7th byte (tests.helpers.split_points). The hard cases
    inside an event are the built streams', tried at every byte; what the recorded streams add is
    real event sequences, which a cut at every boundary and several inside each event still try."""
    return range(len(stream) + 1) if name in BUILT and show else split_points(stream, 7)


@pytest.mark.parametrize("name", list(STREAMS_UNDER_TEST))
@pytest.mark.parametrize("show", [True, False])
def test_runs_give_the_decoded_bytes_at_every_split(name: str, show: bool) -> None:
    """Runs read by their shape give the bytes of decoding every event, however the stream is cut
    in two (at every byte for the built streams with thinking shown, see `cuts_of`) or in 97-byte
    reads."""
    stream = STREAMS_UNDER_TEST[name]()
    reference, decoded = feed([stream], runs=False, show_thinking=show)
    whole, fast = feed([stream], show_thinking=show)
    assert whole == reference
    assert fast.final == decoded.final
    for cut in cuts_of(name, stream, show):
        out, _ = feed([stream[:cut], stream[cut:]], show_thinking=show)
        assert out == reference, f"split at {cut}: {stream[max(0, cut - 30) : cut + 30]!r}"
    step = 97
    out, _ = feed([stream[i : i + step] for i in range(0, len(stream), step)], show_thinking=show)
    assert out == reference


def test_runs_are_read_without_decoding_each_event() -> None:
    """In big reads (a fast upstream's), the chunks of a run are not decoded one by one."""
    stream = synthetic()
    events = stream.count(b"\ndata: ") + 1
    _, t = feed([stream])
    assert t.hits > events * 3 // 4
    assert t.final is not None and t.final["content"][1]["text"].startswith("a/b word Zürich")
    assert feed([stream], runs=False)[1].hits == 0


def test_hidden_thinking_in_runs_writes_nothing_but_keeps_the_text_for_the_signature() -> None:
    stream = synthetic()
    out, t = feed([stream], show_thinking=False)
    assert b"thinking_delta" not in out and "Zürich".encode() in out  # (the answer's text)
    assert t.final is not None
    thinking = t.final["content"][0]
    assert thinking["thinking"] == "" and thinking["signature"] == f"sig:None:{len(''.join(TEXTS))}:\t\u2028 "


def test_a_keep_alive_inside_a_run_is_a_ping_in_place() -> None:
    stream = synthetic()
    out, _ = feed([stream])
    text_delta = b'"delta":{"type":"text_delta","text":"a/b "}'
    ping = out.index(b'event: ping\ndata: {"type":"ping"}\n\n', out.index(text_delta))
    assert out.index(text_delta) < ping < out.index(b'"text":"word "', out.index(text_delta))
    assert out.count(b"event: ping") == 2


# -- runs handed over with their texts (StreamPipeline.feed_runs → MessagesTranscoder.feed_pieces) --


def handed(pieces: list[list[bytes | KnownRun]], **kwargs: Any) -> tuple[bytes, MessagesTranscoder]:
    t = MessagesTranscoder("msg_1", "m", seal=sign, new_id=ids, **kwargs)
    return b"".join(t.feed_pieces(piece) for piece in pieces) + t.close(), t


@pytest.mark.parametrize("name", list(STREAMS_UNDER_TEST))
@pytest.mark.parametrize("show", [True, False])
def test_runs_handed_over_give_the_decoded_bytes_at_every_split(name: str, show: bool) -> None:
    """Each run of whole events claimed with its texts (as a decoder hands them over): the same
    bytes as decoding every event, wherever the claims fall against the transcoder's own state.
    Cut at every line end, the bytes around it and every 13th byte (tests.helpers.split_points): a
    run is handed over as whole events, so a cut matters by the event it falls in and whether at
    its boundary, and each event is still cut inside."""
    stream = STREAMS_UNDER_TEST[name]()
    reference, decoded = feed([stream], runs=False, show_thinking=show)
    whole, t = handed([known_pieces(stream)], show_thinking=show)
    assert whole == reference
    assert t.final == decoded.final
    for cut in split_points(stream, 13):
        out, _ = handed([known_pieces(stream[:cut]), known_pieces(stream[cut:])], show_thinking=show)
        assert out == reference, f"split at {cut}: {stream[max(0, cut - 30) : cut + 30]!r}"


@pytest.mark.parametrize("name", FIXTURES)
def test_what_the_pipeline_hands_over_gives_what_its_bytes_give(name: str) -> None:
    raw = (STREAMS / name).read_bytes()
    events = [i + 2 for i in range(len(raw)) if raw.startswith(b"\n\n", i)][:-1]
    for cuts in ([], events, list(range(13, len(raw), 97))):
        pieces = pipeline_pieces(raw, cuts)
        reference, _ = feed([joined(piece) for piece in pieces], runs=False)
        out, _ = handed(pieces)
        assert out == reference


def test_runs_handed_over_are_not_scanned_again() -> None:
    raw = (STREAMS / "deepseek-reasoner.sse").read_bytes()
    chunks = raw.count(b"\n\ndata: {")
    _, t = handed(pipeline_pieces(raw, []))
    assert t.reader.handed > chunks * 3 // 4 and t.reader.taken == 0
    assert t.hits == t.reader.handed
    # (the same bytes, not handed over, are scanned: the count does count)
    _, scanned = feed([joined(p) for p in pipeline_pieces(raw, [])])
    assert scanned.reader.taken > chunks * 3 // 4 and scanned.reader.handed == 0
