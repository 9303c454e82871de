"""Control headers → typed values.

Pure: a header's raw value (or None) plus the configured default in, an enum out. A value that is
not accepted is a 400 naming the header and the accepted values — never a silent default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar

from proxy.core.errors import BadRequest, quoted


class Level(StrEnum):
    OFF = "off"
    STANDARD = "standard"
    DEEP = "deep"


class TraceMode(StrEnum):
    OFF = "off"
    BRIEF = "brief"
    DETAILED = "detailed"


class TraceFormat(StrEnum):
    COMMENT = "comment"
    EVENT = "event"


class ReasoningVisibility(StrEnum):
    SHOW = "show"
    HIDE = "hide"


class ReasoningField(StrEnum):
    REASONING_CONTENT = "reasoning_content"
    REASONING = "reasoning"
    BOTH = "both"


LEVEL_HEADER = "x-thinking-level"
# Why the level asked was not applied: the model cannot take it (providers.yaml `not_applicable`,
# a Messages model that always thinks). One name for every door.
LEVEL_REASON_HEADER = "x-thinking-level-reason"
TRACE_HEADER = "x-trace"
TRACE_FORMAT_HEADER = "x-trace-format"
REASONING_HEADER = "x-reasoning"
UPSTREAM_HEADER = "x-upstream-base-url"

# Every request header the proxy consumes; none of them is forwarded upstream.
CONTROL_HEADERS = frozenset(
    {LEVEL_HEADER, TRACE_HEADER, TRACE_FORMAT_HEADER, REASONING_HEADER, UPSTREAM_HEADER}
)

# What HTTP allows around a field value (RFC 9110 OWS). Header values arrive as latin-1 text, so
# str.strip() would also eat bytes such as NBSP (0xA0) and NEL (0x85) that are part of the value.
_OWS = " \t"

TRACE_ALIASES: Mapping[str, TraceMode] = {"auto": TraceMode.BRIEF, "pro": TraceMode.DETAILED}

E = TypeVar("E", bound=StrEnum)


def parse_choice(
    header: str,
    raw: str | None,
    enum: type[E],
    default: E | None,
    aliases: Mapping[str, E] | None = None,
) -> E | None:
    """The enum member a header value names (case-insensitive, spaces and tabs trimmed), or the
    default if absent."""
    if raw is None:
        return default
    value = raw.strip(_OWS).lower()
    if aliases and value in aliases:
        return aliases[value]
    try:
        return enum(value)
    except ValueError:
        accepted = [m.value for m in enum] + list(aliases or ())
        raise BadRequest(
            f"Invalid {_display(header)} header value {quoted(raw)}: accepted values are "
            f"{', '.join(accepted)}.",
            code="invalid_header_value",
            param=_display(header),
        ) from None


AUTO_LEVEL = "auto"


def parse_level(raw: str | None, default: Level | None) -> Level | None:
    """The level the header names (None for `auto`, which the auto rules resolve later), or the
    default when absent."""
    if raw is not None and raw.strip(_OWS).lower() == AUTO_LEVEL:
        return None
    try:
        return parse_choice(LEVEL_HEADER, raw, Level, default)
    except BadRequest:
        raise BadRequest(
            f"Invalid {_display(LEVEL_HEADER)} header value {quoted(raw or '')}: accepted values are "
            f"{', '.join(m.value for m in Level)}, {AUTO_LEVEL}.",
            code="invalid_header_value",
            param=_display(LEVEL_HEADER),
        ) from None


def is_auto(raw: str | None) -> bool:
    return raw is not None and raw.strip(_OWS).lower() == AUTO_LEVEL


def parse_trace_mode(raw: str | None, default: TraceMode) -> TraceMode:
    return parse_choice(TRACE_HEADER, raw, TraceMode, default, TRACE_ALIASES) or default


def parse_trace_format(raw: str | None, default: TraceFormat) -> TraceFormat:
    return parse_choice(TRACE_FORMAT_HEADER, raw, TraceFormat, default) or default


def parse_reasoning_visibility(raw: str | None, default: ReasoningVisibility) -> ReasoningVisibility:
    return parse_choice(REASONING_HEADER, raw, ReasoningVisibility, default) or default


@dataclass(frozen=True, slots=True)
class Controls:
    """The control headers of one request, read and checked. Every route reads them, so a bad value
    is the same 400 everywhere (a pass-through route then has no use for them)."""

    level: Level | None
    trace: TraceMode
    trace_format: TraceFormat
    visibility: ReasoningVisibility
    # Whether X-Thinking-Level was sent (else `level` is the configured default), and whether it
    # said `auto` (then `level` is None until the auto rules choose: proxy.core.plan.levels).
    level_header: bool = False
    level_auto: bool = False


class HeaderLookup(Protocol):
    """Case-insensitive header lookup (starlette's `Headers`, a dict of lower-case names)."""

    def get(self, key: str, /) -> str | None: ...


def parse_controls(
    headers: HeaderLookup,
    level: Level | None,
    trace: TraceMode,
    trace_format: TraceFormat,
    visibility: ReasoningVisibility,
) -> Controls:
    """`headers` (a case-insensitive mapping) over the defaults given; BadRequest naming the header."""
    raw_level = headers.get(LEVEL_HEADER)
    raw_trace = headers.get(TRACE_HEADER)
    raw_format = headers.get(TRACE_FORMAT_HEADER)
    raw_visibility = headers.get(REASONING_HEADER)
    # (A header not sent is its default, read by no parser: most requests send none of the four.)
    return Controls(
        level if raw_level is None else parse_level(raw_level, level),
        trace if raw_trace is None else parse_trace_mode(raw_trace, trace),
        trace_format if raw_format is None else parse_trace_format(raw_format, trace_format),
        visibility if raw_visibility is None else parse_reasoning_visibility(raw_visibility, visibility),
        level_header=raw_level is not None,
        level_auto=raw_level is not None and is_auto(raw_level),
    )


def check_control_headers(headers: Iterable[tuple[str, str]]) -> set[str]:
    """A request's control headers checked in one pass over its headers (names lower-case, as
    received): a 400 naming the first control header sent more than once — each takes one value;
    two of them (say `X-Thinking-Level: off` and `deep`) are a client mistake, not something to
    settle by picking one — and then `refuse_control_header_look_alikes`' 400 for a look-alike.
    Returns the control headers sent (empty for most requests: then none needs looking up)."""
    seen: set[str] = set()
    look_alike: str | None = None
    for name, _ in headers:
        if name in CONTROL_HEADERS:
            if name in seen:
                raise _repeated(name)
            seen.add(name)
        elif look_alike is None and "_" in name and name.replace("-", "_") in _LOOK_ALIKES:
            look_alike = name  # (refused after the loop: a repeated control header is said first)
    if look_alike is not None:
        refuse_control_header_look_alikes((look_alike,))
    return seen


def _repeated(name: str) -> BadRequest:
    return BadRequest(
        f"The {_display(name)} header was sent more than once; send it once, with one value.",
        code="invalid_header_value",
        param=_display(name),
    )


def prefers_chinese(accept_language: str | None) -> bool:
    """True when the highest-weighted language in Accept-Language is Chinese."""
    if not accept_language:
        return False
    best_lang, best_q = "", -1.0
    for part in accept_language.split(","):
        lang, _, params = part.strip().partition(";")
        q = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                q = float(params[2:])
            except ValueError:
                q = 0.0
        if q > best_q:
            best_lang, best_q = lang.strip().lower(), q
    return best_lang == "zh" or best_lang.startswith("zh-")


def _display(header: str) -> str:
    return "-".join(p.capitalize() for p in header.split("-")).replace("Url", "URL")


# Spelled with underscores (`X_Thinking_Level`), a control header would be neither read nor
# stripped, and an upstream that folds `_` into `-` (CGI, WSGI, several gateways) would read it as
# the real one. The proxy refuses such a request instead of guessing what was meant.
_LOOK_ALIKES = {name.replace("-", "_"): name for name in CONTROL_HEADERS}


def refuse_control_header_look_alikes(names: Iterable[str]) -> None:
    """400 for a header that is a control header spelled with underscores (names lower-case)."""
    for name in names:
        if "_" in name:
            meant = _LOOK_ALIKES.get(name.replace("-", "_"))
            if meant is not None:
                shown = "-".join(p.capitalize() for p in meant.split("-"))
                raise BadRequest(
                    f"Header {quoted(name)} looks like the proxy's {shown} header spelled with underscores; "
                    f"spell it {shown} (with hyphens), or leave it out.",
                    code="invalid_header",
                    param=name,
                )
