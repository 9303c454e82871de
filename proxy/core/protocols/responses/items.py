"""The output items the Responses encoder streams (proxy.core.protocols.responses.events): what
it keeps of each while it is open (`StreamItem`), and the item object a client reads of it at any
moment (`item_dict`: in `output_item.added` / `.done` and in the `Response`'s `output`).

Pure. Separate from the encoder, which decides when items begin and end and which events say
so; here is only what an item is. Chat function names that stand for a namespaced or a custom
(freeform) Responses tool go back as the client declared them (responses_tools.ToolName): a
namespaced call carries its `name` and `namespace`, a custom tool's call is a `custom_tool_call`
whose `input` is whole only once the call is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.protocols.responses.output import (
    ItemStatus,
    custom_input,
    custom_tool_call_item,
    function_call_item,
    message_item,
    reasoning_item,
)
from proxy.core.protocols.responses.tools import ToolName


@dataclass(slots=True)
class StreamItem:
    """One output item being streamed. `text`: its reasoning, message text or call arguments;
    `begun`: its content part was announced (a call: the item itself)."""

    kind: str  # "reasoning" | "message" | "function_call"
    item_id: str
    output_index: int = -1
    text: list[str] = field(default_factory=list)
    begun: bool = False
    status: ItemStatus = "in_progress"
    details: list[Any] = field(default_factory=list)  # reasoning: raw reasoning_details entries
    encrypted: str | None = None
    call_id: str = ""
    name: str = ""
    extra: Any = None  # a call's first extra_content

    def joined(self) -> str:
        """`text` as one string, kept as its one piece: an item's text is written whole up to five
        times (its done events, its sealed blob, the terminal `Response`), joined once."""
        pieces = self.text
        if len(pieces) == 1:
            return pieces[0]
        text = "".join(pieces)
        if pieces:
            self.text = [text]
        return text


def item_dict(item: StreamItem, *, summary: bool, tool_names: Mapping[str, ToolName]) -> dict[str, Any]:
    """The item object as the stream stands: a reasoning item's text in a summary part (`summary`,
    the request asked `reasoning.summary`) or a reasoning_text part; a call as its client declared
    the tool (`tool_names`: chat function name → the Responses tool it stands for)."""
    text = item.joined() if item.begun else None
    if item.kind == "reasoning":
        return reasoning_item(
            item.item_id, text, summary=summary, status=item.status, encrypted_content=item.encrypted
        )
    if item.kind == "message":
        return message_item(item.item_id, text, status=item.status)
    arguments = item.joined()
    declared = tool_names.get(item.name)
    if declared is None:
        return function_call_item(item.item_id, item.call_id, item.name, arguments, status=item.status)
    if declared.kind == "custom":
        text = custom_input(arguments) if item.status != "in_progress" else ""
        return custom_tool_call_item(item.item_id, item.call_id, declared.name, text, declared.namespace)
    return function_call_item(
        item.item_id,
        item.call_id,
        declared.name,
        arguments,
        status=item.status,
        namespace=declared.namespace,
    )


def is_custom(call: StreamItem, tool_names: Mapping[str, ToolName]) -> bool:
    """Whether a call is a custom (freeform) tool's: its input is streamed whole at its end."""
    declared = tool_names.get(call.name)
    return declared is not None and declared.kind == "custom"
