"""Reasoning replay: what to look up for a request's history, and how to put back what was found.

Pure: no store, no clock, no I/O. The edge (proxy.replay_service) runs the three steps:

1. `plan_lookups(messages, policy, tenant)` — which assistant messages need something back (their
   reasoning text, reasoning_details, thought signatures, or just the time their tool calls were
   handed out) and under which store keys;
2. one batched store lookup of `plan.keys`;
3. `apply_restore(body, plan, found, …)` — the body with what was remembered put back in the field
   the provider wants, the outcome counts, and the client-side tool durations.

And, at the end of a response, `capture_records(turns, …)` turns what the collector saw
(proxy.capture) into store entries.

Keys: a turn that ends in tool calls is known by its first tool-call id (unique per provider
answer, and clients send it back unchanged); a turn without tool calls, which only a `keep` policy
needs, by a hash of its content exactly as the client received it. Keys are hashed together with
the tenant, so one tenant can never name another's entries, and their length is bounded whatever
a client sends.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeGuard

import orjson

from proxy.capture import Turn
from proxy.dialects import ReplayPolicy
from proxy.rewrite import with_think_block

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
    return hmac.new(secret, b"tenant\0" + client_key.encode(), hashlib.sha256).hexdigest()[:32]


def store_key(tenant: str, kind: str, ident: str) -> str:
    digest = hashlib.blake2b(f"{tenant}\0{kind}\0{ident}".encode(), digest_size=20).hexdigest()
    return KEY_PREFIX + digest


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
    them, so they travel as they came."""
    if not isinstance(messages, list):
        return NOTHING
    last_user = _last_user_index(messages)
    timing_index = _answered_turn_index(messages)
    found: list[tuple[str, Need]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        first_id = _first_call_id(calls)
        text, details = _policy_wants(message, policy, has_calls=first_id is not None)
        signatures = first_id is not None and index > last_user and _lacks_extra_content(calls)
        timing = first_id is not None and index == timing_index
        if not (text or details or signatures or timing):
            continue
        if first_id is not None:
            key = store_key(tenant, "t", first_id)
        else:
            content = message.get("content")
            if calls or not _distinct(content):
                continue  # tool calls without a usable id, or content that cannot name the turn
            key = store_key(tenant, "c", content_hash(content))
        found.append((key, Need(index, key, text, details, signatures, timing)))
    if not found:
        return NOTHING
    repeats = Counter(key for key, _ in found)
    needs = tuple(need if repeats[key] == 1 else need._replace(ambiguous=True) for key, need in found)
    keys = tuple(dict.fromkeys(key for key, _ in found if repeats[key] == 1))
    return ReplayPlan(needs, keys)


def _distinct(content: Any) -> TypeGuard[str]:
    """Content that can name a turn: a string with something in it (an empty answer would name
    every other empty answer of the tenant too)."""
    return isinstance(content, str) and bool(content.strip())


def _last_user_index(messages: list[Any]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return index
    return -1


def _answered_turn_index(messages: list[Any]) -> int:
    """The assistant message whose tool results end the history (their durations are new)."""
    index = len(messages) - 1
    while index >= 0 and isinstance(messages[index], dict) and messages[index].get("role") == "tool":
        index -= 1
    if index == len(messages) - 1 or index < 0:
        return -1
    message = messages[index]
    return index if isinstance(message, dict) and message.get("role") == "assistant" else -1


def _first_call_id(calls: Any) -> str | None:
    if not isinstance(calls, list) or not calls:
        return None
    first = calls[0]
    if not isinstance(first, dict):
        return None
    call_id = first.get("id")
    return call_id if isinstance(call_id, str) and call_id else None


def _lacks_extra_content(calls: Any) -> bool:
    return isinstance(calls, list) and any(
        isinstance(c, dict) and c.get("extra_content") is None for c in calls
    )


def _policy_wants(message: dict[str, Any], policy: ReplayPolicy, *, has_calls: bool) -> tuple[bool, bool]:
    """(wants text, wants details): the policy keeps reasoning on this message and it came without."""
    if policy.mode == "strip" or (policy.mode == "tool_calls" and not has_calls):
        return False, False
    if policy.field == "reasoning_details":
        details = message.get("reasoning_details")
        return False, not (isinstance(details, list) and details)
    if _has_text(message):
        return False, False
    if policy.field == "inline_think":
        content = message.get("content")
        if isinstance(content, str) and "<think>" in content:
            return False, False
    return True, False


def _has_text(message: dict[str, Any]) -> bool:
    return any(isinstance(message.get(k), str) and message[k] for k in _TEXT_FIELDS)


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
    if raw is None:
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("p"), str):
        return None
    reasoning = data.get("r")
    details = data.get("d")
    signatures = data.get("x")
    at = data.get("t")
    model = data.get("m")
    return Remembered(
        provider=data["p"],
        model=model if isinstance(model, str) else None,
        reasoning=reasoning if isinstance(reasoning, str) else None,
        details=details if isinstance(details, list) else None,
        signatures=signatures if isinstance(signatures, dict) else {},
        at_ms=float(at) if isinstance(at, int | float) else None,
    )


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
    (`placeholders` False — the store did not answer — makes every miss a plain `missing`).

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
    same_origin = remembered is not None and remembered.same_origin(provider, model)
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
    out = {k: v for k, v in message.items() if k not in _TEXT_FIELDS}
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


def capture_records(
    turns: Sequence[Turn],
    *,
    tenant: str,
    provider: str,
    model: str | None,
    policy: ReplayPolicy,
    now_ms: float,
) -> list[tuple[str, bytes]]:
    """Store entries for the turns of one response: every turn that ends in tool calls (its
    reasoning, details and signatures, and when its calls were handed out), and — only when the
    policy keeps reasoning on every message — a turn without tool calls that had reasoning."""
    items: list[tuple[str, bytes]] = []
    for turn in turns:
        if turn.first_call_id is not None:
            key = store_key(tenant, "t", turn.first_call_id)
        elif policy.mode == "keep" and (turn.reasoning or turn.details) and _distinct(turn.content):
            key = store_key(tenant, "c", content_hash(turn.content))
        else:
            continue
        record: dict[str, Any] = {"p": provider, "m": model, "r": turn.reasoning, "t": round(now_ms)}
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
