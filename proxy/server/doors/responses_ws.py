"""The Responses API's WebSocket mode: `GET /v1/responses` upgraded, one connection per agent
session (docs/responses.md, "WebSocket mode"; the message rules: proxy.core.protocols.responses.socket).

Each `response.create` is one turn, run as the HTTP door runs a POST (ResponsesDoor.turn): the
same planning, bridge, ResponseStream, replay, review gate, policy and access line; the events the
door writes as SSE go out one JSON text message each (comment lines, the trace among them, left
out). The upgrade's headers apply to every turn: the key (checked at the upgrade too: a bad one is
refused there with its status), the control headers (`X-Thinking-Level` for the connection; a
`response.create` that sets `reasoning.effort` overrides it for that turn), `X-Upstream-Base-URL`.
Native upstreams that serve the WebSocket mode (providers.yaml `responses_websocket`) are relayed
over one upstream WebSocket per client socket, opened at the first such turn and closed with the
client's (proxy.server.upstream.responses_socket: the turn planned as over HTTP, the level in each
`response.create`); other native upstreams, and one that refused the upgrade, get HTTP per turn.

- One response at a time per socket: a `response.create` while one runs gets an `error` event
  (`response_in_progress`); the next may follow once the running one's terminal event is out
  (it starts when that one's bookkeeping is done). Every turn ends with a terminal event: a
  stream cut short (a native upstream dropped or silent past the read timeout, an event past
  THINKPROXY_MAX_RESPONSE_BYTES) ends with an `error` event, its half event dropped.
- The connection keeps its own last responses (proxy.server.doors.responses_ws_state: in memory,
  bounded), so that
  `previous_response_id` continues them with `store: false` and with the state store off; stored
  ones (`store` true, the store on) are kept in the store as over HTTP too.
- `generate: false`: the response is made and kept without asking the upstream (bridged), or sent
  on to a native upstream's WebSocket (a native upstream over HTTP refuses it).
- `response.steer`: `response.steer.failed` (`steering_not_supported`).
- `response.append` (Codex's first WebSocket protocol): the last `response.create` continued by
  `previous_response_id` (the response it ended with) with the appended input, a turn like any
  other (proxy.core.protocols.responses.socket.appended); with no response to continue (none yet,
  or the last failed) an `error` event `previous_response_not_found`.
- Limits: a message is at most THINKPROXY_MAX_BODY_BYTES (past it: an `error` event, then close
  1009); a socket with no message and no turn for IDLE_TIMEOUT_S closes (1000, "idle timeout"); a
  socket lives at most MAX_LIFETIME_S (a create past it is refused, its running turn finishes
  while the socket is still read, then an `error` event `websocket_connection_limit_reached` and
  close 1000, as OpenAI's); a client key (its tenant
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

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from proxy.core import jsonio
from proxy.core.errors import BadRequest, PayloadTooLarge, ProxyError
from proxy.core.events import AccessRecord
from proxy.core.gateway import presented_key
from proxy.core.plan import request as plan
from proxy.core.protocols.responses.socket import (
    Append,
    Create,
    Steer,
    appended,
    error_event,
    read_message,
    steer_failed,
    terminal_response_id,
)
from proxy.core.replay.keys import tenant_of
from proxy.server.access_log import log_access
from proxy.server.doors.responses import ResponsesDoor
from proxy.server.doors.responses_turn import SOCKET_TURN, SocketTurn, turn_scope
from proxy.server.doors.responses_ws_connection import Connection, TurnEdge
from proxy.server.doors.responses_ws_state import KeySockets, SocketResponses
from proxy.server.doors.responses_ws_turn import TurnWriter
from proxy.server.edge import EDGE_REQUEST
from proxy.server.upstream.responses_socket import ResponsesSocketUpstream
from proxy.server.websocket_protocol import SEND_TEXTS

logger = logging.getLogger("thinkproxy.responses")

IDLE_TIMEOUT_S = 900.0  # no message and no turn running for this long: the socket closes
MAX_LIFETIME_S = 3600.0  # a socket's longest life (OpenAI's WebSocket mode closes at 60 minutes)
CLOSE_NORMAL = 1000
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011


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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The route's ASGI app: `serve`, with the server's own `send` for the events (each event
        a message, the hot path: it skips Starlette's per-message state checks and exception
        wrapper, which cost as much as the rest of a message's relay; bench/README.md)."""
        await self.serve(WebSocket(scope, receive, send), send)

    async def serve(self, websocket: WebSocket, send: Send | None = None) -> None:
        """One socket, from its upgrade to its close (`send`: the server's, for the events)."""
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
            await self._serve_accepted(websocket, record, started, send)
        finally:
            self.sockets.release(tenant)

    async def _serve_accepted(
        self, websocket: WebSocket, record: AccessRecord, started: float, send: Send | None
    ) -> None:
        """The socket once its upgrade passed: accepted, served, its access line written."""
        proxy = self.door.proxy
        await websocket.accept()
        record.status = 101
        limit = proxy.s.settings.max_body_bytes
        extension = (websocket.scope.get("extensions") or {}).get(SEND_TEXTS)
        connection = Connection(
            websocket,
            SocketResponses(self.door.stored, limit),
            send,
            sends_texts=extension is not None,
            write_texts=extension.get("write") if isinstance(extension, dict) else None,
        )
        s = proxy.s
        connection.upstream = ResponsesSocketUpstream(s.settings, s.guard, s.upstream)
        try:
            record.error = await self._serve(connection, limit)
        except Exception:
            logger.exception("Unexpected error on a Responses WebSocket; it is closed (1011).")
            record.error = "internal_error"
            await connection.close(CLOSE_INTERNAL, "internal error")
        finally:
            connection.leave()  # (a turn still running is the client's no more: it ends)
            try:
                if connection.turn is not None:
                    await asyncio.gather(connection.turn, return_exceptions=True)
            finally:
                log_access(record, started)
                if connection.upstream is not None:  # (the upstream socket, if one opened, goes
                    # with it; shielded: a server cancelling this task still has it closed)
                    await asyncio.shield(connection.upstream.aclose())

    async def _serve(self, connection: Connection, limit: int) -> str | None:
        """Read the client's messages until the socket ends; the access line's `error` (None: the
        client closed it). Reading never stops while a turn runs (a client gone is seen at once,
        its turn's upstream request cancelled), at the lifetime's end too: past it a
        `response.create` is refused, and the socket closes once the running turn ended.

        Each message is read in this task, under a deadline (`asyncio.timeout`): the idle time's
        end while no turn runs, the lifetime's while one does, and the running turn's end, which
        moves the deadline to now (`Connection.wake`) so that the idle time starts, or the
        expired socket closes. (A read in a task of its own, raced against the turn with
        `asyncio.wait`, cost each turn two tasks' worth of loop work and two more hops before
        it started; bench/README.md, "The socket's turn: …".)"""
        websocket = connection.websocket
        deadline = time.monotonic() + self.max_lifetime
        expired = False
        while True:
            now = time.monotonic()
            expired = expired or now >= deadline
            busy = connection.busy
            if expired and not busy:
                await connection.send(error_event(self._limit_reached()))
                await connection.close(CLOSE_NORMAL, "connection limit reached")
                return "websocket_connection_limit_reached"
            wait: float | None
            if busy:  # (its end starts the idle time, or the close)
                wait = None if expired else deadline - now
            else:  # (idle since the last message or turn's end, not since this wait began)
                wait = min(self.idle_timeout - (now - connection.last_active), deadline - now)
            try:
                async with asyncio.timeout(None if wait is None else max(wait, 0.0)) as window:
                    # (no await between the turn's state read above and this: a turn cannot
                    # end unseen in between)
                    connection.wake = window if busy else None
                    message = await websocket.receive()
            except TimeoutError:
                now = time.monotonic()
                idle = now - connection.last_active >= self.idle_timeout
                if not connection.busy and now < deadline and idle:
                    await connection.close(CLOSE_NORMAL, "idle timeout")
                    return "idle_timeout"
                continue
            finally:
                connection.wake = None
            if message["type"] == "websocket.disconnect":
                return None
            connection.last_active = time.monotonic()
            closed = await self._answer(connection, message, limit, expired)
            if closed is not None:
                return closed

    async def _answer(
        self, connection: Connection, message: Message, limit: int, expired: bool
    ) -> str | None:
        """One client message answered (a turn started, or an event sent); the access line's
        `error` when it closed the socket."""
        text, data = message.get("text"), message.get("bytes")
        try:
            event = read_message(text if text is not None else data or b"", limit)
        except PayloadTooLarge as exc:
            await connection.send(error_event(exc))
            await connection.close(CLOSE_TOO_BIG, "message too big")
            return exc.code
        except ProxyError as exc:
            await connection.send(error_event(exc))
            return None
        if isinstance(event, Steer):
            await connection.send(steer_failed(event))
            return None
        stream_id = event.stream_id if isinstance(event, Create) else None
        if expired:
            await connection.send(error_event(self._limit_reached(), stream_id))
        elif connection.busy and not connection.settling:
            await connection.send(error_event(_in_progress(), stream_id))
        else:  # (a settling turn's answer is whole: the next one starts after its bookkeeping)
            if isinstance(event, Append):
                last, response_id = connection.last_create, terminal_response_id(connection.last_terminal)
                if last is None or response_id is None:
                    await connection.send(error_event(_nothing_to_append()))
                    return None
                event = appended(last, response_id, event)
            connection.settling = False
            connection.turn = asyncio.create_task(self._turn(connection, event, connection.turn))
            connection.turn.add_done_callback(connection.turn_ended)
        return None

    def _limit_reached(self) -> BadRequest:
        return BadRequest(
            f"This WebSocket reached its longest life ({self.max_lifetime:g} s); open a new one "
            "and continue with previous_response_id (a store: false response lives only on its "
            "connection: send its items instead).",
            code="websocket_connection_limit_reached",
        )

    async def _turn(
        self, connection: Connection, create: Create, previous: asyncio.Task[None] | None
    ) -> None:
        """One `response.create`, run as the HTTP door runs a POST; its events to the socket. It
        starts once `previous` (the turn before, settling: its answer whole) has ended."""
        if previous is not None and not previous.done():  # (done: no wait, not even a loop turn)
            # (gather: this turn cancelled, the one it waits for is too, as at a server's stop)
            await asyncio.gather(previous, return_exceptions=True)
        connection.last_create, connection.last_terminal = create, None
        body = jsonio.dumps(create.body)
        reasoning = create.body.get("reasoning")
        effort_set = isinstance(reasoning, dict) and reasoning.get("effort") is not None
        scope = turn_scope(connection.websocket.scope, body, effort_set)
        scope["extensions"][EDGE_REQUEST] = TurnEdge(connection, body).hooks()
        responses = connection.responses
        turn = SocketTurn(responses, responses.saver, create.generate, connection.upstream)
        scope[SOCKET_TURN] = turn
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await connection.gone.wait()
            return {"type": "http.disconnect"}

        writer = TurnWriter(connection, create.stream_id, self.door.proxy.s.settings.max_response_bytes, turn)
        try:
            response: Response = await self.door.turn(Request(scope, receive))
            await response(scope, receive, writer.send)
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


def _nothing_to_append() -> BadRequest:
    return BadRequest(
        "response.append adds input to the last response on this WebSocket, and there is none to "
        "continue: no response ended on it yet, or the last one failed. Send a response.create (with "
        "previous_response_id to continue an earlier response).",
        code="previous_response_not_found",
        param="type",
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
