"""The Responses API's WebSocket mode: `GET /v1/responses` upgraded, one connection per agent
session (docs/responses.md, "WebSocket mode"; the message rules: proxy.core.protocols.responses.socket).

Each `response.create` is one turn, run as the HTTP door runs a POST (ResponsesDoor.turn): the
same planning, bridge, ResponseStream, replay, review gate, policy and access line; the events the
door writes as SSE go out one JSON text message each (comment lines, the trace among them, left
out). The upgrade's headers apply to every turn: the key (checked at the upgrade too: a bad one is
refused there with its status), the control headers (`X-Thinking-Level` for the connection; a
`response.create` that sets `reasoning.effort` overrides it for that turn), `X-Upstream-Base-URL`.
Native upstreams are reached over HTTP per turn.

- One response at a time per socket: a `response.create` while one runs gets an `error` event
  (`response_in_progress`); the next may follow once the running one's terminal event is out.
- The connection keeps its own last responses (proxy.server.doors.responses_ws_state: in memory,
  bounded), so that
  `previous_response_id` continues them with `store: false` and with the state store off; stored
  ones (`store` true, the store on) are kept in the store as over HTTP too.
- `generate: false`: the response is made and kept without asking the upstream (bridged only).
- `response.steer`: `response.steer.failed` (`steering_not_supported`).
- Limits: a message is at most THINKPROXY_MAX_BODY_BYTES (past it: an `error` event, then close
  1009); a socket with no message and no turn for IDLE_TIMEOUT_S closes (1000, "idle timeout"); a
  socket lives at most MAX_LIFETIME_S (its running turn finishes, then an `error` event
  `websocket_connection_limit_reached` and close 1000, as OpenAI's); a client key (its tenant
  hash) holds at most THINKPROXY_MAX_SOCKETS_PER_KEY sockets open on a worker (the next upgrade is
  refused with 429 `too_many_websockets` before it is accepted; each close gives its socket back).
  The client gone mid-turn cancels the upstream request (the turn's disconnect watch, as over
  HTTP). Each turn has its
  access line (method `WS`), and the connection one of its own at its end (method `GET`, 101);
  both have `transport` "websocket" (the metrics' label, the span's `thinkproxy.transport`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketState

from proxy.core import jsonio
from proxy.core.controls import LEVEL_HEADER
from proxy.core.errors import BadRequest, BadUpstreamResponse, PayloadTooLarge, ProxyError
from proxy.core.events import AccessRecord
from proxy.core.gateway import presented_key
from proxy.core.plan import request as plan
from proxy.core.protocols.responses.socket import (
    Create,
    EventSplitter,
    Steer,
    error_event,
    error_from_answer,
    read_message,
    steer_failed,
)
from proxy.core.replay.keys import tenant_of
from proxy.server.access_log import log_access
from proxy.server.doors.responses import SOCKET_TURN, ResponsesDoor, SocketTurn
from proxy.server.doors.responses_ws_state import KeySockets, SocketResponses

logger = logging.getLogger("thinkproxy.responses")

IDLE_TIMEOUT_S = 900.0  # no message and no turn running for this long: the socket closes
MAX_LIFETIME_S = 3600.0  # a socket's longest life (OpenAI's WebSocket mode closes at 60 minutes)
# Headers of the upgrade that are the socket's, not a turn's (the rest apply to every turn).
_SOCKET_HEADERS = frozenset(
    {
        b"connection",
        b"upgrade",
        b"content-length",
        b"content-type",
        b"transfer-encoding",
        b"x-request-id",  # (each turn gets its own id)
        b"openai-beta",  # (`responses_websockets=…`: the transport's, not the request's)
    }
)
_HANDSHAKE = b"sec-websocket-"  # (the handshake's own headers: never a turn's, never forwarded)
CLOSE_NORMAL = 1000
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011


def turn_scope(socket_scope: Mapping[str, Any], body: bytes, effort_set: bool) -> dict[str, Any]:
    """The HTTP scope of one turn: the upgrade's headers (less the socket's own; less
    X-Thinking-Level when the turn sets `reasoning.effort`), the body's type and length."""
    dropped = _SOCKET_HEADERS | {LEVEL_HEADER.lower().encode()} if effort_set else _SOCKET_HEADERS
    headers = [
        (name, value)
        for name, value in socket_scope.get("headers", [])
        if name.lower() not in dropped and not name.lower().startswith(_HANDSHAKE)
    ]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    path = socket_scope.get("path", "/v1/responses")
    return {
        "type": "http",
        "asgi": socket_scope.get("asgi", {"version": "3.0"}),
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https" if socket_scope.get("scheme") == "wss" else "http",
        "path": path,
        "raw_path": socket_scope.get("raw_path") or path.encode(),
        "query_string": socket_scope.get("query_string", b""),
        "root_path": socket_scope.get("root_path", ""),
        "headers": headers,
        "client": socket_scope.get("client"),
        "server": socket_scope.get("server"),
        "state": socket_scope.get("state", {}),
        "app": socket_scope.get("app"),
        "extensions": {},
    }


class _Connection:
    """One socket's state: its responses, its running turn, whether the client is gone."""

    def __init__(self, websocket: WebSocket, responses: SocketResponses) -> None:
        self.websocket = websocket
        self.responses = responses
        self.gone = asyncio.Event()
        self.turn: asyncio.Task[None] | None = None
        # The running turn's answer is whole (its terminal event out): what is left is its
        # bookkeeping (the upstream closed, the access line), and a next turn waits for it.
        self.settling = False
        self.last_active = time.monotonic()

    @property
    def busy(self) -> bool:
        return self.turn is not None and not self.turn.done()

    async def send(self, text: str) -> None:
        """A message to the client; a client already gone is no error (its turn is cancelled by
        the disconnect watch)."""
        if self.gone.is_set():
            return
        try:
            await self.websocket.send_text(text)
        except Exception:  # (closed under us: the reader sees the disconnect)
            self.gone.set()


class _TurnWriter:
    """The ASGI `send` of one turn: the door's SSE answer → one message per event; an answer that
    is not a stream (an error: the proxy's or the upstream's) → one `error` event."""

    __slots__ = ("body", "connection", "splitter", "status", "stream_id", "streaming")

    def __init__(self, connection: _Connection, stream_id: str | None, max_event_bytes: int) -> None:
        self.connection = connection
        self.stream_id = stream_id
        # (one event holds at most a whole response: `response.completed` carries its output)
        self.splitter = EventSplitter(stream_id, max_event_bytes)
        self.status = 0
        self.streaming = False
        self.body: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            content_type = b""
            for name, value in message.get("headers", ()):
                if name.lower() == b"content-type":
                    content_type = value
            self.streaming = 200 <= self.status < 300 and content_type.startswith(b"text/event-stream")
            return
        data = message.get("body", b"")
        if not message.get("more_body", False):
            self.connection.settling = True
        if not data:
            return
        if self.streaming:
            send = self.connection.send
            for text in self.splitter.feed(data):
                await send(text)
        else:
            self.body.append(data)

    async def end(self) -> None:
        if self.streaming:
            for text in self.splitter.flush():
                await self.connection.send(text)
        elif self.status:
            await self.connection.send(self._not_streamed())

    def _not_streamed(self) -> str:
        if 200 <= self.status < 300:  # (an upstream that answered a stream request whole)
            whole = BadUpstreamResponse(
                "The upstream answered this turn with one body, not a stream; WebSocket mode relays "
                "streamed answers only.",
                code="upstream_not_streamed",
            )
            return error_event(whole, self.stream_id)
        return error_from_answer(self.status, b"".join(self.body), self.stream_id)


class ResponsesSocket:
    """The `/v1/responses` WebSocket endpoint, bound to the Responses door."""

    def __init__(
        self,
        door: ResponsesDoor,
        *,
        idle_timeout: float = IDLE_TIMEOUT_S,
        max_lifetime: float = MAX_LIFETIME_S,
    ) -> None:
        self.door = door
        self.idle_timeout = idle_timeout
        self.max_lifetime = max_lifetime
        self.sockets = KeySockets(door.proxy.s.settings.max_sockets_per_key)

    async def serve(self, websocket: WebSocket) -> None:
        """The route's endpoint: one socket, from its upgrade to its close."""
        proxy = self.door.proxy
        started = time.perf_counter()
        record = AccessRecord(method="GET", path=websocket.url.path, route="responses", transport="websocket")
        headers = websocket.headers.items()
        try:  # the key and the control headers, checked once at the upgrade (each turn again)
            record.client = proxy.s.gateway.authorize(headers)
            plan.read_controls(websocket.headers, proxy.defaults)
        except ProxyError as exc:
            record.status, record.error = exc.status, exc.code
            log_access(record, started)
            await _deny(websocket, exc)
            return
        tenant = tenant_of(self.door.tenancy.secrets.current, presented_key(headers))
        if not self.sockets.take(tenant):
            refused = _too_many_sockets(self.sockets.cap)
            record.status, record.error = refused.status, refused.code
            log_access(record, started)
            await _deny(websocket, refused)
            return
        try:
            await self._serve_accepted(websocket, record, started)
        finally:
            self.sockets.release(tenant)

    async def _serve_accepted(self, websocket: WebSocket, record: AccessRecord, started: float) -> None:
        """The socket once its upgrade passed: accepted, served, its access line written."""
        proxy = self.door.proxy
        await websocket.accept()
        record.status = 101
        limit = proxy.s.settings.max_body_bytes
        connection = _Connection(websocket, SocketResponses(self.door.stored, limit))
        try:
            record.error = await self._serve(connection, limit)
        except Exception:
            logger.exception("Unexpected error on a Responses WebSocket; it is closed (1011).")
            record.error = "internal_error"
            await _close(websocket, CLOSE_INTERNAL, "internal error")
        finally:
            connection.gone.set()  # (a turn still running is the client's no more: it ends)
            if connection.turn is not None:
                await asyncio.gather(connection.turn, return_exceptions=True)
            log_access(record, started)

    async def _serve(self, connection: _Connection, limit: int) -> str | None:
        """Read the client's messages until the socket ends; the access line's `error` (None: the
        client closed it)."""
        websocket = connection.websocket
        deadline = time.monotonic() + self.max_lifetime
        while True:
            now = time.monotonic()
            wait = min(self.idle_timeout, deadline - now)
            try:
                message = await asyncio.wait_for(websocket.receive(), max(wait, 0.0))
            except TimeoutError:
                now = time.monotonic()
                if now >= deadline:
                    if connection.turn is not None:  # (the running turn ends first)
                        await asyncio.gather(connection.turn, return_exceptions=True)
                    limit_reached = BadRequest(
                        f"This WebSocket reached its longest life ({self.max_lifetime:g} s); open a new one "
                        "and continue with previous_response_id (a store: false response lives only on its "
                        "connection: send its items instead).",
                        code="websocket_connection_limit_reached",
                    )
                    await connection.send(error_event(limit_reached))
                    await _close(websocket, CLOSE_NORMAL, "connection limit reached")
                    return "websocket_connection_limit_reached"
                if connection.busy or now - connection.last_active < self.idle_timeout:
                    continue
                await _close(websocket, CLOSE_NORMAL, "idle timeout")
                return "idle_timeout"
            if message["type"] == "websocket.disconnect":
                return None
            connection.last_active = time.monotonic()
            text, data = message.get("text"), message.get("bytes")
            try:
                event = read_message(text if text is not None else data or b"", limit)
            except PayloadTooLarge as exc:
                await connection.send(error_event(exc))
                await _close(websocket, CLOSE_TOO_BIG, "message too big")
                return exc.code
            except ProxyError as exc:
                await connection.send(error_event(exc))
                continue
            if isinstance(event, Steer):
                await connection.send(steer_failed(event))
            elif connection.busy and not connection.settling:
                await connection.send(error_event(_in_progress(), event.stream_id))
            else:
                if connection.turn is not None:  # (its answer is whole: only its bookkeeping is left)
                    await asyncio.gather(connection.turn, return_exceptions=True)
                connection.settling = False
                connection.turn = asyncio.create_task(self._turn(connection, event))

    async def _turn(self, connection: _Connection, create: Create) -> None:
        """One `response.create`, run as the HTTP door runs a POST; its events to the socket."""
        body = jsonio.dumps(create.body)
        reasoning = create.body.get("reasoning")
        effort_set = isinstance(reasoning, dict) and reasoning.get("effort") is not None
        scope = turn_scope(connection.websocket.scope, body, effort_set)
        responses = connection.responses
        scope[SOCKET_TURN] = SocketTurn(responses, responses.saver, create.generate)
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await connection.gone.wait()
            return {"type": "http.disconnect"}

        writer = _TurnWriter(connection, create.stream_id, self.door.proxy.s.settings.max_response_bytes)
        try:
            response: Response = await self.door.turn(Request(scope, receive))
            await response(scope, receive, writer)
            await writer.end()
        except Exception:  # (the door answers every error itself: this is a bug, said once)
            logger.exception(
                "Unexpected error in a Responses WebSocket turn; the turn ends with an error event."
            )
            failure = ProxyError("The proxy failed to handle this turn (an internal error; see its log).")
            await connection.send(error_event(failure, create.stream_id))
        finally:
            connection.last_active = time.monotonic()


class TooManySockets(ProxyError):
    status = 429
    type = "rate_limit_error"
    code = "too_many_websockets"


def _too_many_sockets(cap: int) -> TooManySockets:
    return TooManySockets(
        f"This key already holds {cap} open Responses WebSockets on this proxy worker, its most "
        "(THINKPROXY_MAX_SOCKETS_PER_KEY): close one, or continue on one already open (one response "
        "runs at a time per socket)."
    )


def _in_progress() -> BadRequest:
    return BadRequest(
        "A response is already in progress on this WebSocket: one runs at a time per connection. Wait "
        "for its terminal event (response.completed, response.incomplete, response.failed or error), or "
        "open another connection.",
        code="response_in_progress",
    )


async def _deny(websocket: WebSocket, error: ProxyError) -> None:
    """The upgrade refused with the error's status and OpenAI-shaped body (a server without the
    denial-response extension: a close before accept, which the client reads as a 403)."""
    response = Response(error.body(), status_code=error.status, media_type="application/json")
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close()


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    if websocket.application_state == WebSocketState.CONNECTED:
        try:
            await websocket.close(code, reason)
        except Exception:  # (the client left first)
            logger.debug("Closing a Responses WebSocket failed: the client had left.")
