"""The simulated upstream's Responses WebSocket mode: `GET [/{dialect}]/v1/responses` upgraded, for
the dialects whose provider serves it (`ResponsesTraits.websocket`: OpenAI's,
https://developers.openai.com/api/docs/guides/websocket-mode); the others refuse the upgrade (404,
as their HTTP route table has no such socket), which is what the proxy's fallback to HTTP reads.

The rules it enforces, as OpenAI's WebSocket mode and openai-python 3.63 describe them
(`openai/types/responses/responses_client_event.py`, `responses_server_event.py`):

- client messages are JSON objects of type `response.create` (the POST body's fields plus `type`,
  `generate`, `stream_id`; `background` is refused) or `response.steer`; anything else is an
  `error` event (`{"type": "error", "status", "error": {type, code, message, param}}`);
- one response at a time per socket: a `response.create` while one streams is an `error` event
  (`response_in_progress`), and the running one goes on;
- `previous_response_id` continues a response made on this connection whatever its `store`
  (connection-local state), or a stored one; a `store: false` response of another connection is
  `previous_response_not_found`, as over HTTP;
- the events are the HTTP stream's (`response.created` … `response.completed`), one message each,
  `stream_id` added when the create named one; a request the HTTP route refuses is one `error`
  event with that status and error object; `generate: false` makes a response with no output.

Faults and pacing come from the upgrade's `X-Mock-*` headers, per turn: the status faults are an
`error` event; `disconnect` closes the socket (1011) a few events in; pacing spaces the events.
`X-Mock-WS-Responses: N` ends the socket's life after its Nth response, as OpenAI's ends at 60
minutes: an `error` event `websocket_connection_limit_reached`, then close 1000.
Every message, and the socket's end (whether a response was still streaming), is in the mock's
request log (method `GET` for the upgrade, `WS` for each message and the close).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from starlette.responses import Response
from starlette.websockets import WebSocket

from proxy.mock import faults
from proxy.mock.dialects import Dialect, ResponsesTraits
from proxy.mock.faults import Abort, BadMockHeader, Canned, Plan, Sleep
from proxy.mock.responses.routes import Bounded, Reply, ResponsesApi

CONNECTION_RESPONSES = 256  # (a socket's own responses, the oldest forgotten first)
CLOSE_INTERNAL = 1011
LIFETIME_HEADER = "x-mock-ws-responses"  # the socket's last response (its lifetime, in responses)

Log = Callable[[WebSocket, str, Any], None]  # (socket, method, body) → the request log
CannedFor = Callable[[Dialect, Plan, str], Canned | None]


def error_event(status: int, error: Mapping[str, Any], stream_id: str | None = None) -> bytes:
    event: dict[str, Any] = {"type": "error", "status": status, "error": dict(error)}
    if stream_id is not None:
        event["stream_id"] = stream_id
    return orjson.dumps(event)


def _invalid(message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"type": "invalid_request_error", "code": code, "message": message, "param": param}


def _error_of(status: int, body: bytes) -> dict[str, Any]:
    """The error object of an HTTP error body (the dialect's, OpenAI-shaped)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        return error
    return _invalid(body.decode("utf-8", "replace")[:2000] or f"status {status}")


class ResponsesSocket:
    """One simulated upstream socket's session: its own responses, its running response."""

    def __init__(
        self,
        websocket: WebSocket,
        api: ResponsesApi,
        dialect: Dialect,
        traits: ResponsesTraits,
        plan: Plan,
        log: Log,
        canned: CannedFor,
    ) -> None:
        self.websocket = websocket
        self.api = api
        self.dialect = dialect
        self.traits = traits
        self.plan = plan
        self.log = log
        self.canned = canned
        self.local = Bounded(CONNECTION_RESPONSES)
        self.running: asyncio.Task[None] | None = None
        self.closed = False
        self.responses = 0
        lifetime = websocket.headers.get(LIFETIME_HEADER, "")
        self.lifetime = int(lifetime) if lifetime.isdigit() else 0

    async def serve(self) -> None:
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                if message.get("text") is None:  # (the protocol's messages are text frames)
                    error = _invalid("Binary frames are not supported: send JSON text messages.")
                    await self._send(error_event(400, error))
                    continue
                await self._message(message["text"])
        finally:
            running = self.running is not None and not self.running.done()
            self.log(self.websocket, "WS", {"type": "websocket.close", "mid_response": running})
            if self.running is not None:
                self.running.cancel()
                with contextlib.suppress(BaseException):
                    await self.running

    async def _message(self, text: str) -> None:
        try:
            message = orjson.loads(text)
        except orjson.JSONDecodeError:
            message = None
        self.log(self.websocket, "WS", message if message is not None else text)
        if not isinstance(message, dict):
            await self._send(error_event(400, _invalid("Invalid JSON: a message must be a JSON object.")))
            return
        kind = message.get("type")
        stream_id = message.get("stream_id") if isinstance(message.get("stream_id"), str) else None
        if kind != "response.create":
            error = _invalid(f"Unknown event type {kind!r}.", "unknown_event_type", "type")
            await self._send(error_event(400, error, stream_id))
            return
        if self.running is not None and not self.running.done():
            error = _invalid(
                "A response is already in progress on this connection; wait for it to finish.",
                "response_in_progress",
            )
            await self._send(error_event(400, error, stream_id))
            return
        self.running = asyncio.create_task(self._respond(message, stream_id))

    async def _respond(self, message: dict[str, Any], stream_id: str | None) -> None:
        if message.get("background") is True:
            error = _invalid(
                "background is not supported in WebSocket mode.", "unsupported_parameter", "background"
            )
            await self._send(error_event(400, error, stream_id))
            return
        canned = self.canned(self.dialect, self.plan, faults.new_request_id())
        if canned is not None:
            await self._send(error_event(canned.status, _error_of(canned.status, canned.body), stream_id))
            return
        generate = message.get("generate") is not False
        body = {k: v for k, v in message.items() if k not in ("type", "generate", "stream_id")}
        body["stream"] = True
        made = self.api.make(self.dialect, self.traits, body, self.plan, self.local, generate=generate)
        if isinstance(made, Reply):
            await self._send(error_event(made.status, _error_of(made.status, made.body), stream_id))
            return
        numbered, _ = made
        if stream_id is not None:
            numbered = [{**event, "stream_id": stream_id} for event in numbered]
        steps = faults.stream_steps([orjson.dumps(event) for event in numbered], self.plan, huge_at=0)
        for step in steps:
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Abort):
                self.closed = True
                await self.websocket.close(CLOSE_INTERNAL, "simulated fault: disconnect")
                return
            else:
                await self._send(step)
        self.responses += 1
        if self.lifetime and self.responses >= self.lifetime:
            error = _invalid(
                "Responses websocket connection limit reached. Create a new websocket connection to "
                "continue.",
                "websocket_connection_limit_reached",
            )
            await self._send(error_event(400, error))
            self.closed = True
            await self.websocket.close(1000)

    async def _send(self, data: bytes) -> None:
        if not self.closed:
            await self.websocket.send_text(data.decode())


async def serve_socket(
    websocket: WebSocket,
    api: ResponsesApi,
    dialect: Dialect | None,
    options_pace_ms: float,
    options_chunk_chars: int,
    log: Log,
    canned: CannedFor,
) -> None:
    """The route's endpoint: the upgrade accepted for a dialect that serves the mode, else refused."""
    traits = dialect.responses_api if dialect is not None else None
    log(websocket, "GET", None)
    if dialect is None or traits is None or not traits.websocket:
        await _refuse(websocket, dialect)
        return
    try:
        plan = faults.parse_plan(websocket.headers, pace_ms=options_pace_ms, chunk_chars=options_chunk_chars)
    except BadMockHeader:
        await _refuse(websocket, dialect)
        return
    await websocket.accept()
    await ResponsesSocket(websocket, api, dialect, traits, plan, log, canned).serve()


async def _refuse(websocket: WebSocket, dialect: Dialect | None) -> None:
    """The upgrade refused: the dialect's own 404 for a route it does not have (where the server
    can send a response to an upgrade), else a close before accept (a 403)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}) and dialect is not None:
        missing = dialect.unknown_route("GET", websocket.url.path)
        await websocket.send_denial_response(
            Response(missing.body, missing.status, media_type=missing.media_type)
        )
    else:
        await websocket.close()
