"""What the proxy changed in a chat body on its way upstream, as the sessions and the console
show it (docs/sessions.md, "changes"): field names and short summaries only — a knob's value when
it is a short scalar (a level, an effort, a budget, a flag), never message text, reasoning, tool
arguments or keys. Pure: the body as it came and the body sent, both dicts, in; a short list out.

Cheap where it runs (only when the body was rewritten): the rewrite keeps every message it did not
change as the same object, so the messages are told apart by identity, and only a changed one is
looked into (its keys, never its text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_CHANGES = 16  # entries per request; the rest are counted in one more
MAX_SCALAR = 40  # a string value shown only up to this length (effort names, model ids)


def _shown(value: Any) -> bool:
    kind = type(value)
    if kind is bool or kind is int or kind is float or value is None:
        return True
    return kind is str and len(value) <= MAX_SCALAR


def _knob(field: str, change: str, before: Any, after: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"field": field, "change": change}
    if change != "set" and _shown(before):
        entry["from"] = before
    if change != "removed" and _shown(after):
        entry["to"] = after
    if change == "changed" and isinstance(before, Mapping) and isinstance(after, Mapping):
        keys = sorted({*before, *after} - {k for k in before if k in after and before[k] == after[k]})
        entry["summary"] = "keys " + ", ".join(str(k) for k in keys[:8])
    else:
        shown = _small_object(after if change != "removed" else before)
        if shown is not None:
            entry["summary"] = shown
    return entry


def _small_object(value: Any) -> str | None:
    """`type=enabled, budget_tokens=1024` for a knob object of a few short scalars (`thinking`,
    `reasoning`, `output_config`); None for anything else (it could hold content)."""
    if not isinstance(value, Mapping) or not 0 < len(value) <= 4:
        return None
    parts = []
    for key, item in value.items():
        if not (isinstance(key, str) and len(key) <= MAX_SCALAR and _shown(item)):
            return None
        parts.append(f"{key}={item}")
    return ", ".join(parts)


def body_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The changes from `before` (the client's chat body) to `after` (the one sent upstream)."""
    out: list[dict[str, Any]] = []
    for field in before:
        if field == "messages":
            continue
        if field not in after:
            out.append(_knob(field, "removed", before[field], None))
        elif after[field] is not before[field] and after[field] != before[field]:
            out.append(_knob(field, "changed", before[field], after[field]))
    for field in after:
        if field != "messages" and field not in before:
            out.append(_knob(field, "set", None, after[field]))
    old, new = before.get("messages"), after.get("messages")
    # (equal lists, copied or not, are told apart in C: the usual rewrite leaves them equal)
    if isinstance(old, Sequence) and isinstance(new, Sequence) and old is not new and old != new:
        out += message_changes(old, new)
    if len(out) > MAX_CHANGES:
        out = [
            *out[:MAX_CHANGES],
            {"field": "…", "change": "changed", "summary": f"{len(out) - MAX_CHANGES} more"},
        ]
    return out


def _role(message: Any) -> str:
    role = message.get("role") if isinstance(message, Mapping) else None
    return role if isinstance(role, str) and len(role) <= MAX_SCALAR else "?"


def message_changes(old: Sequence[Any], new: Sequence[Any]) -> list[dict[str, Any]]:
    """Messages injected (new ones, by role) and messages changed (which keys, by role)."""
    out: list[dict[str, Any]] = []
    pairs: list[tuple[Any, Any]] = []
    if len(new) == len(old):  # (the usual case: pairs told apart by identity, no set made)
        # (a rewrite may copy every message: equal copies are told apart in C, not key by key)
        pairs = [(a, b) for a, b in zip(old, new, strict=True) if a is not b and a != b]
    else:
        olds = {id(message) for message in old}
        fresh = [m for m in new if id(m) not in olds]
        if len(new) > len(old):
            # The extra messages are the injected ones; the rest that differ were changed in place.
            extra = len(new) - len(old)
            roles = [_role(m) for m in fresh[:extra]]
            out.append({"field": "messages", "change": "injected", "summary": _count_roles(roles, "message")})
            fresh = fresh[extra:]
        news = {id(message) for message in new}
        pairs = list(zip([m for m in old if id(m) not in news], fresh, strict=False))
    changed_keys: dict[str, int] = {}
    for before, after in pairs:
        if not (isinstance(before, Mapping) and isinstance(after, Mapping)):
            continue
        for key in {*before, *after}:
            if key not in after:
                what = f"{key} removed"
            elif key not in before:
                what = f"{key} added"
            elif before[key] is not after[key] and before[key] != after[key]:
                what = f"{key} changed"
            else:
                continue
            changed_keys[what] = changed_keys.get(what, 0) + 1
    for what, count in sorted(changed_keys.items()):
        out.append({"field": "messages", "change": "changed", "summary": f"{what} in {count} message(s)"})
    if len(new) < len(old):
        out.append({"field": "messages", "change": "removed", "summary": f"{len(old) - len(new)} message(s)"})
    return out


def _count_roles(roles: list[str], noun: str) -> str:
    counts: dict[str, int] = {}
    for role in roles:
        counts[role] = counts.get(role, 0) + 1
    return ", ".join(f"{n} {role} {noun}{'s' if n > 1 else ''}" for role, n in counts.items())
