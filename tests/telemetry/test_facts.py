"""What telemetry reads from a finished request: error kinds, error.type, token counts, replay notes."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.events import AccessRecord
from proxy.telemetry.facts import (
    error_type,
    note_replay,
    replay_counts,
    upstream_error_kind,
)


def record(**fields: Any) -> AccessRecord:
    return AccessRecord(method="POST", path="/v1/chat/completions", route="chat", **fields)


@pytest.mark.parametrize(
    ("fields", "kind", "etype"),
    [
        ({"status": 200, "upstream_status": 200}, None, None),
        ({"status": 429, "upstream_status": 429}, "4xx", "429"),
        ({"status": 503, "upstream_status": 503}, "5xx", "503"),
        ({"status": 504, "error": "upstream_timeout"}, "timeout", "upstream_timeout"),
        ({"status": 200, "upstream_status": 200, "error": "upstream_timeout"}, "timeout", "upstream_timeout"),
        ({"status": 502, "error": "upstream_unreachable"}, "connect", "upstream_unreachable"),
        ({"status": 502, "error": "upstream_protocol_error"}, "connect", "upstream_protocol_error"),
        (
            {"status": 200, "upstream_status": 200, "error": "upstream_protocol_error"},
            "truncated",
            "upstream_protocol_error",
        ),
        (
            {"status": 200, "upstream_status": 200, "error": "upstream_event_too_large"},
            "truncated",
            "upstream_event_too_large",
        ),
        (
            {"status": 499, "upstream_status": 200, "error": "client_disconnected"},
            None,
            "client_disconnected",
        ),
        ({"status": 400, "error": "invalid_json"}, None, "invalid_json"),
        ({"status": 401}, None, "401"),
        (
            {"status": 200, "upstream_status": 200, "error": "upstream_truncated"},
            "truncated",
            "upstream_truncated",
        ),
        (
            {"status": 502, "upstream_status": 200, "error": "upstream_response_too_large"},
            "invalid",
            "upstream_response_too_large",
        ),
        (
            {"status": 502, "upstream_status": 99, "error": "upstream_invalid_status"},
            "invalid",
            "upstream_invalid_status",
        ),
        ({"status": 302, "upstream_status": 302}, None, None),
    ],
)
def test_error_kind_and_type(fields: dict[str, Any], kind: str | None, etype: str | None) -> None:
    rec = record(**fields)
    assert upstream_error_kind(rec) == kind
    assert error_type(rec) == etype


def test_replay_notes_add_up_and_reject_unknown_outcomes() -> None:
    rec = record()
    assert replay_counts(rec) == []
    note_replay(rec, "restored")
    note_replay(rec, "restored", 2)
    note_replay(rec, "placeholder")
    assert replay_counts(rec) == [("restored", 3), ("placeholder", 1)]
    with pytest.raises(ValueError, match="unknown replay outcome"):
        note_replay(rec, "lost")
    rec.notes["replay.outcome"] = {"missing": "many", "restored": -1}
    assert replay_counts(rec) == []
