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
- **Native** (an upstream that serves the door's API itself): proxy.server.doors.native.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.requests import Request

from proxy.core.config.providers import Dialect
from proxy.core.events import AccessRecord
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import request as plan
from proxy.core.protocols.expansion import SPILL_CAP, Expansion
from proxy.core.protocols.sealing import RestoreReport, SealContext
from proxy.core.replay.keys import Tenants
from proxy.core.stream.chunk_template import DoorPiece
from proxy.core.stream.trace import TraceBuilder
from proxy.server.handlers import Proxy
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

    def feed_pieces(self, pieces: Sequence[DoorPiece]) -> bytes: ...

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
    # The transcoder's own `feed` and `feed_pieces`, bound once: every read of a stream reaches
    # them with no call of this class between (a paced stream's every chunk is one read).
    feed: Callable[[bytes], bytes] = field(init=False, repr=False)
    feed_pieces: Callable[[Sequence[DoorPiece]], bytes] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.feed, self.feed_pieces = self.transcoder.feed, self.transcoder.feed_pieces

    def planned(self, trace: TraceBuilder | None) -> None:
        add_notes(trace, self.notes)

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
