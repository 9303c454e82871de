"""What a Responses WebSocket turn brings the Responses door, and what the door does differently
for one (proxy.server.doors.responses: `ResponsesDoor.turn`; the socket itself:
proxy.server.doors.responses_ws).

A turn runs as `POST /v1/responses` does; its request's scope carries a `SocketTurn` under
SOCKET_TURN (an HTTP request never has one, so nothing the HTTP door does changes). The door reads
the connection's own responses first and keeps each turn's response there (`ResponseSaver`), writes
a bridged turn's events in the socket's own form (`Answer`: the transcoder, whose `final` says the
terminal event is written), relays a native turn over the connection's upstream WebSocket when its
upstream serves the mode (`socket_relay`), and makes a `generate: false` response without asking
the upstream (`prepared`). The turn's request has the upgrade's headers, less the socket's own
(`turn_scope`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.responses import Response

from proxy.core.config.providers import Dialect
from proxy.core.controls import LEVEL_HEADER
from proxy.core.errors import BadRequest
from proxy.core.events import AccessRecord
from proxy.server.doors.common import BridgedOutput
from proxy.server.doors.responses_store import StoredResponses
from proxy.server.handlers import Proxy
from proxy.server.relay import Relay
from proxy.server.upstream.responses_socket import (
    UPSTREAM_TRANSPORT_HEADER,
    ResponsesSocketUpstream,
    SocketTurnUpstream,
)

# The scope key under which a WebSocket turn's request carries its SocketTurn (an HTTP request
# never has one, so nothing the HTTP door does changes).
SOCKET_TURN = "thinkproxy.socket_turn"
# What a turn with `generate: false` hands the transcoder: an answer that ends at once, with no
# output (the response is made, its state kept; no upstream is asked).
NOTHING_GENERATED = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


class ResponseSaver(Protocol):
    """What keeps a finished response: the state store's StoredResponses, or a socket's own."""

    async def save(
        self,
        tenant: str,
        final: dict[str, Any],
        own: list[Any],
        previous: str | None,
        earlier_keys: list[str],
    ) -> None: ...


class Answer(Protocol):
    """A turn's answer as the socket reads it: its terminal `Response` once written."""

    @property
    def final(self) -> dict[str, Any] | None: ...


@dataclass(slots=True)
class SocketTurn:
    """What a WebSocket turn brings the door besides its body (proxy.server.doors.responses_ws):
    `responses`, the connection's own last responses in front of the state store (what
    `previous_response_id` and `item_reference`s read first); `saver(shared)`, what keeps this turn's
    response on the connection (and in the state store too when `shared`: `store` true);
    `generate` false: the response is made without asking the upstream (bridged), or a warm-up
    sent to a native upstream's WebSocket; `upstream`, the connection's upstream WebSocket, for
    native turns to an upstream that serves the WebSocket mode (None: HTTP per turn). The door
    sets `answer`, its transcoder, when it writes the turn's events in the socket's own form
    (proxy.core.protocols.responses.output.message_frames: each event's JSON and a newline)
    instead of SSE (a bridged turn; a native one relays the upstream's SSE): its `final` is set
    once the terminal event is written, so the socket needs no look at the events for it. A
    native turn relayed over `upstream` sets `relayed`, that turn's upstream: its answer's
    messages come one a write (SocketAnswer: each framed as SSE for the relay's usage reader)."""

    responses: StoredResponses
    saver: Callable[[bool], ResponseSaver]
    generate: bool = True
    upstream: ResponsesSocketUpstream | None = None
    answer: Answer | None = None
    relayed: SocketTurnUpstream | None = None


def socket_relay(
    proxy: Proxy, turn: SocketTurn | None, dialect: Dialect, record: AccessRecord
) -> Relay | None:
    """A WebSocket turn's relay over the connection's upstream WebSocket, when its native
    upstream serves the WebSocket mode (None: the app's HTTP relay, a POST per turn). The same
    request goes either way (forward_native plans it); the transport is said on the record."""
    if turn is None or turn.upstream is None or not dialect.relays_responses_socket:
        return None

    def note(transport: str) -> None:
        record.response_headers.append((UPSTREAM_TRANSPORT_HEADER, transport))

    upstream = turn.relayed = turn.upstream.turn(generate=turn.generate, note=note)
    s = proxy.s
    return Relay(s.settings, upstream, proxy.finish, s.review)


def warm_up_over_http() -> BadRequest:
    """`generate: false` for a native upstream reached over HTTP per turn: refused."""
    return BadRequest(
        "generate: false is served for bridged upstreams, and for a native one that serves "
        "the WebSocket mode (providers.yaml responses_websocket); this one is reached over "
        "HTTP per turn, where a warm-up has no state to prepare.",
        code="unsupported_parameter",
        param="generate",
    )


async def prepared(proxy: Proxy, door: BridgedOutput, record: AccessRecord, started: float) -> Response:
    """`generate: false` (a bridged turn): the response made and kept without model output, its
    events as a stream of its own; the upstream is not asked."""
    out = door.feed(NOTHING_GENERATED) + door.close()
    await door.settle()
    record.status, record.bytes_out = 200, len(out)
    proxy.finish(record, started)
    return Response(out, media_type="text/event-stream", headers=dict(record.response_headers))


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
