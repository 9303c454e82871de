"""Baseline: the thinnest Starlette pass-through on a plain httpx.AsyncClient (httpcore transport).

Same contract as baseline_aiohttp.py: body forwarded as is, a stream streamed back raw, any other
answer read whole and sent with its Content-Length.
Upstream from env BENCH_UPSTREAM. Run under uvicorn:
  uvicorn --app-dir bench baseline_httpx:app --loop uvloop --http httptools --no-access-log
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

UPSTREAM = os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:9000")
DROP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


async def chat(request: Request) -> Response:
    headers = {k: v for k, v in request.headers.items() if k not in DROP}
    client: httpx.AsyncClient = request.app.state.client
    outgoing = client.build_request(
        "POST", UPSTREAM + request.url.path, content=await request.body(), headers=headers
    )
    upstream = await client.send(outgoing, stream=True)
    media_type = upstream.headers.get("content-type")
    if media_type is None or not media_type.startswith("text/event-stream"):
        try:
            body = b"".join([part async for part in upstream.aiter_raw()])
        finally:
            await upstream.aclose()
        return Response(body, status_code=upstream.status_code, media_type=media_type)
    return StreamingResponse(
        upstream.aiter_raw(),
        status_code=upstream.status_code,
        media_type=media_type,
        background=BackgroundTask(upstream.aclose),
    )


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(300.0, connect=10.0)) as client:
        app.state.client = client
        yield


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)
