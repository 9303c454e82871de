"""The Responses front door's state, as values: reasoning sealed into `encrypted_content` and put
back from it, stored responses (`store`, `previous_response_id`) and compaction items.

Pure: the edge (proxy.server.doors.responses) reads and writes the state store and passes the
deployment's keys and the request's tenant in.

**Reasoning across turns without server state** (DESIGN.md, "Sealed blobs"). Each reasoning item
the bridge returns carries the proxy's own sealed blob (proxy.core.seal) holding the reasoning
text, `reasoning_details` and thought signatures, the model and the tool-call ids it preceded.
It is bound to the tenant, the upstream entry (provider and base URL) and those tool-call ids —
not to the item id, because Codex does not send reasoning item ids back (its `ResponseItem::
Reasoning` skips `id` when serializing; /work notes in docs/responses.md). When the client sends
the history back, `restore_reasoning` opens each blob and puts the reasoning on the assistant
message it preceded (`reasoning_content`, the internal field; the dialect's replay rules then
write the field the provider reads, or strip it). A blob that does not open (another tenant,
deployment or upstream; tampered; foreign, such as OpenAI's own `encrypted_content`) is never
forwarded: it counts as missing, and the replay store and its miss policy apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core import jsonio, seal
from proxy.core.protocols.door_request import put_reasoning, reference_keys, take_reasoning
from proxy.core.protocols.expansion import UNBOUNDED, Expansion
from proxy.core.protocols.responses.inputs import RestoreTurn
from proxy.core.protocols.responses.output import ReasoningItemFacts, Seal
from proxy.core.protocols.sealing import (
    RestoreReport,
    SealContext,
    seal_reasoning,
    spill_key,
)

__all__ = [
    "RESPONSE_KIND",
    "STORED_RESPONSE_CAP",
    "RestoreReport",
    "SealContext",
    "StoredResponse",
    "expand_compaction",
    "reasoning_sealer",
    "restore_reasoning",
    "spill_key",
    "spilled_keys",
]

RESPONSE_KIND: Final = "response"  # the replay_keys kind of a stored response
# The most one stored response may hold (its own turn's items and its output, encoded). Over it,
# only a stub is kept (StoredResponse.too_large). Half the memory store's default share per tenant
# (8 MiB of 64): a tenant's share always holds its latest turns (proxy.state.memory).
STORED_RESPONSE_CAP: Final = 4 * 1024 * 1024
KIND: Final[seal.Kind] = "responses.reasoning"  # the seal kind of a reasoning blob


def reasoning_sealer(ctx: SealContext, spill: list[tuple[str, bytes]] | None = None) -> Seal:
    """The encoder's sealing callback: each reasoning item's `encrypted_content`. A payload over
    the inline cap goes to `spill` (the edge writes it to the state store before the item reaches
    the client) and the blob seals its key; without a store (`spill` None) it gets none."""

    def seal_item(facts: ReasoningItemFacts) -> str | None:
        if not facts.text and not facts.details:
            return None
        payload: dict[str, Any] = {
            "reasoning": facts.text,
            "model": facts.model,
            "tool_call_ids": list(facts.call_ids),
            "created": ctx.created,
        }
        if facts.details:
            payload["details"] = list(facts.details)
        if facts.signatures:
            payload["signatures"] = dict(facts.signatures)
        return seal_reasoning(
            ctx, "responses.reasoning", facts.call_ids, payload, spill=spill, spill_id=facts.item_id
        )

    return seal_item


def spilled_keys(
    turns: Sequence[RestoreTurn], ctx: SealContext, expansion: Expansion | None = None
) -> list[str]:
    """The state-store keys the turns' blobs refer to (reasoning too large to seal inline), each
    once: the edge reads them before `restore_reasoning` (given the same `expansion`, each
    distinct blob is opened once for both)."""
    opener = expansion if expansion is not None else Expansion(ctx, UNBOUNDED)
    blobs = [(item.encrypted_content, _id_sets(turn.tool_call_ids)) for turn in turns for item in turn.items]
    return reference_keys(opener, KIND, blobs)


def restore_reasoning(
    messages: list[dict[str, Any]],
    turns: Sequence[RestoreTurn],
    ctx: SealContext,
    spilled: Mapping[str, bytes | None] | None = None,
    expansion: Expansion | None = None,
) -> RestoreReport:
    """Put each turn's reasoning on its assistant message (in place), from the blobs that open (a
    reference blob's payload from `spilled`, what the store held under its key), or else from the
    reasoning text the client itself sent (its summary or content parts).

    Bounded by `expansion` (proxy.core.protocols.expansion): each distinct blob is opened once and
    its payload counted once against the request's limit (past it, `PayloadTooLarge`); a blob or a
    reasoning item sent again (the same text, the same id) puts nothing more back."""
    opener = expansion if expansion is not None else Expansion(ctx, UNBOUNDED)
    seen_ids: set[str] = set()
    restored = unverified = foreign = 0
    for turn in turns:
        texts: list[str] = []
        details: list[Any] = []
        signatures: dict[str, Any] = {}
        for item in turn.items:
            if item.id:
                if item.id in seen_ids:
                    continue  # the same reasoning item again (a repeated item_reference, or echoed twice)
                seen_ids.add(item.id)
            payload = None
            if item.encrypted_content is not None:
                if not opener.first_use(item.encrypted_content):
                    continue  # the same blob again: its reasoning is already back
                if seal.is_ours(item.encrypted_content):
                    payload = opener.payload(
                        KIND, _id_sets(turn.tool_call_ids), item.encrypted_content, spilled or {}
                    )
                    if payload is None:
                        unverified += 1
                else:
                    foreign += 1  # another service's blob: never sent to a chat upstream
            if payload is not None:
                take_reasoning(payload, texts, details)
                if isinstance(payload.get("signatures"), dict):
                    signatures.update(payload["signatures"])
            elif item.encrypted_content is None and item.text:
                texts.append(item.text)
        message = put_reasoning(messages, turn.message_index, texts, details)
        if message is None:
            continue
        for call in message.get("tool_calls") or ():
            extra = signatures.get(call.get("id"))
            if extra is not None and "extra_content" not in call:
                call["extra_content"] = extra
        restored += 1
    return RestoreReport(restored, unverified, foreign)


def _id_sets(call_ids: Sequence[str]) -> tuple[Sequence[str], ...]:
    """The bindings a reasoning blob may have: the first call it preceded (the one call known when
    the reasoning item was done, just before that call began: proxy.core.protocols.responses.events),
    all of the turn's calls (blobs sealed before that rule), or none (reasoning before a text
    answer). At most three tries per blob, whatever the number of calls."""
    if not call_ids:
        return ((),)
    return (call_ids, ()) if len(call_ids) == 1 else (call_ids[:1], call_ids, ())


# --------------------------------------------------------------------------------------------------
# Stored responses
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response kept for `previous_response_id` and `GET /v1/responses/{id}`: the items that
    went in and the `Response` object that came out.

    Earlier turns are kept by reference (format 2): `input` holds only this turn's own items and
    `previous` names the response it continued, whose record holds its own turn and names the one
    before; a chain of n turns stores each turn once (O(n) bytes, not O(n^2): the edge walks the
    chain, proxy.server.doors.responses). A format-1 record (written before) holds the whole
    expanded conversation in `input` and no `previous`. A record over the per-response cap
    (`STORED_RESPONSE_CAP`) is kept as a stub: `too_large` its size, no items, so a follow-up
    learns why it cannot continue (the edge answers with that, never with a silent "not found")."""

    input: list[Any]
    response: dict[str, Any]
    previous: str | None = None
    too_large: int = 0

    def encode(self) -> bytes:
        record: dict[str, Any] = {
            "v": 2,
            "previous": self.previous,
            "input": self.input,
            "response": self.response,
        }
        if self.too_large:
            record["too_large"] = self.too_large
        return jsonio.dumps(record)

    def stub(self, size: int) -> StoredResponse:
        """What is kept of a record of `size` bytes over the cap: its id and status, and its size."""
        keep = ("id", "object", "created_at", "status", "model")
        return StoredResponse([], {k: self.response[k] for k in keep if k in self.response}, None, size)

    @classmethod
    def decode(cls, data: bytes | None) -> StoredResponse | None:
        if not data:
            return None
        try:
            parsed = jsonio.loads(data)
        except ValueError:
            return None
        if not isinstance(parsed, dict) or parsed.get("v") not in (1, 2):
            return None
        items, response = parsed.get("input"), parsed.get("response")
        if not isinstance(items, list) or not isinstance(response, dict):
            return None
        if parsed["v"] == 1:
            return cls(items, response)
        previous, too_large = parsed.get("previous", False), parsed.get("too_large", 0)
        if not (previous is None or (isinstance(previous, str) and previous)):
            return None  # (format 2 always says which response it continued, or null)
        if not isinstance(too_large, int) or too_large < 0:
            return None
        return cls(items, response, previous, too_large)

    def conversation(self) -> list[Any]:
        """This record's share of the conversation a follow-up continues from: what went in, then
        what came out (OpenAI's `previous_response_id` semantics; `instructions` are not carried
        over). With `previous` set, the earlier turns' shares come first (the edge joins them)."""
        return [*self.input, *_output_as_input(self.response.get("output"))]


def _output_as_input(output: Any) -> list[Any]:
    return [item for item in output if isinstance(item, Mapping)] if isinstance(output, list) else []


# --------------------------------------------------------------------------------------------------
# Compaction
# --------------------------------------------------------------------------------------------------


def expand_compaction(
    items: list[Any], ctx: SealContext, expansion: Expansion | None = None
) -> tuple[list[Any], int]:
    """Input items with each `compaction` item of ours replaced by the summary it sealed (one
    user message, as Codex's own compaction puts it), and how many did not open (dropped). Each
    distinct blob is opened once; every summary put back counts against `expansion`'s limit."""
    opener = expansion if expansion is not None else Expansion(ctx, UNBOUNDED)
    out: list[Any] = []
    dropped = 0
    for item in items:
        if not (isinstance(item, Mapping) and item.get("type") == "compaction"):
            out.append(item)
            continue
        blob = item.get("encrypted_content")
        text = blob if isinstance(blob, str) else ""
        opened = opener.opened("responses.compaction", ((),), text) if text else None
        summary = opened.payload.get("summary") if isinstance(opened, seal.Inline) else None
        if isinstance(summary, str) and summary:
            if not opener.first_use(text):  # (counted when opened; a repeat adds it again)
                opener.charge(len(summary.encode("utf-8", "surrogatepass")))
            out.append({"type": "message", "role": "user", "content": summary})
        else:
            dropped += 1
    return out, dropped


def seal_compaction(ctx: SealContext, summary: str) -> str | None:
    """A compaction item's `encrypted_content`: the summary that stands for the history."""
    payload = {"summary": summary, "created": ctx.created}
    blob = seal.seal(ctx.keys, ctx.binding("responses.compaction"), payload)
    return blob.text if isinstance(blob, seal.Blob) else None
