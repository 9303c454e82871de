"""The Messages front door's state, as values: reasoning sealed into a thinking block's `signature`
and put back from it (DESIGN.md, "Sealed blobs"; the same scheme as the Responses door's
`encrypted_content`: proxy.core.protocols.sealing).

Pure: the edge (proxy.server.doors.messages) passes the deployment's keys and the request's tenant
in, and reads or writes the state store for payloads too large to seal inline.

Each thinking block the bridge returns is signed with the proxy's sealed blob holding the
reasoning text, `reasoning_details`, the model and the tool_use id it preceded. It is bound to the
tenant, the upstream entry (provider and base URL) and that id (none when text or nothing followed
the block). Claude Code keeps only signed thinking blocks and sends them back in order before the
blocks they preceded; `restore_thinking` then opens each signature and puts the reasoning on the
assistant message it is in (`reasoning_content`, the internal field; the dialect's replay rules
then write the field the provider reads, or strip it). A signature that does not open (another
tenant, deployment or upstream; tampered; Anthropic's own) is never forwarded: the block counts as
missing, and the replay store and its miss policy apply. A thinking block sent with no signature at
all is restored from its text (the client's own claim, as the Responses door does with reasoning
items that carry only text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.core import seal
from proxy.core.protocols.door_request import put_reasoning, reference_keys, take_reasoning
from proxy.core.protocols.expansion import UNBOUNDED, Expansion
from proxy.core.protocols.messages.events import ThinkingFacts, ThinkingSeal
from proxy.core.protocols.messages.inputs import ThinkingBlock, ThinkingTurn
from proxy.core.protocols.sealing import (
    RestoreReport,
    SealContext,
    seal_reasoning,
)

__all__ = ["KIND", "RestoreReport", "restore_thinking", "spilled_keys", "thinking_sealer"]

KIND: Final[seal.Kind] = "anthropic.thinking"


def thinking_sealer(ctx: SealContext, spill: list[tuple[str, bytes]] | None = None) -> ThinkingSeal:
    """The encoder's sealing callback: each thinking block's `signature`. A payload over the inline
    cap goes to `spill` (the edge writes it to the state store before the block reaches the client)
    and the blob seals its key; without a store (`spill` None) the block gets no signature."""

    def sign(facts: ThinkingFacts) -> str | None:
        if not facts.text and not facts.details:
            return None
        ids = _ids(facts.next_call_id)
        payload: dict[str, Any] = {
            "reasoning": facts.text,
            "model": facts.model,
            "tool_call_ids": list(ids),
            "created": ctx.created,
        }
        if facts.details:
            payload["details"] = list(facts.details)
        return seal_reasoning(ctx, KIND, ids, payload, spill=spill, spill_id=facts.block_id)

    return sign


def spilled_keys(
    turns: Sequence[ThinkingTurn], ctx: SealContext, expansion: Expansion | None = None
) -> list[str]:
    """The state-store keys the history's signatures refer to (reasoning too large to seal
    inline), each once: the edge reads them before `restore_thinking` (given the same
    `expansion`, each distinct signature is opened once for both)."""
    opener = expansion if expansion is not None else Expansion(ctx, UNBOUNDED)
    blobs = [(block.signature, (_ids(block.next_call_id),)) for turn in turns for block in turn.blocks]
    return reference_keys(opener, KIND, blobs)


def restore_thinking(
    messages: list[dict[str, Any]],
    turns: Sequence[ThinkingTurn],
    ctx: SealContext,
    spilled: Mapping[str, bytes | None] | None = None,
    expansion: Expansion | None = None,
) -> RestoreReport:
    """Put each turn's reasoning on its assistant message (in place), from the signatures that
    open, or from the text of a block sent without one. Bounded by `expansion`
    (proxy.core.protocols.expansion): each distinct signature is opened once and counted once
    against the request's limit; the same signature again puts nothing more back."""
    opener = expansion if expansion is not None else Expansion(ctx, UNBOUNDED)
    restored = unverified = foreign = 0
    for turn in turns:
        texts: list[str] = []
        details: list[Any] = []
        for block in turn.blocks:
            if block.signature is not None and not opener.first_use(block.signature):
                continue  # the same signed block again: its reasoning is already back
            payload = _payload(block, opener, spilled or {})
            if payload is not None:
                take_reasoning(payload, texts, details)
            elif block.signature is None:
                if block.thinking:
                    texts.append(block.thinking)
            elif seal.is_ours(block.signature):
                unverified += 1
            else:
                foreign += 1  # Anthropic's own: never sent to a chat upstream
        if put_reasoning(messages, turn.message_index, texts, details) is not None:
            restored += 1
    return RestoreReport(restored, unverified, foreign)


def _payload(
    block: ThinkingBlock, opener: Expansion, spilled: Mapping[str, bytes | None]
) -> dict[str, Any] | None:
    if block.signature is None or not seal.is_ours(block.signature):
        return None
    return opener.payload(KIND, (_ids(block.next_call_id),), block.signature, spilled)


def _ids(next_call_id: str | None) -> tuple[str, ...]:
    return (next_call_id,) if next_call_id else ()
