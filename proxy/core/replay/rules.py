"""Reasoning replay, steps 3 and 4: putting back what was remembered, and what a response leaves.

Pure: no store, no clock, no I/O. The edge (proxy.server.replay_service) runs the steps:

1. `plan_lookups(messages, policy, tenant)` (proxy.core.replay.keys) — which assistant messages need
   something back (their reasoning text, reasoning_details, thought signatures, or just the time
   their tool calls were handed out) and under which store keys;
2. one batched store lookup of `plan.keys`;
3. `apply_restore(body, plan, found, …)` — the body with what was remembered put back in the field
   the provider wants, the outcome counts, and the client-side tool durations.

And, at the end of a response, `capture_records(turns, …)` turns what the collector saw
(proxy.core.stream.capture) into store entries. This module owns the record format both ways
(`capture_records` writes it, `decode_record` / `RecordCache` read it back), so the two cannot
drift apart; the keys the records are stored under are proxy.core.replay.keys'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import orjson

from proxy.core.plan.rewrite import with_think_block
from proxy.core.replay.keys import Need, ReplayPlan, turn_keys
from proxy.core.replay.policy import TEXT_FIELDS, ReplayPolicy
from proxy.core.stream.capture import Turn

HEADER = "x-thinking-replay"
# A remembered turn larger than this is not stored (a store entry is one whole value).
MAX_RECORD_BYTES = 4 * 1024 * 1024
_TEXT_FIELDS = TEXT_FIELDS


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


# A sealed blob's signed fields (proxy.core.protocols.sealing): reasoning_details, thought signatures.
SIGNED_FIELDS = ("details", "signatures")


def for_model(payload: dict[str, Any], model: str) -> dict[str, Any]:
    """A sealed blob's payload as a request for `model` may put it back, by the rule the store's
    records follow (`Remembered.same_origin`): the reasoning text always; `details` and
    `signatures` (signed data) only for the model that made them. The entry is the blob's own
    binding (provider and base URL), so only the model is asked here. The payload itself when
    nothing is left out."""
    if payload.get("model") == model or not any(name in payload for name in SIGNED_FIELDS):
        return payload
    return {name: value for name, value in payload.items() if name not in SIGNED_FIELDS}


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
