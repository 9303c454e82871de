"""The replay store at the edge: one batched lookup before a chat request goes upstream, one
write after its response ended. The decisions are proxy.core.replay.keys' and proxy.core.replay.rules's
(pure); this module only does the I/O around them, keeps the outcome counters and reports store outages.

Per request (chat completions only):

- `restore(...)` — tenant from the presented key, `plan_lookups` (pure), one `get_many` (one round
  trip; after a rotation of the secret, what it missed is asked again under each earlier secret's
  tenant hash: proxy.server.tenancy.get_rotated), `apply_restore` (pure). A store that is down or slow is a
  miss: the provider's miss policy applies (DeepSeek and Kimi get the empty placeholder they
  accept: without it they answer 400, which made an outage worse than an empty store). The fault
  is logged once per interval and counted (`record.notes["state.errors"]`, read by metrics);
  `/healthz` asks `reachable()`. Leaves a `ReplayNote` in `record.notes` so that the capture knows
  whom and what the response belongs to.
- capture — a `Listener` (proxy.core.events) whose observer, at the end of a successful response,
  turns the note's `TurnCollector` into store entries and writes them in the background.

Reasoning text is never logged: the only log lines here name the store and the error class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.config.providers import Dialect, ReplayPolicy
from proxy.core.events import AccessRecord, RequestObserver, TraceEvents
from proxy.core.gateway import presented_key
from proxy.core.replay.keys import Secrets, Tenants, plan_lookups, store_key, turn_keys
from proxy.core.replay.rules import (
    HEADER,
    RecordCache,
    Remembered,
    ReplayCounts,
    RestoreResult,
    apply_restore,
    capture_records,
)
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.trace import TraceBuilder
from proxy.server.tenancy import deployment_secrets, get_rotated
from proxy.settings import Settings
from proxy.state import MemoryStore, StateStore, StoreUnavailable, build_store

logger = logging.getLogger("thinkproxy.replay")

NOTE = "replay"  # record.notes key of the ReplayNote
OUTCOME_NOTE = "replay.outcome"  # record.notes key of this request's counts (for metrics)
# record.notes key of the store faults to count with this request, by operation (for metrics):
# `read`, its own lookup's; `write`, background writes that failed since the last chat request
# (they end after their response, so they are counted with the next one).
ERRORS_NOTE = "state.errors"
OUTAGE_LOG_INTERVAL = 60.0
MAX_QUEUED_WRITES = 10_000  # captured turns waiting for the store; beyond, new ones are shed
WRITE_WAIT_S = 0.5  # the longest a request waits for its own tenant's queued writes
MAX_OPEN = 10_000  # responses being tracked until their end (see ReplayService._open)
MAX_OPEN_LOOKED_AT = 64  # of one tenant, the most recent, when a lookup missed


@dataclass(slots=True)
class Prepared:
    """What `prepare` did: the body to send, the capture to hand the response pipeline, and the
    restore's outcome (None when the history needed nothing)."""

    body: dict[str, Any]
    capture: TurnCollector | None  # None when nothing of the answer will be remembered
    result: RestoreResult | None

    @property
    def changed(self) -> bool:
        return self.result is not None and self.result.changed

    def annotate(self, trace: TraceBuilder | None) -> None:
        """The trace's `replaying` status and tool-result durations."""
        if trace is None or self.result is None:
            return
        counts = self.result.counts
        trace.note_replay(counts.as_dict() if counts.any else None, self.result.durations)


@dataclass(slots=True, eq=False)  # eq=False: hashed by identity (kept in a set of open responses)
class ReplayNote:
    tenant: str
    provider: str
    model: str | None
    policy: ReplayPolicy
    capture: TurnCollector | None
    # Set once this response's end was recorded (created only when a request waits for it).
    ended: asyncio.Future[None] | None = None


def may_be_replayed(body: dict[str, Any], policy: ReplayPolicy) -> bool:
    """Whether this request's answer could ever need its reasoning back on a later turn: a turn that
    ends in tool calls (only possible when the request offers tools or functions), or any turn
    under an `every_turn` policy. Anything else is never looked up, so it is not collected: a plain chat
    pays nothing per streamed chunk."""
    # (`mode` read rather than the policy's `every_turn` property: this runs for every request.)
    return policy.mode == "every_turn" or bool(body.get("tools") or body.get("functions"))


class ReplayService:
    """The replay store of one app: restore before, capture after. See the module docstring."""

    def __init__(self, store: StateStore, secret: bytes | Secrets) -> None:
        self.store = store
        self._secrets = secret if isinstance(secret, Secrets) else Secrets(secret)
        self._secret = self._secrets.current
        self._records = RecordCache()
        # Responses whose end has not been recorded yet, per tenant (a response's last byte can
        # reach the client, and its next turn come back, before the proxy is done with it): a
        # lookup that misses a turn one of them carries waits for its end. See `_await_open`.
        self._open: dict[str, dict[ReplayNote, None]] = {}
        self._open_count = 0
        # Captured turns waiting for the background writer (Redis), by tenant (each written with
        # its tenant: the store counts it toward that tenant's share where it keeps shares); a
        # request waits only when its own tenant has writes queued or in flight.
        self._queue: dict[str, list[tuple[str, bytes]]] = {}
        self._queued = 0  # entries in `_queue`
        self._writing_tenants: set[str] = set()
        self._writer: asyncio.Task[None] | None = None
        self._last_outage_log = float("-inf")
        self._unreported_writes = 0  # failed background writes not yet on a request's record
        # Totals since start, for the metrics capability: restored / placeholder / missing per
        # message, captured per stored turn, unavailable per request the store did not answer.
        self.totals: Counter[str] = Counter()
        self._observer = _CaptureObserver(self)

    @property
    def secret(self) -> bytes:
        """The deployment secret (the tenant hash's key; the Responses door seals blobs with it)."""
        return self._secret

    @property
    def secrets(self) -> Secrets:
        """The deployment secret and the earlier ones (rotation): the front doors use the same."""
        return self._secrets

    @classmethod
    def from_settings(cls, settings: Settings) -> ReplayService | None:
        store = build_store(settings)
        return None if store is None else cls(store, deployment_secrets(settings))

    # -- listener (capture) ---------------------------------------------------------------------
    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> RequestObserver | None:
        return self._observer  # stateless: what a request needs is in record.notes

    # -- restore --------------------------------------------------------------------------------
    async def prepare(
        self,
        body: dict[str, Any],
        dialect: Dialect,
        model: str | None,
        headers: Iterable[tuple[str, str]],
        record: AccessRecord,
    ) -> Prepared:
        """The body with remembered reasoning put back, and the collector for this response's
        capture. Never raises for the store's sake."""
        arrived_ms = time.time() * 1000.0
        tenants = self._secrets.tenants(presented_key(headers))
        tenant = tenants.current
        policy = dialect.replay
        capture = TurnCollector() if may_be_replayed(body, policy) else None
        note = ReplayNote(tenant, dialect.name, model, policy, capture)
        record.notes[NOTE] = note
        plan = plan_lookups(body.get("messages"), policy, tenant)
        if plan.empty:  # (every first turn of a conversation)
            if capture is not None:
                self._opened(note)
            if self._unreported_writes:
                self._note_faults(record, reads=0)
            return Prepared(body, capture, None)
        found: dict[str, Remembered | None] = {}
        reads_failed = 0
        if plan.keys:
            try:
                messages = body.get("messages")
                found = await self._lookup(
                    tenants, plan.keys, lambda under: plan_lookups(messages, policy, under).keys
                )
            except Exception as exc:
                # StoreUnavailable, or anything else a backend let through: the store must never
                # fail a request, whatever went wrong in it. What it did not answer is a miss.
                reads_failed = 1
                self._outage(exc)
            else:
                if tenant in self._open and None in found.values():
                    reads_failed = await self._await_open(tenant, found)
        if capture is not None:
            self._opened(note)  # after the lookup: a request never waits for its own response
        result = apply_restore(
            body, plan, found, policy=policy, provider=dialect.name, model=model, now_ms=arrived_ms
        )
        self._count(result.counts, record)
        self._note_faults(record, reads=reads_failed)
        return Prepared(result.body, capture, result)

    async def _lookup(
        self, tenants: Tenants, keys: Sequence[str], keys_of: Callable[[str], Sequence[str]] | None = None
    ) -> dict[str, Remembered | None]:
        """The remembered turns under `keys` (named under the current hash); with `keys_of` (the
        same turns named under another hash), what is missing there is asked again under each
        earlier secret's hash after a rotation (proxy.server.tenancy.get_rotated)."""
        tenant = tenants.current
        if self._writer is not None and (tenant in self._queue or tenant in self._writing_tenants):
            await self.drain()  # this process's own writes land before it reads

        def named(under: str) -> Sequence[str]:
            return keys if under == tenant or keys_of is None else keys_of(under)

        values = await get_rotated(self.store, tenants if keys_of is not None else Tenants(tenant), named)
        decode = self._records.decode
        return {key: decode(value) for key, value in zip(keys, values, strict=True)}

    async def _await_open(self, tenant: str, found: dict[str, Remembered | None]) -> int:
        """A lookup missed, and responses of this tenant have not ended yet: if one of them carries
        a missed turn (the client already has its answer and sent the next turn while the proxy was
        still finishing it), wait (bounded) for its end, then read the missed keys again. Returns
        the number of failed reads (0 or 1)."""
        missed = {key for key, value in found.items() if value is None}
        waits: list[asyncio.Future[None]] = []
        open_notes = list(self._open.get(tenant, ()))[-MAX_OPEN_LOOKED_AT:]
        for note in open_notes:
            capture = note.capture
            if capture is None:
                continue
            if note.policy.every_turn:  # turns without calls are kept too, by their content
                keys: Iterable[str | None] = turn_keys(capture.turns(), tenant=tenant, policy=note.policy)
            else:  # only tool-call turns: their ids, without joining anyone's text
                keys = (store_key(tenant, "t", call_id) for call_id in capture.first_call_ids())
            if missed.isdisjoint(keys):
                continue
            if note.ended is None:
                note.ended = asyncio.get_running_loop().create_future()
            waits.append(note.ended)
        if not waits:
            return 0
        await asyncio.wait(waits, timeout=WRITE_WAIT_S)
        try:
            found.update(await self._lookup(Tenants(tenant), [key for key in found if key in missed]))
        except Exception as exc:  # what the first lookup found stands; the rest stay misses
            self._outage(exc)
            return 1
        return 0

    def _opened(self, note: ReplayNote) -> None:
        if self._open_count >= MAX_OPEN:
            return  # (only ever reached if ends went unrecorded: the wait is then given up, not memory)
        notes = self._open.get(note.tenant)
        if notes is None:
            notes = self._open[note.tenant] = {}
        notes[note] = None
        self._open_count += 1

    def _ended(self, note: ReplayNote) -> None:
        notes = self._open.get(note.tenant)
        if notes is not None and note in notes:
            del notes[note]
            self._open_count -= 1
            if not notes:
                del self._open[note.tenant]
        if note.ended is not None and not note.ended.done():
            note.ended.set_result(None)

    def _count(self, counts: ReplayCounts, record: AccessRecord) -> None:
        if not (counts.restored or counts.placeholder or counts.missing):
            return
        totals = self.totals
        if counts.restored:
            totals["restored"] += counts.restored
        if counts.placeholder:
            totals["placeholder"] += counts.placeholder
        if counts.missing:
            totals["missing"] += counts.missing
        record.notes[OUTCOME_NOTE] = counts.as_dict()
        record.response_headers.append((HEADER, counts.header_value()))

    def _note_faults(self, record: AccessRecord, *, reads: int) -> None:
        writes, self._unreported_writes = self._unreported_writes, 0
        if reads or writes:
            faults = {"read": reads, "write": writes}
            record.notes[ERRORS_NOTE] = {op: n for op, n in faults.items() if n}

    async def reachable(self) -> bool:
        """Whether the store answers now (for /healthz). Bounded like every store call, and free
        while a store already known to be down waits to be tried again."""
        try:
            await self.store.ping()
        except Exception as exc:
            self._outage(exc, counted=False)  # a probe, not a request's fault
            return False
        return True

    def _outage(self, exc: BaseException, *, counted: bool = True) -> None:
        if counted:
            self.totals["unavailable"] += 1
        now = time.monotonic()
        if now - self._last_outage_log >= OUTAGE_LOG_INTERVAL:
            self._last_outage_log = now
            logger.warning(
                "replay store (%s) unavailable (%s): its lookups count as misses (the provider's "
                "miss policy applies: a placeholder where the provider requires the field); "
                "this is logged once a minute while it lasts",
                self.store.name,
                # Our own message names only the error class; anything else: its class alone.
                exc if isinstance(exc, StoreUnavailable) else type(exc).__name__,
            )

    # -- capture --------------------------------------------------------------------------------
    def capture(self, record: AccessRecord) -> None:
        note = record.notes.get(NOTE)
        if not isinstance(note, ReplayNote) or note.capture is None:
            return
        try:
            if 200 <= record.status < 300 and not record.error:
                self._store(note)
        finally:
            self._ended(note)  # stored (or queued) first: whoever waits for it then reads it

    def _store(self, note: ReplayNote) -> None:
        assert note.capture is not None
        items = capture_records(
            note.capture.turns(),
            tenant=note.tenant,
            provider=note.provider,
            model=note.model,
            policy=note.policy,
            now_ms=time.time() * 1000.0,
        )
        if not items:
            return
        self.totals["captured"] += len(items)
        if isinstance(self.store, MemoryStore):
            # (nothing to wait for: written before the client hears back; counted as the tenant's)
            self.store.put_now(items, tenant=note.tenant)
            return
        if self._queued >= MAX_QUEUED_WRITES:
            self.totals["dropped"] += len(items)  # the store is far behind: shed, never grow
            return
        self._queue.setdefault(note.tenant, []).extend(items)
        self._queued += len(items)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_queued())

    async def _write_queued(self) -> None:
        """One writer per process: whatever responses ended meanwhile goes out as one pipelined
        batch per tenant, so a burst of captures costs a few round trips and one connection, not
        one each."""
        try:
            while self._queue:
                batches, self._queue, self._queued = self._queue, {}, 0
                self._writing_tenants = set(batches)
                for tenant, items in batches.items():
                    try:
                        await self.store.put_many(items, tenant=tenant)
                    except Exception as exc:  # a background write: nobody else would hear of it
                        self._unreported_writes += 1
                        self._outage(exc)
        finally:
            self._writing_tenants = set()
            self._writer = None

    async def drain(self) -> None:
        """Wait (bounded) until every captured turn has been written or given up."""
        writer = self._writer
        if writer is not None:
            await asyncio.wait([writer], timeout=WRITE_WAIT_S)

    async def aclose(self) -> None:
        await self.drain()
        await self.store.aclose()


class _CaptureObserver(RequestObserver):
    wants_trace = False

    def __init__(self, service: ReplayService) -> None:
        self._service = service

    def on_trace(self, events: TraceEvents) -> None:  # never asked: wants_trace is False
        pass

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        self._service.capture(record)
