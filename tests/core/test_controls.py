from __future__ import annotations

import pytest

from proxy.core.controls import (
    CONTROL_HEADERS,
    Level,
    ReasoningVisibility,
    TraceFormat,
    TraceMode,
    check_control_headers,
    parse_level,
    parse_reasoning_visibility,
    parse_trace_format,
    parse_trace_mode,
    prefers_chinese,
    refuse_control_header_look_alikes,
)
from proxy.core.errors import BadRequest


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("off", Level.OFF), (" Standard ", Level.STANDARD), ("DEEP", Level.DEEP), (None, None)],
)
def test_level_values_case_insensitive_and_trimmed(raw: str | None, expected: Level | None) -> None:
    assert parse_level(raw, None) is expected


def test_level_default_applies_only_without_header() -> None:
    assert parse_level(None, Level.DEEP) is Level.DEEP
    assert parse_level("off", Level.DEEP) is Level.OFF


@pytest.mark.parametrize("raw", ["", "max", "high", "on", "standard deep"])
def test_bad_level_names_header_and_accepted_values(raw: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_level(raw, None)
    err = info.value
    assert err.status == 400
    assert "X-Thinking-Level" in err.message and "off, standard, deep" in err.message
    assert err.payload()["error"]["param"] == "X-Thinking-Level"


def test_trace_aliases() -> None:
    assert parse_trace_mode("auto", TraceMode.OFF) is TraceMode.BRIEF
    assert parse_trace_mode("PRO", TraceMode.OFF) is TraceMode.DETAILED
    assert parse_trace_mode(None, TraceMode.DETAILED) is TraceMode.DETAILED
    with pytest.raises(BadRequest, match="auto, pro"):
        parse_trace_mode("full", TraceMode.BRIEF)


def test_other_control_headers() -> None:
    assert parse_trace_format("Event", TraceFormat.COMMENT) is TraceFormat.EVENT
    assert parse_reasoning_visibility("hide", ReasoningVisibility.SHOW) is ReasoningVisibility.HIDE
    with pytest.raises(BadRequest, match="X-Reasoning"):
        parse_reasoning_visibility("off", ReasoningVisibility.SHOW)


@pytest.mark.parametrize(
    ("header", "zh"),
    [
        ("zh-CN,zh;q=0.9,en;q=0.8", True),
        ("en-US,en;q=0.9,zh;q=0.8", False),
        ("en;q=0.5, zh-TW;q=0.9", True),
        ("zh", True),
        ("", False),
        (None, False),
        ("fr, *;q=0.1", False),
    ],
)
def test_prefers_chinese(header: str | None, zh: bool) -> None:
    assert prefers_chinese(header) is zh


@pytest.mark.parametrize("raw", ["deep\xa0", "\xa0deep", "deep\x85", "\x85off", "deep\u3000", "deep\x0b"])
def test_only_http_whitespace_is_trimmed(raw: str) -> None:
    # A header value arrives as latin-1 text: NBSP (0xA0) and NEL (0x85) are bytes of the value,
    # not whitespace around it.
    with pytest.raises(BadRequest):
        parse_level(raw, None)
    assert parse_level(" \tdeep\t ", None) is Level.DEEP


def test_a_repeated_control_header_is_400_naming_it() -> None:
    headers = [
        ("content-type", "application/json"),
        ("x-thinking-level", "off"),
        ("x-thinking-level", "deep"),
    ]
    with pytest.raises(BadRequest) as info:
        check_control_headers(headers)
    assert info.value.status == 400
    assert "X-Thinking-Level" in info.value.message and "once" in info.value.message
    assert info.value.payload()["error"]["param"] == "X-Thinking-Level"


def test_other_repeated_headers_and_single_controls_are_fine() -> None:
    check_control_headers(
        [
            ("accept", "a"),
            ("accept", "b"),
            ("x-trace", "brief"),
            ("x-reasoning", "hide"),
            ("x-thinking-level", "deep"),
        ]
    )


@pytest.mark.parametrize("header", ["x-trace", "x-trace-format", "x-reasoning", "x-upstream-base-url"])
def test_every_control_header_is_refused_twice(header: str) -> None:
    with pytest.raises(BadRequest):
        check_control_headers([(header, "a"), (header, "a")])


def _answer(check: object) -> tuple[str, str | None] | None:
    try:
        check()  # type: ignore[operator]
    except BadRequest as refused:
        return refused.message, refused.param
    return None


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("accept", "a"), ("x_custom", "b")],
        [("x-trace", "brief"), ("x-thinking-level", "deep"), ("accept", "a"), ("accept", "b")],
        [("x-thinking-level", "off"), ("x-thinking-level", "deep")],
        [("x_trace", "brief"), ("x-reasoning", "hide")],
        # both faults: the repeated control header is said first, wherever the look-alike stands
        [("x_trace", "brief"), ("x-reasoning", "hide"), ("x-reasoning", "show")],
        [("x-thinking_level", "a"), ("x_reasoning", "b")],
    ],
)
def test_the_one_pass_check_answers_as_the_two_checks_in_turn(headers: list[tuple[str, str]]) -> None:
    def both() -> None:  # (the two checks as they were before the one pass)
        seen: set[str] = set()
        for name, _ in headers:
            if name in CONTROL_HEADERS:
                if name in seen:
                    shown = "-".join(p.capitalize() for p in name.split("-")).replace("Url", "URL")
                    raise BadRequest(
                        f"The {shown} header was sent more than once; send it once, with one value.",
                        code="invalid_header_value",
                        param=shown,
                    )
                seen.add(name)
        refuse_control_header_look_alikes([name for name, _ in headers])

    assert _answer(lambda: check_control_headers(headers)) == _answer(both)
    if _answer(both) is None:
        assert check_control_headers(iter(headers)) == {
            name for name, _ in headers if name in CONTROL_HEADERS
        }
