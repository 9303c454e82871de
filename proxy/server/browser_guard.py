"""What a browser could be tricked into sending, refused before any handler runs.

Two attacks reach a proxy that listens on a developer's machine or inside a private network:

- **DNS rebinding**: a page on `evil.example` makes its name resolve to 127.0.0.1 and then reads
  the console's data as if it were same-origin. The browser still sends `Host: evil.example`, so
  the console (`/ui`, `/thinkproxy/*`) answers only to the host names it knows: loopback names
  when the proxy is bound to loopback, or `THINKPROXY_ALLOWED_HOSTS` (which also turns the check
  on for a proxy bound to every interface). 421 otherwise.
- **Cross-site writes**: a form or `fetch(..., {mode: "no-cors"})` POST with a `text/plain` body
  needs no preflight, so CORS alone never stops it from being executed (only from being read).
  A write (any method but GET, HEAD, OPTIONS) whose `Origin` is neither this proxy's own origin
  nor one of `THINKPROXY_CORS_ORIGINS` is refused with 403 on every path. "Its own" means the
  Origin names the Host the request was sent to, and — when the proxy knows its names (bound to
  loopback, or THINKPROXY_ALLOWED_HOSTS) — that host is one of them: after rebinding, a page's
  Origin and Host agree on the attacker's name. SDKs and servers send no `Origin`, so only browsers
  are affected. A proxy bound to every interface without THINKPROXY_ALLOWED_HOSTS cannot tell a
  rebound name from its own: set the list there (the container image binds 0.0.0.0).

A plain ASGI middleware: the request's headers are read once and nothing else is touched.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.errors import error_body
from proxy.server.hot_routes import SERVER_SEND

GUARDED_PREFIXES = ("/ui", "/thinkproxy/")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback_name(host: str) -> bool:
    """`localhost`, `*.localhost` (browsers resolve these to loopback themselves, RFC 6761) or a
    loopback address literal."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header's name (lower-case, no trailing dot, IPv6 without brackets) and port; None
    when it is not a host at all."""
    value = value.strip().lower()
    if not value:
        return None
    try:
        parts = urlsplit(f"//{value}")
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host or parts.username is not None or parts.path or parts.query:
        return None
    return host.rstrip("."), port


def host_matches(host: str, patterns: Iterable[str]) -> bool:
    """Exact names, `*.example.com` (any subdomain, not the name itself) or `*` (any host)."""
    for pattern in patterns:
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
    return False


@dataclass(frozen=True, slots=True)
class HostRule:
    """Which Host headers the console answers to; `active` False: any (bound to every interface
    and no THINKPROXY_ALLOWED_HOSTS: the proxy cannot know its names)."""

    active: bool
    patterns: tuple[str, ...]
    loopback: bool

    @classmethod
    def for_binding(cls, bind_host: str, allowed_hosts: Sequence[str]) -> HostRule:
        patterns = tuple(p.strip().lower().rstrip(".") for p in allowed_hosts if p.strip())
        loopback = is_loopback_name(bind_host.strip("[]").lower())
        return cls(bool(patterns) or loopback, patterns, loopback and not patterns)

    def allows(self, host: str) -> bool:
        if not self.active:
            return True
        if self.loopback:
            return is_loopback_name(host)
        return host_matches(host, self.patterns)


def same_origin(origin: str, host_header: str | None) -> bool:
    """Whether `Origin` names the host (and port) the request was sent to."""
    if host_header is None:
        return False
    try:
        parts = urlsplit(origin)
        origin_port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return False
    target = split_host(host_header)
    if target is None or not parts.hostname:
        return False
    host, port = target
    return parts.hostname.rstrip(".") == host and origin_port == (port or DEFAULT_PORTS.get(parts.scheme))


class BrowserGuard:
    """The ASGI middleware. `__call__` is a plain function that decides before anything is awaited:
    a request it lets through is the inner app's own coroutine, with no frame of the guard's left
    in its await chain (each suspension and resumption of a request passes every frame of that
    chain; bench/README.md, "Layers off the chat path, second cut"); a refusal is its own."""

    def __init__(self, app: ASGIApp, hosts: HostRule, cors_origins: Sequence[str]) -> None:
        self.app = app
        self.hosts = hosts
        self.any_origin = "*" in cors_origins
        self.origins = frozenset(o.rstrip("/").lower() for o in cors_origins if o != "*")

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return self.app(scope, receive, send)
        guarded = self.hosts.active and scope["path"].startswith(GUARDED_PREFIXES)
        # A WebSocket carries writes (the Responses door's `response.create`), and browsers open
        # one from any page without asking first and without CORS: a write, on every path.
        writes = kind == "websocket" or scope["method"] not in SAFE_METHODS
        # Where the guard's refusals go: a WebSocket upgrade is refused in its own messages.
        answer = _WebSocketRefusal(scope, receive, send).send if kind == "websocket" else send
        if not guarded and not writes:
            return self.app(scope, receive, send)
        host = origin = None
        hosts = origins = 0
        for name, value in scope["headers"]:
            if name == b"host":
                host, hosts = value.decode("latin-1"), hosts + 1
            elif name == b"origin":
                origin, origins = value.decode("latin-1"), origins + 1
        if hosts > 1 or origins > 1:
            # No browser sends two; the parts of a server that read the first and the parts that
            # read the last would disagree on where the request came from.
            return _refused(
                scope,
                answer,
                400,
                f"The request has {hosts} Host and {origins} Origin headers: send at most one of each.",
                "invalid_request_error",
                "duplicate_header",
            )
        if guarded:
            target = split_host(host) if host is not None else None
            if target is None or not self.hosts.allows(target[0]):
                shown = "none" if host is None else repr(host[:100])
                return _refused(
                    scope,
                    answer,
                    421,
                    f"This proxy's console does not answer to Host {shown}: it answers to "
                    + (
                        "loopback names (localhost, 127.0.0.1, [::1])"
                        if self.hosts.loopback
                        else "the names in THINKPROXY_ALLOWED_HOSTS"
                    )
                    + ". Open it by one of those names, or add the name to THINKPROXY_ALLOWED_HOSTS "
                    "(comma-separated).",
                    "misdirected_request",
                    "host_not_allowed",
                )
        if writes and origin is not None and not self._origin_allowed(origin, host):
            return _refused(
                scope,
                answer,
                403,
                f"A cross-site request from origin {origin[:200]!r} was refused: browsers send this "
                "without asking first, so it is not executed. A front-end on another origin must be "
                "listed in THINKPROXY_CORS_ORIGINS (comma-separated).",
                "permission_error",
                "cross_site_request_refused",
            )
        return self.app(scope, receive, send)

    def _origin_allowed(self, origin: str, host: str | None) -> bool:
        if self.any_origin or origin.rstrip("/").lower() in self.origins:
            return True
        if not same_origin(origin.lower(), host):
            return False
        # After DNS rebinding a page's Origin and Host both name the attacker's host: the same
        # origin counts only for a host the proxy knows as its own (when it knows its names).
        target = split_host(host) if host is not None else None
        return not self.hosts.active or (target is not None and self.hosts.allows(target[0]))


class _WebSocketRefusal:
    """Sends the guard's HTTP refusal at a WebSocket upgrade: as the denial response where the
    server offers that extension (uvicorn does: the client reads the status and the JSON body),
    else as a close before accept (read as a 403). Passes anything else through."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.denial = "websocket.http.response" in scope.get("extensions", {})
        self.receive = receive
        self.inner = send
        self.connected = False

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if not kind.startswith("http.response."):
            await self.inner(message)
            return
        if not self.connected:  # (the upgrade request is received before it is answered)
            self.connected = True
            await self.receive()
        if self.denial:
            await self.inner({**message, "type": "websocket." + kind})
        elif kind == "http.response.start":
            await self.inner({"type": "websocket.close", "code": 1008})


def _refused(scope: Scope, send: Send, status: int, message: str, type_: str, code: str) -> Awaitable[None]:
    """A refusal (`_refuse`), with the server's own `send` a front door's POST carries in its scope
    for HotRoutes taken out (hot_routes.SERVER_SEND): a refused POST never reaches HotRoutes, which
    takes it out otherwise, and left there it makes a reference cycle of the request."""
    scope.pop(SERVER_SEND, None)
    return _refuse(send, status, message, type_, code)


async def _refuse(send: Send, status: int, message: str, type_: str, code: str) -> None:
    body = error_body(message, type_, code)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
