"""Reasoning replay, step 1: tenants, store keys, and which of a history's turns need a lookup.

Pure: no store, no clock, no I/O. The edge (proxy.server.replay_service) calls `plan_lookups` on
every chat request with the store on, looks `plan.keys` up in one batch, and hands what it found to
proxy.core.replay.rules, which puts it back (and writes the records `turn_keys` names when a response
ends). Kept apart from the restoring because this is the half that decides identity: which tenant
a request belongs to and what a turn is called in the store.

Keys: a turn that ends in tool calls is known by its first tool-call id (unique per provider
answer, and clients send it back unchanged); a turn without tool calls, which only an `every_turn`
policy needs, by a hash of its content exactly as the client received it. Keys are hashed together
with the tenant, so one tenant can never name another's entries, and their length is bounded whatever
a client sends.

Rotation: the tenant hash is keyed with the deployment secret, so a client's hash changes with it.
`Secrets` holds the current secret and the earlier ones; `Secrets.tenants` gives one client's hash
under each (`Tenants`): new entries go under the current one, lookups that miss there ask the
earlier ones (proxy.server.tenancy).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, NamedTuple, TypeGuard

from proxy.core.replay.policy import ReplayPolicy
from proxy.core.stream.capture import Turn

KEY_PREFIX = "thinkproxy:replay:"
ANONYMOUS = "anonymous"


# --------------------------------------------------------------------------------------------------
# Tenants and keys
# --------------------------------------------------------------------------------------------------


def tenant_of(secret: bytes, client_key: str | None) -> str:
    """The tenant a request belongs to: a keyed hash of the key the client presented (its own
    provider key in BYOK mode, its gateway client key in gateway mode), never the key itself.
    Requests without any key share one anonymous tenant."""
    if not client_key:
        return ANONYMOUS
    mac = _tenant_mac(secret)
    mac.update(client_key.encode())
    return mac.hexdigest()


def _tenant_mac(secret: bytes) -> hashlib.blake2b:
    """The tenant hash's MAC of one secret, before the client's key: keyed BLAKE2b is a MAC in one
    C call (~1.5 µs here, against ~4 µs for the hmac module's HMAC-SHA-256), cheap enough per
    request that no cache of client keys or of their hashes is needed. `Secrets` keeps this for
    its current secret and copies it per request (the key block and the prefix already in)."""
    key = secret if len(secret) <= hashlib.blake2b.MAX_KEY_SIZE else hashlib.sha256(secret).digest()
    mac = hashlib.blake2b(key=key, digest_size=16)
    mac.update(b"tenant\0")
    return mac


@dataclass(frozen=True, slots=True, repr=False)
class Secrets:
    """The deployment secret and the earlier ones still honoured (rotation: THINKPROXY_STATE_SECRET
    and THINKPROXY_STATE_OLD_SECRETS). The current one keys every new tenant hash (so every new
    store key and blob binding); each earlier one keys the hash that named this client's state
    before the rotation, so what it left (store entries, sealed blobs) is still found until it is
    removed from the list. `old` keeps each distinct earlier secret once, in order, without the
    current one or empty ones. The repr hides them."""

    current: bytes
    old: tuple[bytes, ...] = ()
    # `current`'s tenant MAC, prepared once (`_tenant_mac`): every request with the store on asks it.
    _current_mac: hashlib.blake2b = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if not self.current:
            raise ValueError("the deployment secret is empty")
        kept: list[bytes] = []
        for secret in self.old:
            if secret and secret != self.current and secret not in kept:
                kept.append(secret)
        object.__setattr__(self, "old", tuple(kept))
        object.__setattr__(self, "_current_mac", _tenant_mac(self.current))

    def tenants(self, client_key: str | None) -> Tenants:
        """The tenant hashes of the key a request presented: the current one and, aligned with
        `old`, each earlier secret's."""
        if not client_key:
            return _tenants((ANONYMOUS, (ANONYMOUS,) * len(self.old)))
        mac = self._current_mac.copy()
        mac.update(client_key.encode())
        if not self.old:
            return _tenants((mac.hexdigest(), ()))
        return _tenants((mac.hexdigest(), tuple([tenant_of(old, client_key) for old in self.old])))

    def __repr__(self) -> str:
        return f"Secrets(<current and {len(self.old)} earlier, hidden>)"


class Tenants(NamedTuple):
    """One client's tenant hash under the current secret and under each earlier one (aligned with
    `Secrets.old`). New state is written under `current`; a lookup that misses there asks each of
    `earlier` in turn."""

    current: str
    old: tuple[str, ...] = ()

    @property
    def earlier(self) -> tuple[str, ...]:
        """The earlier hashes that name other store keys than `current`, each once (the anonymous
        tenant is the same under every secret: none)."""
        out: list[str] = []
        for tenant in self.old:
            if tenant != self.current and tenant not in out:
                out.append(tenant)
        return tuple(out)

    @property
    def every(self) -> tuple[str, ...]:
        """`current`, then `earlier`: every hash this client's state may be kept under."""
        return (self.current, *self.earlier)


# Builds Tenants from a tuple in C, without the generated __new__'s Python frame (one per request).
_tenants: Callable[[tuple[str, tuple[str, ...]]], Tenants] = partial(tuple.__new__, Tenants)


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
    `extra_content` their provider attached (counted only when put back). Asked of every tool-call
    turn, not only the current one: a turn replayed with its signature on one request and without
    it on the next (once a user message follows) changes the history's bytes, and the upstream's
    prefix cache misses from there on.
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
    where the history's trailing tool results are, then one forward pass
    that looks at assistant messages only, with the policy's questions answered once up front."""
    if not isinstance(messages, list) or not messages:
        return NOTHING
    for message in messages:
        if type(message) is dict and message.get("role") == "assistant":
            break
    else:
        return NOTHING  # a conversation's first turn: no answer of the model to put anything back on
    wants = policy.wants_reasoning
    calls_only = policy.mode == "tool_calls"
    wants_details = policy.field == "reasoning_details"
    inline = policy.field == "inline_think"
    # Backward: the trailing tool results (their assistant message's calls get a duration).
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
            signatures = _lacks_extra_content(calls)
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
# Capture: the keys a finished response's turns are kept under (proxy.core.replay.rules writes the records)
# --------------------------------------------------------------------------------------------------


def turn_keys(turns: Sequence[Turn], *, tenant: str, policy: ReplayPolicy) -> list[str | None]:
    """The store key of each turn (None: not kept): a turn that ends in tool calls under its first
    tool-call id; one without, only when the policy keeps reasoning on every message and the turn
    had some, under the hash of its content."""
    every_turn = policy.mode == "every_turn"  # (`mode` read once: the property is a call per turn)
    keys: list[str | None] = []
    for turn in turns:
        if turn.first_call_id is not None:
            keys.append(store_key(tenant, "t", turn.first_call_id))
        elif every_turn and (turn.reasoning or turn.details) and _distinct(turn.content):
            keys.append(store_key(tenant, "c", content_hash(turn.content)))
        else:
            keys.append(None)
    return keys
