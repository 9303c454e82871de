"""What one request may expand into before the upstream is asked (DESIGN.md, "Sealed blobs":
"repeated blobs and references are opened once; what a request expands into is bounded like its
body").

Pure: the front doors' edges pass the request's `SealContext`, the payloads they read from the
state store and the limit (THINKPROXY_MAX_BODY_BYTES) in.

A small request can name a lot: an `item_reference` to a stored item, a sealed blob (Responses
`encrypted_content`, a Messages thinking `signature`) that inflates to up to `seal.RAW_CAP`, a
reference blob whose payload sits in the state store, earlier turns under `previous_response_id`.
Expanded once each they are what the client's history holds; expanded every time they appear
they made a 13.6 KB request into a 150 MB upstream body. So, per request:

- `Expansion.opened` opens each distinct blob once (cached by kind, bindings and text: a blob
  repeated 300 times costs one decryption and one inflation) and charges an inline payload's size
  as soon as it is inflated, before it is kept: many distinct blobs that each inflate to
  `seal.RAW_CAP` are a 413 once the limit is passed, not after every one was inflated and held
  (the doors open them all to find the reference keys before anything is put back);
- `Expansion.payload` reads each distinct blob's payload once (a reference blob's from what the
  store held, refused past `SPILL_CAP`, the cap an inline payload has) and charges a reference's
  size (an inline one was charged when opened);
- `Expansion.first_use` tells a door's restore that a blob was already put back on an earlier
  message or item: a repeated blob adds nothing more to the upstream body;
- `Expansion.charge` counts everything put back (restored reasoning, resolved items, earlier
  turns) against the limit; past it, a 413 (`PayloadTooLarge`) that says what and how to fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.core import jsonio, seal
from proxy.core.errors import PayloadTooLarge
from proxy.core.protocols.sealing import SealContext, opened_blob

__all__ = ["SPILL_CAP", "UNBOUNDED", "Expansion", "too_large"]

# A payload spilled to the state store (reasoning too large to seal inline) is read back only up to
# the bound an inline payload is inflated to: whatever the store holds under a key, opening one
# reference costs at most this much.
SPILL_CAP: Final = seal.RAW_CAP
# The limit of an expansion nobody bounds (the pure functions' default, for callers and tests that
# pass none: they still open each distinct blob once).
UNBOUNDED: Final = 1 << 62


def too_large(limit: int, used: int) -> PayloadTooLarge:
    """The 413 of a request whose expansion passes `limit` (THINKPROXY_MAX_BODY_BYTES)."""
    return PayloadTooLarge(
        f"This request expands into more than {limit} bytes (THINKPROXY_MAX_BODY_BYTES) once the items "
        f"it references, its earlier turns (previous_response_id) and its sealed reasoning are put back "
        f"(at least {used} bytes). Send fewer or smaller item_reference / reasoning items (each once), "
        "start from a shorter conversation, or raise THINKPROXY_MAX_BODY_BYTES.",
        code="expansion_too_large",
    )


class Expansion:
    """One request's expansion: its blob cache and its byte count (see the module docstring)."""

    def __init__(self, ctx: SealContext, limit: int) -> None:
        self.ctx = ctx
        self.limit = limit
        self.used = 0
        self.opened_blobs = 0  # distinct blobs opened (decrypted, and inflated when inline)
        self._opened: dict[tuple[str, tuple[tuple[str, ...], ...], str], seal.Opened | None] = {}
        self._payloads: dict[tuple[str, tuple[tuple[str, ...], ...], str], dict[str, Any] | None] = {}
        self._used_blobs: set[str] = set()

    def charge(self, size: int) -> None:
        """Count `size` more bytes put back; a 413 once the total passes the limit."""
        self.used += size
        if self.used > self.limit:
            raise too_large(self.limit, self.used)

    def opened(self, kind: seal.Kind, id_sets: Sequence[Sequence[str]], text: str) -> seal.Opened | None:
        """The blob opened under the first of `id_sets` it was bound to (None: it does not open),
        opened once per request whatever the number of times it appears."""
        key = (str(kind), tuple(tuple(ids) for ids in id_sets), text)
        if key in self._opened:
            return self._opened[key]
        opened = opened_blob(self.ctx, kind, key[1], text)
        self.opened_blobs += 1
        if isinstance(opened, seal.Inline):
            self.charge(_size(opened.payload))  # (past the limit: a 413, and the payload is not kept)
        self._opened[key] = opened
        return opened

    def reference_key(self, kind: seal.Kind, id_sets: Sequence[Sequence[str]], text: str) -> str | None:
        """The state-store key a reference blob seals (the edge reads it before the restore)."""
        opened = self.opened(kind, id_sets, text)
        return opened.key if isinstance(opened, seal.Reference) else None

    def payload(
        self,
        kind: seal.Kind,
        id_sets: Sequence[Sequence[str]],
        text: str,
        spilled: Mapping[str, bytes | None],
    ) -> dict[str, Any] | None:
        """A blob's payload (a reference's from `spilled`, none past `SPILL_CAP`), read once and
        charged once (an inline one when it was opened): None for a blob that does not open or
        whose payload is missing."""
        key = (str(kind), tuple(tuple(ids) for ids in id_sets), text)
        if key in self._payloads:
            return self._payloads[key]
        opened = self.opened(kind, id_sets, text)
        payload: dict[str, Any] | None = None
        if isinstance(opened, seal.Inline):
            payload = opened.payload  # (the model rule applied and charged when opened)
        elif isinstance(opened, seal.Reference):
            found = _spilled_payload(spilled.get(opened.key))
            if found is not None:  # (the model rule, here once: an inline one had it when opened)
                payload = self.ctx.usable(found)
                self.charge(_size(payload))
        self._payloads[key] = payload
        return payload

    def first_use(self, text: str) -> bool:
        """True the first time a blob's text is put back in this request, False after: a repeated
        blob (the same reasoning item or thinking block sent again) restores nothing more."""
        if text in self._used_blobs:
            return False
        self._used_blobs.add(text)
        return True


def _spilled_payload(data: bytes | None) -> dict[str, Any] | None:
    if not data or len(data) > SPILL_CAP:
        return None
    try:
        payload = jsonio.loads(data)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _size(payload: Mapping[str, Any]) -> int:
    """What a payload adds to the upstream body: its reasoning text and its details."""
    size = 0
    text = payload.get("reasoning")
    if isinstance(text, str):
        size += _text_bytes(text)
    details = payload.get("details")
    if isinstance(details, list):
        size += len(jsonio.dumps(details))
    signatures = payload.get("signatures")
    if isinstance(signatures, dict):
        size += len(jsonio.dumps(signatures))
    summary = payload.get("summary")
    if isinstance(summary, str):
        size += _text_bytes(summary)
    return size


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
