from __future__ import annotations

import logging

import orjson

from proxy.access_log import AccessFormatter, AccessRecord, log_access


def record_for(fields: dict[str, object]) -> logging.LogRecord:
    record = logging.LogRecord("thinkproxy.access", logging.INFO, __file__, 1, "access", None, None)
    record.access = fields
    return record


def test_json_line_keeps_log_level_and_thinking_level_apart() -> None:
    line = AccessFormatter(json_lines=True).format(
        record_for({"method": "POST", "status": 200, "thinking_level": "deep", "provider": "deepseek"})
    )
    parsed = orjson.loads(line)
    assert parsed["level"] == "info" and parsed["thinking_level"] == "deep" and parsed["status"] == 200


def test_text_line_is_key_value_without_empty_fields() -> None:
    line = AccessFormatter(json_lines=False).format(
        record_for({"method": "GET", "path": "/v1/models", "error": None})
    )
    assert line.endswith("method=GET path=/v1/models") and "error" not in line


def test_log_access_emits_one_structured_record(caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="thinkproxy.access")
    rec = AccessRecord(method="POST", path="/v1/chat/completions", status=502, error="upstream_unreachable")
    log_access(rec, started=0.0)
    [logged] = caplog.records
    assert logged.access["status"] == 502 and logged.access["error"] == "upstream_unreachable"  # type: ignore[attr-defined]
    assert set(logged.access) == {  # type: ignore[attr-defined]
        "method",
        "path",
        "status",
        "upstream_status",
        "provider",
        "thinking_level",
        "duration_ms",
        "bytes",
        "error",
        "client",
        "upstream_route",
    }
