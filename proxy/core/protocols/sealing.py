"""Sealing reasoning for a front door: what the Responses door (`encrypted_content`) and the Messages
door (a thinking block's `signature`) share around proxy.core.seal (DESIGN.md, "Sealed blobs").

Pure: the edge passes the deployment's keys, the request's tenant and the clock in
(`SealContext`), and reads or writes the state store for payloads too large to seal inline.

- `seal_reasoning` seals one payload bound to the tenant, the upstream entry and the ids it
  belongs to; a payload over the inline cap goes to a `spill` list (the edge stores it before the
  blob reaches the client) and the blob seals its store key; without a store (`spill` None) there
  is no blob at all.
- `open_reasoning` opens a blob under the first binding of `id_sets` that verifies and answers
  its payload (a reference blob's from `spilled`, what the store held under its key); None for
  anything that does not open: the caller counts it as missing. Signed data in it (details,
  signatures) only when the request names the model that made it (`SealContext.usable`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core import jsonio, seal
from proxy.core.replay.keys import store_key
from proxy.core.replay.rules import for_model

__all__ = [
    "SPILL_KIND",
    "RestoreReport",
    "SealContext",
    "open_reasoning",
    "reference_key",
    "seal_reasoning",
    "spill_key",
]

SPILL_KIND: Final = "sealed_reasoning"  # the replay_keys kind of a payload too large to seal inline


@dataclass(frozen=True, slots=True)
class SealContext:
    """What every blob of one request is bound to."""

    keys: seal.SealKeys
    tenant: str
    provider: str  # the providers.yaml entry
    base_url: str
    created: int  # unix seconds (the caller's clock)
    # The model the request names: signed reasoning (details, signatures) is put back only for the
    # model that made it (`usable`). None: not asked (a caller that names no model).
    model: str | None = None

    def binding(self, kind: seal.Kind, ids: Sequence[str] = ()) -> seal.Binding:
        return seal.Binding(self.tenant, self.provider, self.base_url, kind, tuple(ids))

    def usable(self, payload: dict[str, Any]) -> dict[str, Any]:
        """An opened payload as this request may put it back: the replay store's model rule
        (proxy.core.replay.rules.for_model), so a blob carries signed data only to its own model."""
        return payload if self.model is None else for_model(payload, self.model)


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a door's restore (`restore_reasoning`, `restore_thinking`) did: messages given
    reasoning back (from a blob of ours, or from the text the client sent), and blobs not used
    (ours that did not verify; foreign ones: another service's, never sent to a chat upstream)."""

    restored: int = 0
    unverified: int = 0
    foreign: int = 0


def spill_key(ctx: SealContext, item_id: str) -> str:
    """The state-store key of a reasoning payload too large to seal inline (per tenant)."""
    return store_key(ctx.tenant, SPILL_KIND, item_id)


def seal_reasoning(
    ctx: SealContext,
    kind: seal.Kind,
    ids: Sequence[str],
    payload: Mapping[str, Any],
    *,
    spill: list[tuple[str, bytes]] | None,
    spill_id: str,
) -> str | None:
    """The blob's text; a payload over the cap is appended to `spill` under `spill_key(spill_id)`
    and its key sealed instead (None without a store: `spill` None)."""
    binding = ctx.binding(kind, ids)
    blob = seal.seal(ctx.keys, binding, payload)
    if isinstance(blob, seal.Blob):
        return blob.text
    if spill is None:
        return None
    key = spill_key(ctx, spill_id)
    spill.append((key, blob.data))
    return seal.seal_reference(ctx.keys, binding, key).text


def opened_blob(
    ctx: SealContext, kind: seal.Kind, id_sets: Iterable[Sequence[str]], text: str
) -> seal.Opened | None:
    """The blob opened under the first of `id_sets` it was bound to, or None."""
    for ids in id_sets:
        opened = seal.open_blob(ctx.keys, ctx.binding(kind, ids), text)
        if isinstance(opened, seal.Inline):
            usable = ctx.usable(opened.payload)
            return opened if usable is opened.payload else seal.Inline(usable)
        if opened is not None:
            return opened
    return None


def reference_key(
    ctx: SealContext, kind: seal.Kind, id_sets: Iterable[Sequence[str]], text: str
) -> str | None:
    """The state-store key a reference blob seals (the edge reads it before opening)."""
    opened = opened_blob(ctx, kind, id_sets, text)
    return opened.key if isinstance(opened, seal.Reference) else None


def open_reasoning(
    ctx: SealContext,
    kind: seal.Kind,
    id_sets: Iterable[Sequence[str]],
    text: str,
    spilled: Mapping[str, bytes | None],
) -> dict[str, Any] | None:
    """A blob's payload (a reference's from `spilled`; an expired or unreadable one is missing)."""
    opened = opened_blob(ctx, kind, id_sets, text)
    if isinstance(opened, seal.Inline):
        return opened.payload
    if isinstance(opened, seal.Reference):
        data = spilled.get(opened.key)
        try:
            payload = jsonio.loads(data) if data else None
        except ValueError:
            return None
        return ctx.usable(payload) if isinstance(payload, dict) else None
    return None
