"""Event templates (proxy.core.protocols.event_template): a Responses delta event learned once, and
the run of events that differ from it only in their text, counter and pad taken from their bytes —
never an event whose structure differs, however its text is written."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.protocols.event_template import EventTemplate, learn

DELTA = "response.output_text.delta"


def event(text: Any, seq: int = 1, pad: str | None = "abc", **extra: Any) -> dict[str, Any]:
    """An event in OpenAI's field order: counter first, then the item, the text and the pad."""
    out: dict[str, Any] = {"type": DELTA, "sequence_number": seq, "item_id": "msg_1", "output_index": 1}
    out.update(content_index=0, delta=text, logprobs=[], **extra)
    if pad is not None:
        out["obfuscation"] = pad
    return out


def frame(payload: dict[str, Any] | bytes, kind: str = DELTA) -> bytes:
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def learned(payload: dict[str, Any] | None = None) -> EventTemplate:
    payload = payload or event("first")
    template = learn(frame(payload), payload)
    assert template is not None
    return template


def run(template: EventTemplate, data: bytes, limit: int = 1 << 20) -> tuple[int, list[tuple[bytes, str]]]:
    end, tokens, texts = template.take_run(data, 0, limit)
    assert len(tokens) == len(texts)
    return end, list(zip(tokens, texts, strict=True))


def test_a_run_differs_only_in_text_counter_and_pad() -> None:
    template = learned()
    assert template.keys == ("sequence_number", "delta", "obfuscation")
    texts = ["Hel", 'lo "you"', "\\n", "café ✓", ',"logprobs":[],"obfuscation":"', "}\n"]
    data = b"".join(frame(event(t, seq=10 + i, pad="x" * i)) for i, t in enumerate(texts))
    end, told = run(template, data)
    assert end == len(data)
    assert [text for _, text in told] == texts
    assert [orjson.loads(token) for token, _ in told] == texts


def test_templates_of_other_items_share_one_compiled_pattern() -> None:
    """Real ids differ in every response: what is compiled depends on the hole keys only."""
    first = learned(event("a"))
    other = learned({**event("a"), "item_id": "msg_2", "output_index": 7})
    assert first.parts != other.parts and first.keys == other.keys
    data = frame({**event("b"), "item_id": "msg_2", "output_index": 7})
    assert run(first, data)[0] == 0 and run(other, data)[0] == len(data)


def test_a_token_is_passed_as_it_came() -> None:
    data = frame(
        b'{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,'
        b'"content_index":0,"delta":"caf\\u00e9","logprobs":[],"obfuscation":""}'
    )
    end, told = run(learned(), data)
    assert end == len(data) and told == [(b'"caf\\u00e9"', "café")]


@pytest.mark.parametrize(
    "other",
    [
        frame(event("x", pad=None)),  # no pad: another structure
        frame({**event("x"), "item_id": "msg_2"}),  # another item
        frame({**event("x"), "content_index": 1}),  # another part
        frame(event("x"), kind="response.refusal.delta"),  # another event name
        frame(event("")),  # nothing to send
        frame(event(5)),  # not a string
        frame(event(None)),
        frame(orjson.dumps(event("x")).replace(b'"sequence_number":1', b'"sequence_number":01')),
        frame(orjson.dumps(event("x")).replace(b'"sequence_number":1', b'"sequence_number":-1')),
        frame(orjson.dumps(event("x")).replace(b'"delta":"x"', b'"delta": "x"')),
        frame(orjson.dumps(event("x")).replace(b'"delta":"x"', b'"delta":"x" ')),
        frame(orjson.dumps(event("x")).replace(b'"delta":"x"', b'"delta":"\\ud800"')),  # (not UTF-8)
        frame(orjson.dumps(event("x")).replace(b'"delta":"x"', b'"delta":"x","x":"y"')),
        frame(orjson.dumps(event("x")).replace(b'"obfuscation":"abc"', b'"obfuscation":"a\\"')),
        b"event: " + DELTA.encode() + b"\ndata: " + orjson.dumps(event("x")) + b"\n\r\n",
    ],
)
def test_a_run_stops_at_an_event_of_another_structure(other: bytes) -> None:
    first = frame(event("a"))
    end, told = run(learned(), first + other + first)
    assert end == len(first) and [text for _, text in told] == ["a"]


def test_a_run_stops_at_an_event_over_the_size_limit() -> None:
    small, large = frame(event("a")), frame(event("b" * 100))
    end, told = run(learned(), small + large, limit=len(small) + 10)
    assert end == len(small) and len(told) == 1


def test_a_run_stops_at_an_event_not_yet_whole() -> None:
    data = frame(event("a")) + frame(event("b"))
    end, told = run(learned(), data[:-1])
    assert end == len(frame(event("a"))) and len(told) == 1


def test_events_without_an_event_line_or_a_counter_are_templates_too() -> None:
    payload = {"type": DELTA, "item_id": "msg_1", "delta": "a"}
    data = b"data: " + orjson.dumps(payload) + b"\n\n"
    template = learn(data, payload)
    assert template is not None and template.keys == ("delta",)
    more = b"data: " + orjson.dumps({**payload, "delta": "b"}) + b"\n\n"
    assert run(template, more + more)[0] == 2 * len(more)


def test_a_hole_key_inside_a_string_is_no_key() -> None:
    payload = event("a", note='"delta":"b","sequence_number":2')
    template = learn(frame(payload), payload)
    assert template is not None
    other = frame({**payload, "delta": "c", "sequence_number": 9})
    assert run(template, other)[1] == [(b'"c"', "c")]


@pytest.mark.parametrize(
    ("raw", "payload"),
    [
        (frame(event("a")).replace(b"\n", b"\r\n"), event("a")),  # CR line ends
        (b"data: " + orjson.dumps(event("a")) + b"\n\n", event("b")),  # the bytes are not the event
        (frame(event("")), event("")),  # an empty text
        (frame(event(["a"])), event(["a"])),
        (frame(event("a", seq=True)), event("a", seq=True)),  # type(True) is not int
        (frame(orjson.dumps(event("a")) + b"\ndata: {}"), event("a")),  # two data lines
        (frame(orjson.dumps(event("a"))[:-1] + b',"delta":"a"}'), event("a")),  # the key twice
        (frame(event("a", key_u="\\u0064elta")), event("a", key_u="\\u0064elta")),  # an escape
    ],
)
def test_what_cannot_be_learned(raw: bytes, payload: dict[str, Any]) -> None:
    assert learn(raw, payload) is None


_ORDERS = {
    "openai": event,
    "pad first": lambda text, seq=1, pad="abc": {
        "type": DELTA,
        "obfuscation": pad,
        "delta": text,
        "sequence_number": seq,
    },
    "counter last": lambda text, seq=1, pad="abc": {
        "type": DELTA,
        "delta": text,
        "obfuscation": pad,
        "sequence_number": seq,
    },
}
_ODD = [
    b"\\",
    b'"',
    b'x","obfuscation":"',
    b"\n",
    b"\n\n",
    b"01",
    b"-1",
    b" ",
    b'"',
    b"\\ud800",
    b"event: x\n",
]


@settings(max_examples=300, deadline=None)
@given(
    order=st.sampled_from(list(_ORDERS)),
    events=st.lists(
        st.tuples(st.text(max_size=6), st.integers(min_value=0, max_value=120), st.text(max_size=4)),
        max_size=6,
    ),
    cut=st.integers(min_value=0, max_value=400),
    odd=st.sampled_from(_ODD),
    where=st.integers(min_value=0, max_value=400),
    limit=st.sampled_from([1 << 20, 150, 200]),
)
def test_the_unrolled_run_is_the_run_hole_by_hole(
    order: str, events: list[tuple[str, int, str]], cut: int, odd: bytes, where: int, limit: int
) -> None:
    # OpenAI's three holes take an unrolled loop (EventTemplate._take_run3): for any data, whole or
    # cut, with bytes slipped in anywhere, it ends where the loop over the holes ends and reads
    # the same texts.
    make = _ORDERS[order]
    template = learned(make("first"))
    assert len(template.keys) == 3
    data = b"".join(frame(make(text, seq=seq, pad=pad)) for text, seq, pad in events)
    data = data[: min(cut, len(data))] if cut < 400 else data
    at = min(where, len(data))
    data = data[:at] + odd + data[at:] if where < 400 else data
    assert template._take_run3(data, 0, limit) == template._take_run_generic(data, 0, limit)
