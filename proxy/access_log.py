"""One structured access-log line per request; never a key, never an Authorization value."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from proxy.observe import RequestObserver

logger = logging.getLogger("thinkproxy.access")


@dataclass(slots=True)
class AccessRecord:
    method: str
    path: str
    status: int = 0
    upstream_status: int | None = None
    provider: str | None = None
    level: str | None = None
    bytes_out: int = 0
    error: str | None = None
    client: str | None = None  # the name of the gateway client key presented (never the key)
    upstream_route: str | None = None  # the name of the routes-file route the request took
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    # What listeners (proxy.observe) read at the end of a request; the access line shows only some.
    route: str = "passthrough"  # "chat" or "passthrough"
    model: str | None = None  # the request's model, as the client sent it
    level_requested: str | None = None
    thinking_method: str | None = None  # "params" or "prompt" when a level was applied
    stream: bool = False
    # Extra headers for the upstream request (e.g. an observer's traceparent).
    forward_headers: list[tuple[str, str]] = field(default_factory=list)
    observers: list[RequestObserver] = field(default_factory=list)
    # Free-form facts a capability records for its own observers (never logged).
    notes: dict[str, Any] = field(default_factory=dict)
    # X-Request-Id (the client's, or generated), and the trace id when tracing is on.
    request_id: str | None = None
    trace_id: str | None = None
    upstream_request_id: str | None = None  # the upstream's own x-request-id, when it sent one
    upstream_base_url: str | None = None  # where the request went (listeners take host and port)
    # The chat request's messages (content: read only by an opted-in OpenTelemetry capture).
    request_messages: Any = None
    # The answer's `id` and `model` (chat completions, when a trace builder saw them).
    response_id: str | None = None
    response_model: str | None = None


def log_access(record: AccessRecord, started: float) -> None:
    if not logger.isEnabledFor(logging.INFO):
        return
    duration_ms = round((time.perf_counter() - started) * 1000.0, 1)
    fields = {
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
    }
    logger.info("access", extra={"access": fields})


# In text lines a value is written bare when it is plain, else quoted with these escaped: anything
# that could end the line or pass for another field (a client chooses the path, and more).
_NEEDS_QUOTES = re.compile(r'[\s"\\=\x00-\x1f\x7f-\x9f\u2028\u2029]|^$')
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
    if _NEEDS_QUOTES.search(text) is None:
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
        stamp = self.formatTime(record, "%Y-%m-%dT%H:%M:%S")
        if fields is not None:
            values = " ".join(f"{k}={text_value(v)}" for k, v in fields.items() if v is not None)
            return f"{stamp} pid={record.process} {values}"
        return f"{stamp} {record.levelname.lower()} {record.name}: {one_line(record.getMessage())}"


def configure_logging(level: str, json_lines: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(AccessFormatter(json_lines))
    root = logging.getLogger("thinkproxy")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
