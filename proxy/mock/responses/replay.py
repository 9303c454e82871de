"""The checks OpenAI makes on the items a client sends back: ids that must resolve, sealed
reasoning, and the reasoning a tool call cannot come back without.

Pure: the request's items and what the mock remembers (`Memory`) in, a `Problem` or None out.
These are the rules a proxy that rewrites a Responses conversation can break, so the mock keeps
them strictly, with OpenAI's words:

- A reasoning item without `encrypted_content` is looked up by its id. Not found with
  `store: false`: 404 `Item with id 'rs_…' not found. Items are not persisted when `store` is set
  to false. Try again with `store` set to true, or remove this item from your input.` (param
  `input`; github.com/openai/openai-dotnet/issues/779, github.com/can1357/oh-my-pi/issues/41);
  otherwise 404 `Item with id 'fc_…' not found.` (quoted from Azure OpenAI, which answered it with
  400: learn.microsoft.com/en-us/answers/a/12246907). The same lookup applies to `item_reference`
  items, and with `store` on to tool calls sent with an `id`.
- `encrypted_content` the mock did not issue: 400 `The encrypted content gAAA...DQ== could not be
  verified.` (param null, code `invalid_encrypted_content`; github.com/openai/codex/issues/8145).
- A reasoning item with nothing after it: 400 `Item 'rs_…' of type 'reasoning' was provided
  without its required following item.` (github.com/continuedev/continue/issues/8933).
- A tool call whose reasoning is missing: 400 `Item 'fc_…' of type 'function_call' was provided
  without its required 'reasoning' item: 'rs_…'.` (param `input`, code null;
  github.com/continuedev/continue/issues/10018, github.com/mastra-ai/mastra/issues/8738). The
  reasoning must come earlier in the same turn (after the last user message), as the item itself
  (sealed, or by id when stored). Which reasoning a call needs the mock remembers per call id and
  item id (`Origin`); a call it answered without reasoning needs none. With `store: false` every
  other tool call needs some reasoning item this mock sealed — stricter than OpenAI, which cannot
  tell where a foreign call came from; the reasoning id named for it is derived from its call id.

These checks run only for a dialect whose traits say `sealed` (OpenAI); the lookups for all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from proxy.mock.responses.inputs import TOOL_CALLS, Problem, item_type
from proxy.mock.responses.seal import shown, unseal
from proxy.mock.scenarios import JSON


@dataclass(frozen=True)
class Origin:
    """What the mock knows of a tool call it issued: the reasoning item that came before it (None
    when it answered without reasoning)."""

    reasoning_id: str | None


class Memory(Protocol):
    """What the mock remembers: stored items by id, and the origin of the tool calls it issued."""

    def item(self, item_id: str) -> JSON | None: ...

    def origin(self, key: str) -> Origin | None: ...


def not_found(item_id: str, store: bool) -> Problem:
    message = f"Item with id '{item_id}' not found."
    if not store:
        message += (
            " Items are not persisted when `store` is set to false. Try again with `store` set to"
            " true, or remove this item from your input."
        )
    return Problem(404, message, "input")


def resolve_references(items: Sequence[JSON], memory: Memory, store: bool) -> list[JSON] | Problem:
    """The items with each `item_reference` replaced by the stored item it names."""
    resolved = []
    for item in items:
        if item_type(item) != "item_reference":
            resolved.append(item)
            continue
        stored = memory.item(item["id"])
        if stored is None:
            return not_found(item["id"], store)
        resolved.append(stored)
    return resolved


def replay_problem(items: Sequence[JSON], memory: Memory, *, store: bool, sealed: bool) -> Problem | None:
    """The first rule the items break (see the module doc), or None."""
    turn: list[str] = []  # ids of the reasoning items since the last user message
    for index, item in enumerate(items):
        kind = item_type(item)
        if kind == "message" and item.get("role") == "user":
            turn = []
        elif kind == "reasoning":
            found = _reasoning_id(item, memory, store=store, sealed=sealed)
            if isinstance(found, Problem):
                return found
            if index == len(items) - 1:
                return _without_following_item(found or "")
            if found is not None:
                turn.append(found)
        elif kind in TOOL_CALLS:
            problem = _tool_call_problem(item, turn, memory, store=store, sealed=sealed)
            if problem is not None:
                return problem
    return None


def _without_following_item(reasoning_id: str) -> Problem:
    message = f"Item '{reasoning_id}' of type 'reasoning' was provided without its required following item."
    return Problem(400, message, "input")


def _reasoning_id(
    item: Mapping[str, object], memory: Memory, *, store: bool, sealed: bool
) -> str | Problem | None:
    """Which reasoning item this is: the id inside its sealed blob, or its own id once looked up."""
    blob = item.get("encrypted_content")
    raw_id = item.get("id")
    item_id = raw_id if isinstance(raw_id, str) else None
    if isinstance(blob, str):
        if not sealed:
            return item_id  # the provider does not read blobs
        content = unseal(blob)
        if content is None:
            message = f"The encrypted content {shown(blob)} could not be verified."
            return Problem(400, message, None, "invalid_encrypted_content")
        return content.id
    if item_id is None:
        return None  # a summary alone: nothing to resolve
    return item_id if memory.item(item_id) is not None else not_found(item_id, store)


def _tool_call_problem(
    item: Mapping[str, object], turn: Sequence[str], memory: Memory, *, store: bool, sealed: bool
) -> Problem | None:
    item_id = item.get("id")
    call_id = str(item["call_id"])
    if store and isinstance(item_id, str) and memory.item(item_id) is None:
        return not_found(item_id, store)
    if not sealed:
        return None
    origin = memory.origin(item_id) if isinstance(item_id, str) else None
    if origin is None and not store:
        origin = memory.origin(call_id)  # stateless clients often drop item ids; call ids stay
    if origin is not None:
        needed = origin.reasoning_id
        if needed is None or needed in turn:
            return None
    elif store or turn:
        return None  # a foreign call: with `store` on, OpenAI ties no reasoning to it either
    else:
        needed = "rs_" + hashlib.sha256(call_id.encode()).hexdigest()[:50]
    named = item_id if isinstance(item_id, str) else call_id
    message = (
        f"Item '{named}' of type '{item_type(item)}' was provided without its required "
        f"'reasoning' item: '{needed}'."
    )
    return Problem(400, message, "input")
