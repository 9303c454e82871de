"""What one finished request tells telemetry, read the same way by metrics and traces.

Pure: an `AccessRecord` in, small values out. Nothing here reads content: only statuses, error
codes and names. Token counts are the record's own (`record.usage`, proxy.core.usage).

Replay outcomes: the replay store tells telemetry what it did to a request's history through
`record.notes["replay.outcome"]`, a dict of outcome → number of assistant messages in that request
(`restored`: reasoning put back from the store, `placeholder`: a stand-in sent because the store
had nothing but the provider requires the field, `missing`: nothing found and nothing sent).
`note_replay` adds to it; metrics read it once, when the request ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.core.events import AccessRecord

if TYPE_CHECKING:
    from proxy.core.config.providers import ProvidersTable
    from proxy.core.config.routing import RouteTable

REPLAY_NOTE = "replay.outcome"  # the replay store keeps its own ReplayNote under "replay"
REPLAY_OUTCOMES = ("restored", "placeholder", "missing")
# Replay store faults to count with a request: operation → number (proxy.server.replay_service).
STATE_ERRORS_NOTE = "state.errors"
STATE_OPERATIONS = ("read", "write")

# Proxy error codes that mean the upstream connection broke (before or after the headers).
_BROKEN = frozenset(
    {
        "upstream_unreachable",
        "upstream_protocol_error",
        "upstream_stream_error",
        "upstream_truncated",
        "upstream_event_too_large",
    }
)
# The upstream answered with something the proxy may not relay (proxy.core.errors.BadUpstreamResponse).
_INVALID = frozenset(
    {
        "upstream_invalid_status",
        "upstream_invalid_header",
        "upstream_bad_response",
        "upstream_bad_encoding",
        "upstream_unsupported_encoding",
        "upstream_response_too_large",
    }
)


def note_replay(record: AccessRecord, outcome: str, count: int = 1) -> None:
    """Record `count` assistant messages of this request with replay `outcome` (see REPLAY_OUTCOMES)."""
    if outcome not in REPLAY_OUTCOMES:
        raise ValueError(f"unknown replay outcome {outcome!r}; expected one of {REPLAY_OUTCOMES}")
    counts = record.notes.setdefault(REPLAY_NOTE, {})
    counts[outcome] = counts.get(outcome, 0) + count


def replay_counts(record: AccessRecord) -> list[tuple[str, int]]:
    counts = record.notes.get(REPLAY_NOTE)
    if not isinstance(counts, dict):
        return []
    return [
        (outcome, n)
        for outcome in REPLAY_OUTCOMES
        if isinstance(n := counts.get(outcome), int) and not isinstance(n, bool) and n > 0
    ]


def state_errors(record: AccessRecord) -> list[tuple[str, int]]:
    counts = record.notes.get(STATE_ERRORS_NOTE)
    if not isinstance(counts, dict):
        return []
    return [
        (operation, n)
        for operation in STATE_OPERATIONS
        if isinstance(n := counts.get(operation), int) and not isinstance(n, bool) and n > 0
    ]


def upstream_error_kind(record: AccessRecord) -> str | None:
    """`4xx`/`5xx` (the upstream's status class), `timeout`, `connect` (no answer came),
    `truncated` (the answer broke off after its headers), `invalid` (an answer the proxy may not
    relay: a bad status line or header, an undecodable or oversized body), or None when the
    upstream did its part."""
    status = record.upstream_status
    code = record.error
    if code in _INVALID:
        return "invalid"
    if status is not None and 400 <= status <= 599:
        return f"{status // 100}xx"
    if code == "upstream_timeout":
        return "timeout"
    if code in _BROKEN:
        return "connect" if status is None else "truncated"
    return None


def error_type(record: AccessRecord) -> str | None:
    """OpenTelemetry's `error.type`: the upstream's status for an upstream error (`429`), else the
    proxy's error code (`upstream_timeout`, `upstream_protocol_error`, `client_disconnected`…),
    else the status the client got when it is an error; None for a success."""
    status = record.upstream_status
    if status is not None and 400 <= status <= 599:
        return str(status)
    if record.error is not None:
        return record.error
    if record.status >= 400:
        return str(record.status)
    return None


_GLOB = frozenset("*?[")


def configured_models(table: ProvidersTable, routes: RouteTable | None) -> frozenset[str]:
    """The model names the configuration writes out: a route's `models` entries and the
    providers.yaml model overrides' `match` entries that are names, not globs. A glob cannot be a
    label value (a client can make up any number of names inside `deepseek-*`), so models that
    match only a glob are labelled like any other (proxy.telemetry.metrics.ModelLabels)."""
    patterns: list[str] = []
    for entry in table.summaries():
        for dialect in entry.overrides:
            patterns += dialect.model_override or ()
    for route in routes.routes if routes is not None else ():
        patterns += route.globs
    return frozenset(p.strip() for p in patterns if p.strip() and not _GLOB & set(p))
