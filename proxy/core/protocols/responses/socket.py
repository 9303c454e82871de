"""The Responses API's WebSocket mode: its message rules, pure (the socket's I/O is
proxy.server.doors.responses_ws).

The protocol, as openai-python 3.63 speaks it (`client.responses.connect()`:
`openai/resources/responses/responses.py`, `ResponsesConnection` and `ResponsesResponseResource`;
the messages: `openai/types/responses/responses_client_event.py` and `responses_server_event.py`):

- client → server, one JSON text message each: `response.create` — the `POST /v1/responses`
  body's top-level fields plus the envelope: `type`, `generate` (false: prepare the request's state
  without model output; its response id may be continued), `stream_id` (the lane its events are
  tagged with); `stream` is implied, `background` is not supported over the socket.
  `response.steer` — `{input, previous_response_id}`, input queued for a continuation.
  `response.append` — `{input, client_metadata?}`: Codex's first WebSocket protocol (before
  `responses_websockets_v2`; codex-rs `codex-api/src/common.rs`, `ResponseAppendWsRequest`), sent
  after a response ended on the connection when the next request differs from the last only by
  items added to its input: a new response with the last `response.create`'s fields whose input is
  the last request's, the last response's output, then `input`. That is the last create continued
  by `previous_response_id` with `input` (`appended`): the connection holds both. (The pinned
  Codex 0.171 speaks the v2 protocol, a `response.create` with `previous_response_id`, and never
  sends it; openai-python 3.63 does not declare it.)
- server → client, one JSON text message each: the same events the SSE stream carries (each
  with `sequence_number`; `stream_id` added when the `response.create` named one), `error`
  (`{type: "error", status, error: {type, code, message, param}}`: `ResponseWsError`), and for
  steering `response.steer.accepted|pending|failed` (`ResponseSteerFailedEvent`: `error.code`
  `steering_not_supported` when the model or mode cannot steer).

`read_message` turns a client message into a `Create`, a `Steer` or an `Append` (a malformed one is a
BadRequest, which the edge sends as an `error` event); `EventSplitter` turns the SSE bytes the
door writes for one turn (any split) into the socket's messages, comment lines (the trace, keep-
alives) left out: a socket has no comment lines, and the trace never reaches it (the console,
metrics and OpenTelemetry still see it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core import jsonio
from proxy.core.errors import BadRequest, PayloadTooLarge, ProxyError, quoted

__all__ = [
    "APPEND",
    "CREATE",
    "STEER",
    "Append",
    "Create",
    "Steer",
    "appended",
    "error_event",
    "error_from_answer",
    "read_message",
    "steer_failed",
    "terminal_response_id",
]

CREATE = "response.create"
STEER = "response.steer"
APPEND = "response.append"
# The terminal events whose response a `response.append` continues (a failed one: none).
_APPENDABLE = ("response.completed", "response.incomplete")
# The envelope's own fields: not part of the POST body the door reads.
_ENVELOPE = ("type", "generate", "stream_id")


@dataclass(frozen=True, slots=True)
class Create:
    """A `response.create`: `body` is the POST body it stands for (`stream: true`)."""

    body: dict[str, Any]
    generate: bool
    stream_id: str | None


@dataclass(frozen=True, slots=True)
class Steer:
    """A `response.steer`, kept as sent (a `response.steer.failed` returns it)."""

    input: Any
    previous_response_id: Any


@dataclass(frozen=True, slots=True)
class Append:
    """A `response.append`: `input`, the items added; `fields`, what else it set (Codex's
    `client_metadata`), applied over the last `response.create`'s."""

    input: list[Any]
    fields: dict[str, Any]


def read_message(message: str | bytes, limit: int) -> Create | Steer | Append:
    """One client message; BadRequest (or PayloadTooLarge past `limit` bytes, the
    THINKPROXY_MAX_BODY_BYTES of a POST body) for one the protocol does not allow."""
    data = message.encode("utf-8", "surrogatepass") if isinstance(message, str) else message
    size = len(data)
    if size > limit:
        raise PayloadTooLarge(
            f"WebSocket message of {size} bytes exceeds the limit of {limit} bytes "
            "(THINKPROXY_MAX_BODY_BYTES)."
        )
    try:
        parsed = jsonio.loads(data)
    except ValueError:
        raise BadRequest("A WebSocket message must be one JSON object.", code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise BadRequest("A WebSocket message must be one JSON object.", code="invalid_json")
    kind = parsed.get("type")
    if kind == STEER:
        return Steer(parsed.get("input"), parsed.get("previous_response_id"))
    if kind == APPEND:
        return _append(parsed)
    if kind != CREATE:
        raise BadRequest(
            f"Unknown WebSocket event type {quoted(kind)}: the client events are {CREATE!r}, "
            f"{STEER!r} and {APPEND!r}.",
            code="unknown_event_type",
            param="type",
        )
    generate = parsed.get("generate", True)
    if not isinstance(generate, bool):
        raise BadRequest("generate must be true or false.", param="generate")
    stream_id = parsed.get("stream_id")
    if stream_id is not None and not isinstance(stream_id, str):
        raise BadRequest("stream_id must be a string.", param="stream_id")
    if parsed.get("background") is True:
        raise BadRequest(
            "background is not supported in WebSocket mode; use POST /v1/responses for a background "
            "response.",
            code="unsupported_parameter",
            param="background",
        )
    if parsed.get("stream") is False:
        raise BadRequest(
            "stream is implied in WebSocket mode (every response is streamed as events); leave it out.",
            code="unsupported_parameter",
            param="stream",
        )
    body = {key: value for key, value in parsed.items() if key not in _ENVELOPE}
    body["stream"] = True
    return Create(body, generate, stream_id)


def _append(parsed: dict[str, Any]) -> Append:
    items = parsed.get("input")
    if not isinstance(items, list) or not items:
        raise BadRequest(
            "response.append needs input: a non-empty array of the items added to the last request's.",
            param="input",
        )
    fields = {key: value for key, value in parsed.items() if key not in ("type", "input")}
    for name in ("stream", "background", "generate", "stream_id", "previous_response_id"):
        if name in fields:  # (the continued request's own, or the envelope's: not an append's)
            raise BadRequest(
                f"{name} is not a field of response.append (it adds input to the last request); send a "
                "response.create to change it.",
                code="unsupported_parameter",
                param=name,
            )
    return Append(items, fields)


def appended(last: Create, response_id: str, append: Append) -> Create:
    """The `response.create` an append stands for: `last`'s body (the last request on the
    connection) with the append's fields over it, continuing `response_id` (the last response) by
    `previous_response_id` with the appended `input`; generated, on the default lane."""
    body = {**last.body, **append.fields, "input": append.input, "previous_response_id": response_id}
    body["stream"] = True
    return Create(body, True, None)


def terminal_response_id(message: str | bytes | None) -> str | None:
    """The id of the response a turn's terminal message ended, when a `response.append` may
    continue it (`response.completed` or `response.incomplete`); None otherwise (`message`: as
    sent, text or its UTF-8)."""
    if message is None:
        return None
    try:
        raw = message if isinstance(message, bytes) else message.encode("utf-8", "surrogatepass")
        event = jsonio.loads(raw)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("type") not in _APPENDABLE:
        return None
    response = event.get("response")
    found = response.get("id") if isinstance(response, dict) else None
    return found if isinstance(found, str) else None


def _tagged(event: dict[str, Any], stream_id: str | None) -> str:
    if stream_id is not None:
        event["stream_id"] = stream_id
    return jsonio.dumps(event).decode()


def error_event(error: ProxyError, stream_id: str | None = None) -> str:
    """The `error` event for one of the proxy's own errors (`ResponseWsError`)."""
    event: dict[str, Any] = {"type": "error", "status": error.status, **error.payload()}
    return _tagged(event, stream_id)


def error_from_answer(status: int, body: bytes, stream_id: str | None = None) -> str:
    """The `error` event for an answer that is not a stream (the proxy's error body, or the
    upstream's passed back): its `error` object as it came, else its text as the message."""
    try:
        parsed = jsonio.loads(body) if body else None
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        text = (
            body.decode("utf-8", "replace").strip()[:2000] or f"The upstream answered with status {status}."
        )
        error = {"message": text, "type": "upstream_error", "code": None, "param": None}
    if not isinstance(error.get("type"), str):
        error = {**error, "type": "upstream_error"}
    return _tagged({"type": "error", "status": status, "error": error}, stream_id)


def steer_failed(steer: Steer, stream_id: str | None = None) -> str:
    """`response.steer.failed` with `steering_not_supported`: a bridged model cannot be steered
    mid-response (the input goes in the next `response.create`)."""
    event: dict[str, Any] = {
        "type": "response.steer.failed",
        "sequence_number": 0,
        "error": {
            "type": "invalid_request_error",
            "code": "steering_not_supported",
            "message": (
                "Steering is not supported by this proxy; send the input in the next response.create "
                "(with previous_response_id) instead."
            ),
        },
        "steer": {"input": steer.input, "previous_response_id": steer.previous_response_id},
    }
    return _tagged(event, stream_id)
