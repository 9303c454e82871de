"""The earlier baseline, kept to show the change in method: every answer streamed back chunked.

Until issue 33 this was `baseline_aiohttp.py`, the reference of every ratio. It streams a
non-stream JSON answer chunk by chunk too, which no lean relay does and which costs it more than
reading the answer and sending it with a Content-Length (`baseline_aiohttp.py` now). Measured as
target `baseline-aiohttp-chunked` (`--targets ...,baseline-aiohttp-chunked`).
Upstream from env BENCH_UPSTREAM (e.g. http://127.0.0.1:9000). Run under uvicorn:
  uvicorn --app-dir bench baseline_aiohttp_chunked:app --loop uvloop --http httptools --no-access-log
"""

import aiohttp
from baseline_aiohttp import DROP, UPSTREAM, lifespan
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route


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


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)
