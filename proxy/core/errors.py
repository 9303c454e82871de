"""The proxy's own errors and their OpenAI-shaped bodies.

Upstream errors are never represented here: they travel back as the upstream's bytes. These are
the errors the proxy itself raises (bad client input, unreachable upstream, limits), each with
the HTTP status and the `{"error": {"message", "type", "code", "param"}}` body OpenAI SDKs parse.
"""

from __future__ import annotations

from typing import Any

import orjson

# What an error message quotes of one client value (its repr), and what any message may hold: an
# error never echoes a huge id, name or value whole (a 1 MB `previous_response_id` comes back cut).
QUOTE_CHARS = 200
MAX_MESSAGE_CHARS = 2000


def quoted(value: object, limit: int = QUOTE_CHARS) -> str:
    """A client's value as an error message quotes it: its repr, cut to `limit` characters with its
    length said when longer (`'xxxx… (1000000 chars)`)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return _cut(text, limit, len(value) if isinstance(value, str) else len(text))


def _cut(text: str, limit: int, size: int) -> str:
    return f"{text[:limit]}… ({size} chars)"


def error_payload(message: str, type_: str, code: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def error_body(message: str, type_: str, code: str, param: str | None = None) -> bytes:
    return orjson.dumps(error_payload(message, type_, code, param))


class ProxyError(Exception):
    """An error the proxy answers itself, before or instead of the upstream."""

    status: int = 500
    type: str = "proxy_error"
    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        # (the backstop: every message that quotes client input should quote it with `quoted`)
        if len(message) > MAX_MESSAGE_CHARS:
            message = _cut(message, MAX_MESSAGE_CHARS, len(message))
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param

    def payload(self) -> dict[str, Any]:
        return error_payload(self.message, self.type, self.code, self.param)

    def body(self) -> bytes:
        return orjson.dumps(self.payload())


class BadRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class Unauthorized(ProxyError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class Forbidden(ProxyError):
    status = 403
    type = "permission_error"
    code = "upstream_not_allowed"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UpstreamUnreachable(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_unreachable"


class UpstreamTimeout(ProxyError):
    status = 504
    type = "upstream_error"
    code = "upstream_timeout"


class BadUpstreamResponse(ProxyError):
    """The upstream answered, but not with anything the proxy may relay: a status outside 200–599,
    a header that is not valid HTTP, a body that cannot be decoded or exceeds its limit."""

    status = 502
    type = "upstream_error"
    code = "upstream_bad_response"


# Also the code of a stream's trace error when an event's reasoning cannot be removed.
UNREADABLE_ANSWER_CODE = "reasoning_not_removable"


class UnreadableAnswer(ProxyError):
    """A non-stream answer whose reasoning cannot be removed: withheld, never forwarded as is."""

    status = 502
    type = "upstream_error"
    code = UNREADABLE_ANSWER_CODE


class FailedAnswer(ProxyError):
    """An upstream's 2xx answer that carries an error or no answer, where a front door translates
    the answer and must say it failed by its status (the Messages door: not a 200 with an error
    body). `status`: the one the error names, else 502."""

    type = "upstream_error"
    code = "upstream_error"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServiceUnavailable(ProxyError):
    """The proxy itself is at a limit it set (e.g. the console's live views)."""

    status = 503
    type = "proxy_error"
    code = "proxy_busy"


class ConfigError(Exception):
    """A bad settings value or providers file: the process must not start."""
