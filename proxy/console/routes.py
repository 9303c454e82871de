"""The console's endpoints: the page (`/ui`, its assets) and its data (`/thinkproxy/requests` as
JSON, `/thinkproxy/events` as server-sent events), behind the admin keys where they apply."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from proxy.console.feed import MAX_SUBSCRIBERS, Feed, Recent
from proxy.core.config.tool_titles import ToolTitles
from proxy.core.errors import ConfigError, ServiceUnavailable, Unauthorized
from proxy.core.gateway import parse_client_keys
from proxy.settings import Settings

UI_DIR = Path(__file__).with_name("ui")
KEEPALIVE_S = 15.0
KEEPALIVE = b": keepalive\n\n"
# What one listing may carry: the newest requests up to these bounds, then `truncated: true` and
# how many were `omitted`. A snapshot is a watcher's first frame and counts against its
# SUBSCRIBER_BYTES (half of them at most, so that updates still fit behind it); /thinkproxy/requests
# is built per call, and bounds what each call (and each read of the shared feed) holds.
SNAPSHOT_BYTES = 512 << 10
LISTING_BYTES = 8 << 20
_SNAPSHOT_HEAD = b"event: snapshot\ndata: "
_META_ROOM = 64  # `"truncated":false,"omitted":N` and the `data` array's brackets

# The page loads nothing but its own files and talks to nothing but this proxy; model output is
# inserted as text, and this policy would stop an inline script even if it were not.
PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


@dataclass(frozen=True, slots=True)
class AdminAccess:
    """Who may read the live data: anyone on a bring-your-own-key proxy without admin keys; in
    gateway mode (Settings.gateway_mode: client keys are set, however the upstreams get theirs) or
    whenever admin keys are set, only a Bearer token among THINKPROXY_ADMIN_KEYS (named `ops:ak-…`
    like the client keys). Client keys are not admin keys."""

    keys: tuple[bytes, ...]
    required: bool

    @classmethod
    def from_settings(cls, settings: Settings) -> AdminAccess:
        keys = tuple(
            key.key
            for key in parse_client_keys(
                (k.get_secret_value() for k in settings.admin_keys), "THINKPROXY_ADMIN_KEYS"
            )
        )
        if settings.gateway_mode and settings.ui and not keys:
            raise ConfigError(
                "THINKPROXY_UI is on in gateway mode (THINKPROXY_CLIENT_KEYS is set) but "
                "THINKPROXY_ADMIN_KEYS is empty: the live view would show every client's requests to "
                "anyone. Set THINKPROXY_ADMIN_KEYS (comma-separated)."
            )
        return cls(keys, settings.gateway_mode or bool(keys))

    def check(self, headers: Iterable[tuple[str, str]]) -> None:
        if not self.required:
            return
        token = None
        for name, value in headers:
            if name.lower() == "authorization":
                scheme, _, rest = value.partition(" ")
                if scheme.lower() == "bearer":
                    token = rest.strip().encode()
        matched = False
        if token:
            for key in self.keys:  # every key compared: the time taken tells nothing
                matched |= hmac.compare_digest(token, key)
        if not matched:
            raise Unauthorized(
                "The console's live data needs an admin key: send 'Authorization: Bearer <key>' with "
                "one of THINKPROXY_ADMIN_KEYS (client keys are not admin keys).",
                code="admin_key_required",
            )


def _unauthorized(exc: Unauthorized) -> Response:
    return Response(
        exc.body(),
        status_code=exc.status,
        media_type="application/json",
        headers={"www-authenticate": 'Bearer realm="thinkproxy console"'},
    )


class ConsoleRoutes:
    def __init__(self, feed: Feed, access: AdminAccess, titles: ToolTitles) -> None:
        self.feed = feed
        self.access = access
        self.titles = {name: dict(title) for name, title in titles.items()}

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/ui", self.page, methods=["GET", "HEAD"]),
            Route("/ui/", self.page, methods=["GET", "HEAD"]),
            Mount("/ui/assets", StaticFiles(directory=UI_DIR / "assets"), name="console-assets"),
            Route("/thinkproxy/requests", self.requests, methods=["GET"]),
            Route("/thinkproxy/events", self.events, methods=["GET"]),
        ]

    async def page(self, request: Request) -> Response:
        return FileResponse(UI_DIR / "index.html", headers=PAGE_HEADERS, media_type="text/html")

    def _listing(self, recent: Recent, max_bytes: int) -> bytes:
        """The listing as JSON, at most `max_bytes`: the newest requests that fit (none skipped for
        a smaller older one: what is shown is always the most recent), and how many were left out."""
        meta: dict[str, Any] = {
            "object": "list",
            "shared": recent.shared,
            "replica": self.feed.replica,
            "history": self.feed.history,
            "tool_titles": self.titles,
        }
        size = len(orjson.dumps(meta)) + _META_ROOM
        parts: list[bytes] = []
        for entry in recent.entries:
            raw = orjson.dumps(entry)
            size += len(raw) + 1
            if size > max_bytes:
                break
            parts.append(raw)
        omitted = recent.omitted + len(recent.entries) - len(parts)
        meta["truncated"] = omitted > 0
        meta["omitted"] = omitted
        return orjson.dumps(meta)[:-1] + b',"data":[' + b",".join(parts) + b"]}"

    async def requests(self, request: Request) -> Response:
        try:
            self.access.check(request.headers.items())
        except Unauthorized as exc:
            return _unauthorized(exc)
        recent = await self.feed.recent(LISTING_BYTES)
        return Response(self._listing(recent, LISTING_BYTES), media_type="application/json")

    async def events(self, request: Request) -> Response:
        try:
            self.access.check(request.headers.items())
        except Unauthorized as exc:
            return _unauthorized(exc)
        if self.feed.watchers >= MAX_SUBSCRIBERS:
            busy = ServiceUnavailable(
                f"Too many live views are open on this proxy process (at most {MAX_SUBSCRIBERS}); "
                "close one, or read GET /thinkproxy/requests instead.",
                code="too_many_watchers",
            )
            return Response(busy.body(), status_code=busy.status, media_type="application/json")
        return StreamingResponse(self._stream(), media_type="text/event-stream", headers=SSE_HEADERS)

    async def _stream(self) -> AsyncIterator[bytes]:
        """`snapshot` (the listing) first, then `request` (finished) and `progress` (in flight)."""
        feed = self.feed
        # Subscribed here, where `finally` is sure to run, and before the snapshot is read:
        # nothing falls between the two.
        subscriber = feed.subscribe()
        if subscriber is None:
            return
        queue = subscriber.queue
        try:
            await feed.follow_replicas()
            recent = await feed.recent(SNAPSHOT_BYTES)
            # At most SNAPSHOT_BYTES, and no more than the watcher has room for: what was queued
            # for it while the listing was read counts.
            limit = min(SNAPSHOT_BYTES, queue.room)
            frame = _SNAPSHOT_HEAD + self._listing(recent, limit - len(_SNAPSHOT_HEAD) - 2) + b"\n\n"
            sent = 0
            while True:
                # A frame handed to the server may wait in the connection's buffer until the
                # watcher reads it: it counts against the watcher's bytes until the server takes
                # the next one, which it does only once that buffer is back under its high-water
                # mark (uvicorn's flow control; 64 KiB). A watcher that never reads holds its
                # snapshot (or one frame) there, and its queue only what else fits.
                queue.sending += len(frame)
                yield frame
                queue.sending -= sent
                sent = len(frame)
                if subscriber.overflowed:
                    break
                try:
                    frame = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    frame = KEEPALIVE
        finally:
            feed.unsubscribe(subscriber)
