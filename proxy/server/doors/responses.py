"""The Responses API front door: `POST /v1/responses` (and its stored responses, compaction) onto
the same core as chat completions (docs/responses.md).

Per providers.yaml entry (`responses: native | bridge`):

- **bridge** (chat-only upstreams): the request is mapped to the internal chat request
  (proxy.core.protocols.responses.request), earlier turns expanded (`previous_response_id`,
  compaction items), reasoning put back from the sealed `encrypted_content` blobs
  (proxy.core.protocols.responses.state); then the chat path runs as for any chat request
  (proxy.server.handlers.Proxy.run_chat: replay store, level rewrite, normalization, trace,
  review gate, relay), and its output is translated last (`BridgeOutput`, a FrontDoor).
- **native**: forwarded to the upstream's own `/responses`, the level sent as `reasoning.effort`;
  reasoning items, `encrypted_content` and errors pass untouched (proxy.server.doors.responses_native).

The WebSocket mode (proxy.server.doors.responses_ws) runs each `response.create` as one of these
requests (`turn`): the same planning, bridge and ResponseStream; what a socket adds comes in a
`SocketTurn` (the connection's own responses, `generate: false`, the upstream WebSocket), and what
the door does differently for one is in proxy.server.doors.responses_turn.

The I/O lives here: reading and writing stored responses in the state store, the clock, ids.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.core import jsonio
from proxy.core.config.providers import Dialect
from proxy.core.errors import BadRequest, NotFound, quoted
from proxy.core.events import AccessRecord
from proxy.core.plan import request as plan
from proxy.core.policy.budgets import output_cap
from proxy.core.protocols.expansion import Expansion
from proxy.core.protocols.responses.compaction import (
    CompactionTranscoder,
    compaction_request,
    is_trigger,
    user_messages,
)
from proxy.core.protocols.responses.output import ResponseFrame
from proxy.core.protocols.responses.request import BridgedRequest, bridge_request
from proxy.core.protocols.responses.state import (
    STORED_RESPONSE_CAP,
    RestoreReport,
    SealContext,
    expand_compaction,
    reasoning_sealer,
    restore_reasoning,
    seal_compaction,
    spilled_keys,
)
from proxy.core.protocols.responses.stream import ResponsesTranscoder
from proxy.core.protocols.responses.tools import client_names
from proxy.core.sessions.identity import CHAIN_NOTE, chain_links
from proxy.server.doors.common import (
    BridgedOutput,
    Door,
    Note,
    NoteWords,
    bridge_notes,
    chat_request,
    new_id,
    note,
    restore_history,
)
from proxy.server.doors.held_levels import HeldLevels
from proxy.server.doors.native import forward_native
from proxy.server.doors.native_owners import NativeOwners
from proxy.server.doors.responses_native import NATIVE
from proxy.server.doors.responses_store import StoredResponses, input_items, stored_keys
from proxy.server.doors.responses_turn import (
    SOCKET_TURN,
    ResponseSaver,
    SocketTurn,
    prepared,
    socket_relay,
    warm_up_over_http,
)
from proxy.server.handlers import Proxy

logger = logging.getLogger("thinkproxy.responses")


@dataclass(slots=True)
class BridgeOutput(BridgedOutput):
    """The bridged answer in the Responses protocol (a proxy.core.plan.chat.FrontDoor): the translation
    is pure (ResponsesTranscoder, CompactionTranscoder); storing the response at its end is this
    edge's I/O, as is writing large reasoning to the state store (door_common.BridgedOutput)."""

    saver: ResponseSaver | None = None  # (None: the response is not kept)
    stored_input: list[Any] = field(default_factory=list)  # this turn's own items (references resolved)
    previous: str | None = None  # the response this one continues (its record is kept by reference)
    earlier_keys: list[str] = field(default_factory=list)  # the store keys of the earlier turns
    settled: bool = False

    async def keep(self) -> None:
        final = self.transcoder.final
        if self.settled or final is None or self.saver is None:
            return
        self.settled = True
        await self.saver.save(self.tenant, final, self.stored_input, self.previous, self.earlier_keys)


class ResponsesDoor(Door):
    """The handlers of `/v1/responses*`, bound to one app's proxy."""

    def __init__(self, proxy: Proxy) -> None:
        super().__init__(proxy)
        self.stored = StoredResponses(self.store)
        # Gateway mode: which tenant created each id a native upstream stores
        # (proxy.server.doors.native_owners).
        self.owners = NativeOwners(self.store, self.tenancy, gateway=proxy.s.gateway.enabled)
        # The level auto chose per native answer, for the tool loop that continues it by id.
        self.held = HeldLevels()

    # -- POST /v1/responses ---------------------------------------------------------------------
    async def create(self, request: Request) -> Response:
        async def run(record: AccessRecord, started: float) -> Response:
            return await self._create(request, record, started)

        return await self.proxy.guarded(request, "responses", run)

    async def turn(self, request: Request) -> Response:
        """One WebSocket turn (`request` carries its SocketTurn): POST /v1/responses's way, its
        access line marked `WS` (proxy.server.doors.responses_ws)."""

        async def run(record: AccessRecord, started: float) -> Response:
            record.method, record.transport = "WS", "websocket"
            return await self._create(request, record, started)

        return await self.proxy.guarded(request, "responses", run)

    # -- POST /v1/responses/compact ---------------------------------------------------------------
    async def compact(self, request: Request) -> Response:
        async def run(record: AccessRecord, started: float) -> Response:
            return await self._create(request, record, started, compact=True)

        return await self.proxy.guarded(request, "responses", run)

    async def _create(
        self, request: Request, record: AccessRecord, started: float, *, compact: bool = False
    ) -> Response:
        proxy = self.proxy
        s = proxy.s
        arrival, intent, tgt, parsed, dialect = await self.arrive(request, record)
        if isinstance(parsed, dict):  # (the chain it continues names its agent session)
            record.notes[CHAIN_NOTE] = (chain_links(parsed), None)
        turn: SocketTurn | None = request.scope.get(SOCKET_TURN)
        if dialect.responses.mode == "native":
            relay = socket_relay(proxy, turn, dialect, record)
            if turn is not None and not turn.generate and relay is None:
                raise warm_up_over_http()
            if compact:  # the upstream compacts itself: its own endpoint, as it came
                if self.owners.active:  # (it may continue a stored response: only its creator's)
                    await self.owners.check_continuation(self.owners.tenants(request.headers.items()), parsed)
                # (budgeted, and its usage read, uncompressed: it reaches a model)
                req = plan.passthrough(arrival, tgt, gateway_mode=s.gateway.enabled, read=True)
                asks = output_cap(parsed)
                return await proxy.relay_as_it_came(
                    request, req, record, started, reaches_model=True, asks=asks
                )
            return await forward_native(
                proxy,
                NATIVE,
                request,
                arrival,
                intent,
                tgt,
                dialect,
                record,
                started,
                owners=self.owners,
                relay=relay,
                held=self.held,
            )
        if compact:
            if parsed.get("stream") is not None:
                raise BadRequest("/v1/responses/compact does not stream; leave stream out.", param="stream")
            record.stream = False
        return await self._bridge(
            request, arrival, intent, tgt, dialect, record, started, compact=compact, turn=turn
        )

    async def _bridge(
        self,
        request: Request,
        arrival: plan.Arrival,
        intent: plan.Intent,
        tgt: plan.Target,
        dialect: Dialect,
        record: AccessRecord,
        started: float,
        *,
        compact: bool,
        turn: SocketTurn | None = None,
    ) -> Response:
        """A request to a chat-only upstream: bridged to the chat path, with the entry `dialect`
        the door looked up (Door.arrive: once per request). A WebSocket `turn` reads earlier
        responses from the connection first and keeps its own there, stored or not."""
        s = self.proxy.s
        assert tgt.parsed is not None
        parsed = tgt.parsed
        tenants, ctx, expansion = self.sealing(request, tgt, dialect, str(parsed.get("model") or ""))
        tenant = tenants.current  # (what this request writes is kept under the current hash)
        own = input_items(parsed)
        stored = self.stored if turn is None else turn.responses
        own, unresolved, repeated = await stored.resolve_references(own, tenants, expansion)
        earlier, earlier_keys = await stored.earlier(parsed, tenants, expansion)
        items, unopened = expand_compaction([*earlier, *own], ctx, expansion)
        trigger = bool(items) and is_trigger(items[-1])
        request_items = items[:-1] if trigger else items
        bridged = bridge_request(
            {**parsed, "input": request_items}, hosted_tools=s.settings.responses_hosted_tools
        )
        chat = bridged.body
        if compact or trigger:
            chat = compaction_request(
                chat["messages"], {**parsed, "stream": not compact and parsed.get("stream")}
            )
        report = await self._restore(chat["messages"], bridged, ctx, expansion)
        record.request_messages = chat.get("messages")
        response_id = new_id("resp")
        noted = record.notes.get(CHAIN_NOTE)  # (the links _create read, with this response's id)
        record.notes[CHAIN_NOTE] = (noted[0] if noted is not None else chain_links(parsed), response_id)
        frame = ResponseFrame.for_request(
            parsed,
            response_id=response_id,
            model=str(chat.get("model") or ""),
            created_at=int(time.time()),
            clock=time.time,
            can_store=self.store is not None,
        )
        transcoder: ResponsesTranscoder | CompactionTranscoder
        spill: list[tuple[str, bytes]] = []
        if compact or trigger:
            kept = user_messages(request_items) if compact else None
            transcoder = CompactionTranscoder(
                frame, sealer=partial(seal_compaction, ctx), new_id=new_id, kept=kept
            )
        else:
            sealer = reasoning_sealer(ctx, spill if self.store is not None else None)
            socket = turn is not None  # (a socket turn's events in the socket's form: no SSE)
            transcoder = ResponsesTranscoder(
                frame, seal=sealer, new_id=new_id, tool_names=bridged.tool_names, socket=socket
            )
            if turn is not None:
                turn.answer = transcoder
        door = BridgeOutput(transcoder, notes=_notes(bridged, report, unopened, unresolved, repeated))
        door.spill, door.spill_store, door.tenant = spill, self.store, tenant
        if turn is not None:  # (a socket keeps every response of its own; the store those stored)
            door.saver, door.stored_input = turn.saver(bridged.store), own
            door.previous, door.earlier_keys = parsed.get("previous_response_id"), earlier_keys
        elif bridged.store and self.store is not None:
            door.saver, door.stored_input = self.stored, own
            door.previous, door.earlier_keys = parsed.get("previous_response_id"), earlier_keys
        if turn is not None and not turn.generate:
            return await prepared(self.proxy, door, record, started)
        chat_arrival, chat_tgt = chat_request(
            arrival, tgt, chat, record, bridged.omitted_tools, query=arrival.query, headers=tgt.headers
        )
        return await self.proxy.run_chat(
            request,
            chat_arrival,
            intent,
            chat_tgt,
            chat,
            record,
            started,
            dialect=dialect,
            door=door,
            client_names=client_names(bridged.tool_names),
            client_level=bridged.level,
        )

    async def _restore(
        self, messages: list[dict[str, Any]], bridged: BridgedRequest, ctx: SealContext, expansion: Expansion
    ) -> RestoreReport:
        """The history's reasoning put back from its blobs (each distinct one opened once): in a
        worker thread past OFFLOAD_BLOBS blobs, so that opening many never holds the event loop."""
        turns = bridged.reasoning
        return await restore_history(
            sum(1 for turn in turns for item in turn.items if item.encrypted_content),
            lambda: spilled_keys(turns, ctx, expansion),
            lambda spilled: restore_reasoning(messages, turns, ctx, spilled, expansion),
            self.store,
        )

    # -- GET / DELETE /v1/responses/{id} --------------------------------------------------------
    async def retrieve(self, request: Request) -> Response:
        return await self._stored(request, delete=False)

    async def delete(self, request: Request) -> Response:
        return await self._stored(request, delete=True)

    async def _stored(self, request: Request, *, delete: bool) -> Response:
        async def run(record: AccessRecord, started: float) -> Response:
            proxy = self.proxy
            s = proxy.s
            record.client = s.gateway.authorize(request.headers.items())
            plan.read_controls(request.headers, proxy.defaults)
            response_id = request.path_params["response_id"]
            tenants = self.tenancy.tenants(request.headers.items())
            stored = await self.stored.load(tenants, response_id) if self.store is not None else None
            if stored is None:
                if self.may_be_native(request):
                    if self.owners.active and not await self.owners.owns(tenants, response_id):
                        raise self.owners.refusal(response_id)  # (another tenant's, or unknown)
                    return await proxy.forward(request, False, started, record)
                raise NotFound(f"Response with id {quoted(response_id)} not found.", code="not_found")
            if stored.too_large and not delete:
                raise NotFound(
                    f"Response with id {quoted(response_id)} was too large to store ({stored.too_large} "
                    f"bytes; one stored response holds at most {STORED_RESPONSE_CAP}).",
                    code="not_found",
                )
            if delete:
                assert self.store is not None
                await self.store.delete_many(stored_keys(tenants, response_id, stored))
                payload: dict[str, Any] = {"id": response_id, "object": "response", "deleted": True}
            else:
                payload = stored.response
            out = jsonio.dumps(payload)
            record.status, record.bytes_out = 200, len(out)
            proxy.finish(record, started)
            return Response(out, media_type="application/json", headers=dict(record.response_headers))

        return await self.proxy.guarded(request, "responses", run)

    # -- GET /v1/responses/{id}/input_items, POST /v1/responses/{id}/cancel ---------------------
    async def cancel(self, request: Request) -> Response:
        """`POST /v1/responses/{id}/cancel`: a native upstream's stored response's cancellation,
        passed through as any route, but in gateway mode only for the tenant that created the
        response (proxy.server.doors.native_owners); others get the upstream's 404 for an unknown
        id. (Its input items: proxy.server.doors.responses_input_items.)"""

        async def run(record: AccessRecord, started: float) -> Response:
            if self.owners.active and self.may_be_native(request):
                record.client = self.proxy.s.gateway.authorize(request.headers.items())
                response_id = request.path_params["response_id"]
                if not await self.owners.owns(self.owners.tenants(request.headers.items()), response_id):
                    raise self.owners.refusal(response_id)
            return await self.proxy.forward(request, False, started, record)

        return await self.proxy.guarded(request, "passthrough", run)

    def may_be_native(self, request: Request) -> bool:
        """Whether a response this proxy does not hold may be the upstream's own (a native one)."""
        s = self.proxy.s
        if s.routes is not None:
            return False
        base_url = s.policy.resolve(request.headers.get("x-upstream-base-url"))
        return s.table.match(base_url).responses.mode == "native"


# How the Responses door names what its bridge notes speak of (door_common.bridge_notes).
WORDS = NoteWords("Hosted tools", "托管工具", "Sealed reasoning", "加密推理", "blob", "")


def _notes(
    bridged: BridgedRequest, report: RestoreReport, unopened: int, unresolved: list[str], repeated: list[str]
) -> list[Note]:
    """What the trace says about the bridge: references the state store did not hold or that came
    more than once, then what every bridge says (tools left out, fields dropped, blobs not used)."""
    notes: list[Note] = []
    if repeated:
        en = f"Repeated item_reference(s) put in once: {', '.join(repeated)}"
        zh = f"重复的条目引用只放入一次：{', '.join(repeated)}"
        notes.append(note(en, zh, code="repeated_references", ids=repeated))
    if unresolved:
        en = f"Referenced items not found in the state store, left out: {', '.join(unresolved)}"
        zh = f"状态存储中未找到被引用的条目，已省略：{', '.join(unresolved)}"
        notes.append(note(en, zh, code="unresolved_references", ids=unresolved))
    unused = report.unverified + report.foreign + unopened
    return notes + bridge_notes(bridged.omitted_tools, bridged.dropped, unused, WORDS)
