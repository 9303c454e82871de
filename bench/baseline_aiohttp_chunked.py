"""The earlier baseline, kept to show the change in method: every answer streamed back chunked.

Until issue 33 this was `baseline_aiohttp.py`, the reference of every ratio. It streams a
non-stream JSON answer chunk by chunk too, which no lean relay does and which costs it more than
reading the answer and sending it with a Content-Length (`baseline_aiohttp.py` now). Measured as
target `baseline-aiohttp-chunked` (`--targets ...,baseline-aiohttp-chunked`).
Upstream from env BENCH_UPSTREAM (e.g. http://127.0.0.1:9000). Run under uvicorn:
  uvicorn --app-dir bench baseline_aiohttp_chunked:app --loop uvloop --http httptools --no-access-log
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

UPSTREAM = os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:9000")
DROP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


async def chat(request: Request) -> StreamingResponse:
    headers = {k: v for k, v in request.headers.items() if k not in DROP}
    session: aiohttp.ClientSession = request.app.state.session
    upstream = await session.post(UPSTREAM + request.url.path, data=await request.body(), headers=headers)
    return StreamingResponse(
        upstream.content.iter_any(),
        status_code=upstream.status,
        media_type=upstream.headers.get("content-type"),
        background=BackgroundTask(upstream.release),
    )


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=1000)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        app.state.session = session
        yield


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)
