"""What every front door other than chat completions shares on the server side, written once: the
Responses door (proxy.server.doors.responses, responses_native) and the Messages door
(proxy.server.doors.messages, messages_native) each say only what their protocol does its own way.
No door imports another; both import this.

- **The door** (`Door`): the handlers' base, bound to one app's proxy (its state store, the tenant
  hashes and sealing keys), a request read as far as its entry's dialect (`Door.arrive`), and a
  bridged request's tenants, seal context and expansion limit (`Door.sealing`).
- **Bridged** (a chat-only upstream): ids in the door's style (`new_id`), the trace's bilingual
  notes about the bridge (`add_notes`, `bridge_notes`), the chat request the chat path runs
  (`chat_request`: `CHAT_PATH`, and the tools left out named in `OMITTED_TOOLS_HEADER`), and the
  answer written last in the door's protocol (`BridgedOutput`, a proxy.core.plan.chat.FrontDoor
  around the door's pure transcoder): reasoning too large to seal inline written to the state
  store (`store_spill`) before what refers to it goes out, and put back on the next turn
  (`restore_history`).
- **Native** (an upstream that serves the door's API itself): `forward_native`, the level applied
  to the body, judged by the thinking policy, the proxy's own blobs left out, the record and the
  trace headers filled, the answer relayed as it came with its usage read (and, in gateway mode,
  the ids of a native upstream's stored state kept to the tenant that made them); a `NativeRoute`
  says the door's own parts (its body knobs, its judge, its blobs, its URL and headers).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from proxy.core.body_splice import splice
from proxy.core.config.providers import Dialect
from proxy.core.controls import Level
from proxy.core.events import AccessRecord
from proxy.core.headers import filter_headers
from proxy.core.native_usage import UsageReader
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import request as plan
from proxy.core.policy.auto_rules import Features, client_kind, features_of
from proxy.core.protocols.expansion import SPILL_CAP, Expansion
from proxy.core.protocols.sealing import RestoreReport, SealContext
from proxy.core.replay.keys import Tenants
from proxy.core.review.rules import refuse_unreviewed_route
from proxy.core.stream.chunk_template import KnownRun
from proxy.core.stream.trace import TraceBuilder
from proxy.policy.service import ThinkingPolicy
from proxy.server import levels
from proxy.server.asgi import RelayResponse
from proxy.server.doors.held_levels import HeldLevels
from proxy.server.doors.native_owners import NativeOwners
from proxy.server.handlers import Proxy
from proxy.server.relay import Relay
from proxy.server.tenancy import DoorSecrets
from proxy.state.base import StateStore

logger = logging.getLogger("thinkproxy.doors")

OMITTED_TOOLS_HEADER = "x-thinking-omitted-tools"
CHAT_PATH = "/v1/chat/completions"
# Past this many sealed blobs in one history, opening them (decryption, inflation) runs in a worker
# thread, so a request full of blobs never holds the event loop (and /healthz) for long.
OFFLOAD_BLOBS = 64

Note = tuple[str, str, dict[str, Any]]  # (English, Chinese, the note's fields)
Body = dict[str, Any]
Headers = list[tuple[str, str]]


def new_id(prefix: str, digits: int = 48) -> str:
    """An id in the door's style: `prefix_` and `digits` random hex digits (OpenAI's `resp_…`,
    `rs_…`, `msg_…`, `fc_…`, `call_…`: 48; Anthropic's `msg_…`, `toolu_…`: 24)."""
    return f"{prefix}_{secrets.token_hex(digits // 2)}"


# -- the door ------------------------------------------------------------------------------------
class Door:
    """A front door's handlers, bound to one app's proxy: its state store (None: off) and the
    tenant hashes and sealing keys, before and after a rotation (proxy.server.tenancy)."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        s = proxy.s
        self.store = s.replay.store if s.replay is not None else None
        self.tenancy = DoorSecrets.of(s.settings, s.replay.secrets if s.replay is not None else None)
        self.secret, self.keys = self.tenancy.secrets.current, self.tenancy.keys

    async def arrive(
        self, request: Request, record: AccessRecord
    ) -> tuple[plan.Arrival, plan.Intent, plan.Target, Body, Dialect]:
        """A request to the door read and planned as far as the chat path's first step: its
        parsed body and its entry's dialect (the request's one lookup in the providers table: a
        bridged request hands it on to Proxy.run_chat), the record's model and whether it streams."""
        arrival, intent, tgt = await self.proxy.arrive(request, record, parse=True)
        assert tgt.parsed is not None
        parsed = tgt.parsed
        dialect = plan_chat.chat_dialect(self.proxy.s.table, tgt)
        record.model = tgt.model
        record.stream = parsed.get("stream") is True
        return arrival, intent, tgt, parsed, dialect

    def sealing(
        self, request: Request, tgt: plan.Target, dialect: Dialect, model: str
    ) -> tuple[Tenants, SealContext, Expansion]:
        """A bridged request's tenant hashes (what it writes is kept under the current one), what
        its blobs are bound to (new ones: the current hash, the entry, the upstream, now, the
        `model` it names), and its expansion limit: everything put back (references, earlier
        turns, sealed reasoning) is bounded like a body (proxy.core.protocols.expansion)."""
        tenants = self.tenancy.tenants(request.headers.items())
        base_url = tgt.destination.base_url
        ctx = self.tenancy.seal_context(tenants, dialect.name, base_url, int(time.time()), model)
        return tenants, ctx, Expansion(ctx, self.proxy.s.settings.max_body_bytes)


# Request headers that speak to the front door, not to a chat upstream: accepted, never forwarded
# by a bridge (`OpenResponses-Version`: the Open Responses version a client speaks, docs/responses.md).
FRONT_DOOR_ONLY_HEADERS = frozenset({"openresponses-version"})


def chat_request(
    arrival: plan.Arrival,
    tgt: plan.Target,
    chat: Body,
    record: AccessRecord,
    omitted_tools: Sequence[str],
    *,
    query: bytes,
    headers: Headers,
) -> tuple[plan.Arrival, plan.Target]:
    """The bridged request as the chat path takes it (`chat`, sent with `query` and `headers` to
    the chat completions path, less FRONT_DOOR_ONLY_HEADERS); the tools the bridge left out are
    named in a response header."""
    if omitted_tools:
        record.response_headers.append((OMITTED_TOOLS_HEADER, ", ".join(omitted_tools)))
    chat_arrival = plan.Arrival("POST", CHAT_PATH, CHAT_PATH.encode(), query, arrival.headers)
    headers = [pair for pair in headers if pair[0].lower() not in FRONT_DOOR_ONLY_HEADERS]
    # Not serialized here: the plan rewrites a body with a level anyway, so it is serialized once
    # (plan.Target.body), when it is first read.
    return chat_arrival, plan.Target(tgt.destination, None, chat, headers)


# -- the trace's notes ---------------------------------------------------------------------------
def add_notes(trace: TraceBuilder | None, notes: list[Note]) -> None:
    """A bridged door's trace notes (tools left out, fields dropped…), before the trace begins."""
    if trace is not None:
        for en, zh, fields in notes:
            trace.add_note(en, zh, **fields)


@dataclass(frozen=True, slots=True)
class NoteWords:
    """How a door names what its bridge notes speak of, in both languages."""

    tools: str  # the tools the upstream cannot run ("Hosted tools")
    tools_zh: str
    reasoning: str  # the reasoning the client sent back sealed ("Sealed reasoning")
    reasoning_zh: str
    seal: str  # what carries it ("blob")
    seal_zh: str  # (may be empty: the count alone)


def note(en: str, zh: str, **fields: Any) -> Note:
    """One trace note, in both languages, with its fields (its `code` and what it names)."""
    return en, zh, fields


def bridge_notes(
    omitted_tools: Sequence[str], dropped: Sequence[str], unused: int, words: NoteWords
) -> list[Note]:
    """What the trace says about every bridge: tools left out, fields dropped, and how much sealed
    reasoning did not verify or was not the proxy's."""
    notes: list[Note] = []
    if omitted_tools:
        names = ", ".join(omitted_tools)
        en = f"{words.tools} left out (the upstream cannot run them): {names}"
        zh = f"已省略上游无法运行的{words.tools_zh}：{names}"
        notes.append(note(en, zh, code="omitted_tools", tools=list(omitted_tools)))
    if dropped:
        names = ", ".join(dropped)
        en = f"Request fields not carried to a chat upstream: {names}"
        zh = f"未转发到聊天接口的请求字段：{names}"
        notes.append(note(en, zh, code="dropped_fields", fields=list(dropped)))
    if unused:
        en = f"{words.reasoning} not used: {unused} {words.seal}(s) did not verify or were not the proxy's"
        zh = f"未使用的{words.reasoning_zh}：{unused} 个{words.seal_zh}无法验证或非本代理生成"
        notes.append(note(en, zh, code="unverified_reasoning", count=unused))
    return notes


# -- the bridged answer --------------------------------------------------------------------------
class Transcoder(Protocol):
    """A door's pure translation of the chat answer the pipeline writes (its FrontDoor methods),
    and the whole answer in the door's protocol once there is one."""

    @property
    def final(self) -> dict[str, Any] | None: ...

    def feed(self, data: bytes) -> bytes: ...

    def feed_pieces(self, pieces: Sequence[bytes | KnownRun]) -> bytes: ...

    def close(self) -> bytes: ...

    def completion(self, body: bytes) -> bytes: ...


@dataclass(slots=True)
class BridgedOutput:
    """The bridged answer in the door's protocol (a proxy.core.plan.chat.FrontDoor): the translation is
    pure (the door's transcoder); writing large reasoning to the state store is this edge's I/O.
    A door adds its own I/O at the answer's end by overriding `keep`."""

    transcoder: Transcoder
    notes: list[Note] = field(default_factory=list)
    # Reasoning payloads too large to seal inline (the door's sealer): written to the state store
    # at the next settle, before the item or block that refers to them goes out.
    spill: list[tuple[str, bytes]] = field(default_factory=list)
    spill_store: StateStore | None = None
    tenant: str = ""  # (whose share what is written counts toward: the current tenant hash)

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
            await store_spill(self.spill, self.spill_store, self.tenant or None)
        await self.keep()

    async def keep(self) -> None:
        """The door's own I/O once the answer is whole (storing a response); none by default."""


# -- the state store: reasoning too large to seal inline -----------------------------------------
async def read_spilled(store: StateStore | None, keys: list[str]) -> dict[str, bytes | None]:
    """The large reasoning payloads a history's blobs refer to, by key (a store fault: none, so
    those blobs count as missing; the store off: none)."""
    if not keys or store is None:
        return {}
    try:
        values = await store.get_many(keys)
    except Exception:
        logger.warning("The state store did not answer for large reasoning payloads.")
        return {}
    return dict(zip(keys, values, strict=True))


async def restore_history(
    blobs: int,
    keys_of: Callable[[], list[str]],
    restore: Callable[[Mapping[str, bytes | None]], RestoreReport],
    store: StateStore | None,
) -> RestoreReport:
    """Both doors' restore of a history's reasoning from its `blobs` sealed blobs: the store keys
    they refer to (`keys_of`, opening each distinct blob once), those payloads read, then
    `restore`. Opening runs in a worker thread past OFFLOAD_BLOBS blobs, so that a request full
    of blobs never holds the event loop (and /healthz) for long."""
    if blobs <= OFFLOAD_BLOBS:
        return restore(await read_spilled(store, keys_of()))
    keys = await asyncio.to_thread(keys_of)
    spilled = await read_spilled(store, keys)
    return await asyncio.to_thread(restore, spilled)


async def store_spill(
    spill: list[tuple[str, bytes]], store: StateStore | None, tenant: str | None = None
) -> None:
    """Reasoning payloads too large to seal inline, written to the state store (counted toward the
    tenant's share) before the item or block that refers to them goes out (both doors' settle).
    A payload past SPILL_CAP (what an inline one may inflate to) is not kept: the blob that refers
    to it then counts as missing on the next turn, like an expired one."""
    if spill and store is not None:
        entries, spill[:] = [entry for entry in spill if len(entry[1]) <= SPILL_CAP], []
        if not entries:
            return
        try:
            await store.put_many(entries, tenant=tenant)
        except Exception:  # (the next turn then finds it missing: the miss policy applies)
            logger.warning("Storing %d large reasoning payload(s) failed.", len(entries))


# -- the native forwarder ------------------------------------------------------------------------
Planned = tuple[Body | None, Level | None]  # the body to send (None: as it came), the level applied
# The body with the level applied as the door's own knobs: (body, level, dialect, the level header sent).
LevelBody = Callable[[Body, Level | None, Dialect, bool], Planned]
# The key's ceiling and budget on the body that would go (proxy.server.policy_gate).
Judge = Callable[[ThinkingPolicy, Body, Planned, Dialect, AccessRecord], Awaitable[Planned]]


def _as_they_are(headers: Headers) -> Headers:
    return headers


def _no_rules(body: Body, level: Level | None, dialect: Dialect, header: bool) -> Headers:
    return []


@dataclass(frozen=True, slots=True)
class NativeRoute:
    """What one door's native forwarding does its own way (forward_native does the rest)."""

    route: str  # the trace headers' route ("responses", "messages")
    level_body: LevelBody
    judge: Judge
    strip: Callable[[Body], tuple[Body | None, int]]  # the proxy's own sealed reasoning left out, how many
    url: Callable[[plan.Arrival, plan.Target, Dialect, bool], str]  # (…, gateway mode) → the endpoint
    headers: Callable[[Headers], Headers] = _as_they_are  # the request headers as the upstream takes them
    left_out_header: str | None = None  # the response header counting what `strip` left out (None: none)
    review_path: str | None = None  # the path the review rules read (None: the request's own)
    # The model's own rules: what it refuses before the upstream (raises the door's error), and
    # the response headers that say what was asked and not applied. (body, level, dialect, header)
    rules: Callable[[Body, Level | None, Dialect, bool], Headers] = _no_rules


async def forward_native(
    proxy: Proxy,
    route: NativeRoute,
    request: Request,
    arrival: plan.Arrival,
    intent: plan.Intent,
    tgt: plan.Target,
    dialect: Dialect,
    record: AccessRecord,
    started: float,
    owners: NativeOwners | None = None,
    relay: Relay | None = None,
    held: HeldLevels | None = None,
) -> Response:
    """A door's request to an upstream that serves the door's API itself: the level as the
    upstream's own knobs, the answer as it came (its usage read for budgets and the usage book).
    `relay`: another transport for the same request (a Responses WebSocket's upstream socket,
    proxy.server.upstream.responses_socket); None: the app's HTTP relay.
    With a review policy set, a request that could call tools is refused (the gate reads chat
    answers: a native answer would go around it). In gateway mode with `owners` (an upstream that
    stores state), the request may only continue state its tenant created, and the answer's ids
    are recorded as that tenant's as they go by (proxy.server.doors.native_owners). With `held`
    (an upstream whose answers are continued by id), the level `auto` chose is kept per answer and
    a continuation without user text keeps it (proxy.server.doors.held_levels)."""
    s = proxy.s
    if s.review is not None:  # the gate reads chat answers: a native answer would go around it
        refuse_unreviewed_route(arrival.method, route.review_path or arrival.path, tgt.body)
    assert tgt.parsed is not None
    # Gateway mode: stored state (a response, its items) is used only by the tenant that created it.
    tenants = owners.tenants(request.headers.items()) if owners is not None and owners.active else None
    if owners is not None and tenants is not None:
        await owners.check_continuation(tenants, tgt.parsed)
    # (the client's own field, read as the door's level_body reads it when no level overrides it)
    _, client_level = route.level_body(tgt.parsed, None, dialect, False)
    kind = client_kind(request.headers.items())
    parsed, model = tgt.parsed, record.model or ""

    def features() -> Features:
        return features_of(route.route, route.route, parsed, model, kind)

    def continued() -> tuple[Level, str] | None:
        # (a continuation by id with no user message: the tool loop of the turn it continues)
        previous = parsed.get("previous_response_id")
        if held is None or not isinstance(previous, str) or features().last_user:
            return None
        return held.get(record.client, previous)

    choice = levels.choose(intent.ask, client_level, features, record, continued)
    level = choice.level
    record.response_headers.extend(route.rules(tgt.parsed, level, dialect, choice.forced))
    changed, applied = route.level_body(tgt.parsed, level, dialect, choice.forced)
    if s.thinking is not None:  # the key's ceiling and budget judge the body that would go
        changed, applied = await route.judge(s.thinking, tgt.parsed, (changed, applied), dialect, record)
    stripped, left_out = route.strip(changed if changed is not None else tgt.parsed)
    changed = stripped if stripped is not None else changed
    if left_out and route.left_out_header is not None:
        record.response_headers.append((route.left_out_header, str(left_out)))
    record.level_requested = level.value if level is not None else None
    record.provider = dialect.name
    record.level = applied.value if applied is not None else "none"
    record.thinking_method = "params" if applied is not None else None
    headers = plan_chat.thinking_headers(applied, dialect.name, "params", route.route)
    request_out = plan.UpstreamRequest(
        "POST",
        route.url(arrival, tgt, dialect, s.gateway.enabled),
        # Only encodings the proxy decodes (Codex asks for zstd): identity, as on chat.
        [
            *route.headers(filter_headers(tgt.headers, plan_chat.DROP_REQUEST_CHAT)),
            ("accept-encoding", "identity"),
        ],
        # A changed body keeps the bytes of every value the proxy left alone: Anthropic binds a
        # thinking block to the exact prefix before it (proxy.core.body_splice).
        tgt.body if changed is None else splice(tgt.body, tgt.parsed, changed),
        client_chosen=tgt.destination.client_chosen,
    )
    extra = headers + record.response_headers
    # (its answer's usage is read as it goes by: budgets and the usage book count it)
    usage = UsageReader(limit=s.settings.max_response_bytes)
    response = await (relay or proxy.relay)(
        request.receive, request_out, record, started, extra_headers=extra, chat=None, usage=usage
    )
    if (
        owners is not None
        and tenants is not None
        # (over an upstream WebSocket a store: false response is continued too, on that socket)
        and (tgt.parsed.get("store") is not False or relay is not None)
        and isinstance(response, RelayResponse)
        and 200 <= response.status_code < 300
    ):
        response.produce = owners.tap(response.produce, tenants.current)  # (whose id this is)
    if (
        held is not None
        and choice.rule is not None
        and choice.level is not None
        and isinstance(response, RelayResponse)
        and 200 <= response.status_code < 300
    ):
        response.produce = held.tap(response.produce, record.client, choice.level, choice.rule)
    return response
