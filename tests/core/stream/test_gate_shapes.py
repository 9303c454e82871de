"""The review gate fails closed: a covered call reaches the client only after a reviewer saw it,
whatever shape the upstream sends it in (any choice index, duplicated choice entries, the legacy
`function_call`, fragments it cannot attribute, a name, arguments or id that is not a string),
streamed or not (proxy.core.stream.gate_rules)."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.review.rules import Decision, HeldCall, ReviewPolicy, Verdict
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.gate_completion import completion_held_calls, release_completion

POLICY = ReviewPolicy(("send_email",))
SECRET = "SECRET_ARG"
EVIL = "EVIL_ARG"  # what an upstream adds in a value the reviewer would not see
ARGS = '{"to":"' + SECRET + '"}'


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"rv_{next(counter)}"


def chunk(*choices: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": list(choices),
    }


def choice(index: Any, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"delta": delta, "finish_reason": finish}
    if index is not None:
        out["index"] = index
    return out


def frame(c: dict[str, Any], event: bytes | None = None) -> bytes:
    head = b"event: " + event + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(c) + b"\n\n"


def through_gate(data: bytes, *, splits: tuple[int, ...] = (), verdict: Verdict = Verdict.REJECT) -> bytes:
    """Everything the client gets: what passed at once, then (if held) what the decisions release."""
    return reviewed_through_gate(data, splits=splits, verdict=verdict)[0]


def reviewed_through_gate(
    data: bytes, *, splits: tuple[int, ...] = (), verdict: Verdict = Verdict.REJECT
) -> tuple[bytes, list[HeldCall]]:
    """`through_gate`, and the calls the reviewer was shown."""
    g = StreamGate(POLICY, new_id=ids(), trace_format=None, zh=False, max_event_bytes=1 << 20)
    cuts = [0, *sorted(s % (len(data) + 1) for s in splits), len(data)]
    out = b"".join(g.feed(data[a:b]) for a, b in itertools.pairwise(cuts))
    calls: list[HeldCall] = []
    if g.holding:
        calls = g.held_calls(now=0.0, timeout=1.0)
        out += g.request_frames(1.0) + g.release({c.review_id: Decision(verdict) for c in calls}, 2.0)
    else:
        out += g.flush()
    return out, calls


def client_calls(body: bytes) -> list[tuple[Any, str, str]]:
    """Every call an SDK could find in the body: (where, name, arguments), in any shape."""
    found: dict[Any, list[str]] = {}
    for block in body.split(b"\n\n"):
        data = b"\n".join(line[6:] for line in block.split(b"\n") if line.startswith(b"data: "))
        if not data or data == b"[DONE]":
            continue
        parsed = orjson.loads(data)
        for n, c in enumerate(parsed.get("choices") or []):
            delta = c.get("delta") or c.get("message") or {}
            fc = delta.get("function_call")
            if isinstance(fc, dict):
                entry = found.setdefault((c.get("index"), "fc"), ["", ""])
                entry[0] += as_text(fc.get("name"))
                entry[1] += as_text(fc.get("arguments"))
            for f in delta.get("tool_calls") or []:
                fn = f.get("function") or f.get("custom") or {}
                entry = found.setdefault((c.get("index"), n, f.get("index")), ["", ""])
                entry[0] += as_text(fn.get("name"))
                entry[1] += as_text(fn.get("arguments") or fn.get("input"))
    return [(k, v[0], v[1]) for k, v in found.items()]


def as_text(value: Any) -> str:
    """What a client's `text += value` makes of a value: the JS SDK concatenates whatever comes
    (`"a" + ["b"]` is `"ab"`), so a value that is not a string is shown in full."""
    if not value:
        return ""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def assert_nothing_unreviewed(body: bytes) -> None:
    assert SECRET.encode() not in body and EVIL.encode() not in body
    assert all("send_email" not in name for _, name, _ in client_calls(body)), client_calls(body)


def assert_only_what_was_reviewed(body: bytes, reviewed: list[HeldCall]) -> None:
    """Every covered call the client gets is one a reviewer saw, name and arguments exactly."""
    assert EVIL.encode() not in body
    seen = {(c.tool, c.arguments) for c in reviewed}
    for _, name, arguments in client_calls(body):
        assert "send_email" not in name or (name, arguments) in seen, (name, arguments, seen)


EMAIL = {
    "index": 0,
    "id": "call_1",
    "type": "function",
    "function": {"name": "send_email", "arguments": ARGS},
}
END = frame(chunk(choice(0, {}, "tool_calls"))) + b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([chunk(choice(1, {"tool_calls": [EMAIL]}))], id="choice-index-1"),
        pytest.param(
            [chunk(choice(0, {"content": "hi"}), choice(0, {"tool_calls": [EMAIL]}))],
            id="second-index-0-entry",
        ),
        pytest.param(
            [chunk(choice(0, {"function_call": {"name": "send_email", "arguments": ARGS}}, "function_call"))],
            id="legacy-function_call",
        ),
        pytest.param(
            [chunk(choice(0, {"tool_calls": [{**EMAIL, "index": None}]}))],
            id="fragment-without-index",
        ),
        pytest.param(
            [
                chunk(
                    choice(
                        0,
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "type": "custom",
                                    "custom": {"name": "send_email", "input": SECRET},
                                }
                            ]
                        },
                    )
                )
            ],
            id="custom-tool-call",
        ),
        pytest.param(
            [
                chunk(
                    choice(
                        0, {"tool_calls": [{**EMAIL, "function": {"name": "kb_search", "arguments": "{}"}}]}
                    )
                ),
                chunk(
                    choice(
                        0,
                        {"tool_calls": [{"index": 0, "function": {"name": "send_email", "arguments": ARGS}}]},
                    )
                ),
            ],
            id="renamed-after-its-name-was-complete",
        ),
    ],
)
def test_a_call_in_a_shape_the_gate_does_not_attribute_never_reaches_the_client(
    events: list[dict[str, Any]],
) -> None:
    body = through_gate(b"".join(frame(e) for e in events) + END)
    assert_nothing_unreviewed(body)
    assert body.endswith(b"data: [DONE]\n\n")


def test_a_call_in_a_trace_named_event_is_held_too() -> None:
    # The OpenAI SDKs parse every named event as a chunk: `event: trace` is no hiding place.
    body = through_gate(frame(chunk(choice(0, {"tool_calls": [EMAIL]})), event=b"trace") + END)
    assert_nothing_unreviewed(body)


def test_a_second_index_0_entry_is_reviewed_and_released_on_approval() -> None:
    data = frame(chunk(choice(0, {"content": "hi"}), choice(0, {"tool_calls": [EMAIL]}))) + END
    g = StreamGate(POLICY, new_id=ids(), trace_format=None, zh=False, max_event_bytes=1 << 20)
    passed = g.feed(data)
    assert SECRET.encode() not in passed and g.holding
    (held,) = g.held_calls(now=0.0, timeout=1.0)
    assert (held.tool, held.arguments) == ("send_email", ARGS)
    released = g.release({held.review_id: Decision(Verdict.APPROVE)}, 2.0)
    assert [(name, args) for _, name, args in client_calls(passed + released)] == [("send_email", ARGS)]


def test_a_refused_shape_is_explained_and_the_finish_reason_is_stop() -> None:
    events = [chunk(choice(1, {"tool_calls": [EMAIL]}))]
    body = through_gate(b"".join(frame(e) for e in events) + END, verdict=Verdict.APPROVE)
    assert_nothing_unreviewed(body)
    text = "".join(
        (c["choices"][0]["delta"].get("content") or "")
        for c in (orjson.loads(b[6:]) for b in body.split(b"\n\n") if b.startswith(b"data: {"))
        if c["choices"]
    )
    assert "send_email" in text and "not made" in text
    finishes = [
        c.get("finish_reason")
        for b in body.split(b"\n\n")
        if b.startswith(b"data: {")
        for c in orjson.loads(b[6:])["choices"]
    ]
    assert "tool_calls" not in finishes and "stop" in finishes


CANNOT_CHECK = "it came in a form the review gate cannot check"


def content_of(body: bytes) -> str:
    return "".join(
        (c["choices"][0]["delta"].get("content") or "")
        for c in (orjson.loads(b[6:]) for b in body.split(b"\n\n") if b.startswith(b"data: {"))
        if c["choices"]
    )


# A name, arguments or id that is not a string: the reviewer would be shown "" (or nothing) while
# the client gets the value, and the JS SDK concatenates it (`"{}" + ["x"]` is `"{}x"`).
NOT_STRINGS = [
    pytest.param(
        [
            chunk(
                choice(
                    0,
                    {
                        "tool_calls": [
                            {**EMAIL, "function": {"name": "send_email", "arguments": {"to": EVIL}}}
                        ]
                    },
                )
            )
        ],
        id="arguments-object",
    ),
    pytest.param(
        [
            chunk(
                choice(
                    0, {"tool_calls": [{**EMAIL, "function": {"name": "send_email", "arguments": [EVIL]}}]}
                )
            )
        ],
        id="arguments-array",
    ),
    pytest.param(
        [
            chunk(choice(0, {"tool_calls": [EMAIL]})),
            chunk(choice(0, {"tool_calls": [{"index": 0, "function": {"arguments": [EVIL]}}]})),
        ],
        id="a-later-fragment-with-arguments-array",
    ),
    pytest.param(
        [
            chunk(
                choice(
                    0, {"tool_calls": [{**EMAIL, "function": {"name": ["send_email"], "arguments": ARGS}}]}
                )
            )
        ],
        id="name-array",
    ),
    pytest.param(
        [
            chunk(
                choice(
                    0,
                    {"tool_calls": [{**EMAIL, "function": {"name": 7, "arguments": '{"x":"' + EVIL + '"}'}}]},
                )
            )
        ],
        id="name-number",
    ),
    pytest.param(
        [chunk(choice(0, {"tool_calls": [{**EMAIL, "id": {"x": EVIL}}]}))],
        id="id-object",
    ),
]


@pytest.mark.parametrize("verdict", [Verdict.APPROVE, Verdict.REJECT])
@pytest.mark.parametrize("events", NOT_STRINGS)
def test_a_name_arguments_or_id_that_is_not_a_string_is_removed_and_explained(
    events: list[dict[str, Any]], verdict: Verdict
) -> None:
    body, reviewed = reviewed_through_gate(b"".join(frame(e) for e in events) + END, verdict=verdict)
    assert_only_what_was_reviewed(body, reviewed)
    if verdict is Verdict.REJECT:
        assert_nothing_unreviewed(body)
    assert CANNOT_CHECK in content_of(body)
    assert body.endswith(b"data: [DONE]\n\n")


# -- non-stream ---------------------------------------------------------------------------------


def completion(*choices: dict[str, Any]) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "choices": list(choices)}


def message_choice(index: Any, message: dict[str, Any], finish: str = "tool_calls") -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", "content": None, **message},
        "finish_reason": finish,
    }


EMAIL_CALL = {"id": "call_1", "type": "function", "function": {"name": "send_email", "arguments": ARGS}}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            completion(
                message_choice(0, {"content": "hi"}, "stop"), message_choice(1, {"tool_calls": [EMAIL_CALL]})
            ),
            id="choice-index-1",
        ),
        pytest.param(
            completion(
                message_choice(0, {"content": "hi"}, "stop"), message_choice(0, {"tool_calls": [EMAIL_CALL]})
            ),
            id="second-index-0-entry",
        ),
        pytest.param(
            completion(
                message_choice(
                    0, {"function_call": {"name": "send_email", "arguments": ARGS}}, "function_call"
                )
            ),
            id="legacy-function_call",
        ),
    ],
)
def test_a_completion_never_carries_a_covered_call_unreviewed(body: dict[str, Any]) -> None:
    held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0)
    out = release_completion(body, held, {c.review_id: Decision(Verdict.REJECT) for c in held}, zh=False)
    assert_nothing_unreviewed(orjson.dumps(out).replace(b'{"id"', b'\n\ndata: {"id"', 1))
    assert SECRET.encode() not in orjson.dumps(out)


def call_with(**changes: Any) -> dict[str, Any]:
    function = {"name": "send_email", "arguments": ARGS, **changes.pop("function", {})}
    return {**EMAIL_CALL, "function": function, **changes}


@pytest.mark.parametrize("verdict", [Verdict.APPROVE, Verdict.REJECT])
@pytest.mark.parametrize(
    "call",
    [
        pytest.param(call_with(function={"arguments": {"to": EVIL}}), id="arguments-object"),
        pytest.param(call_with(function={"arguments": [EVIL]}), id="arguments-array"),
        pytest.param(call_with(function={"name": ["send_email"]}), id="name-array"),
        pytest.param(call_with(function={"name": 7, "arguments": '{"x":"' + EVIL + '"}'}), id="name-number"),
        pytest.param(call_with(id={"x": EVIL}), id="id-object"),
    ],
)
def test_a_completion_call_with_a_value_that_is_not_a_string_is_removed_and_explained(
    call: dict[str, Any], verdict: Verdict
) -> None:
    body = completion(message_choice(0, {"tool_calls": [call]}))
    held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0)
    out = release_completion(body, held, {c.review_id: Decision(verdict) for c in held}, zh=False)
    client = orjson.dumps(out).replace(b'{"id"', b'\n\ndata: {"id"', 1)
    assert_only_what_was_reviewed(client, held)
    assert CANNOT_CHECK in out["choices"][0]["message"]["content"]
    assert out["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "removed",
    [
        pytest.param({"id": "c0", "type": "custom", "custom": {"name": "x", "input": "y"}}, id="custom"),
        pytest.param(call_with(function={"arguments": [EVIL]}), id="arguments-array"),
    ],
)
def test_a_removed_call_before_a_covered_one_does_not_shift_the_decision(removed: dict[str, Any]) -> None:
    # The decisions are by position in the upstream's list; removing a call must not move the
    # covered call that follows it out from under its decision.
    body = completion(message_choice(0, {"tool_calls": [removed, EMAIL_CALL]}))
    held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0)
    assert [c.arguments for c in held] == [ARGS]
    out = release_completion(body, held, {c.review_id: Decision(Verdict.REJECT) for c in held}, zh=False)
    assert SECRET.encode() not in orjson.dumps(out) and EVIL.encode() not in orjson.dumps(out)
    assert "tool_calls" not in out["choices"][0]["message"]
    modified = release_completion(
        body, held, {held[0].review_id: Decision(Verdict.MODIFY, arguments="{}")}, zh=False
    )
    assert [c["function"]["arguments"] for c in modified["choices"][0]["message"]["tool_calls"]] == ["{}"]


# -- property: any placement ----------------------------------------------------------------------

SHAPES = [
    "tool_calls",
    "other_choice",
    "duplicate_zero",
    "function_call",
    "no_index",
    "trace_event",
    "custom",
    # Every fragment of the call carries a name, arguments or id that is not a string.
    "name_not_string",
    "arguments_not_string",
    "id_not_string",
]
# Values that are not strings, as an upstream could send them in place of one.
NOT_STRING = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.lists(st.sampled_from(["send_email", "{}", EVIL]), max_size=2),
    st.dictionaries(st.sampled_from(["to", "name"]), st.sampled_from(["send_email", EVIL]), max_size=2),
)
# A later fragment of the call whose added value is not a string (the JS SDK appends it).
LATE = [
    {"function": {"arguments": [EVIL]}},
    {"function": {"arguments": {"to": EVIL}}},
    {"function": {"name": [EVIL]}},
    {"id": {"x": EVIL}},
]


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """Content, maybe an uncovered call, and one covered call in a random shape, its name and
    arguments cut into random pieces, maybe a later fragment carrying a value that is not a
    string, with a random finish and maybe no [DONE]."""
    shape = draw(st.sampled_from(SHAPES))
    choice_index = draw(st.integers(1, 3)) if shape == "other_choice" else 0
    call_index = draw(st.integers(0, 2))
    name_cut = draw(st.integers(1, len("send_email") - 1))
    names = ["send_email"] if draw(st.booleans()) else ["send_email"[:name_cut], "send_email"[name_cut:]]
    cuts = sorted(draw(st.lists(st.integers(1, len(ARGS) - 1), max_size=3, unique=True)))
    args = [ARGS[a:b] for a, b in itertools.pairwise([0, *cuts, len(ARGS)])]
    pieces: list[tuple[str | None, str]] = [(n, "") for n in names] + [(None, a) for a in args]
    events: list[bytes] = [frame(chunk(choice(0, {"role": "assistant", "content": "Sure."})))]
    if draw(st.booleans()):
        kb = {
            "index": 0,
            "id": "call_kb",
            "type": "function",
            "function": {"name": "kb_search", "arguments": "{}"},
        }
        events.append(frame(chunk(choice(0, {"tool_calls": [kb]}))))
        call_index = max(call_index, 1)
    for name, arguments in pieces:
        if shape == "function_call":
            fc: dict[str, Any] = {"arguments": arguments}
            if name:
                fc["name"] = name
            events.append(frame(chunk(choice(choice_index, {"function_call": fc}))))
            continue
        fragment: dict[str, Any] = {"index": call_index, "function": {"arguments": arguments}}
        if name:
            fragment["function"]["name"] = name
            fragment["id"] = "call_x"
        if shape == "no_index":
            del fragment["index"]
        if shape == "name_not_string":
            fragment["function"]["name"] = [name] if name else draw(NOT_STRING)
        if shape == "arguments_not_string":
            fragment["function"]["arguments"] = draw(st.sampled_from([[arguments], {"to": arguments}]))
        if shape == "id_not_string":
            fragment["id"] = draw(NOT_STRING)
        if shape == "custom":
            fragment = {
                "index": call_index,
                "type": "custom",
                "custom": {"name": name or "", "input": arguments},
            }
        delta = {"tool_calls": [fragment]}
        if shape == "duplicate_zero":
            events.append(frame(chunk(choice(0, {"content": "."}), choice(0, delta))))
        elif shape == "trace_event":
            events.append(frame(chunk(choice(0, delta)), event=b"trace"))
        else:
            events.append(frame(chunk(choice(choice_index, delta))))
    if draw(st.booleans()):
        late = {"index": call_index, **draw(st.sampled_from(LATE))}
        events.append(frame(chunk(choice(choice_index, {"tool_calls": [late]}))))
    finish = draw(st.sampled_from(["tool_calls", "function_call", "stop", None]))
    if finish is not None:
        events.append(frame(chunk(choice(draw(st.sampled_from([0, choice_index])), {}, finish))))
    if draw(st.booleans()):
        events.append(b"data: [DONE]\n\n")
    return b"".join(events)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=streams(), splits=st.lists(st.integers(0, 10_000), max_size=4))
def test_no_placement_of_a_covered_call_reaches_the_client_unreviewed(data: bytes, splits: list[int]) -> None:
    assert_nothing_unreviewed(through_gate(data, splits=tuple(splits)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=streams(), splits=st.lists(st.integers(0, 10_000), max_size=4))
def test_an_approved_call_reaches_the_client_exactly_as_the_reviewer_saw_it(
    data: bytes, splits: list[int]
) -> None:
    body, reviewed = reviewed_through_gate(data, splits=tuple(splits), verdict=Verdict.APPROVE)
    assert_only_what_was_reviewed(body, reviewed)


@settings(max_examples=200, deadline=None)
@given(data=streams(), splits=st.lists(st.integers(0, 10_000), max_size=4))
def test_what_passes_before_a_decision_never_carries_the_call(data: bytes, splits: list[int]) -> None:
    g = StreamGate(POLICY, new_id=ids(), trace_format=None, zh=False, max_event_bytes=1 << 20)
    cuts = [0, *sorted(s % (len(data) + 1) for s in splits), len(data)]
    passed = b"".join(g.feed(data[a:b]) for a, b in itertools.pairwise(cuts))
    passed += b"" if g.holding else g.flush()
    assert_nothing_unreviewed(passed)
