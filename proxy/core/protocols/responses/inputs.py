"""Responses API input items → chat-completions messages, for a bridged (chat-only) upstream.

Pure: values in, values out. Part of the Responses front door's request side
(proxy.core.protocols.responses.request); docs/responses.md holds the table.

The walk keeps chat's rule as it goes: an assistant message with `tool_calls` is followed by one
`tool` message per call and nothing else, so every tool message answers a call made just before
(the rule both bridged doors keep: proxy.core.protocols.tool_pairing).

- Consecutive assistant-side items (assistant `message`, `function_call`, `custom_tool_call`,
  `reasoning`) are one assistant turn: one chat message with the text and every call. A call that
  arrives while the turn still waits for outputs joins it too (parallel calls echoed interleaved
  with their outputs).
- `function_call_output` / `custom_tool_call_output` → a `tool` message; an image or file in an
  output (chat tool messages carry text only) moves to one user message after the outputs.
- `reasoning` items are not put in the body: they are returned as `RestoreTurn`s, attached to the
  assistant turn that follows them, for the edge to verify (`encrypted_content`, carried untouched)
  and put back in the provider's field. One with no assistant item after it is dropped (listed).
- `item_reference` and items with no chat equivalent (hosted tool calls, shell / apply_patch
  calls, compaction, …) are a 400 naming the item's index.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.errors import BadRequest, quoted
from proxy.core.protocols.responses.tools import flat_name
from proxy.core.protocols.tool_pairing import RESPONSES, ToolPairing

_ROLES = {"user": "user", "developer": "system", "system": "system", "assistant": "assistant"}
_DETAILS = {"auto": "auto", "low": "low", "high": "high", "original": "high"}
_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
# Text parts of one message (or one tool output) are joined with this to make one chat string.
PART_SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class ReasoningItem:
    """One `reasoning` input item, as sent: nothing is decrypted or trusted here."""

    index: int  # its position in `input`
    id: str | None
    summary: tuple[str, ...]  # summary_text parts
    content: tuple[str, ...]  # reasoning_text parts
    encrypted_content: str | None  # carried untouched for the sealing module

    @property
    def text(self) -> str:
        """The reasoning as text: the full reasoning_text when sent, else the summary."""
        return PART_SEPARATOR.join(self.content or self.summary)


@dataclass(frozen=True, slots=True)
class RestoreTurn:
    """Reasoning to restore on one assistant message of the chat body."""

    message_index: int  # into body["messages"]
    tool_call_ids: tuple[str, ...]  # the calls that message makes (empty: a text answer)
    items: tuple[ReasoningItem, ...]  # in input order

    @property
    def text(self) -> str:
        return PART_SEPARATOR.join(t for t in (item.text for item in self.items) if t)


@dataclass(frozen=True, slots=True)
class MappedInput:
    messages: list[dict[str, Any]]
    restore: tuple[RestoreTurn, ...]
    stray_reasoning: tuple[int, ...]  # input indexes of reasoning items with no turn to attach to


@dataclass(slots=True)
class _Walk:
    messages: list[dict[str, Any]] = field(default_factory=list)
    turn: dict[str, Any] | None = None  # the open assistant message
    turn_at: int = 0  # its index in messages
    turn_outputs: bool = False  # an output has answered one of the open turn's calls
    pairing: ToolPairing = field(default_factory=lambda: ToolPairing(RESPONSES))
    pending: list[ReasoningItem] = field(default_factory=list)
    restore: dict[int, list[ReasoningItem]] = field(default_factory=dict)  # message index → items
    stray: list[int] = field(default_factory=list)
    media: list[dict[str, Any]] = field(default_factory=list)  # from tool outputs, for a user message


def map_input(input_: Any, instructions: Any) -> MappedInput:
    """Chat messages for `instructions` and `input` (a string, or a list of items)."""
    walk = _Walk()
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadRequest("instructions must be a string.", param="instructions")
        walk.messages.append({"role": "system", "content": instructions})
    first = len(walk.messages)
    if isinstance(input_, str):
        walk.messages.append({"role": "user", "content": input_})
    elif isinstance(input_, list):
        for i, item in enumerate(input_):
            _item(walk, i, item)
    elif input_ is not None:
        raise BadRequest("input must be a string or a list of items.", param="input")
    walk.pairing.settle()
    _close(walk)
    walk.stray.extend(item.index for item in walk.pending)
    if len(walk.messages) == first:
        raise BadRequest(
            "input holds no message or tool call to send: add a user message (input as a string, or a "
            "message item with role user).",
            param="input",
        )
    restore = tuple(
        RestoreTurn(k, tuple(c["id"] for c in walk.messages[k].get("tool_calls", ())), tuple(items))
        for k, items in walk.restore.items()
    )
    return MappedInput(walk.messages, restore, tuple(walk.stray))


def _item(walk: _Walk, i: int, item: Any) -> None:
    param = f"input[{i}]"
    if not isinstance(item, dict):
        raise BadRequest(f"{param} must be an item object.", param=param)
    kind = item.get("type")
    if kind is None and "role" in item:
        kind = "message"  # an easy input message may leave its type out
    if kind == "message":
        _message(walk, i, item)
    elif kind in _CALLS:
        _call(walk, i, item, kind)
    elif kind in _OUTPUTS:
        _output(walk, i, item)
    elif kind == "reasoning":
        walk.pending.append(_reasoning(i, item))
    elif kind == "item_reference" or (kind is None and "id" in item):
        ref = item.get("id")
        raise BadRequest(
            f"{param} is an item_reference{f' to {quoted(ref)}' if isinstance(ref, str) else ''}: this "
            "upstream is bridged to chat completions and keeps no items to look up. Send the item itself "
            "in input.",
            code="unsupported_item",
            param=param,
        )
    elif not isinstance(kind, str):
        raise BadRequest(f"{param} needs a type (message, function_call, …).", param=f"{param}.type")
    else:
        raise BadRequest(
            f"{param} has type {quoted(kind)}, which has no chat-completions equivalent on this upstream (it "
            "runs no hosted or built-in tools). Remove the item, or use a model whose upstream serves "
            "/v1/responses natively.",
            code="unsupported_item",
            param=param,
        )


def _message(walk: _Walk, i: int, item: dict[str, Any]) -> None:
    param = f"input[{i}]"
    role = item.get("role")
    role = _ROLES.get(role) if isinstance(role, str) else None
    if role is None:
        raise BadRequest(f"{param}.role must be user, developer, system or assistant.", param=f"{param}.role")
    content = _content(item.get("content"), role, f"{param}.content")
    if role == "assistant":
        turn = _assistant(walk)
        text = content if isinstance(content, str) else ""
        if text:
            turn["content"] = PART_SEPARATOR.join(t for t in (turn.get("content"), text) if t)
        return
    walk.pairing.settle(f" before input[{i}]")
    _close(walk)
    walk.stray.extend(r.index for r in walk.pending)
    walk.pending.clear()
    walk.messages.append({"role": role, "content": content})


def _call(walk: _Walk, i: int, item: dict[str, Any], kind: str) -> None:
    param = f"input[{i}]"
    call_id = _string(item, "call_id", param)
    name = _string(item, "name", param)
    namespace = item.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise BadRequest(f"{param}.namespace must be a string.", param=f"{param}.namespace")
    if kind == "function_call":
        arguments = item.get("arguments")
        if not isinstance(arguments, str):
            raise BadRequest(f"{param}.arguments must be a string (JSON text).", param=f"{param}.arguments")
    else:
        text = item.get("input")
        if not isinstance(text, str):
            raise BadRequest(f"{param}.input must be a string.", param=f"{param}.input")
        arguments = json.dumps({"input": text}, ensure_ascii=False, separators=(",", ":"))
    turn = _assistant(walk)  # (before the call counts: a call after all outputs opens a new turn)
    walk.pairing.call(call_id, param)
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": flat_name(name, namespace), "arguments": arguments},
    }
    turn.setdefault("tool_calls", []).append(call)


def _output(walk: _Walk, i: int, item: dict[str, Any]) -> None:
    param = f"input[{i}]"
    call_id = _string(item, "call_id", param)
    walk.pairing.answer(call_id, param)
    walk.turn_outputs = True
    output = item.get("output")
    if isinstance(output, str):
        text = output
    elif isinstance(output, list):
        texts: list[str] = []
        media: list[dict[str, Any]] = []
        for j, part in enumerate(output):
            chat_part = _part(part, "user", f"{param}.output[{j}]")
            if chat_part["type"] == "text":
                texts.append(chat_part["text"])
            else:
                media.append(chat_part)
        text = PART_SEPARATOR.join(texts)
        if media:
            note = f"(the {len(media)} attachment(s) of this output follow in the next user message)"
            text = PART_SEPARATOR.join(t for t in (text, note) if t)
            walk.media.append(
                {"type": "text", "text": f"Attachments from the output of tool call {call_id}:"}
            )
            walk.media.extend(media)
    else:
        raise BadRequest(
            f"{param}.output must be a string or a list of content parts.", param=f"{param}.output"
        )
    walk.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})


def _reasoning(i: int, item: dict[str, Any]) -> ReasoningItem:
    param = f"input[{i}]"
    rid = item.get("id")
    encrypted = item.get("encrypted_content")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest(f"{param}.id must be a string.", param=f"{param}.id")
    if encrypted is not None and not isinstance(encrypted, str):
        raise BadRequest(f"{param}.encrypted_content must be a string.", param=f"{param}.encrypted_content")
    return ReasoningItem(
        i,
        rid,
        _texts(item.get("summary"), "summary_text", f"{param}.summary"),
        _texts(item.get("content"), "reasoning_text", f"{param}.content"),
        encrypted,
    )


def _texts(parts: Any, kind: str, param: str) -> tuple[str, ...]:
    if parts is None:
        return ()
    if not isinstance(parts, list):
        raise BadRequest(f"{param} must be a list of {kind} parts.", param=param)
    out: list[str] = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != kind or not isinstance(part.get("text"), str):
            raise BadRequest(f"{param}[{j}] must be a {kind} part with a string text.", param=f"{param}[{j}]")
        out.append(part["text"])
    return tuple(out)


def _assistant(walk: _Walk) -> dict[str, Any]:
    """The open assistant turn, or a new one; the reasoning waiting for a turn attaches to it."""
    if walk.turn is None or (walk.turn_outputs and not walk.pairing.unanswered):
        _close(walk)
        walk.turn = {"role": "assistant", "content": None}
        walk.turn_at = len(walk.messages)
        walk.messages.append(walk.turn)
    if walk.pending:
        walk.restore.setdefault(walk.turn_at, []).extend(walk.pending)
        walk.pending.clear()
    return walk.turn


def _close(walk: _Walk) -> None:
    """End the open assistant turn; attachments from its tool outputs go in one user message."""
    if walk.turn is not None and walk.turn["content"] is None and "tool_calls" not in walk.turn:
        walk.turn["content"] = ""
    walk.turn = None
    walk.turn_outputs = False
    if walk.media:
        walk.messages.append({"role": "user", "content": walk.media})
        walk.media = []


def _content(content: Any, role: str, param: str) -> str | list[dict[str, Any]]:
    """A message's content: one string when it is all text (what every chat upstream takes)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{param} must be a string or a list of content parts.", param=param)
    parts = [_part(part, role, f"{param}[{j}]") for j, part in enumerate(content)]
    if all(p["type"] == "text" for p in parts):
        return PART_SEPARATOR.join(p["text"] for p in parts)
    return parts


def _part(part: Any, role: str, param: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text", "refusal"):
        if role != "assistant" and kind != "input_text":
            raise BadRequest(f"{param}: {kind} parts belong to assistant messages.", param=param)
        key = "refusal" if kind == "refusal" else "text"
        text = part.get(key)
        if not isinstance(text, str):
            raise BadRequest(f"{param} must be a {kind} part with a string {key}.", param=param)
        return {"type": "text", "text": text}
    if kind in ("input_image", "input_file"):
        if role != "user":
            raise BadRequest(
                f"{param}: {role} messages carry text only on chat completions; move the {kind} to a "
                "user message.",
                param=param,
            )
        return _image(part, param) if kind == "input_image" else _file(part, param)
    raise BadRequest(
        f"{param} has type {quoted(kind)}; expected input_text, input_image or input_file (output_text or "
        "refusal in assistant messages).",
        param=param,
    )


def _image(part: dict[str, Any], param: str) -> dict[str, Any]:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise BadRequest(
            f"{param} needs an image_url (a URL or a data: URL); a file_id cannot be looked up on this "
            "upstream.",
            param=param,
        )
    image: dict[str, Any] = {"url": url}
    detail = part.get("detail")
    if isinstance(detail, str) and detail in _DETAILS:
        image["detail"] = _DETAILS[detail]
    return {"type": "image_url", "image_url": image}


def _file(part: dict[str, Any], param: str) -> dict[str, Any]:
    out = {k: part[k] for k in ("file_data", "file_id", "filename") if isinstance(part.get(k), str)}
    if "file_data" not in out and "file_id" not in out:
        raise BadRequest(
            f"{param} needs file_data (or a file_id); a file_url cannot be sent to a chat upstream.",
            param=param,
        )
    return {"type": "file", "file": out}


def _string(item: Mapping[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{param}.{key} must be a non-empty string.", param=f"{param}.{key}")
    return value
