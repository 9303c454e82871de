"""`GET /v1/responses/{id}/input_items` for a stored response, as values: the query read and
checked, the items a response was made from put in the shape the API lists them in, and one page
of them (OpenAI's list object). Pure; the store's I/O is proxy.server.doors.responses_store, the
route proxy.server.doors.responses_input_items.

Shapes follow openai-python (3.63: `input_item_list_params.InputItemListParams`,
`ResponseItemList`, the `ResponseItem` union) and the Open Responses specification's item
schemas (`ItemField`: `Message`, `FunctionCall`, `FunctionCallOutput`, `ReasoningBody`;
tests/fixtures/openresponses/, which has no schema for the list itself):

- A response's input items are the items it was made from, oldest first: the earlier turns of
  its `previous_response_id` chain (each turn's input, then its output) and its own input
  (`item_reference`s resolved) — OpenAI's "a list of items used to generate this response".
- Every listed item has an `id`, listed once (an item met again, a continuation's input echoing
  the output before it, is left out: each cursor names one place), and, where the API gives one,
  a `status`. A client's item that
  came without an id gets one derived from the response that took it in and its place there
  (`msg_…`, `fc_…`, `fco_…`, `rs_…`, `item_…`: 48 hex digits, the same on every read, so an
  `after` cursor finds it again). A message whose content was a string lists it as one
  `input_text` part (`output_text` for an assistant's).
- `order` (`asc` | `desc`, default `desc`), `limit` (1-100, default 20), `after` / `before`
  (an item id of this list: the page starts after it / ends before it), `include` (openai-python
  sends it as `include[]`; each value must be a `ResponseIncludable`). The bridge keeps nothing
  an include would add or remove: reasoning items carry `encrypted_content` whatever it says, as
  every response of the bridge does (docs/responses.md), and it never stores hosted tools'
  results or logprobs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.errors import BadRequest, quoted

DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 100
ORDERS: Final = ("asc", "desc")
# openai-python's `ResponseIncludable` (3.63): what `include` may name.
INCLUDABLE: Final = frozenset(
    (
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    )
)
# The id prefix of an item that came without one, by type (OpenAI's own prefixes).
ID_PREFIXES: Final[Mapping[str, str]] = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
}
# The item types whose listed form carries a `status` (required by openai-python's types).
WITH_STATUS: Final = frozenset(("message", "function_call", "function_call_output"))
INPUT_ROLES: Final = frozenset(("user", "system", "developer"))


@dataclass(frozen=True, slots=True)
class ListQuery:
    """What a client asked of the list: its order, page size, cursors and includes."""

    order: str = "desc"
    limit: int = DEFAULT_LIMIT
    after: str | None = None
    before: str | None = None
    include: tuple[str, ...] = ()


def list_query(params: Sequence[tuple[str, str]]) -> ListQuery:
    """The query string's pairs read into a ListQuery; a bad value is a 400 naming its parameter
    and what it accepts (never a silent default)."""
    single: dict[str, str] = {}
    include: list[str] = []
    for name, value in params:
        if name in ("include", "include[]"):
            include.append(value)
        elif name in ("order", "limit", "after", "before"):
            if name in single:
                raise BadRequest(f"The query parameter {name} is given more than once.", param=name)
            single[name] = value
    order = single.get("order", "desc")
    if order not in ORDERS:
        raise BadRequest(f"Invalid order {quoted(order)}: expected 'asc' or 'desc'.", param="order")
    limit = _limit(single.get("limit"))
    for value in include:
        if value not in INCLUDABLE:
            raise BadRequest(
                f"Invalid include value {quoted(value)}: expected one of {', '.join(sorted(INCLUDABLE))}.",
                param="include",
            )
    after, before = single.get("after"), single.get("before")
    for name, cursor in (("after", after), ("before", before)):
        if cursor is not None and not cursor:
            raise BadRequest(f"{name} must be an item id.", param=name)
    return ListQuery(order, limit, after, before, tuple(include))


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    digits = raw.strip()
    limit = int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 3 else 0
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(
            f"Invalid limit {quoted(raw)}: expected an integer from 1 to {MAX_LIMIT}.", param="limit"
        )
    return limit


def listed_items(turns: Sequence[tuple[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """The items of `turns` ((response id, the items it holds), oldest first) in the shape the
    API lists them, oldest first: each with an id (its own, else one derived from its response
    and place) and, where the API gives one, a status. What is not an object is left out, and so
    is an item whose id is already listed (a continuation's input echoing its previous turn's
    output, or an `item_reference` to it): every id once, so every `after` / `before` cursor names
    one place and a client's paginator ends."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for response_id, items in turns:
        for index, item in enumerate(items):
            if isinstance(item, Mapping):
                listed = listed_item(item, response_id, index)
                if listed["id"] not in seen:
                    seen.add(listed["id"])
                    out.append(listed)
    return out


def listed_item(item: Mapping[str, Any], response_id: str, index: int) -> dict[str, Any]:
    """One stored item as the list gives it back (see the module's docstring)."""
    listed = dict(item)
    kind = listed.get("type")
    if not isinstance(kind, str):
        kind = "message"  # (an input message may leave its type out: `{"role", "content"}`)
        listed["type"] = kind
    if not isinstance(listed.get("id"), str) or not listed["id"]:
        listed["id"] = derived_id(ID_PREFIXES.get(kind, "item"), response_id, index)
    if kind in WITH_STATUS and listed.get("status") not in ("in_progress", "completed", "incomplete"):
        listed["status"] = "completed"
    if kind == "message":
        listed["content"] = _message_content(listed.get("role"), listed.get("content"))
    elif kind == "reasoning" and not isinstance(listed.get("summary"), list):
        listed["summary"] = []
    return listed


def derived_id(prefix: str, response_id: str, index: int) -> str:
    """The id of an item that came without one: the same for the same response and place."""
    digest = hashlib.sha256(f"{response_id}\x00{index}".encode()).hexdigest()
    return f"{prefix}_{digest[:48]}"


def _message_content(role: Any, content: Any) -> list[Any]:
    """A message's content as a list of parts: a string becomes one text part, an assistant's
    `input_text` part (a client's echo) an `output_text` one with its `annotations`."""
    assistant = role not in INPUT_ROLES
    if isinstance(content, str):
        return [_text_part(content, assistant)]
    if not isinstance(content, list):
        return []
    parts: list[Any] = []
    for part in content:
        if assistant and isinstance(part, Mapping) and part.get("type") in ("input_text", "output_text"):
            text = part.get("text")
            parts.append({**_text_part(text if isinstance(text, str) else "", True), **_extra(part)})
        else:
            parts.append(part)
    return parts


def _text_part(text: str, assistant: bool) -> dict[str, Any]:
    if assistant:
        return {"type": "output_text", "text": text, "annotations": []}
    return {"type": "input_text", "text": text}


def _extra(part: Mapping[str, Any]) -> dict[str, Any]:
    """What an assistant's text part carries besides its type and text (annotations, logprobs)."""
    return {k: v for k, v in part.items() if k not in ("type", "text") and v is not None}


def page(items: Sequence[dict[str, Any]], query: ListQuery, response_id: str) -> dict[str, Any]:
    """One page of `items` (oldest first) as OpenAI's list object: `data` in `query.order`, cut
    after `after` and before `before`, `limit` long (the `limit` nearest `before` when only
    `before` is given), `first_id` / `last_id` (null on an empty page) and `has_more` (whether
    more items lie beyond the page in the direction it was read). A cursor that names no item of
    this list is a 400 naming it."""
    ordered = list(items) if query.order == "asc" else list(reversed(items))
    start, end = 0, len(ordered)
    if query.after is not None:
        start = _position(ordered, query.after, response_id, "after") + 1
    if query.before is not None:
        end = _position(ordered, query.before, response_id, "before")
    window = ordered[start:end] if start < end else []
    if query.before is not None and query.after is None:
        data = window[-query.limit :]
        has_more = len(window) > len(data)
    else:
        data = window[: query.limit]
        has_more = len(window) > len(data)
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def _position(ordered: Sequence[dict[str, Any]], cursor: str, response_id: str, name: str) -> int:
    for index, item in enumerate(ordered):
        if item.get("id") == cursor:
            return index
    raise BadRequest(
        f"No item with id {quoted(cursor)} among the input items of response {quoted(response_id)}.",
        param=name,
    )
