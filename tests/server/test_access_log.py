from __future__ import annotations

import io
import logging
import re
import sys
import time
from collections.abc import Iterator

import orjson
import pytest

from proxy.core.events import AccessRecord
from proxy.core.usage import ReasoningTokens, TokenUsage
from proxy.server import access_log
from proxy.server.access_log import AccessFormatter, access_fields, configure_logging, log_access


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
        "cached_tokens",
        "reasoning_tokens",
        "reasoning_tokens_source",
    }


def test_the_access_line_carries_the_answers_token_reading(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy.access")
    rec = AccessRecord(method="POST", path="/v1/chat/completions", status=200)
    rec.usage = TokenUsage(100, 50, 64, ReasoningTokens(31, "estimated"))
    log_access(rec, started=0.0)
    [logged] = caplog.records
    got = {k: logged.access[k] for k in ("cached_tokens", "reasoning_tokens", "reasoning_tokens_source")}  # type: ignore[attr-defined]
    assert got == {"cached_tokens": 64, "reasoning_tokens": 31, "reasoning_tokens_source": "estimated"}


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


@pytest.fixture
def configured_logging() -> Iterator[None]:
    """configure_logging as `serve` does, undone afterwards (it changes process-wide state)."""
    root = logging.getLogger("thinkproxy")
    saved = (root.handlers[:], root.level, root.propagate, access_log._direct)
    try:
        yield
    finally:
        root.handlers[:], root.level, root.propagate, access_log._direct = saved


@pytest.mark.parametrize("json_lines", [False, True])
def test_served_access_lines_are_the_formatters_lines_written_directly(
    json_lines: bool, capsys: pytest.CaptureFixture[str], configured_logging: None
) -> None:
    configure_logging("info", json_lines)
    rec = AccessRecord(method="POST", path="/v1/chat\nx=1", status=200, provider="deepseek", bytes_out=12)
    rec.request_id = 'id "quoted"'
    log_access(rec, started=time.perf_counter())
    [line] = capsys.readouterr().err.splitlines()
    # The same line the formatter makes from an ordinary log record of the same fields.
    fields = access_fields(rec, 0.0)
    logged = logging.LogRecord("thinkproxy.access", logging.INFO, __file__, 1, "access", None, None)
    logged.access = fields
    expected = AccessFormatter(json_lines).format(logged)
    if json_lines:
        got, want = orjson.loads(line), orjson.loads(expected)
        assert abs(got.pop("ts") - want.pop("ts")) < 5 and got.pop("duration_ms") >= 0
        want.pop("duration_ms")
        assert got == want
    else:
        stamp = len("2026-12-01T00:00:00")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", line[:stamp])
        assert re.sub(r"duration_ms=[\d.]+", "", line[stamp:]) == re.sub(
            r"duration_ms=[\d.]+", "", expected[stamp:]
        )
        assert 'path="/v1/chat\\nx=1"' in line and 'request_id="id \\"quoted\\""' in line


def test_another_handler_gets_ordinary_records(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], configured_logging: None
) -> None:
    # An embedding app (or a test) that attaches its own handler gets records, not bare lines.
    configure_logging("info", False)
    logging.getLogger("thinkproxy.access").addHandler(caplog.handler)
    try:
        log_access(AccessRecord(method="GET", path="/v1/models", status=200), started=0.0)
    finally:
        logging.getLogger("thinkproxy.access").removeHandler(caplog.handler)
    [logged] = caplog.records
    assert logged.access["path"] == "/v1/models"  # type: ignore[attr-defined]


def test_a_filter_a_level_or_another_handler_takes_the_ordinary_path(
    capsys: pytest.CaptureFixture[str], configured_logging: None
) -> None:
    configure_logging("info", False)
    root = logging.getLogger("thinkproxy")
    [handler] = root.handlers

    def log_one() -> str:
        log_access(AccessRecord(method="GET", path="/v1/models", status=200), started=0.0)
        return capsys.readouterr().err

    assert "path=/v1/models" in log_one()  # (the direct path)
    handler.addFilter(lambda record: False)
    assert log_one() == ""  # the operator's filter drops it, as logging would
    handler.filters.clear()
    handler.setLevel(logging.WARNING)
    assert log_one() == ""
    handler.setLevel(logging.NOTSET)
    seen: list[logging.LogRecord] = []
    other = logging.Handler()
    other.emit = seen.append  # type: ignore[method-assign]
    root.addHandler(other)
    try:
        assert "path=/v1/models" in log_one() and len(seen) == 1  # both handlers get it
    finally:
        root.removeHandler(other)


@pytest.mark.parametrize("direct", [True, False])
def test_lines_follow_the_standard_error_of_the_moment(
    direct: bool, monkeypatch: pytest.MonkeyPatch, configured_logging: None
) -> None:
    """The handler writes to `sys.stderr` as it is at each line, not as it was when logging was
    configured: a stream replaced and closed since (a test's captured output, an embedding app's
    redirection) is never written to, and no "--- Logging error ---" is printed."""
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("info", False)
    first.close()
    now = io.StringIO()
    monkeypatch.setattr(sys, "stderr", now)
    extra = logging.NullHandler()  # (another handler: log_access goes through logging, not directly)
    if not direct:
        logging.getLogger("thinkproxy.access").addHandler(extra)
    try:
        log_access(AccessRecord(method="GET", path="/v1/models", status=200), started=0.0)
    finally:
        logging.getLogger("thinkproxy.access").removeHandler(extra)
    [line] = now.getvalue().splitlines()
    assert "method=GET path=/v1/models status=200" in line and "Logging error" not in line
