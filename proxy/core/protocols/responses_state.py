"""The Responses front door's state, as values: reasoning sealed into `encrypted_content` and put
back from it, stored responses (`store`, `previous_response_id`) and compaction items.

Pure: the edge (proxy.server.responses_door) reads and writes the state store and passes the
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

from proxy.core import seal
from proxy.core.protocols.responses_input import RestoreTurn
from proxy.core.protocols.responses_output import ReasoningItemFacts, Seal
from proxy.core.protocols.sealing import (
    RestoreReport,
    SealContext,
    open_reasoning,
    reference_key,
    seal_reasoning,
    spill_key,
)
from proxy.core.stream import jsonio

__all__ = [
    "RESPONSE_KIND",
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


def spilled_keys(turns: Sequence[RestoreTurn], ctx: SealContext) -> list[str]:
    """The state-store keys the turns' blobs refer to (reasoning too large to seal inline): the
    edge reads them before `restore_reasoning`."""
    keys = []
    for turn in turns:
        for item in turn.items:
            if seal.is_ours(item.encrypted_content):
                key = reference_key(ctx, KIND, _id_sets(turn.tool_call_ids), str(item.encrypted_content))
                if key is not None:
                    keys.append(key)
    return keys


def restore_reasoning(
    messages: list[dict[str, Any]],
    turns: Sequence[RestoreTurn],
    ctx: SealContext,
    spilled: Mapping[str, bytes | None] | None = None,
) -> RestoreReport:
    """Put each turn's reasoning on its assistant message (in place), from the blobs that open (a
    reference blob's payload from `spilled`, what the store held under its key), or else from the
    reasoning text the client itself sent (its summary or content parts)."""
    restored = unverified = foreign = 0
    for turn in turns:
        texts: list[str] = []
        details: list[Any] = []
        signatures: dict[str, Any] = {}
        for item in turn.items:
            payload = None
            if item.encrypted_content is not None:
                if seal.is_ours(item.encrypted_content):
                    payload = open_reasoning(
                        ctx, KIND, _id_sets(turn.tool_call_ids), item.encrypted_content, spilled or {}
                    )
                    if payload is None:
                        unverified += 1
                else:
                    foreign += 1  # another service's blob: never sent to a chat upstream
            if payload is not None:
                text = payload.get("reasoning")
                if isinstance(text, str) and text:
                    texts.append(text)
                if isinstance(payload.get("details"), list):
                    details.extend(payload["details"])
                if isinstance(payload.get("signatures"), dict):
                    signatures.update(payload["signatures"])
            elif item.encrypted_content is None and item.text:
                texts.append(item.text)
        if not (texts or details) or not 0 <= turn.message_index < len(messages):
            continue
        message = messages[turn.message_index]
        if texts:
            message["reasoning_content"] = "\n\n".join(texts)
        if details:
            message["reasoning_details"] = details
        for call in message.get("tool_calls") or ():
            extra = signatures.get(call.get("id"))
            if extra is not None and "extra_content" not in call:
                call["extra_content"] = extra
        restored += 1
    return RestoreReport(restored, unverified, foreign)


def _id_sets(call_ids: Sequence[str]) -> tuple[Sequence[str], ...]:
    """The bindings a reasoning blob may have: the calls it preceded (all of the turn's, when the
    reasoning came right before them), or none (reasoning before a text answer)."""
    return (call_ids, ()) if call_ids else ((),)


# --------------------------------------------------------------------------------------------------
# Stored responses
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response kept for `previous_response_id` and `GET /v1/responses/{id}`: the items that
    went in (the expanded input: earlier turns included) and the `Response` object that came out."""

    input: list[Any]
    response: dict[str, Any]

    def encode(self) -> bytes:
        return jsonio.dumps({"v": 1, "input": self.input, "response": self.response})

    @classmethod
    def decode(cls, data: bytes | None) -> StoredResponse | None:
        if not data:
            return None
        try:
            parsed = jsonio.loads(data)
        except ValueError:
            return None
        if not isinstance(parsed, dict) or parsed.get("v") != 1:
            return None
        items, response = parsed.get("input"), parsed.get("response")
        if not isinstance(items, list) or not isinstance(response, dict):
            return None
        return cls(items, response)

    def conversation(self) -> list[Any]:
        """The items a follow-up turn continues from: what went in, then what came out (OpenAI's
        `previous_response_id` semantics; `instructions` are not carried over)."""
        return [*self.input, *_output_as_input(self.response.get("output"))]


def _output_as_input(output: Any) -> list[Any]:
    return [item for item in output if isinstance(item, Mapping)] if isinstance(output, list) else []


# --------------------------------------------------------------------------------------------------
# Compaction
# --------------------------------------------------------------------------------------------------


def expand_compaction(items: list[Any], ctx: SealContext) -> tuple[list[Any], int]:
    """Input items with each `compaction` item of ours replaced by the summary it sealed (one
    user message, as Codex's own compaction puts it), and how many did not open (dropped)."""
    out: list[Any] = []
    dropped = 0
    for item in items:
        if not (isinstance(item, Mapping) and item.get("type") == "compaction"):
            out.append(item)
            continue
        opened = seal.open_blob(ctx.keys, ctx.binding("responses.compaction"), item.get("encrypted_content"))
        summary = opened.payload.get("summary") if isinstance(opened, seal.Inline) else None
        if isinstance(summary, str) and summary:
            out.append({"type": "message", "role": "user", "content": summary})
        else:
            dropped += 1
    return out, dropped


def seal_compaction(ctx: SealContext, summary: str) -> str | None:
    """A compaction item's `encrypted_content`: the summary that stands for the history."""
    payload = {"summary": summary, "created": ctx.created}
    blob = seal.seal(ctx.keys, ctx.binding("responses.compaction"), payload)
    return blob.text if isinstance(blob, seal.Blob) else None
