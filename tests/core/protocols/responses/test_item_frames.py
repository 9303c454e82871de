"""The frames that open and close a reasoning or message item, written from their parts
(proxy.core.protocols.responses.item_frames, the encoder's direct path): byte for byte the general
path's, whatever the items' texts, order, finish, form (SSE or the socket's) and reasoning form
(content or summary), and the general path's wherever a tool call is open."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.protocols.chat_events import DONE as DONE_EVENT
from proxy.core.protocols.chat_events import Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from proxy.core.protocols.responses.events import ResponsesEncoder
from proxy.core.protocols.responses.output import frames, message_frames
from proxy.core.protocols.responses.stream import ResponsesTranscoder
from tests.core.protocols.responses.test_events import USAGE, Sealer, ids, make_frame
from tests.helpers import known_pieces

DONE = b"data: [DONE]\n\n"
# Texts with what JSON escapes or holds as more than one byte (quotes, backslashes, control and
# line separator characters, non-ASCII, astral), and the bytes a frame is cut at (`","`, `}`).
TEXT = st.text(alphabet=st.sampled_from(list('ab "\\\n\t\x01\u2028é😀,}{:')), min_size=1, max_size=12)


def data(value: Any) -> bytes:
    return b"data: " + orjson.dumps(value) + b"\n\n"


def delta_chunk(**delta: Any) -> bytes:
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return data({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


def stream(segments: list[tuple[str, list[str]]], finish: str | None) -> bytes:
    """Chat SSE of the segments in order (each a run of reasoning, answer text, or a tool call's
    arguments in pieces), then the finish reason with a usage (none: the stream just ends), [DONE]."""
    out = [delta_chunk(role="assistant", content="")]
    for call, (kind, texts) in enumerate(segments):
        for i, text in enumerate(texts):
            if kind == "call":
                function = {"name": "lookup", "arguments": text} if i == 0 else {"arguments": text}
                fragment = {"index": call, "id": f"call_{call}", "function": function}
                out.append(delta_chunk(tool_calls=[fragment] if i == 0 else [{"index": call, **fragment}]))
            else:
                out.append(delta_chunk(**{kind: text}))
    if finish is not None:
        end = {"index": 0, "delta": {}, "finish_reason": finish}
        out.append(data({"id": "c1", "choices": [end], "usage": USAGE}))
    return b"".join([*out, DONE])


def transcoder(summary: bool, socket: bool, templates: bool) -> ResponsesTranscoder:
    return ResponsesTranscoder(
        make_frame(summary), seal=Sealer(), new_id=ids(), templates=templates, socket=socket
    )


SEGMENTS = st.lists(
    st.tuples(
        st.sampled_from(["reasoning_content", "content", "call"]), st.lists(TEXT, min_size=1, max_size=4)
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(
    segments=SEGMENTS,
    finish=st.sampled_from(["stop", "length", "content_filter", "tool_calls", None]),
    summary=st.booleans(),
    socket=st.booleans(),
    cut=st.integers(min_value=0, max_value=4000),
)
def test_items_opened_and_closed_directly_are_the_general_paths_frames(
    segments: list[tuple[str, list[str]]], finish: str | None, summary: bool, socket: bool, cut: int
) -> None:
    raw = stream(segments, finish)
    reference = transcoder(summary, socket, templates=False)
    expected = reference.feed(raw) + reference.close()
    fast = transcoder(summary, socket, templates=True)
    assert fast.feed(raw) + fast.close() == expected
    assert fast.final == reference.final
    cut = min(cut, len(raw))  # (handed over as the pipeline hands runs: their texts, in two reads)
    handed = transcoder(summary, socket, templates=True)
    out = handed.feed_pieces(known_pieces(raw[:cut])) + handed.feed_pieces(known_pieces(raw[cut:]))
    assert out + handed.close() == expected
    assert handed.final == reference.final


@pytest.mark.parametrize("summary", [False, True])
@pytest.mark.parametrize("socket", [False, True])
def test_the_encoder_opens_and_closes_items_directly_as_feed_does(summary: bool, socket: bool) -> None:
    # Each direct call (not the transcoder's choice between them) against `feed` of the same.
    write = message_frames if socket else frames
    direct = ResponsesEncoder(make_frame(summary), seal=Sealer(), new_id=ids(), socket=socket)
    general = ResponsesEncoder(make_frame(summary), seal=Sealer(), new_id=ids(), socket=socket)
    assert write(direct.start()) == write(general.start())
    for reasoning, texts in [(True, ["a", 'b"']), (False, ["c\n"]), (True, ["d"]), (False, ["é", "😀"])]:
        assert direct.text_delta_frames(reasoning, texts) is None  # (another item, or none, streams)
        written = direct.opening_frames(reasoning, texts)
        delta = ReasoningDelta if reasoning else TextDelta
        assert written == write(general.feed([delta([text]) for text in texts]))
    assert direct.finish_frames(Finish("length", ())) == write(general.feed([Finish("length", ())]))
    assert direct.finish_frames(Finish("stop", ())) == b"" == write(general.feed([Finish("stop", ())]))
    assert direct.opening_frames(True, ["late"]) is None  # (after the finish reason: nothing carried)
    assert write(direct.feed([Usage(USAGE), DONE_EVENT])) == write(general.feed([Usage(USAGE), DONE_EVENT]))


def test_items_are_not_written_directly_while_a_call_is_open() -> None:
    e = ResponsesEncoder(make_frame(), seal=Sealer(), new_id=ids())
    e.start()
    e.feed([ToolCallDelta(0, "call_1", "lookup", "{", None)])
    assert e.opening_frames(False, ["after the call"]) is None
    assert e.finish_frames(Finish("tool_calls", ())) is None


@pytest.mark.parametrize("socket", [False, True])
@pytest.mark.parametrize(
    "echo",
    [
        {},
        {"instructions": 'say "hi"\n\u2028é😀', "metadata": {"k": "v"}, "temperature": 0.5},
        {"instructions": "a lone surrogate \ud800 orjson refuses"},  # (jsonio's fallback writes it)
        {"metadata": {"n": 2**70}},  # (an integer past 64 bits: the fallback too)
    ],
)
def test_the_opening_frames_written_directly_are_the_events_framed(
    echo: dict[str, Any], socket: bool
) -> None:
    """response.created and response.in_progress written with their one `Response`'s JSON once
    (start_frames) are byte for byte both events framed, whatever the echoed fields hold; once
    started, nothing."""
    write = message_frames if socket else frames
    direct, general = (
        ResponsesEncoder(make_frame(**echo), seal=Sealer(), new_id=ids(), socket=socket) for _ in range(2)
    )
    assert direct.start_frames() == write(general.start())
    assert direct.start_frames() == b"" == write(general.start())
    assert write(direct.end()) == write(general.end())
