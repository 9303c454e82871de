"""One structured access-log line per request; never a key, never an Authorization value."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Any

import orjson

from proxy.core.events import AccessRecord

logger = logging.getLogger("thinkproxy.access")
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%S"


def log_access(record: AccessRecord, started: float) -> None:
    if not logger.isEnabledFor(logging.INFO):
        return
    fields = access_fields(record, round((time.perf_counter() - started) * 1000.0, 1))
    direct = _direct
    if direct is not None and direct.in_charge():
        direct.write(fields)
    else:
        logger.info("access", extra={"access": fields})


def access_fields(record: AccessRecord, duration_ms: float) -> dict[str, Any]:
    # The answer's one token reading (proxy.core.usage), as every other reader shows it.
    usage = record.usage
    reasoning = usage.reasoning if usage is not None else None
    return {
        "method": record.method,
        "path": record.path,
        "status": record.status,
        "upstream_status": record.upstream_status,
        "client": record.client,
        "upstream_route": record.upstream_route,
        "provider": record.provider,
        "thinking_level": record.level,
        "duration_ms": duration_ms,
        "bytes": record.bytes_out,
        "error": record.error,
        "request_id": record.request_id,
        "trace_id": record.trace_id,
        "upstream_request_id": record.upstream_request_id,
        "cached_tokens": usage.cached_input if usage is not None else None,
        "reasoning_tokens": reasoning.value if reasoning is not None else None,
        "reasoning_tokens_source": reasoning.source if reasoning is not None else None,
    }


# In text lines a value is written bare when it is plain, else quoted with these escaped: anything
# that could end the line or pass for another field (a client chooses the path, and more).
_NEEDS_QUOTES = re.compile(r'[\s"\\=\x00-\x1f\x7f-\x9f\u2028\u2029]|^$')
_PLAIN = re.compile(r"[A-Za-z0-9/._:+\-]+")  # the usual value, told plain by one quick match
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_UNSAFE_QUOTED = re.compile(r'["\\\x00-\x1f\x7f-\x9f\u2028\u2029]')
_SHORT_ESCAPES = {"\n": r"\n", "\r": r"\r", "\t": r"\t", '"': r"\"", "\\": "\\\\"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def text_value(value: object) -> str:
    """A field value for a text line: bare if plain, else quoted with control characters escaped."""
    text = str(value)
    if _PLAIN.fullmatch(text) is not None or _NEEDS_QUOTES.search(text) is None:
        return text
    return '"' + _UNSAFE_QUOTED.sub(_escape_char, text) + '"'


def one_line(text: str) -> str:
    """A free-text message with its control characters escaped, so it stays one line."""
    return _CONTROL.sub(_escape_char, text)


class AccessFormatter(logging.Formatter):
    """Text or JSON lines; access records render their fields, other records their message."""

    def __init__(self, json_lines: bool) -> None:
        super().__init__()
        self.json_lines = json_lines

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "access", None)
        if self.json_lines:
            payload = {
                "ts": round(record.created, 3),
                "level": record.levelname.lower(),
                "logger": record.name,
                "pid": record.process,  # which worker process (THINKPROXY_WORKERS > 1)
            }
            if fields is not None:
                payload.update(fields)
            else:
                payload["message"] = record.getMessage()
            return orjson.dumps(payload).decode()
        stamp = self.formatTime(record, STAMP_FORMAT)
        if fields is not None:
            return text_access_line(stamp, record.process, fields)
        return f"{stamp} {record.levelname.lower()} {record.name}: {one_line(record.getMessage())}"


def text_access_line(stamp: str, pid: int | None, fields: dict[str, Any]) -> str:
    parts = [stamp, f"pid={pid}"]
    for key, value in fields.items():
        if value is None:
            continue
        kind = type(value)
        # (a number is always plain; bool is not int's type here, so it goes through text_value)
        parts.append(f"{key}={value}" if kind is int or kind is float else f"{key}={text_value(value)}")
    return " ".join(parts)


class DirectAccessWriter:
    """Writes access lines straight to the configured handler's stream: the same line the
    AccessFormatter makes, without a LogRecord, the handler's lock and a strftime per request (the
    logging machinery cost ~30 µs a line, several percent of a request). Used only while the
    handler `configure_logging` installed is still the one in place (a test capturing records, or
    an embedding app with its own handlers, gets ordinary log records)."""

    def __init__(self, handler: logging.StreamHandler[Any], json_lines: bool) -> None:
        self.handler = handler
        self.formatter = handler.formatter
        self.json_lines = json_lines
        self._second = -1
        self._stamp = ""

    def in_charge(self) -> bool:
        """Whether logging would do exactly what `write` does: the one handler configure_logging
        installed, as installed (its formatter, no level, no filter), nothing else on the way
        (another handler, a filter, propagation to the root logger)."""
        handler = self.handler
        handlers = _root.handlers
        return (
            len(handlers) == 1
            and handlers[0] is handler
            and handler.formatter is self.formatter
            and handler.level <= logging.INFO
            and not handler.filters
            and not logger.handlers
            and not logger.filters
            and logger.propagate
            and not _root.filters
            and not _root.propagate
        )

    def write(self, fields: dict[str, Any]) -> None:
        now = time.time()
        if self.json_lines:
            # (The pid is read per line: a server that forks after loading has one per worker.)
            payload = {"ts": round(now, 3), "level": "info", "logger": logger.name, "pid": os.getpid()}
            payload.update(fields)
            line = orjson.dumps(payload).decode()
        else:
            line = text_access_line(self._stamp_of(now), os.getpid(), fields)
        stream = self.handler.stream
        try:
            stream.write(line + "\n")
            stream.flush()
        except Exception:  # as logging.Handler does: a broken log stream never fails a request
            self.handler.handleError(logging.makeLogRecord({"msg": line}))

    def _stamp_of(self, now: float) -> str:
        second = int(now)
        if second != self._second:  # one strftime a second, as formatTime would write it
            self._second = second
            self._stamp = time.strftime(STAMP_FORMAT, time.localtime(second))
        return self._stamp


_root = logging.getLogger("thinkproxy")
_direct: DirectAccessWriter | None = None


class StandardErrorHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler on `sys.stderr` as it is at each line (as logging's own last-resort handler
    does), not as it was when logging was configured: a stream replaced and closed since (a test's
    captured output, an embedding app's redirection) is never written to."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:  # (StreamHandler.__init__ and setStream set it: always stderr)
        pass


def configure_logging(level: str, json_lines: bool) -> None:
    global _direct
    handler = StandardErrorHandler()
    handler.setFormatter(AccessFormatter(json_lines))
    _root.handlers[:] = [handler]
    _root.setLevel(level.upper())
    _root.propagate = False
    _direct = DirectAccessWriter(handler, json_lines)
