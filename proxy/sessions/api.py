"""GET /thinkproxy/sessions, /thinkproxy/sessions/{id}, /thinkproxy/sessions/{id}/export and
/thinkproxy/stats (admin keys, as the console's live data; without admin keys only when the
console is on): docs/sessions.md has their JSON."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.console.routes import AdminAccess
from proxy.core.errors import BadRequest, NotFound, ProxyError
from proxy.sessions.service import SessionsService

PATH = "/thinkproxy/sessions"
STATS_PATH = "/thinkproxy/stats"
MAX_LIMIT = 200
DEFAULT_LIMIT = 50
FILTERS = ("client", "model", "door", "key")
HOUR_MS = 3_600_000


def _integer(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise BadRequest(
            f"Query parameter {name!r} must be an integer from {low} to {high}; got {raw!r}.", param=name
        )
    return value


def _cursor(raw: str | None) -> tuple[int, str] | None:
    if raw is None:
        return None
    at, sep, session_id = raw.partition(":")
    if not sep or not at.isdigit():
        raise BadRequest(
            "Query parameter 'cursor' is not one this API gave: pass the `next` of the previous "
            "page as it came.",
            param="cursor",
        )
    return int(at), session_id


def after(sessions: list[dict[str, Any]], cursor: tuple[int, str]) -> list[dict[str, Any]]:
    """The sessions listed after the cursor's (`last_at`, `id`): after that session itself when it
    is still listed at that time, else those whose last request came earlier."""
    at, session_id = cursor
    for i, summary in enumerate(sessions):
        if summary["id"] == session_id and summary["last_at"] == at:
            return sessions[i + 1 :]
    return [s for s in sessions if s["last_at"] < at]


def matches(summary: Mapping[str, Any], query: Mapping[str, str], since: int) -> bool:
    if summary["last_at"] < since:
        return False
    if "client" in query and summary["client"] != query["client"]:
        return False
    if "model" in query and query["model"] not in summary["models"]:
        return False
    if "door" in query and query["door"] not in summary["doors"]:
        return False
    return not ("key" in query and summary["key"] != query["key"])


class SessionsAPI:
    """`console`: THINKPROXY_UI is on. Without admin keys (a bring-your-own-key proxy) the API
    would show every client's sessions to anyone: it is then served only alongside the console,
    whose live data is as open."""

    def __init__(
        self,
        service: SessionsService,
        admin: AdminAccess,
        clock: Callable[[], float] = time.time,
        *,
        console: bool = False,
    ) -> None:
        self.service = service
        self.admin = admin
        self.clock = clock
        self.served = admin.required or console

    def routes(self) -> list[Route]:
        return [
            Route(PATH, self.list_sessions, methods=["GET"]),
            Route(PATH + "/{session_id:path}/export", self.export, methods=["GET"]),
            Route(PATH + "/{session_id:path}", self.one, methods=["GET"]),
            Route(STATS_PATH, self.stats, methods=["GET"]),
        ]

    async def _guarded(self, request: Request, answer: Callable[[Request], Any]) -> Response:
        try:
            if not self.served:
                raise NotFound(
                    "The sessions API is off on this proxy: without admin keys it would show every "
                    "client's sessions to anyone. Set THINKPROXY_ADMIN_KEYS and send "
                    "'Authorization: Bearer <admin key>', or turn the console on (THINKPROXY_UI=true).",
                    code="sessions_api_off",
                )
            self.admin.check(request.headers.items())
            return await answer(request)  # type: ignore[no-any-return]
        except ProxyError as exc:
            return Response(exc.body(), status_code=exc.status, media_type="application/json")

    async def list_sessions(self, request: Request) -> Response:
        return await self._guarded(request, self._list)

    async def one(self, request: Request) -> Response:
        return await self._guarded(request, self._one)

    async def export(self, request: Request) -> Response:
        return await self._guarded(request, self._export)

    async def stats(self, request: Request) -> Response:
        return await self._guarded(request, self._stats)

    async def _list(self, request: Request) -> Response:
        query = request.query_params
        limit = _integer(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        since = _integer(query, "since", 0, 0, 1 << 53)
        cursor = _cursor(query.get("cursor"))
        found, shared = await self.service.summaries()
        chosen = [s for s in found if matches(s, query, since)]
        # Newest first; sessions whose last requests arrived in the same millisecond keep the
        # order they come in (the most recently active first: the store's order). Stable sort.
        chosen.sort(key=lambda s: s["last_at"], reverse=True)
        if cursor is not None:
            chosen = after(chosen, cursor)
        page = chosen[:limit]
        more = len(chosen) > limit
        last = page[-1] if page else None
        body = {
            "sessions": page,
            "next": f"{last['last_at']}:{last['id']}" if more and last is not None else None,
            "shared": shared,
        }
        return Response(orjson.dumps(body), media_type="application/json")

    async def _found(self, request: Request) -> tuple[dict[str, Any], list[bytes]]:
        session_id = request.path_params["session_id"]
        found = await self.service.session(session_id)
        if found is None:
            raise NotFound(
                f"No session {session_id!r} is kept: it never was, or it aged out (GET {PATH} "
                "lists those kept).",
                code="session_not_found",
            )
        return found

    async def _one(self, request: Request) -> Response:
        summary, details = await self._found(request)
        out = orjson.dumps(summary)[:-1] + b',"details":[' + b",".join(details) + b"]}"
        return Response(out, media_type="application/json")

    async def _export(self, request: Request) -> Response:
        summary, details = await self._found(request)
        lines = [orjson.dumps({"type": "session", **summary})]
        lines += [b'{"type":"request",' + detail[1:] for detail in details]
        return Response(b"\n".join(lines) + b"\n", media_type="application/x-ndjson")

    async def _stats(self, request: Request) -> Response:
        query = request.query_params
        now = int(self.clock() * 1000)
        since = _integer(query, "since", now - HOUR_MS, 0, 1 << 53)
        bucket = _integer(query, "bucket", 60, 10, 86_400)
        return Response(
            orjson.dumps(self.service.stats.report(since, now, bucket)), media_type="application/json"
        )
