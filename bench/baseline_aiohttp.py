"""Baseline: the thinnest Starlette pass-through on a raw aiohttp ClientSession, as a lean relay.

No parsing, no rewriting: the request body is forwarded as is. A stream (`text/event-stream`) is
streamed back chunk by chunk; any other answer is read whole and sent with its Content-Length, as
a relay that only streams streams does. thinkproxy is measured against this (ratios in the bench
table). `baseline_aiohttp_chunked.py` is the earlier reference, which streamed every answer.
Upstream from env BENCH_UPSTREAM (e.g. http://127.0.0.1:9000). Run under uvicorn:
  uvicorn --app-dir bench baseline_aiohttp:app --loop uvloop --http httptools --no-access-log
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

UPSTREAM = os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:9000")
DROP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


async def chat(request: Request) -> Response:
    headers = {k: v for k, v in request.headers.items() if k not in DROP}
    session: aiohttp.ClientSession = request.app.state.session
    upstream = await session.post(UPSTREAM + request.url.path, data=await request.body(), headers=headers)
    media_type = upstream.headers.get("content-type")
    if media_type is None or not media_type.startswith("text/event-stream"):
        try:
            body = await upstream.read()
        finally:
            upstream.release()
        return Response(body, status_code=upstream.status, media_type=media_type)
    return StreamingResponse(
        upstream.content.iter_any(),
        status_code=upstream.status,
        media_type=media_type,
        background=BackgroundTask(upstream.release),
    )


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=1000)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        app.state.session = session
        yield


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)
