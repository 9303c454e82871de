"""`GET /v1/responses/{id}/input_items`: the input items of a response the Responses door stored,
listed as OpenAI lists them (the page, pure: proxy.core.protocols.responses.listing; the chain
walk: proxy.server.doors.responses_store.StoredResponses.made_from).

A response the store does not hold goes where it went before: to a native upstream (its own
stored responses; in gateway mode only for the tenant that created it, as
proxy.server.doors.responses.ResponsesDoor.may_be_native and its owners decide), else a 404 — as
`GET /v1/responses/{id}` does. Another tenant's stored response is a 404 too: the store is read
under the client's own tenant hashes only.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.core import jsonio
from proxy.core.errors import NotFound, quoted
from proxy.core.events import AccessRecord
from proxy.core.plan import request as plan
from proxy.core.protocols.responses.listing import list_query, listed_items, page
from proxy.core.protocols.responses.state import STORED_RESPONSE_CAP
from proxy.server.doors.responses import ResponsesDoor


class InputItems:
    """The input-items route of one app's Responses door."""

    def __init__(self, door: ResponsesDoor) -> None:
        self.door = door

    async def list(self, request: Request) -> Response:
        door = self.door

        async def run(record: AccessRecord, started: float) -> Response:
            proxy = door.proxy
            record.client = proxy.s.gateway.authorize(request.headers.items())
            plan.read_controls(request.headers, proxy.defaults)
            response_id = request.path_params["response_id"]
            tenants = door.tenancy.tenants(request.headers.items())
            stored = await door.stored.load(tenants, response_id) if door.store is not None else None
            if stored is None:
                # (a native upstream's own stored response, maybe: as for ResponsesDoor.cancel)
                if door.may_be_native(request):
                    owners = door.owners
                    if owners.active and not await owners.owns(tenants, response_id):
                        raise owners.refusal(response_id)  # (another tenant's, or unknown)
                    return await proxy.forward(request, False, started, record)
                raise NotFound(f"Response with id {quoted(response_id)} not found.", code="not_found")
            query = list_query(request.query_params.multi_items())
            if stored.too_large:
                raise NotFound(
                    f"Response with id {quoted(response_id)} was too large to store ({stored.too_large} "
                    f"bytes; one stored response holds at most {STORED_RESPONSE_CAP}).",
                    code="not_found",
                )
            turns = await door.stored.made_from(tenants, response_id, stored)
            out = jsonio.dumps(page(listed_items(turns), query, response_id))
            record.status, record.bytes_out = 200, len(out)
            proxy.finish(record, started)
            return Response(out, media_type="application/json", headers=dict(record.response_headers))

        return await door.proxy.guarded(request, "responses", run)
