"""The httpx upstream client: requests go straight to an httpx transport (the `httpx` setting,
and how tests inject `httpx.MockTransport` / respx)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from proxy.core.plan.request import UpstreamRequest
from proxy.server.egress import CLIENT_CHOSEN
from proxy.server.upstream.common import (
    TRANSPORT_ERRORS,
    Upstream,
    UpstreamResponse,
    header_bytes,
    translate_error,
)
from proxy.settings import Settings


class HttpxResponse(UpstreamResponse):
    def __init__(self, response: httpx.Response, url: str) -> None:
        self._response = response
        self.url = url
        self.status = response.status_code
        # The raw bytes, latin-1: httpx's own str view guesses an encoding per value.
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]

    def raw_reader(self) -> AsyncIterator[bytes]:
        stream = self._response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        return stream.__aiter__()  # straight from the transport: no decoder or chunker layers

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxUpstream(Upstream):
    """Requests go straight to an httpx transport, not through `httpx.AsyncClient.send`."""

    def __init__(self, transport: httpx.AsyncBaseTransport, settings: Settings) -> None:
        super().__init__()
        self.transport = transport
        self._timeout = httpx.Timeout(
            connect=settings.connect_timeout,
            read=settings.read_timeout,
            write=settings.read_timeout,
            pool=settings.connect_timeout,
        ).as_dict()

    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        req = httpx.Request(
            request.method,
            request.url,
            # As bytes: httpx would encode str values as ASCII (or refuse non-ASCII ones).
            headers=[(header_bytes(k), header_bytes(v)) for k, v in request.headers],
            content=request.content,
            extensions={"timeout": self._timeout, CLIENT_CHOSEN: request.client_chosen},
        )
        try:
            response = await self.transport.handle_async_request(req)
        except TRANSPORT_ERRORS as exc:
            raise translate_error(exc, request.url) from exc
        response.request = req
        return HttpxResponse(response, request.url)

    async def aclose(self) -> None:
        await self.transport.aclose()
