"""The Responses API front door: `POST /v1/responses` (and its stored responses, compaction) onto
the same core as chat completions (docs/responses.md).

Per providers.yaml entry (`responses: native | bridge`):

- **bridge** (chat-only upstreams): the request is mapped to the internal chat request
  (proxy.core.protocols.responses_request), earlier turns expanded (`previous_response_id`,
  compaction items), reasoning put back from the sealed `encrypted_content` blobs
  (proxy.core.protocols.responses_state); then the chat path runs as for any chat request
  (proxy.server.handlers.Proxy.run_chat: replay store, level rewrite, normalization, trace,
  review gate, relay), and its output is translated last (`BridgeOutput`, a FrontDoor).
- **native**: forwarded to the upstream's own `/responses`, the level sent as `reasoning.effort`;
  reasoning items, `encrypted_content` and errors pass untouched (proxy.server.responses_native).

The I/O lives here: reading and writing stored responses in the state store, the clock, ids.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from proxy.core import plan, seal
from proxy.core.controls import LEVEL_HEADER
from proxy.core.errors import BadRequest, NotFound, ServiceUnavailable
from proxy.core.events import AccessRecord
from proxy.core.gateway import presented_key
from proxy.core.protocols.responses_compaction import (
    CompactionTranscoder,
    compaction_request,
    is_trigger,
    user_messages,
)
from proxy.core.protocols.responses_output import ResponseFrame
from proxy.core.protocols.responses_request import BridgedRequest, bridge_request
from proxy.core.protocols.responses_state import (
    RESPONSE_KIND,
    RestoreReport,
    SealContext,
    StoredResponse,
    expand_compaction,
    reasoning_sealer,
    restore_reasoning,
    seal_compaction,
    spilled_keys,
)
from proxy.core.protocols.responses_stream import ResponsesTranscoder
from proxy.core.replay_keys import store_key, tenant_of
from proxy.core.stream import jsonio
from proxy.core.stream.chunk_template import KnownRun
from proxy.core.stream.trace import TraceBuilder
from proxy.server.handlers import Proxy
from proxy.server.replay_service import deployment_secret
from proxy.server.responses_native import forward_native
from proxy.state.base import StateStore

logger = logging.getLogger("thinkproxy.responses")

OMITTED_TOOLS_HEADER = "x-thinking-omitted-tools"
ITEM_KIND = "response_item"  # the replay_keys kind of a stored output item
CHAT_PATH = "/v1/chat/completions"


def new_id(prefix: str) -> str:
    """An id in OpenAI's style (`resp_…`, `rs_…`, `msg_…`, `fc_…`, `call_…`): 48 random hex digits."""
    return f"{prefix}_{secrets.token_hex(24)}"


def add_notes(trace: TraceBuilder | None, notes: list[tuple[str, str, dict[str, Any]]]) -> None:
    """A bridged door's trace notes (tools left out, fields dropped…), before the trace begins."""
    if trace is not None:
        for en, zh, fields in notes:
            trace.add_note(en, zh, **fields)


async def store_spill(spill: list[tuple[str, bytes]], store: StateStore | None) -> None:
    """Reasoning payloads too large to seal inline, written to the state store before the item or
    block that refers to them goes out (both doors' settle)."""
    if spill and store is not None:
        entries, spill[:] = list(spill), []
        try:
            await store.put_many(entries)
        except Exception:  # (the next turn then finds it missing: the miss policy applies)
            logger.warning("Storing %d large reasoning payload(s) failed.", len(entries))


@dataclass(slots=True)
class BridgeOutput:
    """The bridged answer in the Responses protocol (a proxy.core.plan.FrontDoor): the translation
    is pure (ResponsesTranscoder); storing the response at its end is this edge's I/O."""

    transcoder: ResponsesTranscoder | CompactionTranscoder
    notes: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    store: StateStore | None = None
    tenant: str = ""
    stored_input: list[Any] = field(default_factory=list)
    settled: bool = False
    # Reasoning payloads too large to seal inline (responses_state.reasoning_sealer): written to
    # the state store at the next settle, before the item that refers to them goes out.
    spill: list[tuple[str, bytes]] = field(default_factory=list)
    spill_store: StateStore | None = None

    def planned(self, trace: TraceBuilder | None) -> None:
        add_notes(trace, self.notes)

    def feed(self, data: bytes) -> bytes:
        return self.transcoder.feed(data)

    def feed_pieces(self, pieces: Sequence[bytes | KnownRun]) -> bytes:
        return self.transcoder.feed_pieces(pieces)

    def close(self) -> bytes:
        return self.transcoder.close()

    def completion(self, body: bytes) -> bytes:
        return self.transcoder.completion(body)

    async def settle(self) -> None:
        if self.spill:  # (called after every write: most have nothing to store)
            await store_spill(self.spill, self.spill_store)
        final = self.transcoder.final
        if self.settled or final is None or self.store is None:
            return
        self.settled = True
        # The response under its id (previous_response_id, GET), and each output item under its
        # own (a client's `item_reference`: the AI SDK sends reasoning back only that way).
        entries = [
            (
                store_key(self.tenant, RESPONSE_KIND, str(final["id"])),
                StoredResponse(self.stored_input, final).encode(),
            )
        ]
        for item in final.get("output") or ():
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                entries.append((store_key(self.tenant, ITEM_KIND, item["id"]), jsonio.dumps(item)))
        try:
            await self.store.put_many(entries)
        except Exception:  # the state store never fails a request: the response is just not kept
            logger.warning("Storing response %s failed: it cannot be continued or read.", final.get("id"))


class ResponsesDoor:
    """The handlers of `/v1/responses*`, bound to one app's proxy."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        s = proxy.s
        self.store = s.replay.store if s.replay is not None else None
        secret = s.replay.secret if s.replay is not None else deployment_secret(s.settings)
        self.secret = secret
        old_secrets = s.settings.state_old_secrets
        listed = old_secrets.get_secret_value().split(",") if old_secrets is not None else []
        old = [o.strip().encode() for o in listed if o.strip()]
        self.keys = seal.SealKeys(secret, old)

    # -- POST /v1/responses ---------------------------------------------------------------------
    async def create(self, request: Request) -> Response:
        async def run(record: AccessRecord, started: float) -> Response:
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
        arrival, intent, tgt = await proxy.arrive(request, record, parse=True)
        assert tgt.parsed is not None
        parsed = tgt.parsed
        dialect = plan.chat_dialect(s.table, tgt)
        record.model = tgt.model
        record.stream = parsed.get("stream") is True
        if dialect.responses.mode == "native":
            if compact:  # the upstream compacts itself: its own endpoint, as it came
                req = plan.passthrough(arrival, tgt, gateway_mode=s.gateway.enabled)
                return await proxy.relay(
                    request.receive, req, record, started, extra_headers=record.response_headers, chat=None
                )
            return await forward_native(proxy, request, arrival, intent, tgt, dialect, record, started)
        if compact:
            if parsed.get("stream") is not None:
                raise BadRequest("/v1/responses/compact does not stream; leave stream out.", param="stream")
            record.stream = False
        return await self._bridge(request, arrival, intent, tgt, record, started, compact=compact)

    async def _bridge(
        self,
        request: Request,
        arrival: plan.Arrival,
        intent: plan.Intent,
        tgt: plan.Target,
        record: AccessRecord,
        started: float,
        *,
        compact: bool,
    ) -> Response:
        s = self.proxy.s
        assert tgt.parsed is not None
        parsed = tgt.parsed
        dialect = plan.chat_dialect(s.table, tgt)
        tenant = tenant_of(self.secret, presented_key(request.headers.items()))
        ctx = SealContext(self.keys, tenant, dialect.name, tgt.destination.base_url, int(time.time()))
        items = await self._conversation(parsed, tenant)
        items, unresolved = await self._resolve_references(items, tenant)
        items, unopened = expand_compaction(items, ctx)
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
        spilled = await self._spilled(spilled_keys(bridged.reasoning, ctx))
        report = restore_reasoning(chat["messages"], bridged.reasoning, ctx, spilled)
        if LEVEL_HEADER not in request.headers and bridged.level is not None:
            intent = replace(intent, controls=replace(intent.controls, level=bridged.level))
        record.request_messages = chat.get("messages")
        response_id = new_id("resp")
        frame = ResponseFrame.for_request(
            parsed, response_id=response_id, model=str(chat.get("model") or ""), created_at=int(time.time())
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
            transcoder = ResponsesTranscoder(frame, seal=sealer, new_id=new_id, tool_names=bridged.tool_names)
        door = BridgeOutput(transcoder, notes=_notes(bridged, report, unopened, unresolved))
        door.spill, door.spill_store = spill, self.store
        if bridged.store and self.store is not None:
            door.store, door.tenant, door.stored_input = self.store, tenant, items
        if bridged.omitted_tools:
            record.response_headers.append((OMITTED_TOOLS_HEADER, ", ".join(bridged.omitted_tools)))
        chat_arrival = plan.Arrival("POST", CHAT_PATH, CHAT_PATH.encode(), arrival.query, arrival.headers)
        chat_tgt = plan.Target(tgt.destination, jsonio.dumps(chat), chat, tgt.headers)
        return await self.proxy.run_chat(
            request, chat_arrival, intent, chat_tgt, chat, record, started, door=door
        )

    async def _conversation(self, parsed: dict[str, Any], tenant: str) -> list[Any]:
        """The input items, after the stored conversation `previous_response_id` names."""
        current = parsed.get("input")
        if current is not None and not isinstance(current, (str, list)):
            raise BadRequest("input must be a string or a list of items.", param="input")
        items: list[Any] = (
            [{"type": "message", "role": "user", "content": current}]
            if isinstance(current, str)
            else list(current or ())
        )
        previous = parsed.get("previous_response_id")
        if previous is None:
            return items
        if not isinstance(previous, str) or not previous:
            raise BadRequest("previous_response_id must be a response id.", param="previous_response_id")
        stored = await self._load(tenant, previous)
        if stored is None:
            raise BadRequest(
                f"Previous response with id '{previous}' not found.",
                code="previous_response_not_found",
                param="previous_response_id",
            )
        return [*stored.conversation(), *items]

    async def _resolve_references(self, items: list[Any], tenant: str) -> tuple[list[Any], list[str]]:
        """Input items with each `item_reference` replaced by the stored item it names; those the
        store does not hold (expired, another tenant's, the store off) are left out and listed."""
        refs = [item["id"] for item in items if _is_reference(item)]
        if not refs:
            return items, []
        found: dict[str, Any] = {}
        if self.store is not None:
            try:
                values = await self.store.get_many([store_key(tenant, ITEM_KIND, ref) for ref in refs])
            except Exception:
                logger.warning("The state store did not answer for referenced items; they are left out.")
                values = [None] * len(refs)
            for ref, value in zip(refs, values, strict=True):
                if value:
                    found[ref] = jsonio.loads(value)
        out = [found.get(item["id"]) if _is_reference(item) else item for item in items]
        return [item for item in out if item is not None], [ref for ref in refs if ref not in found]

    async def _spilled(self, keys: list[str]) -> dict[str, bytes | None]:
        """The large reasoning payloads the history's blobs refer to (a store fault: none)."""
        if not keys or self.store is None:
            return {}
        try:
            values = await self.store.get_many(keys)
        except Exception:
            logger.warning("The state store did not answer for large reasoning payloads.")
            return {}
        return dict(zip(keys, values, strict=True))

    async def _load(self, tenant: str, response_id: str) -> StoredResponse | None:
        if self.store is None:
            raise BadRequest(
                "previous_response_id needs the proxy's state store, which is off (THINKPROXY_STATE=off); "
                "send the conversation's items in input instead, or turn the state store on.",
                code="state_disabled",
                param="previous_response_id",
            )
        try:
            found = await self.store.get_many([store_key(tenant, RESPONSE_KIND, response_id)])
        except Exception:
            logger.warning("The state store did not answer for a stored response.")
            raise ServiceUnavailable(
                "The proxy's state store did not answer, so the stored response could not be read; retry.",
                code="state_unavailable",
            ) from None
        return StoredResponse.decode(found[0])

    # -- the WebSocket transport ------------------------------------------------------------------
    async def refuse_websocket(self, websocket: WebSocket) -> None:
        """Codex (and the Agents SDK, when asked) try the Responses WebSocket transport first. It is
        not served: a 426 answers the upgrade, on which Codex falls back to HTTP at once (measured:
        one attempt; a 403 or 404 costs it seven attempts with backoff, ~6 s)."""
        error = BadRequest(
            "The Responses WebSocket transport is not served by this proxy; use HTTP (POST /v1/responses).",
            code="websocket_not_supported",
        )
        response = Response(error.body(), status_code=426, media_type="application/json")
        if "websocket.http.response" in websocket.scope.get("extensions", {}):
            await websocket.send_denial_response(response)
        else:  # (a server without the denial-response extension: a close before accept is a 403)
            await websocket.close()

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
            tenant = tenant_of(self.secret, presented_key(request.headers.items()))
            stored = await self._load(tenant, response_id) if self.store is not None else None
            if stored is None:
                if self._native_upstream(request):
                    return await proxy.forward(request, False, started, record)
                raise NotFound(f"Response with id '{response_id}' not found.", code="not_found")
            if delete:
                assert self.store is not None
                await self.store.delete_many([store_key(tenant, RESPONSE_KIND, response_id)])
                payload: dict[str, Any] = {"id": response_id, "object": "response", "deleted": True}
            else:
                payload = stored.response
            out = jsonio.dumps(payload)
            record.status, record.bytes_out = 200, len(out)
            proxy.finish(record, started)
            return Response(out, media_type="application/json", headers=dict(record.response_headers))

        return await self.proxy.guarded(request, "responses", run)

    def _native_upstream(self, request: Request) -> bool:
        """Whether a response this proxy does not hold may be the upstream's own (a native one)."""
        s = self.proxy.s
        if s.routes is not None:
            return False
        base_url = s.policy.resolve(request.headers.get("x-upstream-base-url"))
        return s.table.match(base_url).responses.mode == "native"


def _is_reference(item: Any) -> bool:
    """An `item_reference` (its type may be left out: an object with only an id)."""
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        return False
    return item.get("type") == "item_reference" or (item.get("type") is None and "role" not in item)


def _notes(
    bridged: BridgedRequest, report: RestoreReport, unopened: int, unresolved: list[str]
) -> list[tuple[str, str, dict[str, Any]]]:
    """What the trace says about the bridge: tools left out, fields dropped, blobs not used,
    references the state store did not hold."""
    notes: list[tuple[str, str, dict[str, Any]]] = []
    if unresolved:
        notes.append(
            (
                f"Referenced items not found in the state store, left out: {', '.join(unresolved)}",
                f"状态存储中未找到被引用的条目，已省略：{', '.join(unresolved)}",
                {"code": "unresolved_references", "ids": unresolved},
            )
        )
    if bridged.omitted_tools:
        names = ", ".join(bridged.omitted_tools)
        notes.append(
            (
                f"Hosted tools left out (the upstream cannot run them): {names}",
                f"已省略上游无法运行的托管工具：{names}",
                {"code": "omitted_tools", "tools": list(bridged.omitted_tools)},
            )
        )
    if bridged.dropped:
        names = ", ".join(bridged.dropped)
        notes.append(
            (
                f"Request fields not carried to a chat upstream: {names}",
                f"未转发到聊天接口的请求字段：{names}",
                {"code": "dropped_fields", "fields": list(bridged.dropped)},
            )
        )
    unused = report.unverified + report.foreign + unopened
    if unused:
        notes.append(
            (
                f"Sealed reasoning not used: {unused} blob(s) did not verify or were not the proxy's",
                f"未使用的加密推理：{unused} 个无法验证或非本代理生成",
                {"code": "unverified_reasoning", "count": unused},
            )
        )
    return notes
