"""Reasoning replay: what to look up for a request's history, and how to put back what was found.

Pure: no store, no clock, no I/O. The edge (proxy.server.replay_service) runs the three steps:

1. `plan_lookups(messages, policy, tenant)` — which assistant messages need something back (their
   reasoning text, reasoning_details, thought signatures, or just the time their tool calls were
   handed out) and under which store keys;
2. one batched store lookup of `plan.keys`;
3. `apply_restore(body, plan, found, …)` — the body with what was remembered put back in the field
   the provider wants, the outcome counts, and the client-side tool durations.

And, at the end of a response, `capture_records(turns, …)` turns what the collector saw
(proxy.core.stream.capture) into store entries.

Keys: a turn that ends in tool calls is known by its first tool-call id (unique per provider
answer, and clients send it back unchanged); a turn without tool calls, which only a `keep` policy
needs, by a hash of its content exactly as the client received it. Keys are hashed together with
the tenant, so one tenant can never name another's entries, and their length is bounded whatever
a client sends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, NamedTuple, TypeGuard

import orjson

from proxy.core.providers import ReplayPolicy
from proxy.core.rewrite import with_think_block
from proxy.core.stream.capture import Turn

HEADER = "x-thinking-replay"
KEY_PREFIX = "thinkproxy:replay:"
ANONYMOUS = "anonymous"
# A remembered turn larger than this is not stored (a store entry is one whole value).
MAX_RECORD_BYTES = 4 * 1024 * 1024
_TEXT_FIELDS = ("reasoning_content", "reasoning")


# --------------------------------------------------------------------------------------------------
# Tenants and keys
# --------------------------------------------------------------------------------------------------


def tenant_of(secret: bytes, client_key: str | None) -> str:
    """The tenant a request belongs to: a keyed hash of the key the client presented (its own
    provider key in BYOK mode, its gateway client key in gateway mode), never the key itself.
    Requests without any key share one anonymous tenant."""
    if not client_key:
        return ANONYMOUS
    # Keyed BLAKE2b is a MAC in one C call (~1.5 µs here, against ~4 µs for the hmac module's
    # HMAC-SHA-256), cheap enough per request that no cache of keys or of their hashes is needed.
    key = secret if len(secret) <= hashlib.blake2b.MAX_KEY_SIZE else hashlib.sha256(secret).digest()
    return hashlib.blake2b(b"tenant\0" + client_key.encode(), key=key, digest_size=16).hexdigest()


def store_key(tenant: str, kind: str, ident: str) -> str:
    if len(ident) <= _CACHED_IDENT_CHARS:
        return _cached_store_key(tenant, kind, ident)
    return _store_key(tenant, kind, ident)


def _store_key(tenant: str, kind: str, ident: str) -> str:
    digest = hashlib.blake2b(f"{tenant}\0{kind}\0{ident}".encode(), digest_size=20).hexdigest()
    return KEY_PREFIX + digest


# A tool loop sends its whole history on every turn, so the same keys are asked for again and
# again: the last few thousand are remembered. Bounded in entries (least recently used evicted) and
# in size (only ordinary ids: a client can send a 100 KB "id"); they hold tool-call ids, content
# hashes and tenant hashes, never a client's key.
_CACHED_IDENT_CHARS = 128
_cached_store_key = lru_cache(maxsize=4096)(_store_key)


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


# --------------------------------------------------------------------------------------------------
# Step 1: what a history needs
# --------------------------------------------------------------------------------------------------


class Need(NamedTuple):
    """One assistant message of the history and what it may get back.

    `text` / `details`: the policy wants reasoning text / reasoning_details on it and the client
    sent none (these count in the outcome). `signatures`: some of its tool calls came without the
    `extra_content` their provider attached (current turn only; counted only when put back).
    `timing`: its tool results end the history, so their round trip can be measured.
    (A NamedTuple: one is built per assistant message of every history, so it must be cheap.)
    """

    position: int  # in the message list
    key: str
    text: bool = False
    details: bool = False
    signatures: bool = False
    timing: bool = False
    ambiguous: bool = False  # its id occurs on more than one message: never restored

    @property
    def counted(self) -> bool:
        return self.text or self.details


# Builds a Need from a tuple in C, without the generated __new__'s Python frame (one per message).
_need: Callable[[tuple[int, str, bool, bool, bool, bool, bool]], Need] = partial(tuple.__new__, Need)


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    needs: tuple[Need, ...]
    keys: tuple[str, ...]  # unique, in first-seen order: the one batched lookup

    @property
    def empty(self) -> bool:
        return not self.needs


NOTHING = ReplayPlan((), ())


def plan_lookups(messages: Any, policy: ReplayPolicy, tenant: str) -> ReplayPlan:
    """The lookups a history needs. Malformed messages (not objects, tool calls without an id,
    content that is not a string where a hash is needed) are left alone: nothing is planned for
    them, so they travel as they came.

    Runs on every chat request with the store on, over the whole history: one backward pass to find
    where the history's last user message and trailing tool results are, then one forward pass
    that looks at assistant messages only, with the policy's questions answered once up front."""
    if not isinstance(messages, list) or not messages:
        return NOTHING
    wants = policy.mode != "strip"
    calls_only = policy.mode == "tool_calls"
    wants_details = policy.field == "reasoning_details"
    inline = policy.field == "inline_think"
    # Backward: the trailing tool results (their assistant message's calls get a duration), then
    # the last user message (only tool-call turns after it get their signatures back).
    last = len(messages) - 1
    index = last
    while index >= 0:
        message = messages[index]
        if type(message) is not dict or message.get("role") != "tool":
            break
        index -= 1
    timing_index = -1
    if -1 < index < last:
        message = messages[index]
        if type(message) is dict and message.get("role") == "assistant":
            timing_index = index
    last_user = index
    while last_user >= 0:
        message = messages[last_user]
        if type(message) is dict and message.get("role") == "user":
            break
        last_user -= 1
    needs: list[Need] = []
    seen: dict[str, bool] = {}  # key → named by more than one message
    repeated = False
    for position, message in enumerate(messages):
        if type(message) is not dict or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        first_id = None
        if type(calls) is list and calls:
            first = calls[0]
            if type(first) is dict:
                call_id = first.get("id")
                if type(call_id) is str and call_id:
                    first_id = call_id
        text = details = False
        if wants and (first_id is not None or not calls_only):
            if wants_details:
                present = message.get("reasoning_details")
                details = not (type(present) is list and present)
            else:
                present = message.get("reasoning_content")
                if not (type(present) is str and present):
                    present = message.get("reasoning")
                    if not (type(present) is str and present):
                        content = message.get("content")
                        text = not (inline and type(content) is str and "<think>" in content)
        if first_id is not None:
            signatures = position > last_user and _lacks_extra_content(calls)
            timing = position == timing_index
            if not (text or details or signatures or timing):
                continue
            key = store_key(tenant, "t", first_id)
        else:
            if not (text or details):
                continue
            content = message.get("content")
            if calls or not _distinct(content):
                continue  # tool calls without a usable id, or content that cannot name the turn
            key = store_key(tenant, "c", content_hash(content))
            signatures = timing = False
        if key in seen:
            seen[key] = repeated = True
        else:
            seen[key] = False
        needs.append(_need((position, key, text, details, signatures, timing, False)))
    if not needs:
        return NOTHING
    if not repeated:
        return ReplayPlan(tuple(needs), tuple(seen))
    return ReplayPlan(
        tuple(need._replace(ambiguous=True) if seen[need.key] else need for need in needs),
        tuple(key for key, twice in seen.items() if not twice),
    )


def _distinct(content: Any) -> TypeGuard[str]:
    """Content that can name a turn: a string with something in it (an empty answer would name
    every other empty answer of the tenant too)."""
    return isinstance(content, str) and bool(content.strip())


def _lacks_extra_content(calls: Any) -> bool:
    """Some of these tool calls (a list: only asked of one) came without their extra_content."""
    # (A loop rather than any() over a generator: this runs for every tool-call turn of a history.)
    for call in calls:  # noqa: SIM110
        if type(call) is dict and call.get("extra_content") is None:
            return True
    return False


# --------------------------------------------------------------------------------------------------
# Step 3: putting it back
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayCounts:
    restored: int = 0
    placeholder: int = 0
    missing: int = 0

    @property
    def any(self) -> bool:
        return bool(self.restored or self.placeholder or self.missing)

    def header_value(self) -> str:
        return f"restored={self.restored}, placeholder={self.placeholder}, missing={self.missing}"

    def as_dict(self) -> dict[str, int]:
        return {"restored": self.restored, "placeholder": self.placeholder, "missing": self.missing}


@dataclass(slots=True)
class RestoreResult:
    body: dict[str, Any]  # the same object as given when nothing changed
    counts: ReplayCounts
    # tool-call id → milliseconds between the proxy handing the call out and its result arriving.
    durations: dict[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.counts.restored or self.counts.placeholder)


class Remembered(NamedTuple):
    """One stored turn, as read back."""

    provider: str
    model: str | None
    reasoning: str | None
    details: list[Any] | None
    signatures: dict[str, Any]
    at_ms: float | None

    def same_origin(self, provider: str, model: str | None) -> bool:
        # Signatures are valid only where they were made: the same entry and the same model (behind
        # a router, another model is another provider).
        return self.provider == provider and self.model == model


def decode_record(raw: bytes | None) -> Remembered | None:
    """A stored value read back; None for anything that is not a record this module wrote.
    (Once per looked-up key of every request: plain type checks, one tuple built.)"""
    if raw is None:
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict:
        return None
    provider = data.get("p")
    if type(provider) is not str:
        return None
    model = data.get("m")
    reasoning = data.get("r")
    details = data.get("d")
    signatures = data.get("x")
    at: Any = data.get("t")
    return _remembered(
        (
            provider,
            model if type(model) is str else None,
            reasoning if type(reasoning) is str else None,
            details if type(details) is list else None,
            signatures if type(signatures) is dict else {},
            float(at) if type(at) in _NUMBERS else None,
        )
    )


# What JSON numbers decode to (bool included: it always was, as a subclass of int).
_NUMBERS = frozenset((int, float, bool))
# Builds a Remembered from a tuple in C, without the generated __new__'s Python frame.
_remembered: Callable[[tuple[Any, ...]], Remembered] = partial(tuple.__new__, Remembered)


class RecordCache:
    """`decode_record` with the last decoded records remembered by their stored bytes: a tool loop
    reads the same turns back on every request, and decoding is most of a lookup's cost.

    Only records without `reasoning_details` or signatures are kept (everything in them is
    immutable, so handing one out to many requests is safe; the others are decoded each time),
    only values up to `max_value_bytes`, at most `max_entries` of them (oldest dropped first): at
    most about 2 × entries × value bytes in memory. With the memory store the bytes are the
    store's own objects (their hash computed once); with Redis each read is new bytes, hashed once.
    """

    __slots__ = ("_data", "max_entries", "max_value_bytes")

    def __init__(self, max_entries: int = 1024, max_value_bytes: int = 4096) -> None:
        self.max_entries = max_entries
        self.max_value_bytes = max_value_bytes
        self._data: dict[bytes, Remembered] = {}

    def __len__(self) -> int:
        return len(self._data)

    def decode(self, raw: bytes | None) -> Remembered | None:
        if raw is None:
            return None
        data = self._data
        hit = data.get(raw)
        if hit is not None:
            return hit
        record = decode_record(raw)
        if (
            record is not None
            and record.details is None
            and not record.signatures
            and len(raw) <= self.max_value_bytes
        ):
            if len(data) >= self.max_entries:
                del data[next(iter(data))]
            data[raw] = record._replace(signatures=_NO_SIGNATURES)
        return record


_NO_SIGNATURES: dict[str, Any] = {}  # shared by cached records; nothing writes to it


def apply_restore(
    body: dict[str, Any],
    plan: ReplayPlan,
    found: Mapping[str, Remembered | None],
    *,
    policy: ReplayPolicy,
    provider: str,
    model: str | None,
    now_ms: float,
    placeholders: bool = True,
) -> RestoreResult:
    """Put back what `found` holds for each planned message; a miss follows `policy.missing`
    (`placeholders` False makes every miss a plain `missing`). A store that did not answer is a
    miss like any other: the edge leaves `placeholders` on, since a provider that requires the
    field refuses the request without it (a store outage would otherwise break tool loops).

    The caller's body is never mutated: a changed message list and changed messages are copies.
    `now_ms` is the wall clock (ms since the epoch) when the request arrived, for durations.
    """
    counts = ReplayCounts()
    result = RestoreResult(body, counts)
    if plan.empty:
        return result
    messages: list[Any] = body["messages"]
    out: list[Any] | None = None
    for need in plan.needs:
        remembered = None if need.ambiguous else found.get(need.key)
        message = messages[need.position]
        new = _restored(message, need, remembered, policy, provider, model, counts, placeholders)
        if need.timing and remembered is not None and remembered.at_ms is not None:
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    result.durations[call["id"]] = max(0.0, now_ms - remembered.at_ms)
        if new is not message:
            if out is None:
                out = list(messages)
            out[need.position] = new
    if out is not None:
        result.body = {**body, "messages": out}
    return result


def _restored(
    message: dict[str, Any],
    need: Need,
    remembered: Remembered | None,
    policy: ReplayPolicy,
    provider: str,
    model: str | None,
    counts: ReplayCounts,
    placeholders: bool,
) -> dict[str, Any]:
    new = message
    restored = placeholder = missing = False
    if need.text:
        text = remembered.reasoning if remembered is not None else None
        if text is not None and (text or policy.field != "inline_think"):
            new = _with_text(new, text, policy.field)
            restored = True
        elif isinstance(new.get(policy.field), str):
            pass  # the client's own empty string: already what a placeholder would be
        elif placeholders and policy.missing == "placeholder" and policy.field in _TEXT_FIELDS:
            new = {**new, policy.field: ""}
            placeholder = True
        else:
            missing = True
    if need.details or need.signatures:  # signed data: only where it was made
        same_origin = remembered is not None and remembered.same_origin(provider, model)
    else:
        same_origin = False  # reasoning text only (DeepSeek, Kimi): its origin is not asked
    if need.details:
        if same_origin and remembered is not None and remembered.details:
            new = {**new, "reasoning_details": remembered.details}
            restored = True
        else:
            missing = True
    if need.signatures and same_origin and remembered is not None and remembered.signatures:
        calls = new.get("tool_calls")
        patched = _with_signatures(calls, remembered.signatures)
        if patched is not calls:
            new = {**new, "tool_calls": patched}
            restored = True
    # One message counts once: a miss of anything it needed wins, then a placeholder.
    if missing:
        counts.missing += 1
    elif placeholder:
        counts.placeholder += 1
    elif restored:
        counts.restored += 1
    return new


def _with_text(message: dict[str, Any], text: str, field_name: str) -> dict[str, Any]:
    if field_name == "inline_think":
        return {**message, "content": with_think_block(message.get("content"), text)}
    # (Copy and pop rather than a filtering comprehension: the same keys in the same order, faster.)
    out = message.copy()
    out.pop("reasoning_content", None)
    out.pop("reasoning", None)
    out[field_name if field_name in _TEXT_FIELDS else "reasoning_content"] = text
    return out


def _with_signatures(calls: Any, signatures: Mapping[str, Any]) -> Any:
    if not isinstance(calls, list):
        return calls
    out: list[Any] | None = None
    for position, call in enumerate(calls):
        if not isinstance(call, dict) or call.get("extra_content") is not None:
            continue
        call_id = call.get("id")
        extra = signatures.get(call_id) if isinstance(call_id, str) else None
        if extra is None:
            continue
        if out is None:
            out = list(calls)
        out[position] = {**call, "extra_content": extra}
    return calls if out is None else out


# --------------------------------------------------------------------------------------------------
# Capture: what a finished response leaves for later requests
# --------------------------------------------------------------------------------------------------


def turn_keys(turns: Sequence[Turn], *, tenant: str, policy: ReplayPolicy) -> list[str | None]:
    """The store key of each turn (None: not kept): a turn that ends in tool calls under its first
    tool-call id; one without, only when the policy keeps reasoning on every message and the turn
    had some, under the hash of its content."""
    keys: list[str | None] = []
    for turn in turns:
        if turn.first_call_id is not None:
            keys.append(store_key(tenant, "t", turn.first_call_id))
        elif policy.mode == "keep" and (turn.reasoning or turn.details) and _distinct(turn.content):
            keys.append(store_key(tenant, "c", content_hash(turn.content)))
        else:
            keys.append(None)
    return keys


def capture_records(
    turns: Sequence[Turn],
    *,
    tenant: str,
    provider: str,
    model: str | None,
    policy: ReplayPolicy,
    now_ms: float,
) -> list[tuple[str, bytes]]:
    """Store entries for the turns of one response (those `turn_keys` names): its reasoning,
    details and signatures, and when its calls were handed out."""
    items: list[tuple[str, bytes]] = []
    at = round(now_ms)
    for turn, key in zip(turns, turn_keys(turns, tenant=tenant, policy=policy), strict=True):
        if key is None:
            continue
        record: dict[str, Any] = {"p": provider, "m": model, "r": turn.reasoning, "t": at}
        if turn.details:
            record["d"] = turn.details
        if turn.signatures:
            record["x"] = turn.signatures
        try:
            value = orjson.dumps(record)
        except orjson.JSONEncodeError:
            continue  # nested deeper than orjson writes: not remembered
        if len(value) <= MAX_RECORD_BYTES:
            items.append((key, value))
    return items
