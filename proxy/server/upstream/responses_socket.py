"""The upstream side of a Responses WebSocket (proxy.server.doors.responses_ws): one client socket's
native turns relayed over ONE upstream WebSocket, for an upstream that serves the Responses API's
WebSocket mode (providers.yaml `responses_websocket`; OpenAI's: `wss://api.openai.com/v1/responses`,
https://developers.openai.com/api/docs/guides/websocket-mode, and openai-python's
`client.responses.connect()`, which opens the `/responses` URL of its base URL with its bearer key).

A turn is planned exactly as over HTTP (proxy.server.doors.native.forward_native: the level, the
policy, the blobs left out, the request's headers); only its transport differs. So the socket is
an `Upstream` per turn (`SocketTurnUpstream.open(UpstreamRequest)`), and the relay, its watch (the
client gone, the read timeout), the usage reader and the access line run unchanged:

- The socket is opened lazily, at the first turn that needs it, to the turn's URL with the ws(s)
  scheme and the headers the POST would carry (the key among them; the body's own headers and the
  handshake's are left to the WebSocket client), through a connector that vets names as the HTTP
  client's does (proxy.server.egress). A turn to another URL or with other headers (another
  entry, another key) closes it and opens one for that turn: one upstream socket per client socket.
- The POST body becomes a `response.create` message (`stream` and `background` dropped: the
  protocol implies one and refuses the other; `generate: false` added for a warm-up). The answer is
  the upstream's messages framed as the SSE stream the door relays (`data: {event}`, one per
  message) up to the terminal event. An upstream `error` event as the turn's first message is its
  error answer (the event's `status`, its `error` object as the body), as over HTTP.
- An upstream that refuses the upgrade (any status but 101) is reached over HTTP per turn from
  then on, for that client socket; each such turn says so (`UPSTREAM_TRANSPORT_HEADER` on its
  access line, and a warning in the log once per socket): never silently different behaviour.
  A warm-up (`generate: false`) cannot be served over HTTP: it is refused with the error an HTTP
  native upstream gets.
- The upstream socket closing (a close frame, the connection lost) before the turn's answer
  began is a 502 (`upstream_websocket_closed`, its close code in the message); after it began,
  the stream is cut short (the door's `stream_interrupted` event). The next turn opens a new one
  (the closed one's connection-local state is gone: `previous_response_id` with `store: false`
  then gets the upstream's own `previous_response_not_found`). A socket kept from an earlier
  turn that ended in between (its lifetime: `websocket_connection_limit_reached`, a close, a
  failed send) is replaced and the turn sent once more, as it never reached a model there.
- A turn that ends before its terminal event (the client gone, the read timeout) closes the
  upstream socket: the protocol has no other way to cancel a running response. The client's
  socket closing closes it too (`ResponsesSocketUpstream.aclose`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Literal
from urllib.parse import urlsplit

import aiohttp
import yarl

from proxy.core import jsonio
from proxy.core.errors import BadRequest, UpstreamUnreachable
from proxy.core.plan.request import UpstreamRequest
from proxy.core.protocols.responses.socket import CREATE
from proxy.core.protocols.responses.socket_events import TERMINAL_TYPES, message_type
from proxy.server.egress import ConnectGuard, GuardedAiohttpResolver
from proxy.server.upstream.aiohttp_client import wire_headers
from proxy.server.upstream.common import (
    TRANSPORT_ERRORS,
    Upstream,
    UpstreamResponse,
    describe_upstream,
    translate_error,
)
from proxy.settings import Settings

logger = logging.getLogger("thinkproxy.responses")

# The header (on the turn's record: its access line and console row; a socket message has no
# headers) that says how a native turn reached its upstream: `websocket`, or `http` with why.
UPSTREAM_TRANSPORT_HEADER = "x-thinking-upstream-transport"
# The POST's own headers, and the handshake's (the WebSocket client writes its own).
_NOT_AT_THE_UPGRADE = frozenset(
    {
        "content-type",
        "content-length",
        "accept-encoding",
        "transfer-encoding",
        "connection",
        "upgrade",
        "host",
        "openai-beta",
    }
)
_HANDSHAKE = "sec-websocket-"
# Headers each request carries its own of (its trace context, its id): sent at the upgrade as the
# first turn had them, never a reason to open another socket.
_PER_REQUEST = frozenset({"traceparent", "tracestate", "baggage", "x-request-id"})
# Body fields the WebSocket mode does not take: streaming is implied, background refused.
_TRANSPORT_FIELDS = ("stream", "background")
# The error an upstream ends a socket with at its lifetime's end (OpenAI's, at 60 minutes).
SOCKET_LIFETIME_ERROR = "websocket_connection_limit_reached"
_CLOSED = frozenset({aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED})


class UpgradeRefused(Exception):
    """The upstream answered the WebSocket upgrade with `status`, not 101."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def ws_url(url: str) -> str:
    """The POST's URL with the WebSocket scheme (`http` → `ws`, `https` → `wss`)."""
    scheme, sep, rest = url.partition("://")
    return {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme) + sep + rest


def upgrade_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The POST's headers as the upgrade carries them: the key and the client's own headers, less
    the body's, the connection's and the handshake's."""
    return [
        (name, value)
        for name, value in headers
        if name.lower() not in _NOT_AT_THE_UPGRADE and not name.lower().startswith(_HANDSHAKE)
    ]


def create_message(content: bytes, *, generate: bool) -> bytes:
    """The POST body as a `response.create` message."""
    body = jsonio.loads(content) if content else {}
    if not isinstance(body, dict):  # (the door sends only JSON objects: a bug, said plainly)
        raise BadRequest("The request body must be a JSON object.", code="invalid_json")
    message: dict[str, object] = {"type": CREATE}
    message.update((key, value) for key, value in body.items() if key not in _TRANSPORT_FIELDS)
    if not generate:
        message["generate"] = False
    return jsonio.dumps(message)


def closed_error(url: str, code: int | None, reason: str) -> UpstreamUnreachable:
    """An upstream socket closed before a turn's answer began."""
    said = f" {code}" if code is not None else ""
    why = f" ({reason[:200]})" if reason else ""
    return UpstreamUnreachable(
        f"Upstream {describe_upstream(url)} closed its Responses WebSocket{said}{why} before answering "
        "this turn; the next turn opens a new one.",
        code="upstream_websocket_closed",
    )


def framed(data: bytes, kind: bytes | None) -> bytes:
    """One upstream message (of type `kind`) as the SSE event the door relays. A message that
    does not open with its `type` (as OpenAI's do) gets an `event:` line, so that its type is
    read without a parse downstream; one holding raw newlines (JSON pretty-printed) is written
    compactly first (an SSE `data:` line ends at a newline)."""
    if b"\n" in data or b"\r" in data:
        data = jsonio.dumps(jsonio.loads(data))
    if kind is not None and not data.startswith(b'{"type":"'):
        return b"event: " + kind + b"\ndata: " + data + b"\n\n"
    return b"data: " + data + b"\n\n"


class _Socket:
    """One open upstream WebSocket, and what it was opened for (its URL and headers)."""

    __slots__ = ("key", "url", "ws")

    def __init__(
        self, ws: aiohttp.ClientWebSocketResponse[Literal[False]], url: str, key: tuple[object, ...]
    ) -> None:
        self.ws = ws
        self.url = url
        self.key = key


class ResponsesSocketUpstream:
    """One client socket's upstream WebSocket (lazily opened, at most one at a time), and the HTTP
    upstream its turns fall back to when the upstream refuses the upgrade."""

    def __init__(self, settings: Settings, guard: ConnectGuard, http: Upstream) -> None:
        self.settings = settings
        self.guard = guard
        self.http = http
        self.session: aiohttp.ClientSession | None = None
        self.socket: _Socket | None = None
        self.refused: int | None = None  # the status that refused the upgrade (then: HTTP per turn)

    def turn(self, *, generate: bool, note: Callable[[str], None]) -> SocketTurnUpstream:
        """The `Upstream` one turn is relayed through; `note(value)` records how it went out."""
        return SocketTurnUpstream(self, generate, note)

    def _session(self, client_chosen: bool) -> aiohttp.ClientSession:
        if self.session is None:
            proxies = (urlsplit(p).hostname or "" for p in self.guard.egress.proxies.values())
            connector = aiohttp.TCPConnector(
                limit=1,  # (one socket at a time)
                resolver=GuardedAiohttpResolver(self.guard, client_chosen=client_chosen, exempt=proxies),
            )
            self.session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False
            )
        return self.session

    async def _connected(self, request: UpstreamRequest) -> tuple[_Socket, bool]:
        """The socket for this request's URL and headers, opened if need be (then: True);
        UpgradeRefused."""
        headers = wire_headers(upgrade_headers(request.headers))
        key = (
            request.url,
            request.client_chosen,
            tuple(pair for pair in headers if pair[0].lower() not in _PER_REQUEST),
        )
        current = self.socket
        if current is not None and (current.key != key or current.ws.closed):
            await self.close_socket()
            current = None
        if current is not None:
            return current, False
        url = ws_url(request.url)
        session = self._session(request.client_chosen)
        try:
            ws = await session.ws_connect(
                yarl.URL(url, encoded=True),
                headers=headers,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=self.settings.connect_timeout),
                autoclose=False,
                autoping=True,
                proxy=self.guard.egress.for_url(request.url),
                max_msg_size=self.settings.max_response_bytes,
                compress=0,
                decode_text=False,  # (the bytes are relayed: never decoded and encoded again)
            )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 101:  # (a 101 with a bad handshake: a broken upstream, not a refusal)
                raise translate_error(exc, request.url) from exc
            raise UpgradeRefused(exc.status) from None
        except TRANSPORT_ERRORS as exc:
            raise translate_error(exc, request.url) from exc
        self.socket = _Socket(ws, request.url, key)
        return self.socket, True

    async def create(self, request: UpstreamRequest, generate: bool) -> SocketAnswer:
        """One turn over the socket: its `response.create` sent, its first message awaited (as an
        HTTP client awaits the head); UpgradeRefused when the upstream does not serve the mode.

        A socket kept from an earlier turn may have ended in between, unread (the upstream's
        lifetime: OpenAI sends `error` `websocket_connection_limit_reached` and closes at 60
        minutes): when sending fails, or the answer is that close or that error, the turn never
        reached a model on it, and is sent once more on a new socket (as an HTTP client
        reconnects a stale keep-alive connection). On a new socket the same is the turn's error."""
        message = create_message(request.content, generate=generate)
        while True:
            socket, fresh = await self._connected(request)
            answer = SocketAnswer(self, socket)
            try:
                # (a text message, as the protocol's are; its bytes are UTF-8 JSON already)
                await socket.ws.send_frame(message, aiohttp.WSMsgType.TEXT)
                await answer.first()
            except TRANSPORT_ERRORS as exc:  # (sending failed: the socket is gone)
                await self.close_socket()
                if fresh:
                    raise translate_error(exc, request.url) from exc
                continue
            except _Stale as exc:
                await self.close_socket()
                if fresh:
                    raise exc.error from None
                continue
            except BaseException:
                await answer.aclose()
                raise
            if answer.ended_socket:
                await self.close_socket()  # (its error is the answer; the next turn opens anew)
                if not fresh:
                    continue
            return answer

    async def close_socket(self) -> None:
        socket, self.socket = self.socket, None
        if socket is not None and not socket.ws.closed:
            try:
                await socket.ws.close()
            except Exception:  # (already gone: nothing to tell)
                logger.debug("Closing an upstream Responses WebSocket failed: it was gone.")

    async def aclose(self) -> None:
        """The client's socket closed: the upstream's closes with it."""
        await self.close_socket()
        session, self.session = self.session, None
        if session is not None:
            await session.close()


class _Stale(Exception):
    """The socket closed before a turn's first message: `error` is what that is on a new one."""

    def __init__(self, error: UpstreamUnreachable) -> None:
        super().__init__(error.message)
        self.error = error


class SocketTurnUpstream(Upstream):
    """One turn's upstream: the client socket's upstream WebSocket, or HTTP when it refused."""

    def __init__(self, owner: ResponsesSocketUpstream, generate: bool, note: Callable[[str], None]) -> None:
        self.owner = owner
        self.generate = generate
        self.note = note
        # The answer read from the upstream socket, once opened (None: none yet, or HTTP): its
        # messages come one a write, each framed as `framed` writes it (the client socket's
        # writer takes them without splitting: proxy.server.doors.responses_ws_turn).
        self.answer: SocketAnswer | None = None

    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        owner = self.owner
        if owner.refused is None:
            try:
                answer = await owner.create(request, self.generate)
            except UpgradeRefused as exc:
                owner.refused = exc.status
                await owner.aclose()  # (no socket will be opened for this client socket again)
                logger.warning(
                    "Upstream %s refused the Responses WebSocket upgrade (status %d): this client "
                    "socket's native turns go over HTTP, one POST each.",
                    describe_upstream(request.url),
                    exc.status,
                )
            else:
                self.note("websocket")
                self.answer = answer
                return answer
        self.note(f"http; the upstream refused the WebSocket upgrade ({owner.refused})")
        if not self.generate:
            raise BadRequest(
                "generate: false is served for a native upstream only over its WebSocket mode, and "
                "this upstream refused the WebSocket upgrade: its turns go over HTTP, where a warm-up "
                "has no state to prepare.",
                code="unsupported_parameter",
                param="generate",
            )
        return await owner.http.open(request)

    async def aclose(self) -> None:  # (the socket is the client socket's: closed with it)
        return None


class SocketAnswer(UpstreamResponse):
    """One turn's answer read from the upstream socket, as the SSE stream the door relays (or, when
    its first message is an `error` event, as that error's status and body)."""

    def __init__(self, owner: ResponsesSocketUpstream, socket: _Socket) -> None:
        self.owner = owner
        self.socket = socket
        self.url = socket.url
        self.status = 200
        self.headers = [("content-type", "text/event-stream")]
        self.pending: bytes | None = None  # the first message, read by `first`
        self.done = False  # the terminal event was read: the socket is free for the next turn
        self.ended_socket = False  # the answer is the upstream's end of this socket (its lifetime)

    async def _next(self) -> bytes:
        """The next message's data; ConnectionError when the socket closes."""
        ws = self.socket.ws
        while True:
            message = await ws.receive()
            kind = message.type
            if kind is aiohttp.WSMsgType.TEXT or kind is aiohttp.WSMsgType.BINARY:
                data = message.data
                return data if isinstance(data, bytes) else str(data).encode()
            if kind in _CLOSED or kind is aiohttp.WSMsgType.ERROR:
                code = ws.close_code
                reason = message.extra if isinstance(message.extra, str) else ""
                raise ConnectionError(f"upstream WebSocket closed ({code}) {reason}".strip())
            # (pings and pongs: answered by aiohttp; nothing else is a message)

    async def first(self) -> None:
        """Wait for the turn's first message: an `error` event there is the turn's error answer."""
        try:
            data = await self._next()
        except ConnectionError:
            raise _Stale(closed_error(self.url, self.socket.ws.close_code, "")) from None
        kind = message_type(data)
        if kind == b"error":
            self.done = True
            event = jsonio.loads(data)
            status = event.get("status") if isinstance(event, dict) else None
            self.status = status if isinstance(status, int) and 400 <= status <= 599 else 400
            error = event.get("error") if isinstance(event, dict) else None
            self.headers = [("content-type", "application/json")]
            self.pending = jsonio.dumps({"error": error if isinstance(error, dict) else event})
            self.ended_socket = isinstance(error, dict) and error.get("code") == SOCKET_LIFETIME_ERROR
            return
        self.pending = framed(data, kind)
        self.done = kind in TERMINAL_TYPES

    async def raw_reader(self) -> AsyncIterator[bytes]:
        pending, self.pending = self.pending, None
        if pending is not None:
            yield pending
        while not self.done:
            data = await self._next()
            kind = message_type(data)
            self.done = kind in TERMINAL_TYPES
            yield framed(data, kind)

    async def aclose(self) -> None:
        owner = self.owner
        if not self.done and owner.socket is self.socket:
            # (cut short: the client gone, a timeout; the protocol has no cancel: the socket goes)
            await owner.close_socket()
