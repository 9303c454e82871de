from __future__ import annotations

import logging

import orjson
import pytest

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
        "request_id",
        "trace_id",
        "upstream_request_id",
    }


def text_line(fields: dict[str, object]) -> str:
    return AccessFormatter(json_lines=False).format(record_for(fields))


def test_text_line_escapes_line_breaks_so_no_line_can_be_forged() -> None:
    forged = "/v1/models\r\n2026-01-01T00:00:00 method=GET path=/admin status=200"
    line = text_line({"method": "GET", "path": forged, "status": 404})
    assert "\n" not in line and "\r" not in line
    assert line.endswith(
        r'path="/v1/models\r\n2026-01-01T00:00:00 method=GET path=/admin status=200" status=404'
    )


def test_text_line_quotes_values_that_could_pass_for_more_fields() -> None:
    line = text_line({"path": "/v1/x status=200", "status": 404})
    assert line.endswith('path="/v1/x status=200" status=404')
    assert text_line({"path": 'a"b\\c'}).endswith(r'path="a\"b\\c"')
    assert text_line({"path": ""}).endswith('path=""')


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\t", "\x7f", "\x85", "\u2028", "\u2029", "\x0b", "\x0c"])
def test_text_line_escapes_every_control_character(char: str) -> None:
    line = text_line({"path": f"/v1/a{char}b", "error": f"x{char}"})
    assert char not in line
    assert line.count(" path=") == 1 and line.count(" error=") == 1


def test_other_records_are_one_line_too() -> None:
    record = logging.LogRecord("thinkproxy", logging.WARNING, __file__, 1, "bad %s", ("a\nb\rc",), None)
    line = AccessFormatter(json_lines=False).format(record)
    assert "\n" not in line and "\r" not in line and line.endswith(r"bad a\nb\rc")


def test_plain_values_stay_bare() -> None:
    line = text_line({"method": "POST", "path": "/v1/chat/completions", "status": 200, "duration_ms": 1.5})
    assert line.endswith("method=POST path=/v1/chat/completions status=200 duration_ms=1.5")


def test_lines_say_which_worker_process_wrote_them() -> None:
    record = record_for({"method": "GET", "status": 200})
    record.process = 4242
    assert " pid=4242 method=GET status=200" in AccessFormatter(json_lines=False).format(record)
    assert orjson.loads(AccessFormatter(json_lines=True).format(record))["pid"] == 4242
