"""One-line summaries of tool arguments and tool outputs, safe to put in a trace.

Pure and deterministic. A summary never carries a raw payload: values under secret-looking keys
become `***` at any depth, long values are cut, and large structures are reduced to their shape
(`{3 keys}`, `[5 items]`). Free text gets a best-effort scrub of `key: value` / `key=value`
pairs with secret-looking keys, because a cut prefix of broken JSON or a log line can still
carry a credential.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from proxy.core.jsonio import DEPTH_ERROR, deeper_than

MAX_VALUE_CHARS = 60
MAX_PAIRS = 6
MAX_KEYS_LISTED = 8
MAX_TEXT_CHARS = 80
MAX_UNPARSED_CHARS = 40
# Scrubbing works on a bounded prefix so a megabyte of tool output costs the same as a line.
_SCRUB_WINDOW = 400
REDACTED = "***"

_SECRET_FRAGMENTS = (
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "token",
    "secret",
    "password",
    "passwd",
    "cookie",
    "configurable",
    "credential",
    "private_key",
    "private-key",
    "privatekey",
)
_SECRET_WORD = (
    r"[\w.-]*(?:authorization|api[_-]?key|token|secret|passw(?:or)?d|cookie|configurable|credential"
    r"|private[_-]?key)[\w.-]*"
)
# key (optionally quoted) followed by `:` or `=` and a value: a quoted string (possibly cut), an
# auth scheme plus its credential, or a bare word.
_SECRET_PAIR = re.compile(
    r"(?i)([\"']?" + _SECRET_WORD + r"[\"']?\s*[:=]\s*)"
    r"(\"(?:[^\"\\]|\\.)*\"?|'[^']*'?|(?:bearer|basic|token)\s+\S+|[^\s,;&}\]\"']+)"
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")
_WHITESPACE = re.compile(r"\s+")
_ERROR_TEXT = re.compile(r"(?i)^(?:error\b|exception\b|traceback \(most recent call last\))")


# Counts of model tokens (`max_tokens`, `total_tokens`, …) contain "token" but are no secret.
_TOKEN_COUNT = re.compile(
    r"(?:max|min|num|total|prompt|completion|reasoning|input|output|cached)_(?:\w+_)?tokens"
)


def is_secret_key(key: str) -> bool:
    """True for a key whose value must never be shown (case-insensitive substring match)."""
    lowered = key.lower()
    if _TOKEN_COUNT.fullmatch(lowered):
        return False
    return any(fragment in lowered for fragment in _SECRET_FRAGMENTS)


def redact(value: Any) -> Any:
    """A copy of a JSON value with every value under a secret-looking key replaced by `***`."""
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_key(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def scrub_text(text: str) -> str:
    """Free text with the values of `secret_key: value` / `secret_key=value` pairs masked."""
    text = _SECRET_PAIR.sub(lambda m: m.group(1) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + " " + REDACTED, text)


def summarize_arguments(raw: str, total_chars: int | None = None) -> str:
    """Tool-call arguments (a JSON string) as `key: value, …` pairs, e.g. `city: Paris, days: 3`.

    `total_chars` larger than `len(raw)` says `raw` is only the head of longer arguments (the trace
    keeps a bounded amount): the summary is then that head, cut, with the whole length.
    """
    if total_chars is not None and total_chars > len(raw):
        return _head(raw, f"{total_chars:,} chars, too long to summarize")
    stripped = raw.strip()
    if not stripped:
        return "(no arguments)"
    try:
        parsed = orjson.loads(stripped)
    except orjson.JSONDecodeError as exc:
        if DEPTH_ERROR in str(exc):  # valid JSON nested deeper than the parser reads
            return _head(stripped, f"{len(stripped):,} chars, nested too deeply to summarize")
        return _unparsed(stripped)
    if isinstance(parsed, dict):
        if not parsed:
            return "(no arguments)"
        pairs = [
            f"{_one_line(str(k))}: {REDACTED if is_secret_key(str(k)) else _value(v)}"
            for k, v in list(parsed.items())[:MAX_PAIRS]
        ]
        return ", ".join(pairs) + _more(len(parsed) - MAX_PAIRS)
    return _value(parsed)


def _as_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def summarize_output(content: Any) -> str:
    """A tool result as its shape: `N items`, `keys: a, b`, `error: …`, or the start of its text."""
    if content is None:
        return "empty"
    if not isinstance(content, (str, list)):
        content = _as_text(content)  # clients send numbers and objects too, against the spec
    if isinstance(content, list):
        return _summarize_parts(content)
    stripped = content.strip()
    if not stripped:
        return "empty"
    parsed = _parse_structured(stripped)
    if isinstance(parsed, list):
        return _count(len(parsed), "item")
    if isinstance(parsed, dict):
        message = _error_message(parsed)
        if message is not None:
            return f"error: {_cut(_one_line(scrub_text(message[:_SCRUB_WINDOW])), MAX_VALUE_CHARS)}"
        if not parsed:
            return "empty object"
        keys = [_one_line(str(k)) for k in list(parsed)[:MAX_KEYS_LISTED]]
        return "keys: " + ", ".join(keys) + _more(len(parsed) - MAX_KEYS_LISTED)
    return _text(stripped, len(content))


def output_is_error(content: Any) -> bool:
    """True when a tool result looks like a failure: an `error` object or text starting with Error."""
    if content is not None and not isinstance(content, (str, list)):
        content = _as_text(content)
    text = _parts_text(content) if isinstance(content, list) else content
    if not text:
        return False
    stripped = text.strip()
    parsed = _parse_structured(stripped)
    if isinstance(parsed, dict):
        return _error_message(parsed) is not None or _flags_error(parsed)
    if parsed is not None:
        return False
    return _ERROR_TEXT.match(stripped) is not None


# -- helpers -------------------------------------------------------------------------------------


def _value(value: Any) -> str:
    if isinstance(value, str):
        return _cut(_one_line(value), MAX_VALUE_CHARS)
    # Every level of nesting takes two characters: a value this deep is never shown whole, and
    # the checks below (redact, the encoder) must not meet nesting deeper than they handle.
    if isinstance(value, dict | list) and deeper_than(value, MAX_VALUE_CHARS // 2):
        return _count(
            len(value),
            "key" if isinstance(value, dict) else "item",
            braces="{}" if isinstance(value, dict) else "[]",
        )
    if isinstance(value, dict):
        compact = orjson.dumps(redact(value)).decode()
        return compact if len(compact) <= MAX_VALUE_CHARS else _count(len(value), "key", braces="{}")
    if isinstance(value, list):
        compact = orjson.dumps(redact(value)).decode()
        return compact if len(compact) <= MAX_VALUE_CHARS else _count(len(value), "item", braces="[]")
    return orjson.dumps(value).decode()  # numbers, booleans, null: their JSON spelling


def _unparsed(raw: str) -> str:
    return _head(raw, f"{len(raw):,} chars, not valid JSON")


def _head(raw: str, note: str) -> str:
    """The scrubbed start of a text that is not summarized further, and why."""
    flat = _one_line(scrub_text(raw[:_SCRUB_WINDOW]))
    head = flat if len(flat) <= MAX_UNPARSED_CHARS else flat[:MAX_UNPARSED_CHARS] + "…"
    return f"{head} ({note})"


def _text(text: str, length: int) -> str:
    flat = _one_line(scrub_text(text[:_SCRUB_WINDOW]))
    if len(text) <= MAX_TEXT_CHARS and len(flat) <= MAX_TEXT_CHARS:
        return flat
    return f"{flat[:MAX_TEXT_CHARS].rstrip()}… ({length:,} chars)"


def _summarize_parts(parts: list[Any]) -> str:
    text = _parts_text(parts)
    others = sum(1 for p in parts if not (isinstance(p, dict) and p.get("type") == "text"))
    if not text.strip():
        return _count(len(parts), "part") if parts else "empty"
    summary = summarize_output(text)
    return summary + (f" (+{_count(others, 'non-text part')})" if others else "")


def _parts_text(parts: list[Any]) -> str:
    texts = [
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    ]
    return "\n".join(texts)


def _parse_structured(text: str) -> Any:
    """The parsed JSON object/array a text holds, or None (scalars and prose stay text)."""
    if not text or text[0] not in "{[":
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _error_message(obj: dict[str, Any]) -> str | None:
    """The error text of an `{"error": …}` object, or None when it carries no error."""
    error = obj.get("error")
    if not error:
        return None
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        message = error.get("message")
        return message if isinstance(message, str) else "{" + ", ".join(str(k) for k in error) + "}"
    return str(error) if not isinstance(error, list) else _count(len(error), "error")


def _flags_error(obj: dict[str, Any]) -> bool:
    if obj.get("isError") is True or obj.get("is_error") is True:
        return True
    status = obj.get("status")
    return isinstance(status, str) and status.lower() in ("error", "failed", "failure")


def _one_line(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def _more(hidden: int) -> str:
    return f" (+{hidden} more)" if hidden > 0 else ""


def _count(n: int, noun: str, braces: str = "") -> str:
    words = f"{n:,} {noun}{'' if n == 1 else 's'}"
    return f"{braces[0]}{words}{braces[1]}" if braces else words
